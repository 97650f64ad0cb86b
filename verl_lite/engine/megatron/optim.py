"""Megatron's optimizer and LR schedule from the `optim` section, and the clipped step.

Gradient clipping happens here, not inside megatron's optimizer (its clip asserts CUDA tensors):
the optimizer computes the norm, `clipped_step` scales the gradients to `optim.clip_grad`, then
the optimizer steps. `optim.clip_grad` is the one clip setting, as in verl 0.9's engines
(`actor.grad_clip` is not read). Megatron is imported inside the functions only.

`optim.override_optimizer_config` (verl's Megatron optimizer overrides) is merged into the
OptimizerConfig field by field, as verl's `init_megatron_optim_config` does, after the preflight's
checks (`decisions/optimizer_overrides.py`) are repeated against the installed megatron-core. On a cpu
engine the CPU optimizer offload fields are left out: megatron's HybridDeviceOptimizer moves Adam's
state and step to host memory, where a cpu engine keeps them already (and it needs CUDA streams).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
from typing import Any, Dict, List, Tuple

import torch

from verl_lite.config.roles import SECTION
from verl_lite.config.schema import OptimConfig
from verl_lite.decisions import lr_schedule, optimizer_overrides

logger = logging.getLogger(__name__)


def _optimizers(optimizer: Any) -> List[Any]:
    """The optimizers megatron chains (one per parameter kind), or the optimizer itself."""
    return getattr(optimizer, "chained_optimizers", [optimizer])


def _device_of(model: List[Any]) -> str:
    """Where the optimizer state would live: the device type of the model's parameters."""
    for chunk in model:
        for param in chunk.parameters():
            return param.device.type
    return "cpu"


def _has_transformer_engine() -> bool:
    """transformer_engine imported already (on Ascend, MindSpeed's stand-in module) or importable."""
    if "transformer_engine" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("transformer_engine") is not None
    except (ImportError, ValueError):
        return False


def optimizer_config(model: List[Any], optim: OptimConfig, dtype: torch.dtype, use_distributed_optimizer: bool,
                     role: str = "megatron") -> Any:
    """megatron-core's OptimizerConfig from the `optim` section and its override_optimizer_config."""
    import dataclasses

    from megatron.core.optimizer import OptimizerConfig

    lr, betas, weight_decay = float(optim.lr), list(optim.betas), float(optim.weight_decay)
    device = _device_of(model)
    items = dict(optim.override_optimizer_config or {})
    fields = tuple(f.name for f in dataclasses.fields(OptimizerConfig))
    # the role's section, for messages: actor_rollout_ref.actor.optim..., critic.optim... (a role outside
    # config.roles, as the default, names itself)
    section = SECTION.get(role, role)
    try:
        overrides = optimizer_overrides.engine_overrides(items, device, fields, prefix=section)
    except ValueError as e:
        raise ValueError(f"{role}: {e}") from e
    left_out = sorted(set(items) - set(overrides))
    if left_out:
        logger.info("%s: %s left out on cpu: megatron's CPU optimizer offload would move Adam's state to host "
                    "memory, where this engine keeps it already", role, ", ".join(left_out))
    kwargs = dict(
        optimizer=optim.optimizer or lr_schedule.DEFAULT_OPTIMIZER["megatron"],
        lr=lr,
        min_lr=float(optim.min_lr),
        weight_decay=weight_decay,
        adam_beta1=float(betas[0]),
        adam_beta2=float(betas[1]),
        clip_grad=0.0,  # clipped by clipped_step (megatron's clip asserts CUDA tensors)
        bf16=dtype == torch.bfloat16,
        params_dtype=dtype,
        use_distributed_optimizer=use_distributed_optimizer,
    )
    kwargs.update(overrides)
    if overrides.get("use_precision_aware_optimizer") and not _has_transformer_engine():
        # megatron-core 0.16 reads Transformer Engine's version for it (a TypeError without TE), then its FusedAdam
        raise RuntimeError(
            f"{role}: {section}.optim.override_optimizer_config.use_precision_aware_optimizer=True: megatron-core needs "
            "Transformer Engine (its FusedAdam and version) for the precision-aware optimizer, and "
            "transformer_engine is not installed on this worker; install Transformer Engine on the workers, or "
            "remove the line")
    return OptimizerConfig(**kwargs)


