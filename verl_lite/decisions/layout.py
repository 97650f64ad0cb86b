"""Layout arithmetic that the preflight and the Megatron engines both decide, each rule once: the
devices against the model-parallel span, a head count against TP, and MoE training at TP > 1 without
sequence parallelism. Each function returns the message (or None), so the preflight lists it with
the role's name and the engine raises it: the two can never disagree.

The launcher (`launch/lib.sh:vl_divides`) checks the env-var arithmetic (TP*PP*CP against the
devices) before any Python runs, naming the env vars a user edits; it is the shell's own first
pass, and the preflight's answer (this module) is what decides."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence


def train_world(cfg: Any) -> int:
    """The training devices: trainer.nnodes x trainer.n_gpus_per_node (fully-async: the training pool)."""
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def span_problem(world: int, what: str, factors: Sequence[int], where: str) -> Optional[str]:
    """`world` devices against a product of parallel sizes: `what` names the product (e.g. "TP*PP*CP"),
    `factors` its sizes in that order, `where` the keys a user sets."""
    span = math.prod(int(f) for f in factors)
    if span < 1 or world % span == 0:
        return None
    sizes = "*".join(str(int(f)) for f in factors)
    return f"is not divisible by {what} = {sizes} = {span} ({where}): {world} % {span} = {world % span}"


def heads_problem(count: int, tp: int) -> Optional[str]:
    """A head count (or another size split over TP ranks) that TP does not divide."""
    if not count or tp < 1 or count % tp == 0:
        return None
    return f"{count} % {tp} = {count % tp}"


def moe_sequence_parallel_problem(experts: Optional[int], tp: int, sequence_parallel: bool, prefix: str) -> Optional[str]:
    """megatron-core's MoE layer refuses to train with TP > 1 without sequence parallelism (a ValueError
    in its training forward, moe_layer.py). `prefix`: the role's megatron section
    (e.g. actor_rollout_ref.actor.megatron), named in the fix."""
    if not experts or tp <= 1 or sequence_parallel:
        return None
    return (f"training an MoE model ({experts} experts) with {prefix}.tensor_model_parallel_size={tp} needs Megatron "
            f"sequence parallelism (megatron-core's MoE layer refuses TP > 1 without it): set "
            f"{prefix}.sequence_parallel=True (verl's default), or {prefix}.tensor_model_parallel_size=1 and split "
            f"the experts with {prefix}.expert_model_parallel_size")


def first_stage_layers(num_layers: int, pp: int, vpp: Optional[int], first_stage: Optional[int] = None) -> int:
    """Decoder layers in the model chunk of the first pipeline stage (virtual stage 0 of PP rank 0):
    override_transformer_config.num_layers_in_first_pipeline_stage when set, else megatron's even split."""
    if first_stage:
        return int(first_stage)
    return num_layers // max(1, pp * (int(vpp) if vpp and int(vpp) > 1 else 1))


def deepstack_stage_problem(deepstack: int, num_layers: int, pp: int, vpp: Optional[int],
                            first_stage: Optional[int], prefix: str) -> Optional[str]:
    """Qwen3-VL adds DeepStack visual features after decoder layers 0 .. deepstack-1, on the first pipeline
    stage with the vision tower (engine/megatron/bridges/qwen3_vl.py refuses them elsewhere)."""
    if not deepstack or pp <= 1:
        return None
    held = first_stage_layers(num_layers, pp, vpp, first_stage)
    if held >= deepstack:
        return None
    return (f"the model adds DeepStack visual features after decoder layers 0..{deepstack - 1}, which must sit on the "
            f"first pipeline stage with the vision tower, but {prefix}.pipeline_model_parallel_size={pp}"
            f"{f' (virtual {vpp})' if vpp else ''} puts {held} layer(s) there: lower the pipeline size or set "
            f"{prefix}.override_transformer_config.num_layers_in_first_pipeline_stage >= {deepstack}")
