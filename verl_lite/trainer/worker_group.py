"""A group of worker ranks as Ray actors (or one in-process worker for unit tests), with
data-parallel dispatch: split a batch over DP ranks, call every rank, gather the leaders' outputs.

A worker that dies or raises makes every call fail fast with the worker's error, the method and
the rank: the driver never waits forever (each call has a timeout, `trainer.ray_timeout_s`, on
top of Ray's own death detection). A worker killed by a signal (the OOM killer's SIGKILL, a
`kill`) is reported as such, with its pid.

With `VERL_LITE_FAULT=ACTION:worker.METHOD[:N]` (crash tests only; see checkpoint.py) the worker
class is wrapped so that METHOD hits the fault point inside the worker's own process.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from verl_lite.batch import Batch, chunk, concat
from verl_lite.device import free_port
from verl_lite.faults import FAULT_ENV, fault_spec
from verl_lite.trainer import tensor_transport
from verl_lite.trainer.placement import dead_nodes

logger = logging.getLogger(__name__)


class WorkerError(RuntimeError):
    """A worker rank failed (raised, died or timed out) while running a method."""


def cpu_threads() -> int:
    """torch threads for one CPU worker: OMP_NUM_THREADS when set, else 1."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        return max(1, int(value)) if value else 1
    except ValueError:
        raise ValueError(f"OMP_NUM_THREADS={value!r} is not a positive integer (unset it or set e.g. 2)") from None


def worker_resources(device: str) -> Dict[str, Any]:
    """Ray resource request of one rank: a CPU core on cpu, a GPU or an NPU otherwise."""
    if device == "cuda":
        return {"num_cpus": 1, "num_gpus": 1}
    if device == "npu":
        return {"num_cpus": 1, "resources": {"NPU": 1}}
    return {"num_cpus": 1}


class NodeLostError(WorkerError):
    """A worker rank failed because its node left the cluster; `node` names it."""

    def __init__(self, message: str, node: str):
        super().__init__(message)
        self.node = node


def _free_port_here() -> Tuple[int, str]:
    import ray

    return free_port(""), ray.get_runtime_context().get_node_id()


