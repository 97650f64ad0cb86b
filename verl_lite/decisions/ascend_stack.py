"""Which documented Ascend stack an npu run uses, and what that stack does to Qwen3.5's Gated DeltaNet
layers and to the run's settings: pure functions over the facts table read from the stacks' pinned
sources (`config/generated/ascend_facts.json`, written by tools/gen_ascend_facts.py). The preflight and
the MindSpeed engines call the same functions, so `CHECK=1` prints what the cluster will do for the
stack it names.

The two stacks (docs/ascend.md; verl's run_qwen3_5_35b_megatron.sh lists both):

- core_r0.16.0: Megatron-LM 0.16 + MindSpeed core_r0.16.0 (+ Megatron-Bridge de93536e). MindSpeed's
  always-on pre-patch makes `fla.ops.gated_delta_rule.chunk_gated_delta_rule` its own kernel, whether
  or not the Triton fla package is installed: flash_gated_delta_rule (AscendC ops of
  flash-linear-attention-npu) where `fla_npu` imports, else its Triton chunk rule. It swaps its own
  GatedDeltaNet (not a subclass of megatron's) in for megatron's only under context parallelism, EOD
  packing, 2-D TP with the ring algorithm, or `use_naive_l2norm` (which verl's NPU Qwen3.5 scripts set).
- core_r0.18.0: Megatron-LM core_v0.18.0 + MindSpeed and MegatronAdaptor core_r0.18.0 +
  TransformerEngineNPU + Megatron-Bridge v0.5.0 + MindSpeed-Bridge (`USE_MINDSPEED_BRIDGE=True`).
  MindSpeed always swaps in a subclass of megatron 0.18's GatedDeltaNet with its Triton kernel;
  MegatronAdaptor, not MindSpeed, creates the fla stand-ins (unverified: its source is not reachable).

`trainer.ascend_stack` names the stack (auto: the installed MindSpeed's, found by its files; where
none is installed, as on a laptop, core_r0.18.0 when use_ascend_gdn=True, MindSpeed-Bridge's signal,
else core_r0.16.0). A named stack that differs from the installed one is refused on the nodes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verl_lite.config.generated import ascend_facts
from verl_lite.decisions.bridge_choice import ASCEND, FLA, module_installed, overrides_of
from verl_lite.decisions.layout import repatch_context_parallel
from verl_lite.decisions.repatch import RepatchError, build_repatch_dict
from verl_lite.decisions.switches import switch

AUTO = "auto"
STACKS = ascend_facts.STACKS
CHOICES = (AUTO,) + STACKS
BRIDGE_STACK = "core_r0.18.0"  # where MindSpeed-Bridge runs (verl's script header, docs/ascend.md)
DEFAULT_STACK = "core_r0.16.0"
FLA_RULE = "fla.ops.gated_delta_rule.chunk_gated_delta_rule"


class StackError(ValueError):
    """A stack setting the engines cannot honour; the message names the value and the fix."""


@dataclass(frozen=True)
class Stack:
    """A documented Ascend stack and how the run came to it (for the summary and errors)."""

    name: str
    how: str

    @property
    def facts(self) -> Dict[str, Any]:
        return ascend_facts.stack(self.name)

    @property
    def mindspeed(self) -> Dict[str, Any]:
        return self.facts["mindspeed"]

    @property
    def megatron_core(self) -> str:
        return str(self.facts["megatron_core"])

    def describe(self) -> str:
        return f"{self.name}: {self.facts['title']} ({self.how})"


def _source_path(cite: str) -> str:
    """'Ascend/MindSpeed@e4772499:mindspeed/x.py:39' -> 'mindspeed/x.py'."""
    path = cite.split(":", 1)[1]
    return path.rsplit(":", 1)[0] if path.rsplit(":", 1)[-1].isdigit() else path


def markers() -> Dict[str, str]:
    """stack -> a file of MindSpeed that only that stack's commit has (the feature file of its
    GatedDeltaNet swap), by which an installed MindSpeed is recognised without importing it."""
    out = {}
    for name in STACKS:
        swap = ascend_facts.stack(name)["mindspeed"]["gdn_swap"]
        out[name] = _source_path(swap["source"])
    return out


def installed_stack() -> Optional[Tuple[str, str]]:
    """(stack, evidence) of the MindSpeed installed where this runs, found by its files (nothing is
    imported: importing MindSpeed patches megatron); None where no MindSpeed is installed. A MindSpeed
    that matches no documented stack raises StackError."""
    try:
        spec = importlib.util.find_spec("mindspeed")
    except (ImportError, ValueError):  # sys.modules holds None or a module without a spec: not a MindSpeed install
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = os.path.dirname(list(spec.submodule_search_locations)[0])
    for name, marker in markers().items():
        if os.path.isfile(os.path.join(root, marker)):
            return name, f"the installed MindSpeed has {marker}"
    raise StackError(
        f"the MindSpeed installed at {root} matches no documented Ascend stack (none of "
        f"{', '.join(f'{m} ({n})' for n, m in markers().items())} exists): install MindSpeed core_r0.16.0 with "
        f"megatron-core 0.16, or core_r0.18.0 with megatron-core 0.18 (docs/ascend.md)")


def installed_megatron_core() -> Optional[str]:
    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return None


def choose_stack(configured: Any, overrides: Mapping[str, Any],
                 installed: Optional[Tuple[str, str]] = None) -> Stack:
    """The stack of an npu run: `configured` (trainer.ascend_stack), the role's
    override_transformer_config, and `installed` (`installed_stack()` where the workers run; None on a
    machine without MindSpeed)."""
    configured = str(configured if configured is not None else AUTO)
    if configured not in CHOICES:
        raise StackError(f"trainer.ascend_stack={configured!r} is not one of {', '.join(CHOICES)} "
                         f"(the documented stacks; auto takes the installed MindSpeed's)")
    if configured != AUTO:
        if installed and installed[0] != configured:
            raise StackError(
                f"trainer.ascend_stack={configured} but {installed[1]}, which is {installed[0]}: set "
                f"trainer.ascend_stack={installed[0]} (or auto), or install the stack you named (docs/ascend.md)")
        return Stack(configured, "trainer.ascend_stack")
    if installed:
        return Stack(installed[0], f"auto: {installed[1]}")
    if switch(overrides.get("use_ascend_gdn")):
        return Stack(BRIDGE_STACK, "auto, no MindSpeed here: use_ascend_gdn=True (USE_MINDSPEED_BRIDGE=True) is "
                                   "MindSpeed-Bridge's stack; trainer.ascend_stack names another")
    return Stack(DEFAULT_STACK, "auto, no MindSpeed here: the default stack; trainer.ascend_stack names another")


def megatron_core_problem(stack: Stack, version: Optional[str]) -> Optional[str]:
    """The installed megatron-core must be the stack's release line."""
    if version is None or version.startswith(stack.megatron_core + "."):
        return None
    return (f"Ascend stack {stack.name} pairs MindSpeed with megatron-core {stack.megatron_core}.x, but megatron-core "
            f"{version} is installed: install the stack's megatron-core, or name the stack that pairs with it in "
            f"trainer.ascend_stack (docs/ascend.md)")


