"""The torch engine's optimizer and LR schedule from the role's `optim` section, as verl's FSDP engine
builds them: the torch.optim class with its keyword overrides, and the warm-up + constant / cosine LR
multiplier by step that the engine wraps in a LambdaLR."""

from __future__ import annotations

import math

import torch

from verl_lite.config.schema import OptimConfig
from verl_lite.decisions.lr_schedule import TORCH_OPTIMIZERS


def schedule_type(optim: OptimConfig) -> str:
    """fsdp's schedule: verl's deprecated `warmup_style` wins over `lr_scheduler_type` when set."""
    kind = optim.warmup_style if optim.warmup_style is not None else optim.lr_scheduler_type
    if kind not in ("constant", "cosine"):
        name = "warmup_style" if optim.warmup_style is not None else "lr_scheduler_type"
        raise ValueError(f"optim.{name}={kind!r}: choose constant or cosine")
    return kind


def make_lr_lambda(optim: OptimConfig, total_steps: int):
    """LR multiplier by step, as verl's FSDP engine builds it (verl/utils/torch_functional.py):
    linear warm-up from 0 over `lr_warmup_steps` (else `lr_warmup_steps_ratio * total_steps`), then
    constant, or `num_cycles` cosine waves from 1 down to `min_lr_ratio` at `total_steps`."""
    warmup = int(optim.lr_warmup_steps)
    if warmup <= 0:
        warmup = int(float(optim.lr_warmup_steps_ratio) * total_steps)
    kind = schedule_type(optim)
    min_ratio, cycles = float(optim.min_lr_ratio), float(optim.num_cycles)
    shift = 0 if optim.zero_indexed_step else 1

    def constant(step: int) -> float:
        return step / max(1.0, warmup) if step < warmup else 1.0

    def cosine(step: int) -> float:
        step += shift
        if step < warmup:
            return step / max(1, warmup)
        progress = (step - warmup) / max(1, total_steps - warmup)
        wave = math.cos(math.pi * cycles * 2.0 * progress)
        return max(min_ratio, min_ratio + (1 - min_ratio) * 0.5 * (1 + wave))

    return constant if kind == "constant" else cosine


def build_optimizer(params, optim: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer class `optim.optimizer` of `optim.optimizer_impl` (torch.optim), as verl's
    build_optimizer makes it: lr, weight_decay, betas, and override_optimizer_config's keyword arguments
    (checked by the preflight, decisions/optimizer_overrides.torch_problems)."""
    name = optim.optimizer or "AdamW"
    if optim.optimizer_impl != "torch.optim" or name not in TORCH_OPTIMIZERS:
        raise ValueError(f"optim.optimizer={name!r} of optim.optimizer_impl={optim.optimizer_impl!r}: the fsdp "
                         f"engine builds {', '.join(TORCH_OPTIMIZERS)} of torch.optim")
    cls = getattr(torch.optim, name)
    extra = dict(optim.override_optimizer_config or {})
    return cls(params, lr=float(optim.lr), betas=tuple(optim.betas), weight_decay=float(optim.weight_decay), **extra)