def port_on_node(node_id: str, timeout_s: float = 120.0) -> Tuple[int, str]:
    """(a TCP port free now on node `node_id`, the node that checked): rank 0's rendezvous port is
    picked on rank 0's node, not on the driver's (what is free here says nothing of another host).
    The driver's own node is asked in this process; another node through a zero-CPU task pinned to it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if node_id == ray.get_runtime_context().get_node_id():
        return _free_port_here()
    try:
        task = ray.remote(num_cpus=0, max_retries=0)(_free_port_here).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
        return tuple(ray.get(task.remote(), timeout=timeout_s))
    except Exception as e:
        raise WorkerError(f"could not pick a rendezvous port on rank 0's node {node_id[:8]}: "
                          f"{type(e).__name__}: {e}") from e


# Tries at starting a worker group's ranks when rank 0 finds its rendezvous port taken (EADDRINUSE).
PORT_TRIES = 3

# How long a worker's death may precede the head marking its node dead (Ray's health checks).
NODE_DEATH_GRACE_S = 20.0


class WorkerGroup:
    """`placement` (trainer/placement.NodeGroups): rank r runs in the node group and bundle of rank r,
    taking `share` of it (1 / the worker groups that share the devices); without it, each rank asks
    Ray for a device anywhere (one-node runs and tests)."""

    def __init__(self, cls: type, name: str, cfg: Any, world_size: int, device: str,
                 use_ray: bool = True, threads: int = 1, call_timeout_s: Optional[float] = None,
                 init_timeout_s: float = 600.0, placement: Any = None, share: float = 1.0):
        self.name, self.world_size, self.use_ray = name, world_size, use_ray
        self.call_timeout_s = call_timeout_s
        self.pids: List[Optional[int]] = []
        self.nodes: List[Optional[str]] = [None] * world_size
        master = "127.0.0.1"
        if placement is not None:
            if placement.slots != world_size:
                raise ValueError(f"{name}: {world_size} ranks for a placement of {placement.slots} devices")
            master = placement.master_addr()
            self.nodes = [placement.node_of(rank) for rank in range(world_size)]
        args = lambda rank, port: (cfg, rank, world_size, master, port, device, threads)  # noqa: E731
        cls = with_fault_hook(cls)
        if use_ray:
            import ray

            actor_cls = ray.remote(defer_init_errors(cls))
            where = ((lambda rank: worker_resources(device)) if placement is None  # noqa: E731
                     else (lambda rank: placement.options(rank, share)))
            for attempt in range(1, PORT_TRIES + 1):
                port = free_port() if placement is None else port_on_node(placement.node_of(0))[0]
                self.workers = [actor_cls.options(max_restarts=0, max_task_retries=0, **where(rank))
                                .remote(*args(rank, port)) for rank in range(world_size)]
                try:
                    self._wait([w.ready.remote() for w in self.workers], "__init__", init_timeout_s)
                    break
                except WorkerError as e:
                    # The port was free when picked here, and another process bound it before rank 0's
                    # process group listened on it (the ranks' imports take seconds): a new port.
                    self.shutdown()
                    if world_size == 1 or "EADDRINUSE" not in str(e) or attempt == PORT_TRIES:
                        raise
                    logger.warning("%s: port %d on %s was taken before rank 0 listened on it; starting the %d "
                                   "ranks again on a new port (try %d of %d)", name, port, master, world_size,
                                   attempt + 1, PORT_TRIES)
            self.pids = self._wait([w.__ray_call__.remote(worker_pid) for w in self.workers], "pid", init_timeout_s)
            logger.info("%s: %d rank(s) ready, pids %s", name, world_size, self.pids)
        else:
            if world_size != 1:
                raise ValueError(f"trainer.ray=false runs one in-process worker; {name} needs {world_size} ranks "
                                 f"(set trainer.ray=true or a single-device layout)")
            try:
                self.workers = [cls(*args(0, free_port()))]
            except Exception as e:
                raise WorkerError(f"{name} rank 0 failed in __init__: {type(e).__name__}: {e}") from e
            self.pids = [None]
        self.topology = self.call_all("topology")
        self.dp_size = self.topology[0]["dp_size"]
        self.leaders = dp_leaders(self.topology)
        if [r for r, _ in self.leaders] != list(range(self.dp_size)):
            raise WorkerError(f"{name}: data-parallel leaders {self.leaders} do not cover ranks 0..{self.dp_size - 1}")

    # -- calls ---------------------------------------------------------------------------------

    def _wait(self, refs: List[Any], method: str, timeout: Optional[float]) -> List[Any]:
        import ray

        start = time.monotonic()
        pending = list(refs)
        answers: Dict[int, Any] = {}  # each answer fetched (and unpickled) once
        while pending:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            ready, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not ready:
                raise WorkerError(f"{self.name}.{method}: no answer from ranks "
                                  f"{[refs.index(p) for p in pending]} within {timeout:.0f} s "
                                  f"(raise trainer.ray_timeout_s if the step is just slow)")
            rank = refs.index(ready[0])
            try:
                answers[rank] = ray.get(ready[0])  # a failure surfaces at once, not after the slowest rank
            except Exception as e:  # RayTaskError / RayActorError / OOM
                pid = self.pids[rank] if rank < len(self.pids) and self.pids[rank] else None
                who = f"{self.name} rank {rank}" + (f" (pid {pid})" if pid else "")
                lost = lost_node(self.nodes, e, pending)
                if lost:
                    raise node_lost_error(f"{self.name} rank", lost, self.pids, method) from e
                raise WorkerError(f"{who} failed in {method}: {short_error(e)}") from e
        return [answers[i] for i in range(len(refs))]

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> List[Any]:
        if not self.use_ray:
            try:
                return [getattr(self.workers[0], method)(*args, **kwargs)]
            except Exception as e:
                raise WorkerError(f"{self.name} rank 0 failed in {method}: {type(e).__name__}: {e}") from e
        refs = [getattr(w, method).remote(*args, **kwargs) for w in self.workers]
        return self._wait(refs, method, self.call_timeout_s)

    def call_shards(self, method: str, shards: Sequence[Batch], *args: Any, **kwargs: Any) -> List[Any]:
        """Call every rank with its DP shard; gather the DP leaders' outputs in DP order."""
        return self.submit_shards(method, shards, *args, **kwargs).result()

    def submit_shards(self, method: str, shards: Sequence[Batch], *args: Any, **kwargs: Any) -> "PendingCall":
        """call_shards without waiting: the call is sent to every rank now (on the Ray path; in-process
        it runs now) and `result()` waits for it. A rank runs the calls it gets in the order they
        were sent, so a call submitted after another starts when that one ends."""
        if len(shards) != self.dp_size:
            raise ValueError(f"{self.name}.{method}: {len(shards)} shards for {self.dp_size} data-parallel ranks")
        if not self.use_ray:
            return PendingCall(self, method, answers=self.call_all(method, shards[0], *args, **kwargs))
        refs = [getattr(w, method).remote(shard, *args, **kwargs)
                for w, shard in zip(self.workers, shards_by_rank(shards, self.topology))]
        return PendingCall(self, method, refs=refs)

    def dp_call(self, method: str, batch: Batch, *args: Any, **kwargs: Any) -> Batch:
        """Split `batch` into equal contiguous DP shards, run `method`, concatenate the outputs."""
        return self.dp_submit(method, batch, *args, **kwargs).batch()

    def dp_submit(self, method: str, batch: Batch, *args: Any, **kwargs: Any) -> "PendingCall":
        """dp_call without waiting: `batch()` of the answer waits and concatenates the outputs."""
        return self.submit_shards(method, chunk(batch, self.dp_size), *args, **kwargs)

    def shutdown(self) -> None:
        if self.use_ray:
            import ray

            for w in self.workers:
                try:
                    ray.kill(w, no_restart=True)
                except Exception as e:  # already dead, or Ray is going down: nothing left to stop
                    logger.debug("%s: ray.kill: %s", self.name, e)
        self.workers = []