# ------------------------------------------------------------------------------ Gated DeltaNet


def _conditions(plan: Mapping[str, Any]) -> Dict[str, bool]:
    """MindSpeed core_r0.16.0's GatedDeltaNet swap conditions, read from its arguments as the feature reads
    them (features_manager/context_parallel/gated_delta_net.py; the generator checks which arguments)."""
    algo = plan.get("context_parallel_algo", "megatron_cp_algo")
    return {
        "context_parallel": repatch_context_parallel(plan) > 1,
        "eod_packing": switch(plan.get("reset_position_ids")) and switch(plan.get("reset_attention_mask")),
        "2d_tp_ring": switch(plan.get("tp_2d")) and int(plan.get("tp_y", 1) or 1) > 1 and algo == "megatron_cp_algo",
        "naive_l2norm": switch(plan.get("use_naive_l2norm")),
    }


CONDITION_WORDS = {
    "context_parallel": "context_parallel_size > 1",
    "eod_packing": "reset_position_ids and reset_attention_mask (EOD packing)",
    "2d_tp_ring": "2-D tensor parallelism with megatron_cp_algo",
    "naive_l2norm": "use_naive_l2norm=True",
}


def gdn_swap_reason(stack: Stack, plan: Mapping[str, Any]) -> Optional[str]:
    """Why MindSpeed replaces megatron's GatedDeltaNet with its own class under this repatch plan, or
    None where megatron's stays (and verl_lite builds its own GDN layer)."""
    swap = stack.mindspeed["gdn_swap"]
    if swap is None:
        return None
    if swap["always"]:
        return f"always on {stack.name} ({swap['source']})"
    unknown = set(swap["when_any"]) - set(CONDITION_WORDS)
    if unknown:  # a regenerated table with a condition this function does not evaluate
        raise StackError(f"the facts table's GatedDeltaNet swap on {stack.name} has conditions {sorted(unknown)} that "
                         f"verl_lite does not evaluate: update decisions/ascend_stack.py with the generator")
    met = [name for name, on in _conditions(plan).items() if on and name in swap["when_any"]]
    if not met:
        return None
    return f"{'; '.join(CONDITION_WORDS[m] for m in met)} ({swap['source']})"


