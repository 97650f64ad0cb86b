"""Allowed values of the enum-like settings, and the migration messages for settings that verl
removed upstream (the separate MindSpeed strategy and engine).

Checked after the overrides are applied, so a value reached through an interpolation is
checked too.
"""

from __future__ import annotations

import difflib
from typing import Any, Dict, Iterator, List, Optional, Tuple

from verl_lite.config.generated import ascend_facts
from verl_lite.config.devices import DEVICE_MEMORY

STRATEGIES = ("fsdp", "megatron")
ROLLOUT_NAMES = ("hf", "vllm")
# actor_rollout_ref.rollout.mode: verl's only mode (async, its servers) and verl_lite's earlier name
# (sync) for the same single-turn generation inside the actor's worker
ROLLOUT_MODES = ("async", "sync")
# What an engine computes: log-probs (actor, ref) or values (critic); the registry's first key.
MODEL_TYPES = ("language_model", "value_model")
DEVICES = ("auto", "cuda", "npu", "cpu")
# megatron-core 0.16's OptimizerParamScheduler styles (optim.lr_decay_style, weight_decay_incr_style,
# lr_wsd_decay_style: the megatron strategy's LR schedule)
LR_DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
WD_INCR_STYLES = ("constant", "linear", "cosine")
WSD_DECAY_STYLES = ("exponential", "linear", "cosine", "minus_sqrt")
DEVICE_ALIASES = {"gpu": "cuda"}
# trainer.device_name: the accelerators of config/devices.py's memory table; trainer.memory_check's modes
DEVICE_NAMES = tuple(DEVICE_MEMORY)
MEMORY_CHECKS = ("refuse", "warn", "off")
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

# Each KL estimator name and the aliases verl accepts for it (http://joschu.net/blog/kl-approx.html);
# any of them may end in "+" (the forward value of that estimator, the gradient of k2).
KL_TYPES = {
    "kl": "kl",
    "k1": "kl",
    "abs": "abs",
    "mse": "mse",
    "k2": "mse",
    "low_var_kl": "low_var_kl",
    "k3": "low_var_kl",
}
KL_LOSS_TYPES = tuple(KL_TYPES) + tuple(f"{name}+" for name in KL_TYPES)
# algorithm.kl_penalty: the estimator of the KL penalty in the reward (each may end in "+")
KL_PENALTIES = tuple(KL_TYPES)
# algorithm.kl_ctrl.type: a fixed KL coefficient or verl's adaptive controller
KL_CTRL_TYPES = ("fixed", "adaptive")
# actor_rollout_ref.actor.policy_loss.loss_mode: verl's registered losses that verl_lite runs
# (trainer/algos/policy_losses.py registers one function under each)
POLICY_LOSS_MODES = ("vanilla", "gspo", "geo_mean", "dppo_tv", "dppo_kl", "sapo", "gpg", "clip_cov", "kl_cov", "dro",
                     "cispo")
# verl's losses that need what verl_lite lacks: name -> what is missing
REFUSED_POLICY_LOSSES = {
    "bypass_mode": "verl sets it itself with algorithm.rollout_correction.bypass_mode=True; set that (with "
                   "loss_mode=vanilla) instead of naming the loss",
}
# algorithm.adv_estimator: verl's registered estimators that verl_lite runs (trainer/algos/advantages.py)
ADV_ESTIMATORS = ("gae", "grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo",
                  "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gpg", "remax", "optimal_token_baseline",
                  "tir_optimal_token_baseline", "gdpo")
# verl's estimators that need what verl_lite lacks: name -> what is missing (none at the pinned commit)
REFUSED_ADV_ESTIMATORS: Dict[str, str] = {}


# trainer.logger: verl_lite's console and jsonl, and verl's trackers (verl/utils/tracking.py supported_backend)
LOGGERS = ("console", "jsonl", "tensorboard", "wandb", "mlflow", "swanlab", "clearml", "trackio", "file")
# The module each tracker imports and the pip line that installs it (the check reports a missing one)
LOGGER_PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
                   "mlflow": ("mlflow", "mlflow-skinny sqlalchemy alembic"), "swanlab": ("swanlab", "swanlab"),
                   "clearml": ("clearml", "clearml"), "trackio": ("trackio", "trackio")}
