"""Preflight rules of the memory knobs, the settings that trade memory for time without changing a
number: fused kernels for log-probs and entropy (engine/torch/fused.py), activation offload
(engine/torch/activations.py), entropy chunking and checkpointing (engine/logits.py), and the offload flags of
parameters, gradients and optimizer state. What a role's engine cannot act on is refused; a knob that
moves nothing in this run is said.

The memory each device is predicted to need is `memory.py`'s.
"""

from __future__ import annotations

from typing import List, Sequence

from verl_lite.config.verl_names import NOT
from verl_lite.decisions import fsdp_settings
from verl_lite.preflight.roles import RoleView


def memory_knob_problems(view: RoleView) -> List[str]:
    """The log-prob and activation memory settings a role's engine cannot act on: fused kernels need an
    LM head on the torch engine, activation offload the torch engine; the entropy settings run on both
    engines."""
    role, model, model_key = view.role, view.model, view.model_key
    problems = []
    # the ref loads with the actor's model section: its problems are said once, for the actor
    shared = role == "ref" and view.strategy == view.actor_section.strategy
    if model.use_fused_kernels and not shared:
        if role == "critic":
            problems.append(f"critic: critic.model.use_fused_kernels=True is {NOT}: the critic has a value head, no LM "
                            "head to fuse; set it to False")
        elif view.megatron:
            problems.append(f"{role}: {model_key}.use_fused_kernels=True is {NOT} on the megatron strategy (its "
                            "logits are split over TP ranks; use entropy_from_logits_with_chunking and "
                            "entropy_checkpointing there); set it to False")
    backend = model.fused_kernel_options.impl_backend
    if backend != "torch" and not shared:
        problems.append(f"{role}: {model_key}.fused_kernel_options.impl_backend={backend!r} is {NOT}: verl's Triton "
                        "kernels are not part of verl_lite; choose torch")
    if model.enable_activation_offload and view.megatron and not shared:
        problems.append(f"{role}: {model_key}.enable_activation_offload=True is {NOT} on the megatron strategy (the "
                        "Megatron engine does not offload activations; use its recompute settings in "
                        "override_transformer_config); set it to False")
    if role != "critic":
        size = view.section.entropy_from_logits_chunk_size
        if view.section.entropy_from_logits_with_chunking and (not isinstance(size, int) or size < 1):
            problems.append(f"{role}: {view.prefix}.entropy_from_logits_chunk_size={size!r}: a chunk holds at least "
                            "1 token; set a positive number of tokens (verl's 2048)")
    return problems


def memory_knob_warnings(views: Sequence[RoleView]) -> List[str]:
    """The offload flags, then the entropy settings, that move nothing in this run."""
    return _offload_warnings(views) + _log_prob_memory_warnings(views)


def _offload_warnings(views: Sequence[RoleView]) -> List[str]:
    """Offload flags that are on where they move nothing: on a cpu run, under FSDP2's CPU offload policy
    (offload_policy, the ref's on a device), and the ref's optimizer and gradient flags (it keeps neither)."""
    warnings = []
    for view in views:
        role, section, prefix = view.role, view.section, view.prefix
        engine = "megatron" if view.megatron else "fsdp_config"
        names = ("param_offload", "grad_offload", "optimizer_offload") if engine == "megatron" else (
            "param_offload", "optimizer_offload")
        on = [f"{prefix}.{engine}.{n}" for n in names if getattr(getattr(section, engine), n)]
        policy = (not view.megatron and view.device not in (None, "cpu")
                  and fsdp_settings.cpu_offload(section.fsdp_config, role, view.device))
        held = [key for key in on if role != "ref" or key.endswith(".param_offload")] if policy else []
        if held:  # FSDP2's CPUOffloadPolicy already holds them on the host (verl turns the flags off)
            why = (f"{prefix}.fsdp_config.offload_policy=True" if section.fsdp_config.offload_policy
                   else "the ref's FSDP2 CPU offload policy (verl's, for its forward-only engine)")
            warnings.append(f"{', '.join(held)}=True {'has' if len(held) == 1 else 'have'} no effect: {why} keeps "
                            "the tensors on the host, as in verl")
            on = [key for key in on if key not in held]
        if on and view.device == "cpu":
            warnings.append(f"{', '.join(on)}=True {'has' if len(on) == 1 else 'have'} no effect on trainer.device=cpu "
                            "(the tensors already live on the host)")
        elif role == "ref":
            idle = [key for key in on if not key.endswith(".param_offload")]
            if idle:
                warnings.append(f"{', '.join(idle)}=True {'has' if len(idle) == 1 else 'have'} no effect: the ref "
                                "model keeps no gradients or optimizer state (param_offload moves its parameters)")
    return warnings


def _log_prob_memory_warnings(views: Sequence[RoleView]) -> List[str]:
    """The entropy settings of a role that has nothing for them to act on: with use_fused_kernels the
    torch engine never holds the logits (its fused pass is chunked and recomputed already), and the
    chunk size matters only with chunking."""
    warnings = []
    for view in views:
        if view.role == "critic":
            continue
        section, prefix = view.section, view.prefix
        if view.model.use_fused_kernels and not view.megatron:
            on = [f"{prefix}.{k}" for k in ("entropy_from_logits_with_chunking", "entropy_checkpointing")
                  if getattr(section, k)]
            if on:
                warnings.append(f"{', '.join(on)} {'has' if len(on) == 1 else 'have'} no effect with "
                                "actor_rollout_ref.model.use_fused_kernels=True (the fused pass already goes chunk by "
                                "chunk and recomputes in backward)")
        elif not section.entropy_from_logits_with_chunking and section.entropy_from_logits_chunk_size != 2048:
            warnings.append(f"{prefix}.entropy_from_logits_chunk_size={section.entropy_from_logits_chunk_size} has no "
                            f"effect: {prefix}.entropy_from_logits_with_chunking is False")
    return warnings