def mindspeed_gdn_class(stack: Stack) -> str:
    """'module:Class' of the GatedDeltaNet MindSpeed swaps in on this stack."""
    return stack.mindspeed["gdn_swap"]["replacement"]


def fla_rule_on_npu(stack: Stack) -> Dict[str, Any]:
    """What `fla.ops.gated_delta_rule.chunk_gated_delta_rule` is on the nodes once MindSpeed is imported:
    {"with fla_npu": {...}, "without fla_npu": {...}} (or {"always": ...}); {} where MindSpeed does not
    stand in fla itself (core_r0.18.0: MegatronAdaptor does, unverified)."""
    return dict(stack.mindspeed["fla_stand_ins"].get(FLA_RULE, {}))


def ascend_kernel_entry(stack: Stack) -> Optional[Dict[str, Any]]:
    """The AscendC GDN kernel entry this stack's MindSpeed ships (the one needing fla_npu), or None."""
    for entry in stack.mindspeed["kernels"].values():
        if "fla_npu" in entry["needs"]:
            return entry
    return None


def _assumed(stack: Stack, part: str) -> str:
    """What the facts table assumes of an unverified part of `stack` (its name starts with `part`)."""
    found = [u["assumed"] for u in ascend_facts.unverified(stack.name) if u["part"].startswith(part)]
    return found[0] if found else "no source read"


def _short(replacement: str) -> str:
    module, _, fn = replacement.partition(":")
    return f"{module}.{fn}"


def describe_fla_rule(stack: Stack) -> str:
    """One line: what the fla name means on this stack's nodes."""
    rule = fla_rule_on_npu(stack)
    if not rule:
        return f"{FLA_RULE} as MegatronAdaptor stands it in on {stack.name} (unverified: {_assumed(stack, 'MegatronAdaptor')})"
    parts = [f"{_short(v['replacement'])} {k}" for k, v in sorted(rule.items())]
    return f"{FLA_RULE} as MindSpeed {stack.name} replaces it: {', else '.join(parts)}"


@dataclass(frozen=True)
class GdnPlan:
    """How a Qwen3.5 GDN layer runs on an npu stack: `layer` "mindspeed" (MindSpeed's GatedDeltaNet,
    swapped in by the repatch) or "verl_lite" (verl_lite's GatedDeltaLayer with `kernel`);
    `packs`: it takes packed (THD) input itself (None: decided on the nodes); `why`: one line."""

    layer: str
    kernel: Optional[str]
    packs: Optional[bool]
    why: str


def mindspeed_gdn_packs(stack: Stack, fla_npu: Optional[bool], deterministic: bool) -> Optional[bool]:
    """Whether MindSpeed's GatedDeltaNet takes packed (THD) input: on core_r0.16.0 only with its
    causal_conv1d, which it binds where fla_npu imports, and never in deterministic mode (its forward
    asserts both, core/ssm/gated_delta_net.py); on core_r0.18.0 megatron 0.18's forward takes THD
    (outside deterministic mode). None: not known here (fla_npu on the nodes)."""
    if deterministic:
        return False
    kernel = stack.mindspeed["gdn_swap"]["kernel"]
    if str(kernel.get("causal_conv1d", "")).startswith("fla."):
        return fla_npu
    return True