def scheduler_kwargs(optim: OptimConfig, role: str = "megatron") -> Dict[str, Any]:
    """megatron-core OptimizerParamScheduler's arguments (all but the optimizer), derived from `optim`
    as verl's get_megatron_optimizer_param_scheduler does: the decay spans lr_decay_steps (null:
    total_training_steps), a non-positive lr_warmup_steps takes lr_warmup_steps_ratio of the decay steps,
    weight decay ramps from weight_decay to weight_decay over total_training_steps."""
    total = int(optim.total_training_steps)
    decay_steps = total if optim.lr_decay_steps is None else int(optim.lr_decay_steps)
    warmup = int(optim.lr_warmup_steps)
    if warmup <= 0:
        warmup = int(float(optim.lr_warmup_steps_ratio) * decay_steps)
    if decay_steps <= 0 and warmup == 0 and optim.lr_decay_style == "constant":
        decay_steps = 1  # a constant LR without warm-up has no length (an engine built outside a run)
    if decay_steps <= 0 or warmup >= decay_steps:
        raise ValueError(f"{role}: megatron-core's LR schedule needs 0 <= warm-up < decay steps; got warm-up {warmup}, "
                         f"decay {decay_steps} (optim.lr_decay_steps={optim.lr_decay_steps}, "
                         f"total_training_steps={total}): set optim.lr_decay_steps above the warm-up")
    weight_decay = float(optim.weight_decay)
    return dict(
        init_lr=float(optim.lr_warmup_init),
        max_lr=float(optim.lr),
        min_lr=float(optim.min_lr),
        lr_warmup_steps=warmup,
        lr_decay_steps=decay_steps,
        lr_decay_style=optim.lr_decay_style,
        start_wd=weight_decay,
        end_wd=weight_decay,
        wd_incr_steps=total,
        wd_incr_style=optim.weight_decay_incr_style,
        # verl: use_checkpoint_opt_param_scheduler=False, so the config's values win over a checkpoint's
        use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=True,
        wsd_decay_steps=optim.lr_wsd_decay_steps,
        lr_wsd_decay_style=optim.lr_wsd_decay_style,
    )


def build_optimizer(model: List[Any], optim: OptimConfig, dtype: torch.dtype,
                    use_distributed_optimizer: bool, role: str) -> Tuple[Any, Any]:
    """(megatron-core optimizer over the model chunks, its OptimizerParamScheduler)."""
    from megatron.core.optimizer import get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    problems = lr_schedule.optimizer_problem(optim.optimizer, "megatron", "optim")
    if problems:
        raise ValueError(f"{role}: {problems[0]}")
    kwargs = scheduler_kwargs(optim, role)
    config = optimizer_config(model, optim, dtype, use_distributed_optimizer, role)
    optimizer = get_megatron_optimizer(config, model)
    return optimizer, OptimizerParamScheduler(optimizer, **kwargs)


def clipped_step(optimizer: Any, clip: float, role: str) -> float:
    """Step with gradients scaled down to norm `clip` (0 = no clipping); returns the norm before.
    A non-finite norm skips the step (logged)."""
    if optimizer.prepare_grads():  # found inf/nan (fp16 loss scaling only)
        return float("nan")
    grad_norm = float(optimizer.get_grad_norm())
    if not math.isfinite(grad_norm):
        logger.warning("%s: gradient norm is %s; skipping this optimizer step", role, grad_norm)
        return grad_norm
    if clip > 0 and grad_norm > clip:
        grads = [_main_grad(opt, p) for opt in _optimizers(optimizer) for p in opt.get_parameters()]
        torch._foreach_mul_([g for g in grads if g is not None], clip / (grad_norm + 1e-6))
    optimizer.step_with_ready_grads()
    return grad_norm


def _main_grad(opt: Any, param: torch.Tensor) -> Any:
    """The gradient megatron's optimizer steps with: `decoupled_grad` under the precision-aware
    optimizer (megatron-core's clip_grads reads the same), else `grad`."""
    config = getattr(opt, "config", None)
    if getattr(config, "use_precision_aware_optimizer_no_fp8_or_ds_fp8", False):
        return getattr(param, "decoupled_grad", None)
    return param.grad


def current_lr(optimizer: Any) -> float:
    return float(_optimizers(optimizer)[0].param_groups[0]["lr"])
