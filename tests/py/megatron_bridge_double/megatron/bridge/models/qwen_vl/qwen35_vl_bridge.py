"""Qwen35VLMoEBridge / Qwen35VLBridge (de93536e models/qwen_vl/qwen35_vl_bridge.py:68-73, 403-408; the same
at 03711a9d l.60-68, 434-440): `register_bridge(source="Qwen3_5MoeForConditionalGeneration" /
"Qwen3_5ForConditionalGeneration", target=Qwen3VLModel, provider=Qwen35VLMoEModelProvider /
Qwen35VLModelProvider, model_type="qwen3_5_moe" / "qwen3_5")` (string sources, l.64-65).
MindSpeed-Bridge's import registers the same names again, replacing these entries."""

from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model import Qwen3VLModel
from megatron.bridge.models.qwen_vl.qwen35_vl_provider import Qwen35VLModelProvider, Qwen35VLMoEModelProvider


@MegatronModelBridge.register_bridge(source="Qwen3_5MoeForConditionalGeneration", target=Qwen3VLModel,
                                     provider=Qwen35VLMoEModelProvider, model_type="qwen3_5_moe")
class Qwen35VLMoEBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5ForConditionalGeneration", target=Qwen3VLModel,
                                     provider=Qwen35VLModelProvider, model_type="qwen3_5")
class Qwen35VLBridge(MegatronModelBridge):
    pass
