"""Preflight rules of a role's engine settings beyond its parallel sizes: the Megatron engine's
training dtype, context parallelism and dist checkpoint to load from (`<section>.megatron`), and
FSDP2's `<section>.fsdp_config` (its dtypes, mesh and wrap policy: decisions/fsdp_settings.py; the
megatron strategy reads none of it), with the fsdp_config settings that do nothing on one rank.
"""

from __future__ import annotations

from typing import List, Optional

from verl_lite.config.verl_names import YET
from verl_lite.decisions import fsdp_settings
from verl_lite.preflight.roles import RoleView


def _megatron_dtype(device: Optional[str]) -> str:
    """What verl_lite's Megatron engines train in (engine/megatron/engine.py): float32 on cpu, bfloat16 on devices."""
    return "float32" if device == "cpu" else "bfloat16"


def engine_problems(view: RoleView, world: int) -> List[str]:
    """The role's megatron dtype, context parallelism and dist checkpoint, then its fsdp_config (`world`:
    the training devices)."""
    role, section, prefix, megatron = view.role, view.section, view.prefix, view.megatron
    problems = []
    dtype = section.megatron.dtype if megatron else None
    if dtype is not None and dtype != _megatron_dtype(view.device):
        problems.append(f"{role}: {prefix}.megatron.dtype={dtype!r}: another training dtype is {YET}: the Megatron "
                        f"engine trains in {_megatron_dtype(view.device)} on {view.device}; leave it null")
    cp = view.layout.cp if megatron else 1
    if isinstance(cp, int) and cp > 1:
        problems.append(f"{role}: {prefix}.megatron.context_parallel_size={cp}: context parallelism is {YET}: the "
                        "Megatron forward keeps each sequence whole on a rank (verl's example scripts use 1); set it "
                        "to 1")
    if megatron and section.megatron.dist_checkpointing_path:
        problems.append(f"{role}: {prefix}.megatron.dist_checkpointing_path={section.megatron.dist_checkpointing_path!r}: "
                        f"loading a Megatron dist checkpoint is {YET}; point the model path at the HF model and "
                        "leave it null")
    fsdp_problems = (fsdp_settings.megatron_problems(section.fsdp_config, prefix) if megatron
                     else fsdp_settings.problems(section.fsdp_config, prefix, world))
    return problems + [f"{role}: {p}" for p in fsdp_problems]


def one_rank_warnings(view: RoleView, world: int) -> List[str]:
    """An fsdp role on one rank shards nothing: its resharding, prefetch and wrap settings do nothing."""
    if view.strategy != "fsdp" or world != 1 or _shards_one_rank(view):
        return []
    f = view.section.fsdp_config
    idle = [f"{key}={value}" for key, value, default in (
        ("reshard_after_forward", f.reshard_after_forward, True),
        ("forward_prefetch", f.forward_prefetch, False),
        ("wrap_policy", dict(f.wrap_policy or {}), {"min_num_params": 0})) if value != default]
    return [f"{view.prefix}.fsdp_config.{setting} has no effect on one rank (nothing is sharded)" for setting in idle]


def _shards_one_rank(view: RoleView) -> bool:
    try:
        return fsdp_settings.shards_one_rank(view.section.fsdp_config, view.role, view.device or "cpu")
    except ValueError:  # a bad dtype: refused by engine_problems
        return False
