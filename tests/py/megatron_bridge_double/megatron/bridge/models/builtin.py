"""Built-in bridges the double registers at import (the real package registers dozens; these are
the ones the tests name). Megatron-Bridge itself ships Qwen3 and Qwen3.5 text bridges
(models/qwen/qwen3_bridge.py, models/qwen/qwen35_bridge.py: source="Qwen3_5MoeForCausalLM",
model_type="qwen3_5_moe_text")."""

from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
from megatron.bridge.models.gpt_provider import GPTModelProvider


@MegatronModelBridge.register_bridge(source="Qwen3ForCausalLM", target="GPTModel", model_type="qwen3")
class MegatronQwen3Bridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5MoeForCausalLM", target="GPTModel", model_type="qwen3_5_moe_text")
class Qwen35MoEBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5ForCausalLM", target="GPTModel", model_type="qwen3_5_text")
class Qwen35Bridge(MegatronModelBridge):
    pass


class Qwen35VLMoEModelProvider(GPTModelProvider):
    """Megatron-Bridge's own Qwen3.5 VL provider (v0.5.0 models/qwen_vl/qwen35_vl_provider.py): no
    use_triton_gdn / use_ascend_gdn fields (MindSpeed-Bridge's provider has them)."""


# Megatron-Bridge v0.5.0 models/qwen_vl/qwen35_vl_bridge.py registers the conditional-generation
# names itself (target Qwen3VLModel); MindSpeed-Bridge's import replaces these entries.
@MegatronModelBridge.register_bridge(source="Qwen3_5MoeForConditionalGeneration", target="Qwen3VLModel",
                                     provider=Qwen35VLMoEModelProvider)
class Qwen35VLMoEBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5ForConditionalGeneration", target="Qwen3VLModel",
                                     provider=Qwen35VLMoEModelProvider)
class Qwen35VLBridge(MegatronModelBridge):
    pass