# verl's trackers verl_lite does not run: name -> why
REFUSED_LOGGERS = {
    "vemlp_wandb": "its library, volcengine_ml_platform, is Volcengine ML Platform's own and is not on PyPI; "
                   "use wandb (or mlflow, swanlab, clearml, trackio, tensorboard, file)",
    "rl_insight": "verl's rl_insight logger exports gauges and the rollout servers' runtime signals to rl-insight's "
                  "Prometheus service, which verl_lite's rollout does not run; use tensorboard, mlflow or file",
}
# Dotted key -> allowed values. None in a tuple means null is allowed (ref/critic inherit the
# actor's strategy when null).
CHOICES: Dict[str, Tuple[Any, ...]] = {
    "actor_rollout_ref.actor.strategy": STRATEGIES,
    "actor_rollout_ref.ref.strategy": STRATEGIES + (None,),
    "critic.strategy": STRATEGIES + (None,),
    "trainer.device": DEVICES,
    "trainer.device_name": DEVICE_NAMES + (None,),
    "trainer.ascend_stack": ("auto",) + ascend_facts.STACKS,
    "trainer.memory_check": MEMORY_CHECKS,
    "algorithm.adv_estimator": ADV_ESTIMATORS,
    "actor_rollout_ref.actor.policy_loss.loss_mode": POLICY_LOSS_MODES,
    "actor_rollout_ref.actor.loss_agg_mode": LOSS_AGG_MODES,
    "critic.loss_agg_mode": LOSS_AGG_MODES,
    "actor_rollout_ref.actor.kl_loss_type": KL_LOSS_TYPES,
    "actor_rollout_ref.rollout.name": ROLLOUT_NAMES,
    "trainer.resume_mode": ("disable", "auto", "resume_path"),
    "data.truncation": ("error", "left", "right"),
    **{f"{section}.optim.{name}": values for section in ("actor_rollout_ref.actor", "critic")
       for name, values in (("lr_scheduler_type", ("constant", "cosine")), ("lr_decay_style", LR_DECAY_STYLES),
                            ("weight_decay_incr_style", WD_INCR_STYLES), ("lr_wsd_decay_style", WSD_DECAY_STYLES))},
    "async_training.stale_policy": ("drop", "reweight"),
}
# verl's values of a setting that verl_lite refuses with a reason (what is missing) instead of the list
REFUSED_CHOICES: Dict[str, Dict[str, str]] = {
    "algorithm.adv_estimator": REFUSED_ADV_ESTIMATORS,
    "actor_rollout_ref.actor.policy_loss.loss_mode": REFUSED_POLICY_LOSSES,
    "trainer.logger": REFUSED_LOGGERS,
}
# What a checkpoint holds (verl's names): checkpoint.save_contents / load_contents of actor and critic.
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")
# global_profiler.tool values that run (trainer/profiling.py); verl's others are refused with the reason
PROFILER_TOOLS = ("torch", "npu", "torch_memory")
# <role>.profiler.tool_config.torch.contents (verl's names)
TORCH_PROFILER_CONTENTS = ("cuda", "cpu", "memory", "shapes", "stack")
# <role>.profiler.tool_config.npu.contents and .level (verl's names; torch_npu.profiler.ProfilerLevel)
NPU_PROFILER_CONTENTS = ("npu", "cpu", "memory", "shapes", "module", "stack")
NPU_PROFILER_LEVELS = ("level_none", "level0", "level1", "level2")
# actor_rollout_ref.rollout.checkpoint_engine.backend: verl's checkpoint-engine backends verl_lite runs
CHECKPOINT_BACKENDS = ("naive",)
# The public keys of Ray's runtime_env (ray.runtime_env.RuntimeEnv.known_fields without the private
# ones; tests/py/test_verl_rules.py checks the list against the installed Ray).
RAY_RUNTIME_ENV_KEYS = ("conda", "config", "container", "env_vars", "excludes", "image_uri", "java_jars", "pip",
                        "py_executable", "py_modules", "uv", "worker_process_setup_hook", "working_dir")
# A plain string given for one of these is taken as a one-element list (verl accepts `trainer.logger=console`).
LIST_CHOICES: Dict[str, Tuple[str, ...]] = {
    "trainer.logger": LOGGERS,
    "actor_rollout_ref.actor.checkpoint.save_contents": CHECKPOINT_CONTENTS,
    "actor_rollout_ref.actor.checkpoint.load_contents": CHECKPOINT_CONTENTS,
    "critic.checkpoint.save_contents": CHECKPOINT_CONTENTS,
    "critic.checkpoint.load_contents": CHECKPOINT_CONTENTS,
}