def gdn_plan(stack: Stack, plan: Mapping[str, Any], kernel: str, fla_npu: Optional[bool] = None,
             deterministic: bool = False) -> GdnPlan:
    """The GDN layers of a Qwen3.5 model built by verl_lite's own bridges on `stack`, under the repatch
    `plan`; `kernel`: what `bridge_choice.gdn_kernel` picked from the switches (used where megatron's
    layer stays); `fla_npu`: whether flash-linear-attention-npu imports (None: unknown here)."""
    reason = gdn_swap_reason(stack, plan)
    if reason:
        packs = mindspeed_gdn_packs(stack, fla_npu, deterministic)
        how = {True: "takes packed input", False: "padded only", None: "packed where fla_npu imports on the nodes"}
        return GdnPlan("mindspeed", None, packs,
                       f"MindSpeed's GatedDeltaNet ({mindspeed_gdn_class(stack)}, swapped in: {reason}); kernel "
                       f"{describe_fla_rule(stack)}; {how[packs]}")
    return GdnPlan("verl_lite", kernel, None, "verl_lite's GatedDeltaLayer (megatron's GatedDeltaNet stays on this plan)")


def role_stack(configured: Any, megatron: Any) -> Stack:
    """The stack of a Megatron role on npu, as the preflight sees it: `configured` (trainer.ascend_stack)
    and the role's megatron section, with the MindSpeed installed where this runs (none on a laptop).
    Raises StackError for a bad value or a mismatch with the installed MindSpeed."""
    return choose_stack(configured, overrides_of(megatron), installed_stack())


def role_stack_or_none(configured: Any, megatron: Any) -> Optional[Stack]:
    """`role_stack`, or None where the stack setting is refused (the preflight's stack rule reports that)."""
    try:
        return role_stack(configured, megatron)
    except StackError:
        return None


def role_gdn_plan(stack: Stack, megatron: Any, kernel: str) -> GdnPlan:
    """`gdn_plan` for a role's megatron section as the preflight sees it: fla_npu is known only where
    MindSpeed is installed here (the nodes), else left to the nodes."""
    try:
        plan = build_repatch_dict(megatron)
    except RepatchError:  # reported by the preflight's repatch rule
        plan = overrides_of(megatron)
    fla_npu = module_installed("fla_npu") if installed_stack() else None
    return gdn_plan(stack, plan, kernel, fla_npu=fla_npu)


def describe_kernel(stack: Stack, kernel: str) -> str:
    """What a kernel of verl_lite's GDN layer (bridge_choice.FLA / ASCEND / TORCH) is on this stack's nodes."""
    if kernel == FLA:
        return describe_fla_rule(stack)
    if kernel == ASCEND:
        entry = ascend_kernel_entry(stack)
        if not entry:
            return f"none: MindSpeed {stack.name} ships no AscendC GDN entry"
        return (f"{entry['module']}.{entry['function']} (AscendC ops of flash-linear-attention-npu, needs "
                f"{', '.join(entry['needs'])}; q/k/v [{entry['qkv_layout']}]; {entry['source']})")
    return "pure-torch gated delta rule"


def external_gdn(stack: Stack, overrides: Mapping[str, Any], mindspeed_bridge: bool) -> str:
    """One line: the GDN layers of a model Megatron-Bridge builds on this stack."""
    swap = stack.mindspeed["gdn_swap"]
    ms = (f"MindSpeed {stack.name} replaces megatron's GatedDeltaNet with {swap['replacement']} "
          f"({'always' if swap['always'] else 'under ' + ', '.join(swap['when_any'])}; {swap['source']})")
    if not mindspeed_bridge:
        return f"built by Megatron-Bridge from megatron's spec; {ms}"
    return (f"built by MindSpeed-Bridge's Qwen3.5 bridge; use_triton_gdn={overrides.get('use_triton_gdn')}, "
            f"use_ascend_gdn={overrides.get('use_ascend_gdn')} choose its kernel (unverified: "
            f"{_assumed(stack, 'MindSpeed-Bridge')}); {ms}")


# ------------------------------------------------------------------------------ settings a stack lacks


