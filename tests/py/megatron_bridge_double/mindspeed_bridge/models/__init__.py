"""`import mindspeed_bridge.models` registers MindSpeed-Bridge's Qwen3.5 bridges into
Megatron-Bridge's registry (MegatronModelBridge.register_bridge), replacing the registration of the
same architecture names. Its providers carry `use_triton_gdn` / `use_ascend_gdn`, which its
GatedDeltaNet reads (shared/notes/mindspeed.md section 8).

Ordering rule enforced (verl's Ascend stack): MindSpeed's repatch must already have run in this
process (the MindSpeed double's event log shows `repatch`); importing earlier raises, because the
bridges' layers would bind megatron before MindSpeed patched it."""

import sys

_ms = sys.modules.get("mindspeed._double")
if _ms is None or "repatch" not in _ms.kinds():
    raise RuntimeError(
        "mindspeed_bridge.models imported before MindSpeed's repatch: import mindspeed.megatron_adaptor and "
        "call repatch(...) first (the MindSpeed engines do it in device-mesh init), then import "
        "mindspeed_bridge.models, then build the model")

from megatron.bridge._double import record  # noqa: E402
from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge  # noqa: E402
from megatron.bridge.models.gpt_provider import GPTModelProvider  # noqa: E402


class Qwen35NpuProvider(GPTModelProvider):
    EXTRA_FIELDS = ("use_triton_gdn", "use_ascend_gdn", "linear_attention_freq")


@MegatronModelBridge.register_bridge(source="Qwen3_5ForConditionalGeneration", target="GPTModel",
                                     provider=Qwen35NpuProvider, model_type="qwen3_5")
class Qwen35NpuBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5MoeForConditionalGeneration", target="GPTModel",
                                     provider=Qwen35NpuProvider, model_type="qwen3_5_moe")
class Qwen35MoeNpuBridge(MegatronModelBridge):
    pass


record("mindspeed_bridge_models_imported", after_repatch=True, mindspeed_events=list(_ms.kinds()))