# Removed upstream strategy/backend values -> the strategy that replaces them.
LEGACY_STRATEGIES = {
    "mindspeed": "megatron",
    "mindspeed_megatron": "megatron",
    "mindspeed_fsdp": "fsdp",
}


def migration_message(key: str, value: Any) -> str:
    """Why `key=value` no longer works and what to write instead."""
    if key == "model_engine" or key.endswith(".model_engine"):
        return (
            f"{key}={value} was removed upstream (verl dropped the separate MindSpeed engine): "
            "use actor_rollout_ref.actor.strategy=megatron with trainer.device=npu; "
            "MindSpeed is applied to Megatron as a repatch"
        )
    replacement = LEGACY_STRATEGIES.get(str(value).lower(), "megatron")
    target = key if key.endswith(".strategy") else "actor_rollout_ref.actor.strategy"
    return (
        f"{key}={value} was removed upstream (verl dropped the separate MindSpeed backend): "
        f"use {target}={replacement} with trainer.device=npu; MindSpeed is applied to Megatron as a repatch"
    )


def legacy_key_problem(key: str, value: Any) -> Optional[str]:
    """A migration message for an override of a key verl_lite does not have, or None.

    Catches verl's `model_engine=mindspeed` group choice, `...backend=mindspeed_megatron` and the
    old `...mindspeed.*` config sections.
    """
    parts = key.split(".")
    if parts[-1] == "model_engine":
        if str(value).lower() in LEGACY_STRATEGIES:
            return migration_message(key, value)
        if key != "model_engine":
            return (f"unknown key {key!r} (verl has no such key either): verl's engine is the top-level config "
                    f"group, model_engine={value}")
        return (f"{key}={value}: verl's {value} engine is not supported by verl_lite: choose model_engine=megatron "
                "or model_engine=dp (FSDP2), or set actor_rollout_ref.actor.strategy")
    if parts[-1] in ("backend", "strategy") and str(value).lower() in LEGACY_STRATEGIES:
        return migration_message(key, value)
    if "mindspeed" in parts[:-1]:
        replacement = key.replace(".mindspeed.", ".megatron.", 1)
        return (
            f"{key}: the mindspeed config section was removed upstream; MindSpeed settings live in the "
            f"megatron section on device npu (for example {replacement})"
        )
    return None


def normalize_device_name(value: Any) -> Any:
    """`GPU`/`gpu` -> `cuda`, `NPU` -> `npu`; anything else is returned unchanged for the check."""
    if not isinstance(value, str):
        return value
    name = value.strip().lower()
    return DEVICE_ALIASES.get(name, name)


def _closest(value: Any, allowed: Tuple[Any, ...]) -> str:
    names = [a for a in allowed if isinstance(a, str)]
    close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _shown(allowed: Tuple[Any, ...]) -> str:
    return ", ".join("null" if a is None else str(a) for a in allowed)


def choice_problems(values: Dict[str, Any]) -> List[str]:
    """Problems for `values` (dotted key -> value, read from the composed config)."""
    problems: List[str] = []
    for key, allowed in CHOICES.items():
        if key not in values:
            continue
        value = values[key]
        if value in allowed:
            continue
        if key.endswith(".strategy") and str(value).lower() in LEGACY_STRATEGIES:
            problems.append(migration_message(key, value))
            continue
        if value in REFUSED_CHOICES.get(key, {}):
            problems.append(f"{key}={value} is not supported by verl_lite: {REFUSED_CHOICES[key][value]}")
            continue
        problems.append(f"{key}={value!r} is not supported: choose one of {_shown(allowed)}{_closest(value, allowed)}")
    for key, allowed in LIST_CHOICES.items():
        for item in values.get(key) or ():
            if item in REFUSED_CHOICES.get(key, {}):
                problems.append(f"{key} contains {item!r}, which is not supported by verl_lite: "
                                f"{REFUSED_CHOICES[key][item]}")
            elif item not in allowed:
                problems.append(
                    f"{key} contains {item!r}, which is not supported: each entry must be one of "
                    f"{_shown(allowed)}{_closest(item, allowed)}"
                )
    return problems


def choice_keys() -> Iterator[str]:
    yield from CHOICES
    yield from LIST_CHOICES
