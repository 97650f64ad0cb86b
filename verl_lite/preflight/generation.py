"""Preflight rules of where and how the rollout generates, apart from its engine (`rollout.py`):
`actor_rollout_ref.hybrid_engine` (the rollout on the actor's devices in synchronous training, on a
pool of its own in fully-async training), verl's `rollout.mode`, and a rollout length apart from the
data's (verl_lite generates single-turn responses inside the actor's worker, up to data's lengths).
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config.choices import ROLLOUT_MODES
from verl_lite.config.verl_names import NOT


def hybrid_engine_problems(cfg: Any) -> List[str]:
    """hybrid_engine against the trainer's mode (null follows async_training.enable)."""
    problems = []
    hybrid = cfg.actor_rollout_ref.hybrid_engine
    if hybrid is False and not cfg.async_training.enable:
        problems.append(f"actor_rollout_ref.hybrid_engine=False: {NOT} in synchronous training (actor and rollout "
                        "always share their devices); set it to True, or use async_training.enable=True")
    if hybrid is True and cfg.async_training.enable:
        problems.append(f"actor_rollout_ref.hybrid_engine=True with async_training.enable=True is {NOT}: "
                        "fully-async training puts the rollout on a pool of its own; set it to False")
    return problems


def rollout_mode_problems(cfg: Any) -> List[str]:
    """verl's rollout.mode, and rollout lengths that differ from data.max_response/prompt_length."""
    problems = []
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.mode not in ROLLOUT_MODES:
        problems.append(f"actor_rollout_ref.rollout.mode={rollout.mode!r} is {NOT}: choose async (verl's only mode; "
                        "verl_lite generates single-turn responses inside the actor's worker, sampling as verl's "
                        "servers do) or sync, verl_lite's earlier name for the same")
    for key, data_key in (("response_length", "max_response_length"), ("prompt_length", "max_prompt_length")):
        value, data_value = getattr(rollout, key), getattr(cfg.data, data_key)
        if value is not None and int(value) != int(data_value):
            problems.append(f"actor_rollout_ref.rollout.{key}={value} differs from data.{data_key}={data_value}: a "
                            f"separate rollout length is {NOT} (generation uses data.{data_key}); set "
                            f"data.{data_key}={value} and remove the rollout line")
    return problems
