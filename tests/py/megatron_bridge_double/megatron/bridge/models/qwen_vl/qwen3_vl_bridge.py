"""Qwen3VLBridge / Qwen3VLMoEBridge (de93536e models/qwen_vl/qwen3_vl_bridge.py:40-45, 206-211):
`register_bridge(source=Qwen3VL(Moe)ForConditionalGeneration, target=Qwen3VLModel,
provider=Qwen3VL(MoE)ModelProvider, model_type="qwen3_vl" / "qwen3_vl_moe")`."""

from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model import Qwen3VLModel
from megatron.bridge.models.qwen_vl.qwen3_vl_provider import Qwen3VLModelProvider, Qwen3VLMoEModelProvider


@MegatronModelBridge.register_bridge(source="Qwen3VLForConditionalGeneration", target=Qwen3VLModel,
                                     provider=Qwen3VLModelProvider, model_type="qwen3_vl")
class Qwen3VLBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3VLMoeForConditionalGeneration", target=Qwen3VLModel,
                                     provider=Qwen3VLMoEModelProvider, model_type="qwen3_vl_moe")
class Qwen3VLMoEBridge(MegatronModelBridge):
    pass