def own_bridge_refusal(stack: Stack, gdn_model: bool) -> Optional[str]:
    """Why verl_lite's own bridges cannot build this model on `stack`, or None: its Qwen3.5 layers
    mirror megatron-core 0.16's GatedDeltaNet (engine/megatron/gdn.py), so on core_r0.18.0 the Qwen3.5
    model comes from Megatron-Bridge + MindSpeed-Bridge, as verl builds it there."""
    if not gdn_model or stack.megatron_core == "0.16":
        return None
    return (f"Qwen3.5's Gated DeltaNet layers on Ascend stack {stack.name} (megatron-core {stack.megatron_core}) are built "
            f"by Megatron-Bridge + MindSpeed-Bridge (vanilla_mbridge=False, both installed on the nodes): verl_lite's "
            f"own Qwen3.5 bridge mirrors megatron-core 0.16's GatedDeltaNet; or use the core_r0.16.0 stack "
            f"(trainer.ascend_stack)")


def stack_problems(stack: Stack, plan: Mapping[str, Any]) -> List[str]:
    """Settings of the repatch plan (override_transformer_config) that `stack` cannot honour, each naming
    the stack, the value and the fix."""
    ms = stack.mindspeed
    problems = []
    if switch(plan.get("fp8_reuse_quantized_weight")) and not ms["fp8_reuse"]["module"]:
        flag = ms["fp8_reuse"]["flag"]
        have = [n for n in STACKS if ascend_facts.stack(n)["mindspeed"]["fp8_reuse"]["module"]]
        master = ascend_facts.FACTS["mindspeed_master"]["fp8_reuse"]
        problems.append(
            f"fp8_reuse_quantized_weight=True: MindSpeed {stack.name} has no mindspeed.te.pytorch.fp8.reuse "
            f"({'it parses the flag, ' + flag + ', but implements it nowhere it ships' if flag else 'nor the flag'}); "
            f"the FP8 weight-reuse cache exists only on MindSpeed master ({master['source']})"
            + (f" and on {', '.join(have)}" if have else "") + ": remove the setting")
    asked = [k for k in ("use_flash_attn_npu_batch_invariant", "use_batch_invariant_ops") if switch(plan.get(k))]
    if asked and ms["batch_invariant"] is None:
        have = [n for n in STACKS if ascend_facts.stack(n)["mindspeed"]["batch_invariant"]]
        problems.append(
            f"{', '.join(f'{k}=True' for k in asked)}: MindSpeed {stack.name} has no batch-invariant feature (its "
            f"flags are gone); {', '.join(have) or 'no documented stack'} has it: remove the setting or use that stack")
    elif "use_flash_attn_npu_batch_invariant" in asked and ms["batch_invariant"]["flash_attention_needs"]:
        needs = ms["batch_invariant"]["flash_attention_needs"]
        if module_installed("torch_npu") and not module_installed(needs):  # MindSpeed's validate_args would raise
            problems.append(f"use_flash_attn_npu_batch_invariant=True on {stack.name} needs the {needs} package "
                            f"({ms['batch_invariant']['source']}), which does not import here: install "
                            f"flash-attention-npu or remove the setting")
    algo = plan.get("context_parallel_algo")
    cp = ms["context_parallel"]
    if algo is not None and str(algo) not in cp["algorithms"]:
        retired = " (retired there)" if str(algo) in cp["retired"] else ""
        problems.append(f"context_parallel_algo={algo!r} is not an algorithm of MindSpeed {stack.name}{retired}: "
                        f"one of {', '.join(cp['algorithms'])}")
    return problems


def stack_warnings(stack: Stack, plan: Mapping[str, Any]) -> List[str]:
    """Settings `stack` accepts and does nothing with, where that changes no number: use_naive_l2norm on
    core_r0.18.0, which verl's own Qwen3.5 scripts pass with USE_MINDSPEED_BRIDGE=True (MindSpeed 0.18 has no
    such flag: its GatedDeltaNet always takes its Triton l2norm, the same x / sqrt(sum(x^2) + 1e-6))."""
    if switch(plan.get("use_naive_l2norm")) and not stack.mindspeed["naive_l2norm_flag"]:
        return [f"use_naive_l2norm=True has no effect on Ascend stack {stack.name}: MindSpeed {stack.name} has no "
                f"--use-naive-l2norm and its GatedDeltaNet always takes its Triton l2norm (the same formula); "
                f"verl's core_r0.16.0-era scripts set it"]
    return []
