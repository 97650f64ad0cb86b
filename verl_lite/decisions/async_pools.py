"""The two resource pools of fully-async training (`async_training.enable=True`), decided once for
the preflight (`preflight/fully_async.py`), the Ray runtime env and the fully-async trainer
(`trainer/async_run.py`). Pure config arithmetic: no torch, ray or transformers.

Pools (decisions/layout.py: `train_pool`, `rollout_pool`, `rollout_replicas`): training runs on the
trainer's devices, rollout on devices of its own (verl's fully-async layout). Weight versions: the trainer publishes version `step // trigger_parameter_sync_step`
after every `trigger_parameter_sync_step` steps; a sample's staleness is the published version at
the step that trains on it minus the oldest version that generated any of its tokens.

verl's arithmetic (fully_async_rollouter.py, fully_async_trainer.py at the pinned commit; the line
numbers are cited per function and checked by tests/py/test_async_conventions.py): a step takes
`step_prompts` groups, the rollouter starts at most `max_required_samples` groups per weight
version, and produces `total_rollout_prompts` groups in the whole run.
"""

from __future__ import annotations

from typing import Any


def streaming(cfg: Any) -> bool:
    """verl's fully-async convention `data.train_batch_size=0`: a step trains on
    `ppo_mini_batch_size * require_batches` prompts and the run's length is the rollouter's prompt count."""
    return bool(cfg.async_training.enable) and int(cfg.data.train_batch_size) == 0


def step_prompts(cfg: Any) -> int:
    """Prompt groups one training step takes from the queue (verl's `required_samples`,
    fully_async_trainer.py:159 and fully_async_rollouter.py:424: ppo_mini_batch_size * require_batches);
    with data.train_batch_size > 0 (verl_lite's own form, require_batches 1) that batch."""
    if streaming(cfg):
        return int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size) * int(cfg.async_training.require_batches)
    return int(cfg.data.train_batch_size)


def max_required_samples(cfg: Any) -> int:
    """Prompt groups the rollouter may start between two weight syncs, counting those carried over
    (queued or in flight) from the last one: int(required * (staleness_threshold + 1) *
    trigger_parameter_sync_step), verl's set_max_required_samples (fully_async_rollouter.py:493). It is
    also verl's queue size (max_queue_size, :507). Samples generated with weights older than the
    trainer's are at most `staleness_threshold * required * trigger_parameter_sync_step` at a sync."""
    a = cfg.async_training
    return int(step_prompts(cfg) * (float(a.staleness_threshold) + 1) * int(a.trigger_parameter_sync_step))


def total_rollout_prompts(cfg: Any, n_prompts: int) -> int:
    """Prompt groups the rollouter generates in the whole run: every prompt once per epoch
    (verl's dataloader of gen_batch_size 1), capped at `rollout.total_rollout_steps` when set
    (fully_async_rollouter.py:405-407; its feed loop stops after that many, :878)."""
    total = int(n_prompts) * int(cfg.trainer.total_epochs)
    cap = cfg.actor_rollout_ref.rollout.total_rollout_steps
    return min(int(cap), total) if cap is not None else total


def total_train_steps(cfg: Any, n_prompts: int) -> int:
    """Training steps (verl's local updates) of a fully-async run: the trainer takes `step_prompts`
    groups a step until the rollouter has produced its total; a remainder smaller than a step is
    generated but never trained on (verl's trainer stops when the queue ends, fully_async_trainer.py:428).
    verl counts the run in weight versions, int(total / (required * trigger_parameter_sync_step))
    (fully_async_rollouter.py:498): `versions(...)`. trainer.total_training_steps cuts it shorter."""
    steps = total_rollout_prompts(cfg, n_prompts) // step_prompts(cfg)
    if cfg.trainer.total_training_steps:
        steps = min(steps, int(cfg.trainer.total_training_steps))
    return steps


def versions(cfg: Any, n_prompts: int) -> int:
    """verl's total_train_steps: weight versions the run publishes (its progress bar and log steps)."""
    a = cfg.async_training
    return int(total_rollout_prompts(cfg, n_prompts) / (step_prompts(cfg) * int(a.trigger_parameter_sync_step)))