class PendingCall:
    """A call sent to a worker group's ranks (submit_shards): `result()` waits for the DP leaders'
    answers (in DP order) with the group's timeout and failure reports; `batch()` concatenates them."""

    def __init__(self, group: WorkerGroup, method: str, refs: Optional[List[Any]] = None,
                 answers: Optional[List[Any]] = None):
        self.group, self.method, self._refs = group, method, refs
        self._answers = None if answers is None else [answers[0]]  # in-process: the one rank, already run

    def result(self) -> List[Any]:
        if self._answers is None:
            results = self.group._wait(self._refs, self.method, self.group.call_timeout_s)
            self._answers = [results[i] for _, i in self.group.leaders]
            self._refs = None
        return self._answers

    def batch(self) -> Batch:
        return concat(self.result())


def shards_by_rank(shards: Sequence[Any], topology: List[Dict[str, Any]]) -> List[Any]:
    """The shard each rank gets: its data-parallel rank's; the ranks of one model-parallel or sequence-parallel
    group (one data-parallel rank) get the same one."""
    return [shards[t["dp_rank"]] for t in topology]


def dp_leaders(topology: List[Dict[str, Any]]) -> List[Any]:
    """(dp_rank, rank) of the ranks whose outputs are collected, one per data-parallel rank, in DP order."""
    return sorted((t["dp_rank"], i) for i, t in enumerate(topology) if t["leader"])


def lost_node(nodes: Sequence[Optional[str]], first: BaseException, pending: List[Any],
              grace_s: Optional[float] = None) -> Optional[Tuple[int, str]]:
    """(index, 'IP (node id ...)') of the first member (a rank, a rollout replica) whose node, in
    `nodes` (one node id per member), left the cluster, when the members span several nodes; None
    for an ordinary failure. The first failure is often a survivor's (its collective lost the peer:
    "Connection reset by peer") before the head has marked the node dead, so the nodes are asked
    again until the call's other members (`pending`) have all answered or failed, for at most
    `grace_s` (NODE_DEATH_GRACE_S) seconds."""
    import ray

    spread = {n for n in nodes if n}
    if len(spread) < 2:
        return None
    deadline = time.monotonic() + (NODE_DEATH_GRACE_S if grace_s is None else grace_s)
    died = isinstance(first, ray.exceptions.RayActorError)
    while True:
        dead = dead_nodes(spread)
        if dead:
            lost = min(i for i, n in enumerate(nodes) if n in dead)
            return lost, dead[nodes[lost]]
        if time.monotonic() >= deadline:
            return None
        if not pending and not died:  # every member answered or raised, none died: an ordinary failure
            return None
        if pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            died = died or any(_died(ref) for ref in done)
        else:
            time.sleep(0.5)  # an actor died: the head marks its node dead some seconds later, if it is gone


