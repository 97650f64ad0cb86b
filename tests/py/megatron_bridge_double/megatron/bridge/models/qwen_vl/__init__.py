"""Megatron-Bridge's vision-language Qwen bridges (de93536e src/megatron/bridge/models/qwen_vl/): Qwen3-VL
dense and MoE, Qwen3.5 dense and MoE conditional generation, all building `Qwen3VLModel`."""

from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model import Qwen3VLModel
from megatron.bridge.models.qwen_vl.qwen35_vl_bridge import Qwen35VLBridge, Qwen35VLMoEBridge
from megatron.bridge.models.qwen_vl.qwen35_vl_provider import Qwen35VLModelProvider, Qwen35VLMoEModelProvider
from megatron.bridge.models.qwen_vl.qwen3_vl_bridge import Qwen3VLBridge, Qwen3VLMoEBridge
from megatron.bridge.models.qwen_vl.qwen3_vl_provider import Qwen3VLModelProvider, Qwen3VLMoEModelProvider

__all__ = ["Qwen35VLBridge", "Qwen35VLMoEBridge", "Qwen35VLModelProvider", "Qwen35VLMoEModelProvider", "Qwen3VLBridge",
           "Qwen3VLMoEBridge", "Qwen3VLModel", "Qwen3VLModelProvider", "Qwen3VLMoEModelProvider"]
