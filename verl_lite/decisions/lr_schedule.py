"""Which `optim` keys each strategy reads, and the optimizer names it builds, as verl's engines do.

verl has two optimizer configs: FSDPOptimizerConfig (its fsdp engine: torch optimizers and the LambdaLR
schedules of verl/utils/torch_functional.py) and McoreOptimizerConfig (its megatron engine: megatron-core's
OptimizerParamScheduler). verl_lite has one `optim` section; a key the role's strategy does not read in
verl is refused at any value but verl's default, naming the key that does the same on that strategy, so
a setting is never taken and ignored. No torch import: the preflight reads this.
"""

from __future__ import annotations

from typing import Any, Dict, List

from verl_lite.config import roles

# optim.optimizer -> the class each strategy builds (verl: FSDPOptimizerConfig.optimizer of optimizer_impl,
# McoreOptimizerConfig.optimizer passed to megatron-core's OptimizerConfig.optimizer)
TORCH_OPTIMIZERS = ("AdamW", "Adam")  # torch.optim.<name>
MEGATRON_OPTIMIZERS = ("adam",)  # megatron-core's Adam (decoupled weight decay)
DEFAULT_OPTIMIZER = {"fsdp": "AdamW", "megatron": "adam"}

# key -> (verl's default, what to set on the other strategy instead)
FSDP_ONLY: Dict[str, tuple] = {
    "lr_scheduler_type": ("constant", "optim.lr_decay_style (constant, linear, cosine, inverse-square-root, WSD)"),
    "warmup_style": (None, "optim.lr_decay_style"),
    "min_lr_ratio": (0.0, "optim.min_lr (the absolute final LR: lr * min_lr_ratio)"),
    "num_cycles": (0.5, "optim.lr_decay_style=cosine (one half wave over optim.lr_decay_steps)"),
    "zero_indexed_step": (True, "nothing: megatron-core's scheduler counts from 0; remove it"),
    "optimizer_impl": ("torch.optim", "optim.optimizer=adam (megatron-core's Adam)"),
}
MEGATRON_ONLY: Dict[str, tuple] = {
    "lr_decay_style": ("constant", "optim.lr_scheduler_type (constant or cosine)"),
    "lr_decay_steps": (None, "optim.total_training_steps (the cosine schedule's length)"),
    "min_lr": (0.0, "optim.min_lr_ratio (the final LR as a share of lr)"),
    "lr_warmup_init": (0.0, "nothing: the fsdp warm-up starts from 0; remove it"),
    "weight_decay_incr_style": ("constant", "nothing: the fsdp weight decay is constant; remove it"),
    "lr_wsd_decay_style": ("exponential", "optim.lr_scheduler_type=cosine (fsdp has no WSD schedule)"),
    "lr_wsd_decay_steps": (None, "optim.lr_scheduler_type=cosine (fsdp has no WSD schedule)"),
}
ROLES_WITH_OPTIM = ("actor", "critic")


def optimizer_problem(name: Any, strategy: str, prefix: str) -> List[str]:
    if name is None:
        return []
    valid = MEGATRON_OPTIMIZERS if strategy == "megatron" else TORCH_OPTIMIZERS
    if name in valid:
        return []
    what = "megatron-core's Adam" if strategy == "megatron" else "torch.optim.AdamW or torch.optim.Adam"
    return [f"{prefix}.optim.optimizer={name!r} is not supported by verl_lite on strategy {strategy} ({what}): "
            f"choose one of {', '.join(valid)}, or leave it out"]


def optim_section_problems(cfg: Any, role: str, strategy: str) -> List[str]:
    """The refusals for one role's optim section (actor and critic; the ref has no optimizer)."""
    if role not in ROLES_WITH_OPTIM or strategy not in DEFAULT_OPTIMIZER:
        return []
    prefix = roles.SECTION[role]
    optim = roles.section(cfg, role).optim
    problems = optimizer_problem(getattr(optim, "optimizer", None), strategy, prefix)
    foreign = FSDP_ONLY if strategy == "megatron" else MEGATRON_ONLY
    for name, (default, instead) in foreign.items():
        value = getattr(optim, name)
        if value != default:
            problems.append(f"{prefix}.optim.{name}={value!r} is not supported on strategy {strategy} (verl's "
                            f"{strategy} engine does not read it): on {strategy} set "
                            + instead.replace("optim.", f"{prefix}.optim."))
    if strategy == "fsdp":
        if optim.warmup_style not in (None, "constant", "cosine"):
            problems.append(f"{prefix}.optim.warmup_style={optim.warmup_style!r}: choose constant or cosine "
                            f"(verl's deprecated spelling of {prefix}.optim.lr_scheduler_type)")
        if optim.optimizer_impl != "torch.optim":
            problems.append(f"{prefix}.optim.optimizer_impl={optim.optimizer_impl!r}: optimizers of other modules "
                            "(verl's torchao / bitsandbytes ones) are not supported by verl_lite yet; use torch.optim")
    elif optim.lr_decay_style == "WSD" and optim.lr_wsd_decay_steps is None:
        problems.append(f"{prefix}.optim.lr_decay_style=WSD needs {prefix}.optim.lr_wsd_decay_steps (megatron-core "
                        "asserts it): set the length of the final decay in steps")
    return [f"{role}: {p}" for p in problems]
