"""Preflight rules of fully-async training (`async_training.enable=True`): the two resource pools
(`decisions/layout.py`, `decisions/async_pools.py`), the sync and staleness settings, and what the mode does
not support yet; with it off, its settings have no effect.

Pure config arithmetic (no torch, ray or transformers), so the preflight check can call
`fully_async_problems(cfg)` in milliseconds; `run_async` runs it too before starting anything.
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config import roles, schema
from verl_lite.decisions.layout import rollout_layout, rollout_pool
from verl_lite.preflight.defaults import changed_keys


def fully_async_problems(cfg: Any) -> List[str]:
    """Every problem of an async config; [] when async training is off or can start."""
    a = cfg.async_training
    if not a.enable:
        return []
    rollout, own, tp = cfg.actor_rollout_ref.rollout, rollout_pool(cfg), rollout_layout(cfg).tp
    pool = own.describe()
    problems = []
    if own.nodes < 1 or own.per_node < 1:
        problems.append(
            f"async_training.enable=True needs a rollout pool of its own, but {pool}: set both to at least 1 "
            "(trainer.nnodes x trainer.n_gpus_per_node is the training pool)")
    elif own.world % max(1, tp):
        problems.append(
            f"{pool} = {own.world} rollout devices is not divisible by "
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}")
    if rollout.name == "hf" and tp != 1:
        problems.append(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} with the hf "
            "rollout: it runs one replica per device, set it to 1")
    if not cfg.trainer.ray:
        problems.append("async_training.enable=True runs the rollout and training pools as Ray actors: "
                        "set trainer.ray=true")
    for key, value, low in (("trigger_parameter_sync_step", a.trigger_parameter_sync_step, 1),
                            ("require_batches", a.require_batches, 1),
                            ("rollout_segment_tokens", a.rollout_segment_tokens, 0)):
        if int(value) < low:
            problems.append(f"async_training.{key}={value} must be an integer >= {low}")
    if not float(a.staleness_threshold) >= 0:  # NaN too
        problems.append(f"async_training.staleness_threshold={a.staleness_threshold} must be >= 0 (verl's fraction "
                        "of stale samples: 0 = every version generates exactly what its steps train on)")
    steps = rollout.total_rollout_steps
    if steps is not None and int(steps) < 1:
        problems.append(f"rollout.total_rollout_steps={steps} must be >= 1 (prompts the rollouter generates in the "
                        "run), or null = every prompt once per trainer.total_epochs")
    if int(cfg.data.train_batch_size) > 0 and int(a.require_batches) != 1:
        problems.append(f"async_training.require_batches={a.require_batches} with data.train_batch_size="
                        f"{cfg.data.train_batch_size}: a step trains on data.train_batch_size prompts; set "
                        "data.train_batch_size=0 (verl's fully-async form: a step is ppo_mini_batch_size * "
                        "require_batches prompts) or require_batches=1")
    if a.use_trainer_do_validate:
        problems.append("async_training.use_trainer_do_validate=True is not supported by verl_lite: verl runs it on "
                        "hybrid rollout replicas on the trainer's devices (its dynamic resource scheduling), which "
                        "verl_lite lacks; validation runs on rollout replica 0 with the newest published weights "
                        "(verl's path with False): remove it")
    if not float(a.queue_timeout_s) > 0:  # NaN too
        problems.append(f"async_training.queue_timeout_s={a.queue_timeout_s} must be > 0 (seconds the trainer "
                        "waits on an empty queue before it stops with an error)")
    if not float(a.reweight_cap) > 0:  # NaN too
        problems.append(f"async_training.reweight_cap={a.reweight_cap} must be > 0")
    if roles.critic_enabled(cfg):
        problems.append("async training updates the actor (and a ref for the KL loss) only; a critic "
                        f"(algorithm.adv_estimator={cfg.algorithm.adv_estimator}, critic.enable={cfg.critic.enable}) "
                        "is not supported yet: use algorithm.adv_estimator=grpo or async_training.enable=False")
    if cfg.algorithm.adv_estimator == "remax":
        problems.append("algorithm.adv_estimator=remax is not supported with async_training.enable=True: its greedy "
                        "baseline generation runs in the synchronous trainer only; use grpo or rloo, or "
                        "async_training.enable=False")
    return problems


def async_setting_warnings(cfg: Any) -> List[str]:
    """async_training settings changed while fully-async training is off."""
    if cfg.async_training.enable:
        return []
    changed = changed_keys(cfg.async_training, schema.AsyncTrainingConfig, "async_training", skip=("enable",))
    if changed:
        return [f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: fully-async "
                "training is off (async_training.enable=False)"]
    return []
