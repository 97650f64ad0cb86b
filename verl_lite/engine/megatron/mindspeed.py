"""MindSpeed engines: the Megatron engines on Ascend NPUs, registered for
(language_model | value_model, "megatron", "npu").

MindSpeed adapts Megatron to NPUs by patching it. verl's NPU runs broke on the order of those
patches, so the order is fixed here:

1. `initialize()` first imports `mindspeed.megatron_adaptor` (its import patches megatron, seeing
   argparse defaults only), before anything imports megatron. Missing MindSpeed raises an
   ImportError that says what to install.
2. Device-mesh init calls `repatch(plan)` *before* `initialize_model_parallel`, with the plan from
   `verl_lite.decisions.repatch.build_repatch_dict` (attention backend as `AttnBackend`, flash attention off
   when the batch-invariant kernel is on, `context_parallel_size` when > 1). After the parallel
   init the context-parallel ring wrapper could no longer be registered.
3. MindSpeed's patches are process-wide. The first engine of a process applies its plan; later
   engines (the ref next to the actor) with the same plan do not repatch. A later engine with a
   different plan keeps the applied one and logs the differing keys: give the actor, ref and
   critic of one worker the same `override_transformer_config`.
4. FP8 weight reuse (`fp8_reuse_quantized_weight`) is refused: its cache
   (`mindspeed.te.pytorch.fp8.reuse`) exists only on MindSpeed master, in neither documented stack
   (the facts table; core_r0.18.0 parses the flag and implements it nowhere it ships).

5. Remove-padding: packed (THD) micro-batches reach megatron's DotProductAttention, whose forward
   MindSpeed's flash attention (`use_flash_attn`, on by default in the plan) replaces with one taking
   TND input and cu_seqlens; with it off, or with the batch-invariant attention, an explicit
   use_remove_padding=True is refused and auto runs padded (decisions/packing_mode.py). GDN layers
   pack through the Ascend kernel (`use_ascend_gdn=True`) with cu_seqlens.

6. The Ascend stack (decisions/ascend_stack.py, facts read from the stacks' pinned sources):
   `trainer.ascend_stack` (auto: the installed MindSpeed's) is resolved before MindSpeed is imported and
   must match the installed MindSpeed and megatron-core; settings the stack lacks (FP8 weight reuse,
   batch-invariant mode on core_r0.18.0, a CP algorithm it does not have) are refused before the
   repatch (use_naive_l2norm on core_r0.18.0, which changes no number there, is logged as a warning). Qwen3.5's GDN layers are MindSpeed's own GatedDeltaNet where the stack swaps it
   in under the plan (core_r0.16.0 with use_naive_l2norm, CP or EOD packing), else verl_lite's layer
   with the kernel the switches pick, the fla name being MindSpeed's kernel on npu.

Tests run these engines on CPU: `MindSpeedEngineMixin.internals_device = "cpu"` (set by the test,
never by the product) makes the engine keep device "npu" for the registry and MindSpeed while its
megatron internals run on CPU through `megatron/cpu.py`, with a MindSpeed contract double on
sys.path (tests/py/mindspeed_double), or the real MindSpeed source with only the device layer
doubled (tests/py/mindspeed_contract).
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any, ClassVar, Dict, Optional, Tuple

import torch

from verl_lite.decisions import ascend_stack, bridge_choice
from verl_lite.engine.megatron.engine import MegatronLMEngine
from verl_lite.engine.megatron.value import MegatronValueEngine
from verl_lite.decisions.repatch import build_repatch_dict
from verl_lite.models import is_gdn_model

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "strategy=megatron on device npu runs on Ascend MindSpeed, which is not importable here "
    "({error}). Install the source release matching megatron-core (MindSpeed core_r0.16.0 for "
    "megatron-core 0.16: git clone -b core_r0.16.0 https://github.com/Ascend/MindSpeed.git && "
    "pip install -e MindSpeed) together with torch_npu and CANN; the PyPI package 'mindspeed' is "
    "an empty placeholder. See docs/ascend.md."
)
# core_r0.18.0's `import mindspeed` imports MegatronAdaptor (mindspeed/__init__.py), a separate package
ADAPTOR_HINT = (
    "Ascend stack {stack}: `import mindspeed` imports the separate package `megatron_adaptor` (MegatronAdaptor, "
    "{source}), which does not import here ({error}); install MegatronAdaptor, TransformerEngineNPU and MindSpeed "
    "core_r0.18.0 in that order (docs/ascend.md), or use the core_r0.16.0 stack (trainer.ascend_stack)"
)

# The plan applied in this process: (canonical key, plan). MindSpeed patches are process-wide.
_APPLIED: Optional[Tuple[str, Dict[str, Any]]] = None


def _plan_key(plan: Dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in plan.items()))


def applied_plan() -> Optional[Dict[str, Any]]:
    """The repatch plan applied in this process, or None."""
    return dict(_APPLIED[1]) if _APPLIED else None


class MindSpeedEngineMixin:
    """What the NPU engines add to the Megatron engines: the Ascend stack, MindSpeed import, repatch,
    the stack's GDN layers."""

    # Where megatron's tensors live. None = the NPU. Tests set "cpu" to run the engines without one.
    internals_device: ClassVar[Optional[str]] = None
    # trainer.ascend_stack, set by the worker before initialize() (auto: the installed MindSpeed's)
    ascend_stack_setting: str = ascend_stack.AUTO
    stack: Optional[ascend_stack.Stack] = None
    # The megatron-core release the stack is checked against. None = the installed one. Tests of the
    # core_r0.18.0 double set "0.18.0" (megatron-core 0.18 needs Python >= 3.12: they run 0.16 under it).
    megatron_core_version: ClassVar[Optional[str]] = None

    @property
    def compute_device(self) -> str:
        return self.internals_device or self.device

    def _choose_stack(self) -> ascend_stack.Stack:
        overrides = bridge_choice.overrides_of(self.megatron_config)
        stack = ascend_stack.choose_stack(self.ascend_stack_setting, overrides, ascend_stack.installed_stack())
        problem = ascend_stack.megatron_core_problem(
            stack, self.megatron_core_version or ascend_stack.installed_megatron_core())
        if problem:
            raise ascend_stack.StackError(f"{self.role}: {problem}")
        logger.info("%s: Ascend stack %s", self.role, stack.describe())
        return stack

    def _import_backend(self) -> None:
        self.stack = self._choose_stack()
        early = sorted(m for m in sys.modules if m == "megatron.core" or m.startswith("megatron.core."))
        if early and "mindspeed.megatron_adaptor" not in sys.modules:
            logger.warning(
                "megatron.core was imported before mindspeed.megatron_adaptor (%s): patches applied at "
                "import time cannot reach bindings made earlier; import verl_lite's NPU engines first",
                early[0],
            )
        try:
            importlib.import_module("mindspeed.megatron_adaptor")
        except ImportError as e:
            error = f"{type(e).__name__}: {e}"
            imports = self.stack.mindspeed["import"]
            if imports["needs_external_megatron_adaptor"] and getattr(e, "name", None) == "megatron_adaptor":
                raise ImportError(ADAPTOR_HINT.format(stack=self.stack.name, source=imports["source"], error=error)) from e
            raise ImportError(INSTALL_HINT.format(error=error)) from e

    def repatch_plan(self) -> Dict[str, Any]:
        from megatron.core.transformer.enums import AttnBackend

        return build_repatch_dict(self.megatron_config, lambda name: AttnBackend[name])

    def _before_parallel_init(self) -> None:
        global _APPLIED
        plan = self.repatch_plan()
        problems = ascend_stack.stack_problems(self.stack, plan)
        if problems:
            raise ascend_stack.StackError(f"{self.role}: " + "; ".join(problems))
        for warning in ascend_stack.stack_warnings(self.stack, plan):
            logger.warning("%s: %s", self.role, warning)
        key = _plan_key(plan)
        if _APPLIED is not None:
            if _APPLIED[0] != key:
                old = _APPLIED[1]
                differing = sorted(k for k in set(old) | set(plan) if repr(old.get(k)) != repr(plan.get(k)))
                logger.warning(
                    "%s: MindSpeed was already repatched in this process with another plan (keys %s differ); "
                    "keeping the applied plan. Give every engine of a worker the same override_transformer_config.",
                    self.role, differing,
                )
            return
        # not `from mindspeed import megatron_adaptor`: on core_r0.18.0 `mindspeed/__init__.py` binds that name
        # to the separate MegatronAdaptor package, which has no repatch; the submodule is sys.modules' entry
        adaptor = importlib.import_module("mindspeed.megatron_adaptor")
        logger.info("%s: MindSpeed repatch %s", self.role, plan)
        adaptor.repatch(plan)
        _APPLIED = (key, plan)

    def transformer_overrides(self) -> Dict[str, Any]:
        """The applied repatch plan: the same values reach MindSpeed and the TransformerConfig."""
        return dict(_APPLIED[1]) if _APPLIED else self.repatch_plan()

    def _own_bridge_refusal(self) -> Optional[str]:

        hf = self.hf_config.to_dict() if hasattr(self.hf_config, "to_dict") else dict(self.hf_config or {})
        return ascend_stack.own_bridge_refusal(self.stack, is_gdn_model(hf))

    def _configure_gdn(self, tf_config: Any) -> None:
        """The stack's Gated DeltaNet layers: MindSpeed's own class where the stack swaps it in under the
        applied plan (`ascend_stack.gdn_plan`), else verl_lite's GatedDeltaLayer with the kernel the
        switches chose, fed in bf16 (MindSpeed's kernels refuse fp32) and, for use_ascend_gdn, from the
        Ascend entry the stack ships, in its tensor layout."""
        applied = self.transformer_overrides()
        if self.compute_device == "cpu" and ascend_stack.gdn_swap_reason(self.stack, applied):
            # CPU internals (tests): MindSpeed's kernels are Triton / AscendC, so its class runs its
            # pure-torch rule, which it takes only in deterministic mode (megatron's embedding then
            # indexes instead of F.embedding: the same numbers)
            tf_config.deterministic_mode = True
        plan = ascend_stack.gdn_plan(self.stack, applied, tf_config.gdn_kernel,
                                     fla_npu=bridge_choice.module_installed("fla_npu"),
                                     deterministic=bool(getattr(tf_config, "deterministic_mode", False)))
        tf_config.gdn_layer = plan.layer
        tf_config.gdn_kernel_dtype = torch.bfloat16
        if plan.layer == "mindspeed":
            tf_config.mindspeed_gdn_class = ascend_stack.mindspeed_gdn_class(self.stack)
            tf_config.gdn_kernel = bridge_choice.MINDSPEED_GDN
            self._gdn_packs = plan.packs
        elif tf_config.gdn_kernel == bridge_choice.ASCEND:
            tf_config.ascend_kernel = ascend_stack.ascend_kernel_entry(self.stack)
        logger.info("%s: Gated DeltaNet on %s: %s", self.role, self.stack.name, plan.why)


class MindSpeedLMEngine(MindSpeedEngineMixin, MegatronLMEngine):
    """Actor / ref language model on Ascend NPUs (Megatron + MindSpeed)."""


class MindSpeedValueEngine(MindSpeedEngineMixin, MegatronValueEngine):
    """Critic on Ascend NPUs (Megatron + MindSpeed): the value head engine."""
