"""Where the ranks of a run go on a Ray cluster, and what the driver waits for before it builds the
workers. Pure config arithmetic: no torch, ray or transformers (trainer/worker_group.py creates
the placement groups this describes; trainer/run.py waits for the cluster).

A pool of `nodes x per_node` devices is one placement group per node (STRICT_PACK, one bundle
per device); node k's group may only use nodes that the groups before it did not take, so the
pool is spread over `nodes` distinct nodes. Rank r runs in node `r // per_node`, bundle
`r % per_node`: consecutive ranks share a node, so a Megatron layout puts TP inside a node and
PP / DP across nodes. Worker groups that share the pool's devices (the actor/rollout/ref group
and the critic) each take an equal share of every bundle, so rank r of each lands on the same
device. Fully-async runs have two pools, placed the same way: the training pool
(`trainer.nnodes x trainer.n_gpus_per_node`) and the rollout pool (`rollout.nnodes x
rollout.n_gpus_per_node`, as decisions/layout.py counts it); a node holds a part of each
when it has the devices (for example 4 training + 12 rollout devices on each of 16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from verl_lite.decisions import layout
from verl_lite.decisions.layout import Pool

# The Ray resource that stands for one device of each kind.
DEVICE_RESOURCE = {"cuda": "GPU", "npu": "NPU", "cpu": "CPU"}
# What the waiting message calls the devices.
DEVICE_WORD = {"cuda": "GPUs", "npu": "NPUs", "cpu": "CPUs"}
# Ray's label of each node's id, read by the label selector that keeps a pool's node groups apart.
NODE_ID_LABEL = "ray.io/node-id"


def device_resource(device: str) -> str:
    if device not in DEVICE_RESOURCE:
        raise ValueError(f"device {device!r} is not resolved: expected one of {', '.join(DEVICE_RESOURCE)}")
    return DEVICE_RESOURCE[device]


def bundle(device: str) -> Dict[str, float]:
    """The resources of one device's bundle: the device and a CPU for the process that drives it."""
    res = device_resource(device)
    return {"CPU": 1.0} if res == "CPU" else {res: 1.0, "CPU": 1.0}


def node_bundles(device: str, per_node: int) -> List[Dict[str, float]]:
    return [bundle(device) for _ in range(int(per_node))]


def rank_slot(rank: int, per_node: int) -> Tuple[int, int]:
    """(node index, bundle index) of `rank` in a pool of `per_node` devices per node."""
    return divmod(int(rank), int(per_node))


def actor_share(device: str, share: float) -> Dict[str, Any]:
    """Ray actor options of one rank that takes `share` of its device's bundle (1/groups sharing it)."""
    res = device_resource(device)
    if res == "CPU":
        return {"num_cpus": share}
    if res == "GPU":
        return {"num_cpus": share, "num_gpus": share}
    return {"num_cpus": share, "resources": {res: share}}


def other_nodes(used: List[str], per_node: int) -> Optional[List[Dict[str, str]]]:
    """The bundle label selector of a node group that must avoid the nodes in `used`."""
    if not used:
        return None
    return [{NODE_ID_LABEL: f"!in({','.join(used)})"} for _ in range(int(per_node))]


def sync_pool(cfg: Any) -> Pool:
    return layout.train_pool(cfg, "actor_rollout_ref")


def async_pool_list(cfg: Any) -> List[Pool]:
    """The fully-async pools: training, then rollout (decisions/layout.rollout_pool's devices)."""
    train, rollout = layout.train_pool(cfg), layout.rollout_pool(cfg)
    per_node = rollout.world // max(1, rollout.nodes)
    return [train, Pool("rollout", rollout.nodes, per_node, rollout.keys)]


def run_pools(cfg: Any) -> List[Pool]:
    return async_pool_list(cfg) if cfg.async_training.enable else [sync_pool(cfg)]


@dataclass(frozen=True)
class ClusterNeed:
    """What the driver waits for: at least `nodes` nodes, and `devices` devices in all."""

    nodes: int
    devices: int
    device: str

    def describe(self) -> str:
        word = DEVICE_WORD[self.device]
        return f"{self.nodes} node{'s' if self.nodes != 1 else ''} with {self.devices} {word} in all"


def cluster_need(cfg: Any, device: str) -> ClusterNeed:
    """The nodes and devices the run's pools need. Pools may share nodes, so the node count is the
    largest pool's; the devices are every pool's."""
    pools = run_pools(cfg)
    return ClusterNeed(max(p.nodes for p in pools), sum(p.world for p in pools), device)


def missing(need: ClusterNeed, node_devices: List[float]) -> Optional[str]:
    """What a cluster whose alive nodes have `node_devices` devices (of need.device's resource) lacks,
    e.g. "1 of 2 nodes, 8 of 16 NPUs"; None when it has enough. A node without any is not counted."""
    nodes = [d for d in node_devices if d >= 1]
    have_nodes, have = len(nodes), int(sum(nodes))
    if have_nodes >= need.nodes and have >= need.devices:
        return None
    return f"{have_nodes} of {need.nodes} nodes, {have} of {need.devices} {DEVICE_WORD[need.device]}"
