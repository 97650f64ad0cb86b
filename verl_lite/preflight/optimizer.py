"""Preflight rules of each trained role's optimizer (`<role>.optim`, the actor's and the critic's; the
ref has none): the optim section's keys on the role's strategy (decisions/lr_schedule.py), the
override_optimizer_config passed to megatron-core or torch.optim (decisions/optimizer_overrides.py),
gradient clipping, and the warm-up settings.
"""

from __future__ import annotations

from typing import Any, List, Sequence

from verl_lite.config import schema
from verl_lite.decisions import lr_schedule, optimizer_overrides
from verl_lite.preflight.roles import RoleView

# the legacy grad_clip's default per trained role
_GRAD_CLIP_DEFAULTS = {"actor": schema.ActorConfig().grad_clip, "critic": schema.CriticConfig().grad_clip}


def grad_clip_problems(views: Sequence[RoleView]) -> List[str]:
    """verl 0.9's engines (FSDP and Megatron alike) clip gradients at `<section>.optim.clip_grad`;
    `<section>.grad_clip` is the legacy key they no longer read. A grad_clip the user changed is
    refused with the key to set instead, never silently dropped."""
    problems = []
    for view in views:
        if view.role not in _GRAD_CLIP_DEFAULTS:
            continue
        value = view.section.grad_clip
        if value != _GRAD_CLIP_DEFAULTS[view.role]:
            problems.append(f"{view.prefix}.grad_clip={value} is not read: verl's engines clip gradients at "
                            f"{view.prefix}.optim.clip_grad (now {view.section.optim.clip_grad}); "
                            f"set {view.prefix}.optim.clip_grad={value} instead")
    return problems


def optimizer_problems(cfg: Any, view: RoleView) -> List[str]:
    """The role's override_optimizer_config, then its optim section, on its strategy and device."""
    return (optimizer_overrides.override_config_problems(cfg, view.role, view.strategy, view.device)
            + lr_schedule.optim_section_problems(cfg, view.role, view.strategy))


def warmup_warnings(view: RoleView) -> List[str]:
    """lr_warmup_steps_ratio applies only while lr_warmup_steps is negative."""
    optim = getattr(view.section, "optim", None)
    no_ratio = schema.OptimConfig().lr_warmup_steps_ratio
    if optim is not None and optim.lr_warmup_steps >= 0 and optim.lr_warmup_steps_ratio != no_ratio:
        return [f"{view.prefix}.optim.lr_warmup_steps_ratio={optim.lr_warmup_steps_ratio} has no effect: "
                f"{view.prefix}.optim.lr_warmup_steps={optim.lr_warmup_steps} is set (the ratio applies when it is "
                "negative)"]
    return []
