"""The two resource pools of fully-async training (`async_training.enable=True`), decided once for
the preflight (`preflight/fully_async.py`), the Ray runtime env and the fully-async trainer
(`trainer/async_run.py`). Pure config arithmetic: no torch, ray or transformers.

Pools: training runs on `trainer.nnodes x trainer.n_gpus_per_node` devices, rollout on
`actor_rollout_ref.rollout.nnodes x n_gpus_per_node` devices of its own (verl's fully-async
layout). Weight versions: the trainer publishes version `step // trigger_parameter_sync_step`
after every `trigger_parameter_sync_step` steps; a sample's staleness is the published version at
the step that trains on it minus the oldest version that generated any of its tokens.
"""

from __future__ import annotations

from typing import Any


def rollout_world(cfg: Any) -> int:
    rollout = cfg.actor_rollout_ref.rollout
    return int(rollout.nnodes) * int(rollout.n_gpus_per_node)


def rollout_replicas(cfg: Any) -> int:
    """Rollout engines in the rollout pool: one per `rollout.tensor_model_parallel_size` devices."""
    tp = max(1, int(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size))
    return rollout_world(cfg) // tp


def queue_capacity_batches(cfg: Any) -> int:
    """Train batches the queue holds (generated and being generated): `staleness_threshold *
    trigger_parameter_sync_step`, at least 1. A batch that waits that long is at most
    `staleness_threshold` versions old when it is trained on."""
    a = cfg.async_training
    return max(1, int(a.staleness_threshold) * int(a.trigger_parameter_sync_step))
