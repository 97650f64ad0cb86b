"""The Megatron engine of the critic: the language model's trunk with a scalar value head, registered for
(value_model, "megatron", cpu | cuda) (`MindSpeedValueEngine` on npu). Its hooks change the language
model engine's where a value model differs: the head, the parameter names, the HF config and class,
the head's initial weights and the outputs (values instead of log-probs).
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from verl_lite.engine.megatron import hf as megatron_hf
from verl_lite.engine.megatron import model as megatron_model
from verl_lite.engine.megatron.engine import MegatronLMEngine


class MegatronValueEngine(MegatronLMEngine):
    """Critic on megatron-core: the LM's trunk with a scalar head; outputs values (B, R)."""

    model_type = "value_model"

    def _attach_head(self, module: Any) -> None:
        module.output_layer = megatron_model.ValueHead(self.tf_config.hidden_size, self.dtype,
                                                       sequence_parallel=self.tf_config.sequence_parallel)

    def _mapping_name(self, name: str) -> str:
        if name.startswith("output_layer.linear."):
            return "value_head." + name[len("output_layer.linear.") :]
        return name

    def _read_hf_config(self) -> Any:
        hf_config = super()._read_hf_config()
        hf_config.num_labels = 1
        return hf_config

    def _hf_model_class(self) -> Any:
        """transformers' token-classification class where it has one for this config (Qwen3); Qwen3.5
        has none, so its seeded random init is the causal LM's and the head is added below."""
        from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

        if type(self.hf_config) in AutoModelForTokenClassification._model_mapping:
            return AutoModelForTokenClassification
        return AutoModelForCausalLM

    def _hf_source(self) -> megatron_hf.HFSource:
        source = super()._hf_source()
        if not isinstance(source, megatron_hf.SafetensorsSource) and self._hf_model_class().__name__.endswith(
                "TokenClassification"):
            return source
        if isinstance(source, megatron_hf.SafetensorsSource) and "score.weight" in source:
            return source
        # An LM checkpoint: the value head starts like HF's token-classification head.
        generator = torch.Generator().manual_seed(int(self.model_config.init_seed))
        std = float(getattr(self.hf_config, "initializer_range", 0.02))
        head = {
            "score.weight": torch.randn(1, self.hf_config.hidden_size, generator=generator) * std,
            "score.bias": torch.zeros(1),
        }
        return lambda name: head[name] if name in head else source(name)

    def postprocess(self, output: torch.Tensor, batch: Dict[str, Any], with_entropy: bool) -> Dict[str, torch.Tensor]:
        if self._sum_pi_squared:
            raise ValueError(f"{self.role}: a value model has no token distribution: no sum_pi_squared")
        r = batch["responses"].shape[1]
        return {"values": output[:, -r - 1 : -1, 0].float()}
