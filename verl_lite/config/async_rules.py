"""Preflight rules of fully-async training (`async_training.enable=True`): the two resource pools,
the sync and staleness settings, and what the mode does not support yet.

Pure config arithmetic (no torch, ray or transformers), so the preflight check can call
`async_problems(cfg)` in milliseconds; `run_async` runs it too before starting anything.

Pools: training runs on `trainer.nnodes x trainer.n_gpus_per_node` devices, rollout on
`actor_rollout_ref.rollout.nnodes x n_gpus_per_node` devices of its own (verl's fully-async
layout). Weight versions: the trainer publishes version `step // trigger_parameter_sync_step`
after every `trigger_parameter_sync_step` steps; a sample's staleness is the published version at
the step that trains on it minus the oldest version that generated any of its tokens.
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config import roles


def train_world(cfg: Any) -> int:
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


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


def async_problems(cfg: Any) -> List[str]:
    """Every problem of an async config; [] when async training is off or can start."""
    a = cfg.async_training
    if not a.enable:
        return []
    rollout = cfg.actor_rollout_ref.rollout
    pool = (f"actor_rollout_ref.rollout.nnodes={rollout.nnodes} x actor_rollout_ref.rollout.n_gpus_per_node="
            f"{rollout.n_gpus_per_node}")
    problems = []
    if int(rollout.nnodes) < 1 or int(rollout.n_gpus_per_node) < 1:
        problems.append(
            f"async_training.enable=True needs a rollout pool of its own, but {pool}: set both to at least 1 "
            "(trainer.nnodes x trainer.n_gpus_per_node is the training pool)")
    elif rollout_world(cfg) % max(1, int(rollout.tensor_model_parallel_size)):
        problems.append(
            f"{pool} = {rollout_world(cfg)} rollout devices is not divisible by "
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size}")
    if rollout.name == "hf" and int(rollout.tensor_model_parallel_size) != 1:
        problems.append(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size} with the hf "
            "rollout: it runs one replica per device, set it to 1")
    if not cfg.trainer.ray:
        problems.append("async_training.enable=True runs the rollout and training pools as Ray actors: "
                        "set trainer.ray=true")
    for key, value, low in (("trigger_parameter_sync_step", a.trigger_parameter_sync_step, 1),
                            ("staleness_threshold", a.staleness_threshold, 0),
                            ("rollout_segment_tokens", a.rollout_segment_tokens, 0)):
        if int(value) < low:
            problems.append(f"async_training.{key}={value} must be an integer >= {low}")
    if float(a.queue_timeout_s) <= 0:
        problems.append(f"async_training.queue_timeout_s={a.queue_timeout_s} must be > 0 (seconds the trainer "
                        "waits on an empty queue before it stops with an error)")
    if float(a.reweight_cap) <= 0:
        problems.append(f"async_training.reweight_cap={a.reweight_cap} must be > 0")
    if int(a.require_batches) != 1:
        problems.append(f"async_training.require_batches={a.require_batches} is not supported yet: a step trains on "
                        "data.train_batch_size prompts; set it to 1 and size the step with data.train_batch_size")
    if roles.critic_enabled(cfg):
        problems.append("async training updates the actor (and a ref for the KL loss) only; a critic "
                        f"(algorithm.adv_estimator={cfg.algorithm.adv_estimator}, critic.enable={cfg.critic.enable}) "
                        "is not supported yet: use algorithm.adv_estimator=grpo or async_training.enable=False")
    return problems
