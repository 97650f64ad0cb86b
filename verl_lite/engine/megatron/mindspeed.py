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
4. `to()` clears the FP8 quantized-weight reuse cache (releasing its storage) before moving
   weights when `fp8_reuse_quantized_weight` is on, and lets quantization release BF16 weights
   only for a training actor or critic (a ref never steps, so it must keep its weights).

5. Remove-padding: packed (THD) micro-batches reach megatron's DotProductAttention, whose forward
   MindSpeed's flash attention (`use_flash_attn`, on by default in the plan) replaces with one taking
   TND input and cu_seqlens; with it off, or with the batch-invariant attention, an explicit
   use_remove_padding=True is refused and auto runs padded (decisions/packing_mode.py). GDN layers
   pack through the Ascend kernel (`use_ascend_gdn=True`) with cu_seqlens.

Tests run these engines on CPU: `MindSpeedEngineMixin.internals_device = "cpu"` (set by the test,
never by the product) makes the engine keep device "npu" for the registry and MindSpeed while its
megatron internals run on CPU through `megatron/cpu.py`, with a MindSpeed contract double on
sys.path (tests/py/mindspeed_double).
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any, ClassVar, Dict, Optional, Tuple

from verl_lite.engine.megatron.engine import MegatronLMEngine, MegatronValueEngine
from verl_lite.decisions.repatch import build_repatch_dict
from verl_lite.decisions.switches import switch

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "strategy=megatron on device npu runs on Ascend MindSpeed, which is not importable here "
    "({error}). Install the source release matching megatron-core (MindSpeed core_r0.16.0 for "
    "megatron-core 0.16: git clone -b core_r0.16.0 https://github.com/Ascend/MindSpeed.git && "
    "pip install -e MindSpeed) together with torch_npu and CANN; the PyPI package 'mindspeed' is "
    "an empty placeholder. See docs/ascend.md."
)

# The plan applied in this process: (canonical key, plan). MindSpeed patches are process-wide.
_APPLIED: Optional[Tuple[str, Dict[str, Any]]] = None


def _plan_key(plan: Dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in plan.items()))


def applied_plan() -> Optional[Dict[str, Any]]:
    """The repatch plan applied in this process, or None."""
    return dict(_APPLIED[1]) if _APPLIED else None


class MindSpeedEngineMixin:
    """What the NPU engines add to the Megatron engines: MindSpeed import, repatch, FP8 cache."""

    # Where megatron's tensors live. None = the NPU. Tests set "cpu" to run the engines without one.
    internals_device: ClassVar[Optional[str]] = None

    @property
    def compute_device(self) -> str:
        return self.internals_device or self.device

    def _import_backend(self) -> None:
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
            raise ImportError(INSTALL_HINT.format(error=f"{type(e).__name__}: {e}")) from e

    def repatch_plan(self) -> Dict[str, Any]:
        from megatron.core.transformer.enums import AttnBackend

        return build_repatch_dict(self.megatron_config, lambda name: AttnBackend[name])

    def _before_parallel_init(self) -> None:
        global _APPLIED
        plan = self.repatch_plan()
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
        from mindspeed import megatron_adaptor

        logger.info("%s: MindSpeed repatch %s", self.role, plan)
        megatron_adaptor.repatch(plan)
        _APPLIED = (key, plan)

    def transformer_overrides(self) -> Dict[str, Any]:
        """The applied repatch plan: the same values reach MindSpeed and the TransformerConfig."""
        return dict(_APPLIED[1]) if _APPLIED else self.repatch_plan()

    def _fp8_reuse_on(self) -> bool:
        return switch(self.transformer_overrides().get("fp8_reuse_quantized_weight", False))

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        if model and self._fp8_reuse_on():
            try:
                reuse = importlib.import_module("mindspeed.te.pytorch.fp8.reuse")
            except ImportError as e:
                raise ImportError(
                    "fp8_reuse_quantized_weight=True needs mindspeed.te.pytorch.fp8.reuse, which this "
                    f"MindSpeed lacks ({e}); use a MindSpeed release with FP8 reuse or turn it off"
                ) from e
            reuse.clear_weight_quantization_reuse_cache(release_storage=True)
            reuse.set_weight_release_enabled(self.mode == "train" and self.role != "ref")
        super().to(device, model=model, optimizer=optimizer, grad=grad)  # type: ignore[misc]


class MindSpeedLMEngine(MindSpeedEngineMixin, MegatronLMEngine):
    """Actor / ref language model on Ascend NPUs (Megatron + MindSpeed)."""


class MindSpeedValueEngine(MindSpeedEngineMixin, MegatronValueEngine):
    """Critic on Ascend NPUs (Megatron + MindSpeed): the value head engine."""