def node_lost_error(member: str, lost: Tuple[int, str], pids: Sequence[Optional[int]], method: str) -> NodeLostError:
    """The error of a call whose member `lost` (lost_node's (index, node)) failed because its node left:
    "<member> <index> (pid N) failed in <method>: its node <node> left the cluster" (no pid when unknown)."""
    index, node = lost
    pid = pids[index] if index < len(pids) and pids[index] else None
    who = f"{member} {index}" + (f" (pid {pid})" if pid else "")
    return NodeLostError(f"{who} failed in {method}: its node {node} left the cluster", node)


def _died(ref: Any) -> bool:
    """Whether a finished call failed because its actor died."""
    import ray

    try:
        ray.get(ref, timeout=0)
    except ray.exceptions.RayActorError:
        return True
    except Exception:  # answered, or raised an error of its own
        return False
    return False


def worker_pid(_worker: Any) -> int:
    """The process id of the actor it runs in (`actor.__ray_call__.remote(worker_pid)`)."""
    return os.getpid()


def defer_init_errors(cls: type) -> type:
    """A subclass whose __init__ keeps its exception and raises it from `ready()`. Ray prints the
    traceback of an actor whose __init__ raises on the driver's console ("Exception raised in
    creation task"); an error raised by a method goes to the caller only, which reports it in one
    line (an expected refusal such as UnsupportedModelError), the traceback kept in last_error.txt."""
    def __init__(self, *args, **kwargs):
        self._init_error = None
        try:
            tensor_transport.install()  # this worker's answers travel as the driver's calls do
            cls.__init__(self, *args, **kwargs)
        except Exception as e:  # re-raised, unchanged, by ready()
            self._init_error = e

    def ready(self, *args, **kwargs):
        if self._init_error is not None:
            raise self._init_error
        return cls.ready(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "ready": ready})


def with_fault_hook(cls: type) -> type:
    """`cls`, or a subclass whose METHOD first hits the fault point `worker.METHOD` when
    VERL_LITE_FAULT names one (crash tests). The subclass keeps the name, so Ray's process titles
    stay `ray::<Class>`; it is defined here, so Ray ships it to the workers by value."""
    spec = fault_spec()
    if spec is None or not spec.point.startswith("worker."):
        return cls
    method = spec.point[len("worker."):]
    original = getattr(cls, method, None)
    if not callable(original):
        return cls
    text = f"{spec.action}:{spec.point}:{spec.nth}"

    def hooked(self, *args, **kwargs):
        fault_spec({FAULT_ENV: text}).hit(spec.point)  # counted in the worker's own process
        return original(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {method: hooked})


def short_error(e: BaseException) -> str:
    """The worker's own error line(s), without Ray's wrapper boilerplate."""
    cause = getattr(e, "cause", None)
    if cause is not None and not isinstance(cause, type(e)):
        text = " ".join(str(cause).split())
        return f"{type(cause).__name__}: {text}" if text else f"{type(cause).__name__} (no message)"
    text = " ".join(str(e).split())
    died = re.search(r"Worker exit detail: (.*?\.)(?: |$)(?:(End of file\.))?", text)
    if died:  # Ray's ActorDiedError: keep the exit detail, drop the advice paragraph
        detail = " ".join(g for g in died.groups() if g)
        return (f"its process died ({detail} It was killed, e.g. by SIGKILL or the kernel's OOM killer, "
                f"or it crashed)")
    if "running low on memory" in text:  # Ray's memory monitor killed it
        return "Ray's memory monitor killed it: " + text.split(". ")[0] + " (give the workers more memory)"
    tail = [t for t in str(e).strip().splitlines() if t.strip()][-3:]
    return " | ".join(tail) if tail else type(e).__name__
