"""The Qwen text bridges of Megatron-Bridge de93536e, each registering target=GPTModel:

- qwen/qwen3_bridge.py:28 `register_bridge(source=Qwen3ForCausalLM, target=GPTModel, model_type="qwen3")`;
- qwen/qwen3_moe_bridge.py:28 `register_bridge(source=Qwen3MoeForCausalLM, target=GPTModel,
  model_type="qwen3_moe")`;
- qwen/qwen3_next_bridge.py:35 `register_bridge(source=Qwen3NextForCausalLM, target=GPTModel)`.

(One file in the double; the real package has one each.) No text-only Qwen3.5 bridge
(`Qwen3_5ForCausalLM`, `Qwen3_5MoeForCausalLM`) exists at de93536e nor at 03711a9d (v0.5.0 line): the
Qwen3.5 checkpoints register as vision-language models (models/qwen_vl/qwen35_vl_bridge.py).
The double builds what verl_lite's registry maps (Qwen3 dense); the others refuse at the build."""

from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge


@MegatronModelBridge.register_bridge(source="Qwen3ForCausalLM", target="GPTModel", model_type="qwen3")
class Qwen3Bridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3MoeForCausalLM", target="GPTModel", model_type="qwen3_moe")
class Qwen3MoEBridge(MegatronModelBridge):
    pass


@MegatronModelBridge.register_bridge(source="Qwen3NextForCausalLM", target="GPTModel")
class Qwen3NextBridge(MegatronModelBridge):
    pass
