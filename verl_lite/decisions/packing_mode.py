"""Remove-padding (verl's `use_remove_padding`, packed sequences): whether a role's micro-batches run
packed or padded, and why. Pure: the preflight (`preflight/packing.py`, the summary in
`preflight/summary.py`) and the engines (`engine/megatron/engine.py`, `engine/torch/engine.py` through
`engine/torch/packing.py`) call the same `decide`, the preflight with what it can know here, the engine with what it built.

`model.use_remove_padding` is tri-state:

- null (auto, verl_lite's default) = packed where the engine packs natively, padded otherwise;
- True = packed; refused, with the reason, where the engine cannot pack;
- False = padded.

verl's default is True. verl_lite's auto differs on purpose in two places. Gated DeltaNet models on
Megatron whose GDN layers run the pure-torch rule: it takes no `cu_seqlens`, so packing runs it once
per sequence (right, but a loop); auto keeps those padded and True packs them. The torch engine:
transformers keeps packed sequences apart with a block-causal mask over the whole packed row (its
sdpa attention, dense), so the attention's cost grows with the square of the micro-batch's tokens;
on the main job's micro-batch (128 sequences of <= 24 tokens) packing made the update 2.5-3.2x slower
(`bench/trl_compare.py` shapes, `use_remove_padding` null vs False). Auto runs it padded there and
True packs (GDN layers: one right-padded row per sequence, `models/packed_gdn.py`), which pays off for
small micro-batches of ragged, long sequences (`bench/torch_packing_bench.py`). Under Ulysses sequence parallelism
(ulysses_sequence_parallel_size > 1) auto packs: SP splits the packed sequence.

What auto picks (and what True can do), per engine:

| engine / model | device | attention | GDN layers | auto | True |
|---|---|---|---|---|---|
| torch (fsdp), attention-only | any | transformers (block-causal by position ids) | - | padded | packed |
| torch (fsdp), Gated DeltaNet (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) | any | as above | transformers' GDN layer, one row per packed sequence (state reset at each) | padded | packed |
| torch (fsdp), other linear-attention layers | any | - | no per-sequence split: state would cross sequences | padded | refused |
| megatron, attention-only | cpu | per-sequence core attention (`engine/megatron/cpu.py`, cpu only) | - | packed | packed |
| megatron, attention-only | cuda | Transformer Engine's attention (THD) | - | packed (padded where TE does not import) | packed (the engine refuses without TE) |
| megatron, attention-only | npu | MindSpeed flash attention (TND), `use_flash_attn` on | - | packed | packed |
| megatron, Gated DeltaNet | as above | as above | fla (cuda) / Ascend (npu): cu_seqlens | packed | packed |
| megatron, Gated DeltaNet | as above | as above | torch rule: run per sequence | padded | packed |

Megatron vision-language bridges (Qwen3-VL, Qwen3.5 `...ForConditionalGeneration`): image
embeddings and 3-D positions sit in the padded layout, so a micro-batch with images always runs
padded. Where the table packs, auto packs the text-only micro-batches and runs those with images
padded (the same built model takes both); True packs text-only micro-batches and the engine refuses
a micro-batch with images.

Megatron refusals (True; auto runs padded): on npu with MindSpeed flash attention off
(`use_flash_attn=False`) or with the batch-invariant attention (`use_flash_attn_npu_batch_invariant`),
whose forward replaces the one taking TND; a Megatron-Bridge / mbridge build on cpu (their layer
specs have no packed attention without Transformer Engine). Pipeline parallelism packs (stages exchange each packed
micro-batch's shape first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from verl_lite.config import roles
from verl_lite.config.shapes import model_shape
from verl_lite.decisions import ascend_stack, bridge_choice
from verl_lite.decisions.layout import ulysses_setting
from verl_lite.decisions.switches import switch, tri_state
from verl_lite.models import is_gdn_model, torch_packing_problem

# How a GDN kernel that takes cu_seqlens itself (`bridge_choice.kernel_takes_packed_input`) packs.
NATIVE_GDN_KERNELS = {bridge_choice.FLA: "Triton fla (cu_seqlens)", bridge_choice.ASCEND: "the Ascend kernel (cu_seqlens)",
                      bridge_choice.MINDSPEED_GDN: "MindSpeed's GatedDeltaNet (cu_seqlens)"}


@dataclass(frozen=True)
class Decision:
    """packed: run packed; why: one line for logs and the preflight summary; refusal: set when the user
    asked for True and the engine cannot pack (the message names the fix)."""

    packed: bool
    why: str
    refusal: Optional[str] = None


# model_types whose verl_lite Megatron bridge builds the vision tower (engine/megatron/bridges/vision.py:
# qwen3_vl.py, qwen3_5_vl.py)
VISION_BRIDGED = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")


def _finish(setting: Optional[bool], can: bool, native: bool, how: str, why_not: str) -> Decision:
    if setting is False:
        return Decision(False, "padded (use_remove_padding=False)")
    if setting is True:
        if not can:
            return Decision(False, f"padded: {why_not}", refusal=why_not)
        return Decision(True, f"packed (use_remove_padding=True): {how}")
    if can and native:
        return Decision(True, f"packed (auto): {how}")
    if can:
        return Decision(False, f"padded (auto: the GDN kernel takes no cu_seqlens); True would pack: {how}")
    return Decision(False, f"padded (auto): {why_not}")


def decide_torch(setting: Any, problem: Optional[str], gdn: bool = False, sequence_parallel: bool = False) -> Decision:
    """The torch (fsdp) engine; `problem`: why the model cannot pack there
    (`verl_lite.models.torch_packing_problem`), None when it can; `gdn`: it has GDN layers;
    `sequence_parallel`: the role runs Ulysses SP (> 1), which splits the packed sequence, so auto packs."""
    if problem:
        return _finish(tri_state(setting), False, False, "",
                       f"remove-padding on the torch engine: {problem}; set use_remove_padding=False (or leave "
                       f"it null: auto runs it padded)")
    how = "transformers' attention keeps packed sequences apart"
    if gdn:
        how += "; GDN layers: one row per packed sequence (models/packed_gdn.py)"
    setting = tri_state(setting)
    if setting is None and sequence_parallel:
        return Decision(True, f"packed (auto: Ulysses sequence parallelism splits the packed sequence): {how}")
    if setting is None:  # transformers' sdpa masks the packed row densely: cost grows with its tokens squared
        return Decision(False, "padded (auto: the packed row's attention mask is dense, its cost grows with the "
                               f"micro-batch's tokens squared); True would pack: {how}")
    return _finish(setting, True, True, how, "")


def decide_megatron(setting: Any, device: str, gdn_kernel: Optional[str], overrides: Mapping[str, Any],
                    external: bool = False, te_installed: Optional[bool] = None, vision: bool = False,
                    gdn_packs: Optional[bool] = None) -> Decision:
    """The Megatron engines. `gdn_kernel`: "fla" | "ascend" | "torch" for a model with GDN layers, or
    "mindspeed" where MindSpeed's own GatedDeltaNet runs them (npu), None for an attention-only model.
    `gdn_packs` (with "mindspeed"): whether that class takes packed input here
    (`ascend_stack.mindspeed_gdn_packs`); None = decided on the nodes (fla_npu there). `external`: the model is built by Megatron-Bridge / mbridge.
    `te_installed`: whether Transformer Engine imports (cuda with verl_lite's own layer specs); None =
    not known here (the preflight): assumed, and the engine decides on the node. `vision`: a
    vision-language model through verl_lite's own bridge: micro-batches with images run padded
    (their image embeddings and 3-D positions need the padded layout): under auto the engine pads
    those and packs the text-only ones, under True it refuses them."""
    setting = tri_state(setting)
    decision = _decide_megatron(setting, device, gdn_kernel, overrides, external, te_installed, gdn_packs)
    if not vision or external or not decision.packed:
        return decision
    if setting is None:  # auto: the text-only micro-batches packed, those with images padded
        return Decision(True, f"{decision.why}; micro-batches with images run padded (image embeddings and 3-D "
                              "rotary positions are placed in the padded layout)")
    return Decision(True, f"{decision.why}; text-only micro-batches: {VISION_PACKED_REFUSAL}")


# what a packed micro-batch with images gets on a vision-language bridge (the engine raises it)
VISION_PACKED_REFUSAL = ("a micro-batch with images is refused packed (its image embeddings and 3-D rotary positions "
                         "need the padded layout): leave use_remove_padding null (auto pads the micro-batches with "
                         "images and packs the others) or set it False")


def _decide_megatron(setting: Optional[bool], device: str, gdn_kernel: Optional[str], overrides: Mapping[str, Any],
                     external: bool, te_installed: Optional[bool], gdn_packs: Optional[bool] = None) -> Decision:
    if device == "cpu":
        if external:
            return _finish(setting, False, False, "", "a Megatron-Bridge / mbridge model on cpu has no packed "
                           "attention (its layer spec needs Transformer Engine for THD input); set "
                           "use_remove_padding=False or use verl_lite's own bridge")
        attention = "attention per packed sequence (cpu core attention)"
    elif device == "cuda":
        if not external and te_installed is False:
            return _finish(setting, False, False, "", "packed attention on cuda needs Transformer Engine's "
                           "attention (THD with cu_seqlens), which does not import here; install "
                           "transformer-engine or set use_remove_padding=False")
        attention = "Transformer Engine attention (THD)"
        if not external and te_installed is None:
            attention += " where it imports on the nodes (the engine runs auto padded, and refuses True, without it)"
    elif device == "npu":
        if switch(overrides.get("use_flash_attn_npu_batch_invariant")):
            return _finish(setting, False, False, "", "use_flash_attn_npu_batch_invariant replaces MindSpeed's "
                           "flash attention, which is what takes packed (TND) input; set "
                           "use_remove_padding=False or turn the batch-invariant attention off")
        if "use_flash_attn" in overrides and not switch(overrides.get("use_flash_attn")):
            return _finish(setting, False, False, "", "use_flash_attn=False: megatron's local attention takes no "
                           "packed (TND) input, MindSpeed's flash attention does; set use_flash_attn=True or "
                           "use_remove_padding=False")
        attention = "MindSpeed flash attention (TND)"
    else:
        raise ValueError(f"device {device!r} is not one of cpu, cuda, npu")
    if gdn_kernel is None:
        return _finish(setting, True, True, attention, "")
    if external and gdn_kernel == bridge_choice.TORCH:  # no per-sequence loop in a model verl_lite did not build
        return _finish(setting, False, False, "", "a Gated DeltaNet model built by Megatron-Bridge / mbridge on "
                       "megatron-core < 0.18 takes no packed input (its GatedDeltaNet refuses THD; 0.18 takes it); "
                       "set use_remove_padding=False")
    if gdn_kernel == bridge_choice.MINDSPEED_GDN:
        if gdn_packs is False:  # its forward refuses THD without causal_conv1d or in deterministic mode
            return _finish(setting, False, False, "", "MindSpeed's GatedDeltaNet takes packed (THD) input only with "
                           "its causal_conv1d (flash-linear-attention-npu installed) and outside deterministic mode; "
                           "set use_remove_padding=False or install fla_npu")
        where = "" if gdn_packs else " where fla_npu imports on the nodes (the engine decides there)"
        return _finish(setting, True, True, f"{attention}; GDN layers: {NATIVE_GDN_KERNELS[gdn_kernel]}{where}", "")
    if bridge_choice.kernel_takes_packed_input(gdn_kernel):
        how = NATIVE_GDN_KERNELS[gdn_kernel]
        if device == "npu" and gdn_kernel == bridge_choice.FLA:  # MindSpeed stands the fla name in on npu
            how = "the fla name, MindSpeed's kernel on npu (cu_seqlens)"
        return _finish(setting, True, True, f"{attention}; GDN layers: {how}", "")
    return _finish(setting, True, False,
                   f"{attention}; GDN layers: the torch rule takes no cu_seqlens, packed it runs once per "
                   f"sequence (recurrent state reset at each)", "")


def role_decision(cfg: Any, role: str, device: str, external: bool = False) -> Decision:
    """The preflight's decision for a role of a composed config on `device`: its model section's
    use_remove_padding, its strategy, the model's shape (config.json or a shipped shape) and, for
    Gated DeltaNet models on megatron, the GDN kernel the switches pick with the packages installed
    here (on the training nodes the engine decides with theirs). `external`: the role's model is built
    by Megatron-Bridge / mbridge (the summary knows; the problem list assumes verl_lite's own bridge)."""
    setting = roles.model_section(cfg, role).use_remove_padding
    shape = model_shape(roles.model_path(cfg, role))
    gdn = shape is not None and is_gdn_model(shape.hf)
    if roles.strategy(cfg, role) != "megatron":
        sp = ulysses_setting(roles.section(cfg, role), roles.SECTION[role])[1]
        return decide_torch(setting, None if shape is None else torch_packing_problem(shape.hf), gdn,
                            sequence_parallel=int(sp or 1) > 1)
    megatron = roles.section(cfg, role).megatron
    overrides = bridge_choice.overrides_of(megatron)
    kernel, packs = None, None
    if gdn:
        kernel = bridge_choice.gdn_kernel(device, overrides,
                                          bridge_choice.fla_importable(device, bridge_choice.installed_here()["fla"]))
        if device == "npu":  # the Ascend stack may build the layers with MindSpeed's own GatedDeltaNet
            stack = ascend_stack.role_stack_or_none(cfg.trainer.ascend_stack, megatron)
            plan = ascend_stack.role_gdn_plan(stack, megatron, kernel) if stack else None
            if plan is not None and plan.layer == "mindspeed":
                kernel, packs = bridge_choice.MINDSPEED_GDN, plan.packs
    # transformers gives these model types a vision config (its default) when config.json has none, so
    # the engine builds the tower for them either way (a shipped shape lists only the text settings)
    vision = shape is not None and shape.hf.get("model_type") in VISION_BRIDGED
    return decide_megatron(setting, device, kernel, overrides, external=external, vision=vision, gdn_packs=packs)
