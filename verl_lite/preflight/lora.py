"""Preflight rules of LoRA (`<model>.lora_rank`, `<model>.lora_adapter_path`): the rank, the engines
that run adapters (the torch engine only: engine/torch/lora.py), the adapter dirs on the machine that trains,
and the ref, which with LoRA is the actor with its adapters disabled (as in verl), not a model of its own.
"""

from __future__ import annotations

import os
from typing import Any, List, Sequence

from verl_lite.config import roles, schema
from verl_lite.config.verl_names import NOT
from verl_lite.decisions.layout import ulysses_own_size
from verl_lite.preflight.defaults import changed_keys
from verl_lite.preflight.roles import RoleView, view_of


def lora_problems(view: RoleView) -> List[str]:
    """LoRA runs on the torch engine only; the ref has none of its own."""
    if view.role == "ref":
        return []
    key, model = view.model_key, view.model
    rank, path = model.lora_rank, model.lora_adapter_path
    problems = []
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        problems.append(f"{key}.lora_rank={rank!r}: the LoRA rank is an integer >= 0 (0 = off, e.g. 16)")
        return problems
    if not (rank > 0 or path):
        return problems
    what = f"{key}.lora_rank={rank}" if rank > 0 else f"{key}.lora_adapter_path={path!r}"
    if view.megatron:
        problems.append(f"{view.role}: {what}: LoRA on the megatron strategy is {NOT} (verl's Megatron LoRA, "
                        f"{key}.lora.*, is not implemented): use {view.prefix}.strategy=fsdp, or set {key}.lora_rank=0")
    return problems


def lora_adapter_problems(views: Sequence[RoleView]) -> List[str]:
    """On the machine that trains: each lora_adapter_path of the actor's and the critic's model is a PEFT
    adapter dir (nothing is downloaded)."""
    return [f"{view.model_key}.lora_adapter_path={view.model.lora_adapter_path!r} holds no adapter_config.json: give "
            "a PEFT adapter dir (e.g. a checkpoint's actor/lora_adapter); nothing is downloaded"
            for view in views
            if view.role != "ref" and view.model.lora_adapter_path
            and not os.path.isfile(os.path.join(str(view.model.lora_adapter_path), "adapter_config.json"))]


def ref_in_actor_warnings(cfg: Any, views: Sequence[RoleView]) -> List[str]:
    """With LoRA the ref is the actor's engine with its adapters disabled (as in verl): the ref's own
    engine settings build nothing. Its log-prob micro-batch and token budget still cut its pass."""
    ref = view_of(views, "ref")
    if ref is None or not roles.ref_in_actor(cfg):
        return []
    section, actor, prefix = ref.section, ref.actor_section, ref.prefix
    changed = [f"{prefix}.strategy"] if section.strategy is not None else []
    changed += changed_keys(section.fsdp_config, schema.FSDPConfig, f"{prefix}.fsdp_config")
    # they follow the actor's unless set
    if section.use_torch_compile != actor.use_torch_compile:
        changed.append(f"{prefix}.use_torch_compile")
    if ulysses_own_size(section) != ulysses_own_size(actor):
        changed.append(f"{prefix}.ulysses_sequence_parallel_size")
    default = schema.RefConfig()
    changed += [f"{prefix}.{key}" for key in ("entropy_from_logits_with_chunking", "entropy_from_logits_chunk_size",
                                              "entropy_checkpointing") if getattr(section, key) != getattr(default, key)]
    if not changed:
        return []
    return [f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: with LoRA "
            "(actor_rollout_ref.model.lora_rank > 0 or lora_adapter_path) the ref is the actor with its adapters "
            "disabled, not a model of its own (as in verl); the actor's engine settings apply"]
