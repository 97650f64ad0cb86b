"""Megatron's optimizer and LR schedule from the `optim` section, and the clipped step.

Gradient clipping happens here, not inside megatron's optimizer (its clip asserts CUDA tensors):
the optimizer computes the norm, `clipped_step` scales the gradients to `optim.clip_grad`, then
the optimizer steps. `optim.clip_grad` is the one clip setting, as in verl 0.9's engines
(`actor.grad_clip` is not read). Megatron is imported inside the functions only.
"""

from __future__ import annotations

import logging
import math
from typing import Any, List, Tuple

import torch

from verl_lite.config.schema import OptimConfig

logger = logging.getLogger(__name__)


def _optimizers(optimizer: Any) -> List[Any]:
    """The optimizers megatron chains (one per parameter kind), or the optimizer itself."""
    return getattr(optimizer, "chained_optimizers", [optimizer])


def build_optimizer(model: List[Any], optim: OptimConfig, dtype: torch.dtype,
                    use_distributed_optimizer: bool) -> Tuple[Any, Any]:
    """(megatron Adam optimizer over the model chunks, OptimizerParamScheduler): linear warm-up
    (explicit steps win over the ratio), then constant or cosine decay to `lr * min_lr_ratio`."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    lr, betas, weight_decay = float(optim.lr), list(optim.betas), float(optim.weight_decay)
    config = OptimizerConfig(
        optimizer="adam",
        lr=lr,
        min_lr=lr * float(optim.min_lr_ratio),
        weight_decay=weight_decay,
        adam_beta1=float(betas[0]),
        adam_beta2=float(betas[1]),
        clip_grad=0.0,  # clipped by clipped_step (megatron's clip asserts CUDA tensors)
        bf16=dtype == torch.bfloat16,
        params_dtype=dtype,
        use_distributed_optimizer=use_distributed_optimizer,
    )
    optimizer = get_megatron_optimizer(config, model)
    total = int(optim.total_training_steps)
    warmup = int(optim.lr_warmup_steps)
    if warmup < 0:
        warmup = int(float(optim.lr_warmup_steps_ratio) * max(total, 0))
    style = optim.lr_scheduler_type
    decay_steps = max(total, warmup + 1, 1)
    if style == "cosine" and total <= 0:
        raise ValueError("optim.lr_scheduler_type=cosine needs optim.total_training_steps > 0")
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0 if warmup > 0 else lr,
        max_lr=lr,
        min_lr=config.min_lr,
        lr_warmup_steps=warmup,
        lr_decay_steps=decay_steps,
        lr_decay_style=style,
        start_wd=weight_decay,
        end_wd=weight_decay,
        wd_incr_steps=decay_steps,
        wd_incr_style="constant",
    )
    return optimizer, scheduler


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
        params = [p for opt in _optimizers(optimizer) for p in opt.get_parameters()]
        torch._foreach_mul_([p.grad for p in params if p.grad is not None], clip / (grad_norm + 1e-6))
    optimizer.step_with_ready_grads()
    return grad_norm


def current_lr(optimizer: Any) -> float:
    return float(_optimizers(optimizer)[0].param_groups[0]["lr"])
