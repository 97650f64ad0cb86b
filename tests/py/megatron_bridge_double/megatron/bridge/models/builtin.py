"""Built-in bridges the double registers at import (the real package registers dozens; these are
the ones the tests name). Megatron-Bridge itself ships Qwen3 and Qwen3.5 text bridges
(models/qwen/qwen3_bridge.py, models/qwen/qwen35_bridge.py: source="Qwen3_5MoeForCausalLM",
model_type="qwen3_5_moe_text")."""

from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge


@MegatronModelBridge.register_bridge(source="Qwen3ForCausalLM", target="GPTModel", model_type="qwen3")
class MegatronQwen3Bridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5MoeForCausalLM", target="GPTModel", model_type="qwen3_5_moe_text")
class Qwen35MoEBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3_5ForCausalLM", target="GPTModel", model_type="qwen3_5_text")
class Qwen35Bridge(MegatronModelBridge):
    pass
