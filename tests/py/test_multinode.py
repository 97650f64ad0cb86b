"""Multi-node on one machine: several Ray nodes on localhost, fake accelerators as Ray resources.

- Placement and device visibility: a two-node `ray.cluster_utils.Cluster` whose nodes declare GPUs
  and NPUs they do not have; probe actors placed by the trainer's own placement code report the
  node they run on and the device they would open (Ray's visibility variable, or no-set mode).
- Megatron across the same two nodes: TP=2 inside each node and DP=2 or PP=2 across them, placed
  by the trainer; each rank reports its node and its TP / PP / DP groups, and the first steps'
  metrics equal those of the same layout on one node of 4.
- Fully-async on the same two nodes: the worker node is removed under a rollout replica; the run
  stops with the lost-node line and the newest complete checkpoint.
- The launcher path: `launch/ray_cluster.sh head` and `worker` start the nodes, the training script
  joins through RAY_ADDRESS before the worker node is up (it waits), trains across both nodes
  with the single-node metrics, loses the worker node mid-run (its processes killed by the process
  group this test started), stops within a bounded time with one line naming the node and the
  last complete checkpoint, and resumes to the uninterrupted run's metrics once the node is back.

Every process is started here and ended by its pid / process group; `ray stop` is never called
(other Ray clusters may run on this machine).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest

from verl_lite.decisions import placement as plan
from verl_lite.decisions.layout import Pool
from verl_lite.device import local_device_index

REPO_ROOT = Path(__file__).resolve().parents[2]
PER_NODE = 3  # fake devices on each node of the placement cluster
NODE = dict(num_cpus=PER_NODE + 1, num_gpus=PER_NODE, resources={"NPU": PER_NODE})  # one node of that cluster


# ---------------------------------------------------------------------------- pure rules


def _cfg(nnodes=2, per_node=8, enable=False, rollout_nodes=2, rollout_per_node=12, rollout_tp=1):
    return SimpleNamespace(
        trainer=SimpleNamespace(nnodes=nnodes, n_gpus_per_node=per_node),
        async_training=SimpleNamespace(enable=enable),
        actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(
            nnodes=rollout_nodes, n_gpus_per_node=rollout_per_node, tensor_model_parallel_size=rollout_tp)))


def test_consecutive_ranks_share_a_node_so_tensor_parallel_groups_stay_inside_one():
    slots = [plan.rank_slot(r, 8) for r in range(16)]
    assert slots[:8] == [(0, i) for i in range(8)] and slots[8:] == [(1, i) for i in range(8)]
    # TP=2, PP=2 on 2 x 8: Megatron's TP groups are consecutive ranks -> never split across nodes
    assert all(slots[r][0] == slots[r + 1][0] for r in range(0, 16, 2))


def test_a_lost_node_is_named_alike_for_a_worker_rank_and_a_rollout_replica():
    from verl_lite.trainer.worker_group import NodeLostError, node_lost_error

    node = "10.0.0.2 (node id 0123456789ab)"
    e = node_lost_error("actor rank", (1, node), [11, 12], "update_actor")
    assert isinstance(e, NodeLostError) and e.node == node
    assert str(e) == f"actor rank 1 (pid 12) failed in update_actor: its node {node} left the cluster"
    # a pid not known (None, or past the list): the line leaves it out
    assert str(node_lost_error("rollout replica", (0, node), [None], "run")) == (
        f"rollout replica 0 failed in run: its node {node} left the cluster")
    assert str(node_lost_error("critic rank", (3, node), [], "x")).startswith("critic rank 3 failed in x:")


def test_the_cluster_wait_counts_the_nodes_and_devices_the_pools_need_and_names_what_is_missing():
    need = plan.cluster_need(_cfg(2, 8), "npu")
    assert (need.nodes, need.devices) == (2, 16)
    assert need.describe() == "2 nodes with 16 NPUs in all"
    assert plan.missing(need, [8.0]) == "1 of 2 nodes, 8 of 16 NPUs"
    assert plan.missing(need, [8.0, 0.0]) == "1 of 2 nodes, 8 of 16 NPUs"  # a node without NPUs is no node here
    assert plan.missing(need, [8.0, 8.0]) is None
    # fully-async, 4 training + 12 rollout devices on each of 2 nodes: 2 nodes, 32 devices
    need = plan.cluster_need(_cfg(2, 4, enable=True, rollout_nodes=2, rollout_per_node=12), "cuda")
    assert (need.nodes, need.devices) == (2, 32)
    assert plan.missing(need, [16.0, 8.0]) == "2 of 2 nodes, 24 of 32 GPUs"
    pools = plan.async_pool_list(_cfg(2, 4, enable=True, rollout_nodes=2, rollout_per_node=12))
    assert [(p.name, p.nodes, p.per_node) for p in pools] == [("trainer", 2, 4), ("rollout", 2, 12)]


@pytest.mark.parametrize("device, env, assigned, expected", [
    ("npu", {"ASCEND_RT_VISIBLE_DEVICES": "5"}, ["5"], 0),   # Ray narrowed the visibility to the device
    ("npu", {}, ["5"], 5),                                   # Ray's no-set mode: all devices are seen
    ("npu", {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}, ["6"], 2),  # no-set under a user's own narrowing
    ("cuda", {"CUDA_VISIBLE_DEVICES": "3"}, ["3"], 0),
    ("cuda", {}, ["3"], 3),
])
def test_the_device_a_worker_opens_is_the_one_ray_assigned_not_its_rank(device, env, assigned, expected):
    assert local_device_index(device, assigned, env) == expected


def test_a_visibility_variable_that_hides_the_assigned_device_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"ASCEND_RT_VISIBLE_DEVICES='0,1' does not include device 5.*unset"):
        local_device_index("npu", ["5"], {"ASCEND_RT_VISIBLE_DEVICES": "0,1"})


# ---------------------------------------------------------------------------- placement on 2 fake nodes


@pytest.fixture(scope="module")
def two_nodes():
    """Two Ray nodes on this host, each with PER_NODE fake GPUs and NPUs (custom resources)."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp = tempfile.mkdtemp(prefix="vl_mn")  # short: Ray's socket paths must stay under 108 bytes
    os.environ["RAY_TMPDIR"] = temp
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    try:
        add_node(cluster, **NODE, include_dashboard=False)  # the head
        add_node(cluster, **NODE)
        ray.init(address=cluster.address, log_to_driver=False)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probe task
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def add_node(cluster, tries: int = 3, **args) -> None:
    """cluster.add_node, tried again when Ray's fixed 30 s for a raylet to register passed (an
    overloaded machine: "The current node timed out during startup"). A failed attempt's processes
    are not the cluster's; Ray ties them to this process (they end with it)."""
    for attempt in range(tries):
        try:
            cluster.add_node(**args)
            return
        except Exception as e:
            if "timed out during startup" not in str(e) or attempt == tries - 1:
                raise


