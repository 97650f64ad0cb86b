"""The Ray side of decisions/placement.py: a pool's placement groups, one per node, each on a node
that the pool's other groups do not use; the node each rank runs on; and waiting for the cluster
to have the nodes and devices the run needs.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from verl_lite.decisions import placement as plan
from verl_lite.decisions.layout import Pool
from verl_lite.device import VISIBLE_ENV, local_device_index

logger = logging.getLogger(__name__)


class PlacementError(RuntimeError):
    """The cluster cannot hold a pool (too few nodes or devices), or did not within the wait."""


def alive_nodes() -> List[Dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def node_devices(device: str, nodes: Optional[List[Dict[str, Any]]] = None) -> List[float]:
    res = plan.device_resource(device)
    return [float(n.get("Resources", {}).get(res, 0.0)) for n in (alive_nodes() if nodes is None else nodes)]


def wait_for_cluster(need: plan.ClusterNeed, timeout_s: float, poll_s: float = 1.0,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once the cluster has `need`'s nodes and devices; PlacementError naming what is missing
    after `timeout_s` seconds (0: look once). Nodes that join during the wait are counted."""
    start = time.monotonic()
    said = None
    while True:
        lack = plan.missing(need, node_devices(need.device))
        if lack is None:
            if said is not None:
                logger.info("the cluster has %s", need.describe())
            return
        waited = time.monotonic() - start
        if waited >= timeout_s:
            raise PlacementError(f"the Ray cluster has {lack} after {waited:.0f} s of waiting (the run needs "
                                 f"{need.describe()}: start the missing nodes with launch/ray_cluster.sh worker, "
                                 f"or raise trainer.ray_wait_nodes_s)")
        if lack != said:
            logger.warning("waiting up to %.0f s for the Ray cluster: it has %s", timeout_s, lack)
            said = lack
        sleep(min(poll_s, max(0.0, timeout_s - waited)))


class NodeGroups:
    """A pool placed as placement groups, one per node (STRICT_PACK, a bundle of `per_bundle`
    devices each), on distinct nodes. `options(rank, share)` are the Ray actor options of rank
    `rank` of a worker group that takes `share` of every bundle."""

    def __init__(self, pool: Pool, device: str, timeout_s: float = 600.0, per_bundle: int = 1):
        import ray
        from ray.util.placement_group import placement_group, placement_group_table

        self.pool, self.device, self.per_bundle = pool, device, int(per_bundle)
        if pool.per_node % self.per_bundle:
            raise PlacementError(f"{pool.name}: {pool.per_node} devices per node do not split into bundles of "
                                 f"{self.per_bundle}")
        self.bundles_per_node = pool.per_node // self.per_bundle
        self.groups: List[Any] = []
        self.node_ids: List[str] = []
        ips = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()}
        one = {k: v * self.per_bundle if k != "CPU" or self.device == "cpu" else v
               for k, v in plan.bundle(device).items()}
        try:
            for k in range(pool.nodes):
                pg = placement_group([dict(one) for _ in range(self.bundles_per_node)], strategy="STRICT_PACK",
                                     bundle_label_selector=plan.other_nodes(self.node_ids, self.bundles_per_node))
                self.groups.append(pg)
                if not pg.wait(timeout_seconds=timeout_s):
                    lack = plan.missing(plan.ClusterNeed(pool.nodes, pool.world, device), node_devices(device))
                    raise PlacementError(
                        f"{pool.name}: no node of the Ray cluster could take node group {k + 1} of {pool.nodes} "
                        f"({pool.per_node} {plan.DEVICE_WORD[device]} on one node, besides the nodes of the groups "
                        f"before it) within {timeout_s:.0f} s" + (f"; the cluster has {lack}" if lack else
                                                                  " (the devices are taken by other pools or jobs)"))
                self.node_ids.append(placement_group_table(pg)["bundles_to_node_id"][0])
        except BaseException:
            self.remove()
            raise
        ips.update({n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes()})
        self.node_ips = [ips.get(n, "?") for n in self.node_ids]
        logger.info("%s: %d node(s) x %d %s: %s", pool.name, pool.nodes, pool.per_node, plan.DEVICE_WORD[device],
                    ", ".join(f"{ip} ({nid[:8]})" for ip, nid in zip(self.node_ips, self.node_ids)))

    @property
    def slots(self) -> int:
        """Worker ranks one group of this placement has: one per bundle."""
        return self.pool.nodes * self.bundles_per_node

    def master_addr(self) -> str:
        """Where rank 0's process group listens: the first node's address."""
        return self.node_ips[0]

    def node_of(self, rank: int) -> str:
        return self.node_ids[plan.rank_slot(rank, self.bundles_per_node)[0]]

    def options(self, rank: int, share: float = 1.0) -> Dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        node, index = plan.rank_slot(rank, self.bundles_per_node)
        opts = plan.actor_share(self.device, share)
        if self.per_bundle > 1:
            opts = {k: ({n: c * self.per_bundle for n, c in v.items()} if isinstance(v, dict)
                        else (v * self.per_bundle if k != "num_cpus" or self.device == "cpu" else v))
                    for k, v in opts.items()}
        opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            self.groups[node], placement_group_bundle_index=index, placement_group_capture_child_tasks=False)
        return opts

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups:
            try:
                remove_placement_group(pg)
            except Exception as e:  # Ray is going down, or the group is gone with its node
                logger.debug("%s: remove_placement_group: %s", self.pool.name, e)
        self.groups = []


def dead_nodes(node_ids: Any) -> Dict[str, str]:
    """{node id: 'IP (node id ...)'} of the nodes in `node_ids` that the cluster no longer has alive."""
    import ray

    try:
        nodes = {n["NodeID"]: n for n in ray.nodes()}
    except Exception as e:  # the head is gone too: the nodes cannot be told apart
        logger.debug("ray.nodes(): %s", e)
        return {}
    return {i: f"{nodes[i].get('NodeManagerAddress', '?')} (node id {i[:12]})"
            for i in node_ids if i in nodes and not nodes[i].get("Alive")}


def assigned_device_index(device: str, environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The local index of the cuda/npu device Ray assigned this actor (device.local_device_index:
    0 when Ray narrowed the visibility variable to it, the device's own id in Ray's no-set mode);
    None on cpu and outside a Ray actor."""
    ray = sys.modules.get("ray")
    if device not in VISIBLE_ENV or ray is None or not ray.is_initialized():
        return None
    ids = ray.get_runtime_context().get_accelerator_ids().get(plan.device_resource(device), [])
    if not ids:
        return None
    return local_device_index(device, ids, os.environ if environ is None else environ)
