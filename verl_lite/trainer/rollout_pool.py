"""The rollout pool of fully-async training: one `RolloutWorker` per replica as a threaded Ray actor
(`update_weights` and `stats` run beside its generation loop), each holding
rollout.tensor_model_parallel_size devices, in the bundles of its node groups when placed. The pool
pushes weights, starts and stops the loops, and reports a replica that raised, died, stopped or left
the cluster (RolloutError, NodeLostError) with the replica and the method."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from verl_lite.decisions.layout import rollout_layout
from verl_lite.trainer import tensor_transport
from verl_lite.trainer.async_workers import RolloutWorker
from verl_lite.trainer.worker_group import lost_node, node_lost_error, short_error, worker_pid, worker_resources


class RolloutError(RuntimeError):
    """A rollout replica raised, died or stopped generating."""


class RolloutPool:
    """The rollout replicas: threaded Ray actors (update_weights and stats run beside the loop)."""

    def __init__(self, cfg: Any, replicas: int, device: str, threads: int, examples: List[Any],
                 val_examples: List[Any], call_timeout_s: Optional[float], init_timeout_s: float = 600.0,
                 placement: Any = None):
        import ray

        self.timeout = call_timeout_s
        # A replica holds rollout.tensor_model_parallel_size devices (vllm runs its TP workers on them).
        tp = rollout_layout(cfg).engine_ranks
        resources = {k: ({n: c * tp for n, c in v.items()} if isinstance(v, dict) else v * tp)
                     for k, v in worker_resources(device).items()}
        remote = ray.remote(tensor_transport.actor_class(RolloutWorker))
        # With `placement` (trainer/placement.NodeGroups, bundles of tp devices), replica r runs in bundle r.
        where = (lambda r: placement.options(r)) if placement is not None else (lambda r: resources)  # noqa: E731
        ex_ref, val_ref = ray.put(examples), ray.put(val_examples)
        self.workers = [remote.options(max_concurrency=4, max_restarts=0, max_task_retries=0, **where(r)).remote(
                            cfg, r, device, threads, ex_ref, val_ref) for r in range(replicas)]
        self.loops: List[Any] = []
        # the node of each replica: a replica whose node left the cluster is reported as such (the
        # training pool's line), not as a dead process
        self.nodes = [placement.node_of(r) if placement is not None else None for r in range(replicas)]
        self.pids: List[Optional[int]] = [None] * replicas
        self._wait([w.ready.remote() for w in self.workers], "__init__", init_timeout_s)
        self.pids = self._wait([w.__ray_call__.remote(worker_pid) for w in self.workers], "pid", init_timeout_s)

    def _wait(self, refs: List[Any], method: str, timeout: Optional[float]) -> List[Any]:
        import ray

        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        answers = {}  # each answer fetched (and unpickled) once
        for ref in ready:
            try:
                answers[refs.index(ref)] = ray.get(ref)
            except Exception as e:
                self._raise_if_node_lost(e, method, pending)
                raise RolloutError(f"rollout replica {refs.index(ref)} failed in {method}: {short_error(e)}") from e
        if pending:
            raise RolloutError(f"rollout replicas {[refs.index(p) for p in pending]} did not answer {method} within "
                               f"{timeout:.0f} s (raise trainer.ray_timeout_s if they are just slow)")
        return [answers[i] for i in range(len(refs))]

    def _raise_if_node_lost(self, first: BaseException, method: str, pending: List[Any]) -> None:
        """NodeLostError naming the replica and its node, when a replica's node left the cluster."""
        lost = lost_node(self.nodes, first, pending)
        if lost:
            raise node_lost_error("rollout replica", lost, self.pids, method) from first

    def push(self, weights_ref: Any, version: int) -> None:
        refs = [w.update_weights.remote(weights_ref, version) for w in self.workers]
        self._wait(refs, "update_weights", self.timeout)

    def start(self, buffer: Any) -> None:
        self.loops = [w.run.remote(buffer) for w in self.workers]

    def check(self) -> None:
        """Raise RolloutError if a generation loop has ended (it never ends on its own)."""
        import ray

        if not self.loops:
            return
        done, _ = ray.wait(self.loops, num_returns=len(self.loops), timeout=0)
        for ref in done:
            replica = self.loops.index(ref)
            try:
                ray.get(ref)
            except Exception as e:
                self._raise_if_node_lost(e, "run", [])
                raise RolloutError(f"rollout replica {replica} stopped generating: {short_error(e)}") from e
            raise RolloutError(f"rollout replica {replica} stopped generating without an error (was it stopped?)")

    def stats(self) -> List[Dict[str, Any]]:
        return self._wait([w.stats.remote() for w in self.workers], "stats", self.timeout)

    def validate(self, step: int = 0) -> Dict[str, Any]:
        """The first replica's validation metrics after training step `step` (its dump rows: RolloutWorker.validate)."""
        return self._wait([self.workers[0].validate.remote(step)], "validate", self.timeout)[0]

    def shutdown(self, buffer: Any) -> None:
        import ray

        for w in self.workers:
            w.stop.remote()
        if buffer is not None:
            buffer.close.remote()
        if self.loops:
            ray.wait(self.loops, num_returns=len(self.loops), timeout=2)  # a stuck one is killed below
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers, self.loops = [], []