def probe(device: str) -> Dict[str, object]:
    """Where a task placed like a rank runs and which device it would open (the worker's own rule).
    A task holds its bundle's device as an actor does, and reuses worker processes (fast)."""
    import ray

    from verl_lite.trainer.placement import assigned_device_index

    ctx = ray.get_runtime_context()
    ids = ctx.get_accelerator_ids()[plan.device_resource(device)]
    index = assigned_device_index(device)
    visible = os.environ.get({"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}[device])
    seen = visible.split(",") if visible else [str(i) for i in range(PER_NODE)]
    return {"node": ctx.get_node_id(), "ids": ids, "index": index, "opens": seen[index], "visible": visible}


def probes(groups, share: float, device: str, n: int, env: Dict[str, str] = None) -> List[Dict[str, object]]:
    """`probe` for ranks 0..n-1, each with the options the trainer gives that rank."""
    import ray

    fn = ray.remote(probe)
    extra = {"runtime_env": {"env_vars": env}} if env else {}
    return ray.get([fn.options(**groups.options(rank, share), **extra).remote(device) for rank in range(n)],
                   timeout=120)


def duplicate_devices(infos: List[Dict[str, object]]) -> List[str]:
    """(node, device) pairs that more than one rank opens."""
    seen: Dict[tuple, int] = {}
    dups = []
    for rank, i in enumerate(infos):
        key = (i["node"], i["opens"])
        if key in seen:
            dups.append(f"ranks {seen[key]} and {rank} both open device {i['opens']} on node {str(i['node'])[:8]}")
        seen.setdefault(key, rank)
    return dups


@pytest.mark.parametrize("device, noset", [("cuda", False), ("npu", False), ("npu", True)])
def test_a_pool_spreads_one_node_per_group_and_each_rank_opens_its_own_device(two_nodes, device, noset):
    from verl_lite.trainer.placement import NodeGroups

    env = {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1"} if noset else None
    groups = NodeGroups(Pool("actor_rollout_ref", 2, 2), device, timeout_s=60)
    try:
        assert len(set(groups.node_ids)) == 2
        # two worker groups sharing the devices (actor/rollout/ref and critic), half a bundle each
        actor, critic = (probes(groups, 0.5, device, 4, env) for _ in range(2))
    finally:
        groups.remove()
    nodes = [i["node"] for i in actor]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3], "ranks 0-1 on one node, 2-3 on the other"
    assert nodes == [groups.node_of(r) for r in range(4)]
    assert duplicate_devices(actor) == [] and duplicate_devices(critic) == []
    for a, c in zip(actor, critic):  # the critic's rank r sits on the actor's rank r device
        assert (a["node"], a["opens"]) == (c["node"], c["opens"])
    for i in actor:
        assert len(i["ids"]) == 1
        if noset:
            assert i["visible"] is None and i["index"] == int(i["ids"][0])
        else:
            assert i["visible"] == i["ids"][0] and i["index"] == 0


def test_the_duplicate_check_catches_two_ranks_on_one_device(two_nodes):
    """The check above can fail: two ranks of one group put in the same bundle open the same device."""
    from verl_lite.trainer.placement import NodeGroups

    groups = NodeGroups(Pool("broken", 1, 1), "npu", timeout_s=60)
    try:
        infos = probes(groups, 0.5, "npu", 1) + probes(groups, 0.5, "npu", 1)
    finally:
        groups.remove()
    assert duplicate_devices(infos) and "ranks 0 and 1 both open device" in duplicate_devices(infos)[0]


def test_rank_0s_rendezvous_port_is_picked_on_rank_0s_node_not_the_drivers(two_nodes):
    import ray

    from verl_lite.trainer.worker_group import WorkerError, port_on_node

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    here = ray.get_runtime_context().get_node_id()
    assert len(nodes) == 2 and here in nodes
    for node in nodes:  # the driver's node in this process, the other through a task pinned to it
        port, checked = port_on_node(node)
        assert checked == node and 1024 <= port < 65536
    gone = "ab" * 28  # a node id no node of the cluster has
    with pytest.raises(WorkerError, match="could not pick a rendezvous port on rank 0's node abababab"):
        port_on_node(gone, timeout_s=20)


def test_the_fully_async_pools_split_every_node_between_training_and_rollout(two_nodes):
    """1 training + 2 rollout devices on each of the 2 nodes of 3 (the 4 + 12 of 16 layout, scaled)."""
    from verl_lite.trainer.placement import NodeGroups

    cfg = _cfg(2, 1, enable=True, rollout_nodes=2, rollout_per_node=2)
    train_pool, rollout_pool = plan.async_pool_list(cfg)
    train = NodeGroups(train_pool, "npu", timeout_s=60)
    rollout = NodeGroups(rollout_pool, "npu", timeout_s=60)
    try:
        t, r = probes(train, 1.0, "npu", 2), probes(rollout, 1.0, "npu", 4)
    finally:
        train.remove()
        rollout.remove()
    per_node: Dict[str, List[str]] = {}
    for kind, infos in (("train", t), ("rollout", r)):
        for i in infos:
            per_node.setdefault(i["node"], []).append(kind)
    assert sorted(sorted(v) for v in per_node.values()) == [["rollout", "rollout", "train"]] * 2
    assert duplicate_devices(t + r) == []


def test_a_pool_that_needs_more_nodes_than_the_cluster_has_is_refused_naming_what_is_missing(two_nodes):
    from verl_lite.trainer.placement import NodeGroups, PlacementError, wait_for_cluster

    with pytest.raises(PlacementError, match=r"node group 3 of 3 .* within 2 s; the cluster has 2 of 3 nodes, "
                                             rf"{2 * PER_NODE} of {3 * PER_NODE} NPUs"):
        NodeGroups(Pool("actor_rollout_ref", 3, PER_NODE), "npu", timeout_s=2)
    with pytest.raises(PlacementError, match=r"the Ray cluster has 2 of 4 nodes, 6 of 8 GPUs after \d+ s of waiting "
                                             r"\(the run needs 4 nodes with 8 GPUs in all: start the missing nodes"):
        wait_for_cluster(plan.ClusterNeed(4, 8, "cuda"), timeout_s=1, poll_s=0.2)
    from ray.util import placement_group_table

    assert not [p for p in placement_group_table().values() if p["state"] != "REMOVED"], "a placement group was left"


def where_rank_runs() -> Dict[str, object]:
    """Called in each worker actor: its Ray node and the global ranks of its Megatron TP, PP and DP groups."""
    import ray
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu

    return {"node": ray.get_runtime_context().get_node_id(), "rank": dist.get_rank(),
            "tp": dist.get_process_group_ranks(mpu.get_tensor_model_parallel_group()),
            "pp": dist.get_process_group_ranks(mpu.get_pipeline_model_parallel_group()),
            "dp": dist.get_process_group_ranks(mpu.get_data_parallel_group())}


def misplaced(ranks: List[Dict[str, object]], node: Dict[int, str], inside: tuple, across: tuple) -> List[str]:
    """The groups of `ranks` (where_rank_runs) that break the layout, with rank r on node[r]: each
    group named in `inside` must lie in one node, each in `across` must span two."""
    bad = []
    for r in ranks:
        spans = {kind: len({node[i] for i in r[kind]}) for kind in inside + across}
        bad += [f"{kind.upper()} group {r[kind]} spans nodes" for kind in inside if spans[kind] != 1]
        bad += [f"{kind.upper()} group {r[kind]} inside one node" for kind in across if spans[kind] != 2]
    return bad


# (parallel sizes, groups inside a node, groups across the 2 nodes): TP=2 x DP=2, and TP=2 x PP=2 with one
# pipeline stage (of tiny-qwen3's 2 layers) per node. Either way the ranks in a node are one TP group.
MEGATRON_LAYOUTS = {
    "tp_in_node_dp_across": ({"tensor": 2, "pipeline": 1}, ("tp",), ("dp",)),
    "tp_in_node_pp_across": ({"tensor": 2, "pipeline": 2}, ("tp",), ("pp",)),
}


@pytest.mark.megatron
@pytest.mark.timeout(600)
@pytest.mark.parametrize("layout", list(MEGATRON_LAYOUTS))
def test_megatron_across_two_nodes_gives_the_one_node_metrics(layout, two_nodes, copy_task_data, tmp_path,
                                                              monkeypatch):
    """4 ranks on 2 nodes of 2 against the same layout on one node of 4 devices: the trainer's own
    placement, Megatron over gloo. Each rank reports the node it runs on and its groups: a TP group
    never spans two nodes, a DP (or PP) group does, and with the ranks placed round-robin instead
    of in order the same check fails."""
    import ray

    from test_faults import metrics, overrides
    from verl_lite.config import load_config
    from verl_lite.trainer import run as run_mod

    sizes, inside, across = MEGATRON_LAYOUTS[layout]
    landed: Dict[str, List[Dict[str, object]]] = {}

    class Recording(run_mod.WorkerGroup):
        def __init__(self, cls, name, *args, **kwargs):
            super().__init__(cls, name, *args, **kwargs)
            landed[name] = ray.get([w.__ray_call__.remote(lambda _self: where_rank_runs()) for w in self.workers],
                                   timeout=120)

    monkeypatch.setattr(run_mod, "WorkerGroup", Recording)
    data = copy_task_data(n_train=64, n_val=8)
    megatron = ("actor_rollout_ref.model.path=tiny-qwen3", "actor_rollout_ref.actor.strategy=megatron",
                f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={sizes['tensor']}",
                f"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size={sizes['pipeline']}",
                "actor_rollout_ref.actor.megatron.sequence_parallel=false",
                "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false",
                "trainer.total_training_steps=3", "trainer.save_freq=-1", "trainer.ray=true",
                "trainer.ray_wait_nodes_s=60")
    runs = {}
    for name, nodes in (("one", ("trainer.nnodes=1", "trainer.n_gpus_per_node=4")),
                        ("two", ("trainer.nnodes=2", "trainer.n_gpus_per_node=2"))):
        out = tmp_path / name
        assert run_mod.run(load_config(overrides(data, out, *megatron, *nodes))) == 0
        runs[name] = (metrics(out), landed.pop("actor_rollout_ref"))
    (one, one_ranks), (two, two_ranks) = runs["one"], runs["two"]
    assert len({r["node"] for r in one_ranks}) == 1
    node = {r["rank"]: r["node"] for r in two_ranks}
    assert len(set(node.values())) == 2 and sorted(node) == [0, 1, 2, 3]
    for r in two_ranks:
        assert (len(r["tp"]), len(r["pp"]), len(r["dp"])) == (sizes["tensor"], sizes["pipeline"],
                                                              4 // (sizes["tensor"] * sizes["pipeline"])), r
    assert misplaced(two_ranks, node, inside, across) == []
    round_robin = {r: node[2 * (r % 2)] for r in node}  # rank r on node r % 2: ranks 0 and 1 on different nodes
    assert misplaced(two_ranks, round_robin, inside, across), "the check cannot tell the placements apart"
    assert sorted(one) == sorted(two) == [1, 2, 3]
    # a group whose samples all score the same has no advantage: some step's groups do differ (the first's
    # with TP alone; with PP the stages' own initialisation samples other responses, and step 3's differ)
    assert any(two[step]["actor/grad_norm"] > 0 for step in two), "no step updated anything"
    diffs = {}
    for step in one:
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
            diffs[(step, key)] = abs(two[step][key] - one[step][key])
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-5, abs=1e-7), (key, step)
    print(f"{layout}: largest difference, two nodes vs one:", max(diffs.values()),
          {key: [round(two[step][key], 6) for step in two] for key in ("critic/score/mean", "actor/pg_loss",
                                                                      "actor/grad_norm")})


@pytest.mark.timeout(600)
def test_a_node_lost_under_the_fully_async_rollout_pool_stops_with_the_node_and_the_last_checkpoint(
        two_nodes, copy_task_data, tmp_path, monkeypatch):
    """Fully-async, one training device and a rollout replica on each of the 2 nodes: the worker node
    is removed (its processes killed) while step 3 publishes its weights to the replicas. The run
    stops with the training pool's line, naming the replica, its node and the newest complete
    checkpoint; step 3 left nothing that passes for a checkpoint. The worker node is added back."""
    import ray

    from test_faults import latest, overrides
    from verl_lite.config import load_config
    from verl_lite.trainer import rollout_pool
    from verl_lite.trainer import run as run_mod
    from verl_lite.trainer.worker_group import NodeLostError

    worker = next(iter(two_nodes.worker_nodes))
    head = ray.get_runtime_context().get_node_id()
    seen: Dict[str, object] = {}
    push = rollout_pool.RolloutPool.push

    def push_losing_the_node(self, weights_ref, version):
        if version == 3:  # the end of step 3 (a version a step): the worker node goes before its replica hears
            assert sorted(self.nodes) == sorted([head, worker.node_id]), "a rollout replica on each node"
            seen.update(replica=self.nodes.index(worker.node_id), pid=self.pids[self.nodes.index(worker.node_id)])
            two_nodes.remove_node(worker, allow_graceful=False)
            seen["removed"] = time.monotonic()
        return push(self, weights_ref, version)

    monkeypatch.setattr(rollout_pool.RolloutPool, "push", push_losing_the_node)
    out = tmp_path / "async"
    cfg = load_config(overrides(copy_task_data(n_train=64, n_val=8), out, "async_training.enable=True",
                                "actor_rollout_ref.rollout.nnodes=2", "actor_rollout_ref.rollout.n_gpus_per_node=1",
                                "trainer.total_training_steps=4", "trainer.save_freq=1", "trainer.ray=true",
                                "trainer.ray_wait_nodes_s=60"))
    try:
        with pytest.raises(NodeLostError) as failed:
            run_mod.run(cfg)
        took = time.monotonic() - seen["removed"]
    finally:
        if worker in two_nodes.worker_nodes:  # the run failed before the node was removed
            two_nodes.remove_node(worker, allow_graceful=False)
        add_node(two_nodes, **NODE)  # the fixture's other tests have two nodes again
        two_nodes.wait_for_nodes()
    line = run_mod.describe_failure(failed.value)
    assert latest(out) == 2
    assert re.fullmatch(rf"at step 3 of 4: rollout replica {seen['replica']} \(pid {seen['pid']}\) failed in "
                        rf"update_weights: its node [0-9.]+ \(node id {worker.node_id[:12]}\) left the cluster; "
                        rf"last complete checkpoint {re.escape(str(out / 'global_step_2'))} \(step 2; restart the "
                        r"node and run again to resume from it\)", line), line
    # step 3 was not saved: nothing newer than the checkpoint named is left, complete or not
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_1", "global_step_2"]
    assert took < 60, f"the driver took {took:.1f} s to stop after the node was lost"
    print(f"rollout node loss: stopped {took:.1f} s after the node was removed: {line}")


# ---------------------------------------------------------------------------- the launcher path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A Ray process that cannot reach the head's GCS for gcs_rpc_server_reconnect_timeout_s (60 s) exits
# ("Failed to connect to GCS within 60 seconds"); on a machine loaded far past its cores the GCS can
# stall that long (its RPCs time out: "Deadline Exceeded") while the test's cluster is fine. The nodes
# and the driver wait longer; a GCS that is really gone still fails the test, by its own time limits.
GCS_PATIENCE = {"RAY_gcs_rpc_server_reconnect_timeout_s": "300"}


class LocalNodes:
    """Ray nodes started with launch/ray_cluster.sh on this host, each in a process group of its own
    (`ray start --block` and everything it starts), ended by that group."""

    def __init__(self, root: Path):
        self.root, self.port, self.procs = root, free_port(), {}
        self.started: List[int] = []  # process groups of the nodes ended so far
        self.env = dict(os.environ, RAY_AUTH_MODE="disabled", DEVICE="cpu", NDEVICES_PER_NODE="1",
                        NODE_IP="127.0.0.1", RAY_PORT=str(self.port), HEAD_ADDRESS="127.0.0.1", **GCS_PATIENCE)
        self.env.pop("RAY_ADDRESS", None)

    def start(self, name: str, role: str, tries: int = 2) -> None:
        """Start node `name` and wait until Ray says it runs. Ray gives a raylet 30 s to register
        (a fixed limit); on an overloaded machine that can pass, so a failed start is ended by its
        process group and tried once more."""
        for attempt in range(tries):
            temp = self.root / f"{name}.{attempt}"
            temp.mkdir()
            extra = [f"--temp-dir={temp}", "--dashboard-agent-listen-port=0", "--metrics-export-port=0", "--block"]
            if role == "head":
                extra += [f"--ray-client-server-port={free_port()}", f"--dashboard-port={free_port()}",
                          "--include-dashboard=false"]
            path = self.root / f"{name}.{attempt}.log"
            with open(path, "w", encoding="utf-8") as log:
                proc = subprocess.Popen(["bash", str(REPO_ROOT / "launch/ray_cluster.sh"), role, *extra],
                                        stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
            self.procs[name] = proc
            wait_for(lambda: "Ray runtime started" in path.read_text() or proc.poll() is not None, 120,
                     f"Ray node {name}")
            if proc.poll() is None:
                return
            self.kill(name)
        pytest.fail(f"Ray node {name} did not start:\n{path.read_text()[-3000:]}")

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        self.started.append(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def left(self, name_pgids: List[int]) -> List[str]:
        out = subprocess.run(["ps", "-eo", "pid=,pgid=,args="], capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line.split()[1:2] and int(line.split()[1]) in name_pgids]

    def report(self) -> str:
        """What a failed phase's message needs besides the driver's log: the end of each node's
        `ray start` output, the node's ray_process_exit.log (which of its processes exited, when
        `--block` stopped the node) and the head's gcs_server.out. A driver that cannot reach the
        head's GCS for 60 s exits with Ray's "Failed to connect to GCS within 60 seconds"; these
        say whether the GCS was gone (its node stopped, or a `ray stop` on this host) or only slow."""
        parts = []
        for pattern, size in (("*.log", 1500), ("*/session_*/logs/ray_process_exit.log", 1500),
                              ("head.*/session_*/logs/gcs_server.out", 1500)):
            for path in sorted(self.root.glob(pattern)):
                parts.append(f"--- {path.relative_to(self.root)}:\n{path.read_text(errors='replace')[-size:]}")
        gone = [f"{name} (exit {proc.poll()})" for name, proc in self.procs.items() if proc.poll() is not None]
        return "\n".join([f"--- nodes ended: {', '.join(gone) or 'none'}", *parts])

    def status(self) -> str:
        return subprocess.run(["bash", str(REPO_ROOT / "launch/ray_cluster.sh"), "status"], capture_output=True,
                              text=True, env=self.env, timeout=60).stdout


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


@pytest.mark.timeout(900)  # three runs and three node starts: ~90 s on 2 idle cores, far more on a loaded box
def test_two_nodes_started_by_the_launcher_train_lose_a_node_and_resume_to_the_single_node_metrics(
        copy_task_data, tmp_path):
    from test_faults import error_line, latest, logged_steps, metrics, overrides, start, finish

    data = copy_task_data(n_train=64, n_val=8)
    root = Path(tempfile.mkdtemp(prefix="vl_mn"))
    nodes = LocalNodes(root)
    steps = ["trainer.total_training_steps=6", "trainer.save_freq=2", "trainer.ray=true",
             "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "ray_init.num_cpus=2",
             f"ray_init.temp_dir={root / 'single'}"]
    # the single-node run (one node, 2 ranks) runs while the head starts
    ref = start(overrides(data, tmp_path / "single", *steps, "trainer.n_gpus_per_node=2"), tmp_path / "single.log")
    pgids: List[int] = []
    try:
        nodes.start("head", "head")
        pgids.append(nodes.procs["head"].pid)
        assert finish(ref, timeout=400) == 0, (tmp_path / "single.log").read_text()[-3000:] + nodes.report()

        os.environ["RAY_ADDRESS"] = f"127.0.0.1:{nodes.port}"  # what a user exports on the head node
        os.environ.update(GCS_PATIENCE)  # the drivers started below
        out, log = tmp_path / "multi", tmp_path / "multi.log"
        args = overrides(data, out, *steps[:4], "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
                         "trainer.ray_wait_nodes_s=120")
        # before the worker node: the driver waits for it. Step 4's update never ends (the fault point), so
        # the node is lost during a step however fast the first three ran
        proc = start(args, log, fault="hang:worker.update_actor:4")
        wait_for(lambda: "waiting up to 120 s for the Ray cluster: it has 1 of 2 nodes, 1 of 2 CPUs" in log.read_text()
                 or proc.poll() is not None, 120, "the driver's wait")
        nodes.start("worker1", "worker")
        pgids.append(nodes.procs["worker1"].pid)
        # "Ray runtime started" is the worker's own line; the head's autoscaler report lags it by seconds
        wait_for(lambda: nodes.status().count(" node_") == 2, 60, "`ray_cluster.sh status` to show 2 nodes")
        wait_for(lambda: logged_steps(out) >= 3 or proc.poll() is not None, 240, "three steps on two nodes")
        assert proc.poll() is None, log.read_text()[-3000:] + nodes.report()
        nodes.kill("worker1")  # the node is lost: raylet, agents and the worker ranks on it
        killed = time.monotonic()
        rc = finish(proc, timeout=120)
        took = time.monotonic() - killed
        text = log.read_text()
        assert rc == 1, text[-3000:] + nodes.report()
        line = error_line(text)
        found = latest(out)
        assert found is not None
        assert re.match(r"verl_lite.main: (at step|saving the checkpoint of step) \d+ of 6: actor_rollout_ref rank [01] "
                        r"\(pid \d+\) failed in \w+: its node [0-9.]+ \(node id [0-9a-f]{12}\) left the cluster; "
                        rf"last complete checkpoint {re.escape(str(out / f'global_step_{found}'))} \(step {found}; "
                        r"restart the node", line), line
        assert took < 60, f"the driver took {took:.1f} s to stop after the node was lost"
        # nothing half-written passes for a checkpoint: the newest global_step_N dir is the one named
        assert max(int(p.name.split("_")[-1]) for p in out.glob("global_step_*")) == found
        assert "Traceback" not in text
        assert not nodes.left(pgids[1:]), "the lost node's processes are still running"

        nodes.start("worker2", "worker")
        pgids.append(nodes.procs["worker2"].pid)
        assert finish(start(args, tmp_path / "resumed.log")) == 0, ((tmp_path / "resumed.log").read_text()[-3000:]
                                                                    + nodes.report())
        assert "resumed from" in (tmp_path / "resumed.log").read_text()
        single, multi = metrics(tmp_path / "single"), metrics(out)
        assert sorted(multi) == sorted(single) == list(range(1, 7))
        for step in single:
            for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
                assert multi[step][key] == pytest.approx(single[step][key], rel=1e-6, abs=1e-9), (key, step)
        print(f"node loss noticed and the run stopped in {took:.1f} s: {line}")
    finally:
        for key in ("RAY_ADDRESS", *GCS_PATIENCE):
            os.environ.pop(key, None)
        for name in list(nodes.procs):
            nodes.kill(name)
        if ref.poll() is None:
            ref.kill()
        wait_for(lambda: not nodes.left(pgids + nodes.started), 30, "the nodes' processes to end")
        shutil.rmtree(root, ignore_errors=True)
