"""Qwen3-VL bridges: HF `Qwen3VLForConditionalGeneration` (model_type qwen3_vl, dense text model)
and `Qwen3VLMoeForConditionalGeneration` (qwen3_vl_moe, MoE text model) on megatron-core 0.16's
GPT model, with the vision tower.

The model (read from transformers' modeling_qwen3_vl / modeling_qwen3_vl_moe):
- the vision tower (`model.visual`: patch embedding, learned position grid, vision blocks, the
  patch merger and the DeepStack mergers) turns `pixel_values` / `image_grid_thw` into one
  embedding per merged patch; those replace the embeddings of the image placeholder tokens
  (`image_token_id`), and the DeepStack features (one per `deepstack_visual_indexes` entry) are
  added to the hidden states at the same positions after decoder layers 0, 1, ...;
- the text model is Qwen3's (GQA with q/k RMSNorm, no bias, SwiGLU; MoE on every layer for
  qwen3_vl_moe: softmax, top-k, renormalise; no shared expert) with 3-D rotary positions
  (mrope) whose frequency channels are interleaved T H W T H W ... (`mrope_section` channels each,
  the rest T).

The vision tower, its hooks, DeepStack and the interleaved mrope are shared with the Qwen3.5
vision-language bridges: `vision.VisionTower` (what megatron-core 0.16 lacks and what is added).

Weights: `model.visual.*` as they are (megatron names `vision.*`), the text model under
`model.language_model.*` (Qwen3 q/k/v, fused experts as in transformers' state dict:
`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]), `lm_head.weight`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges.base import (HFShard, ModelShard, ModelBridge, 
                                                    gpt_config_kwargs, hf_field)
from verl_lite.engine.megatron.bridges.qwen3 import local_block_spec
from verl_lite.engine.megatron.bridges.qwen3_5_weights import Qwen3_5Weights
from verl_lite.engine.megatron.bridges.qwen3_text import (Qwen3TextMLP, required_int, rope_parameters, text_problems,
                                                          use_torch_router_gemm)
from verl_lite.engine.megatron.bridges.vision import (VISION_PREFIX, DeepStackFeatures, InterleavedMRoPE, VisionTower,
                                                      visual_inputs)

logger = logging.getLogger(__name__)

# config.json spellings of one field: Qwen's checkpoints write num_experts, transformers 5 writes
# num_local_experts (its attribute_map)
_ALIASES = {"num_experts": ("num_experts", "num_local_experts")}


def _text_field(text: Any, name: str, default: Any = None) -> Any:
    for spelling in _ALIASES.get(name, (name,)):
        value = hf_field(text, spelling, None)
        if value is not None:
            return value
    return default


class Qwen3VLBridge(VisionTower, Qwen3TextMLP, Qwen3_5Weights, ModelBridge):
    """Qwen3-VL dense (`Qwen3VLForConditionalGeneration`): vision tower + Qwen3 text model."""

    model_types: Tuple[str, ...] = ("qwen3_vl",)
    vl_model_types: Tuple[str, ...] = ("qwen3_vl",)  # the config.json's model_type (VISION_BRIDGED)
    family = "Qwen3-VL"
    moe = False
    hf_prefix = "model.language_model."
    vision_class = "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLVisionModel"
    hf_class = "transformers:Qwen3VLForConditionalGeneration"

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)
        self.text = hf_field(hf_config, "text_config")

    # -- what is covered ---------------------------------------------------------------------

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        model_type = str(hf_field(hf_config, "model_type", ""))
        text, vision = hf_field(hf_config, "text_config"), hf_field(hf_config, "vision_config")
        problems = []
        if model_type not in cls.model_types:
            problems.append(f"model_type={model_type!r} (expected {' or '.join(cls.model_types)})")
        if text is None or vision is None:
            problems.append("no text_config / vision_config")
        else:
            problems += text_problems(text)
            if rope_parameters(text).get("mrope_interleaved") is False:
                problems.append("mrope_interleaved=False")
            if cls.moe:
                if hf_field(text, "mlp_only_layers", None):
                    problems.append(f"mlp_only_layers={hf_field(text, 'mlp_only_layers')!r}")
                if int(hf_field(text, "decoder_sparse_step", 1) or 1) != 1:
                    problems.append(f"decoder_sparse_step={hf_field(text, 'decoder_sparse_step')!r}")
                missing = [k for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
                           if not _text_field(text, k)]
                problems += [f"no {k}" for k in missing]
        if problems:
            raise UnsupportedModelError(
                f"model_type {model_type!r} with {'; '.join(problems)} is not covered by verl_lite's {cls.__name__} "
                f"(it maps Qwen3-VL {'MoE' if cls.moe else 'dense'}: vision tower + Qwen3 text model, default "
                f"interleaved mrope, SiLU{', MoE on every layer' if cls.moe else ''})")

    def _int(self, name: str, default: Any = None) -> int:
        return required_int(_text_field(self.text, name, default), name, "the HF config's text_config")

    # -- the megatron model --------------------------------------------------------------------

    def transformer_config_kwargs(self) -> Dict[str, Any]:
        kwargs = gpt_config_kwargs(self.text, self._ffn_hidden_size())
        kwargs.update(self._moe_kwargs())
        return kwargs

    def model_spec(self, config: Any, vp_stage: Optional[int] = None) -> Any:
        """The local layer spec with verl_lite's RMSNorm (as the Qwen3 bridge), dense or MoE MLP."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        if self.moe:
            use_torch_router_gemm()
        spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, moe_grouped_gemm=False,
                                        qk_layernorm=True, normalization="RMSNorm")
        return local_block_spec(spec, config, vp_stage)

    def gpt_model_kwargs(self) -> Dict[str, Any]:
        # built with plain rope; finish_chunk swaps in the interleaved mrope (megatron's own asks for CUDA)
        return dict(max_sequence_length=self._int("max_position_embeddings", 4096), position_embedding_type="rope",
                    rotary_base=float(rope_parameters(self.text).get("rope_theta", 10000.0) or 10000.0))

    def mrope_section(self) -> List[int]:
        return [int(s) for s in rope_parameters(self.text).get("mrope_section", [24, 20, 20])]

    def rope_theta(self) -> float:
        return float(rope_parameters(self.text).get("rope_theta", 10000.0) or 10000.0)

    def layout(self, tp_size: int, tp_rank: int) -> ModelShard:
        fields = {k: hf_field(self.text, k) for k in (
            "num_attention_heads", "hidden_size", "num_key_value_heads", "head_dim", "vocab_size")}
        fields["intermediate_size"] = self._ffn_hidden_size()
        # transformers ties the LM head to the top-level config's tie_word_embeddings
        fields["tie_word_embeddings"] = bool(hf_field(self.hf_config, "tie_word_embeddings", False))
        return ModelShard.from_hf(fields, tp_size, tp_rank)

    # -- weights -------------------------------------------------------------------------------

    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: ModelShard, layer_offset: int = 0) -> List[HFShard]:
        if name.startswith(VISION_PREFIX):  # the tower's: VisionTower
            return super().megatron_to_hf(name, shard, layout, layer_offset)
        kind, hf, _ = self._split(name, layer_offset)
        if kind == "qkv":
            n = layout.heads // layout.groups
            cols = shard.shape[-1]
            grouped = shard.reshape(-1, n + 2, layout.head_dim, cols)
            return [(hf + "q_proj.weight", grouped[:, :n].reshape(-1, cols), 0),
                    (hf + "k_proj.weight", grouped[:, n].reshape(-1, cols), 0),
                    (hf + "v_proj.weight", grouped[:, n + 1].reshape(-1, cols), 0)]
        return super().megatron_to_hf(name, shard, layout, layer_offset)

    def finish_hf_tensor(self, hf_name: str, full: torch.Tensor, layout: ModelShard) -> torch.Tensor:
        if hf_name in (self.hf_prefix + "embed_tokens.weight", "lm_head.weight") and full.shape[0] != layout.vocab:
            full = full[: layout.vocab]
        if hf_name.endswith("mlp.experts.gate_up_proj") and full.dim() == 4:
            full = full.reshape(full.shape[0], -1, full.shape[-1])  # [E, 2, I, H] -> [E, 2I, H]
        return full

    def hf_to_megatron(self, name: str, layout: ModelShard, get_hf: Callable[[str], torch.Tensor],
                       layer_offset: int = 0) -> torch.Tensor:
        if name.startswith(VISION_PREFIX):  # the tower's: VisionTower
            return super().hf_to_megatron(name, layout, get_hf, layer_offset)
        kind, hf, _ = self._split(name, layer_offset)
        if kind == "qkv":
            per_group = layout.heads // layout.groups
            parts = []
            for proj, heads in (("q_proj", per_group), ("k_proj", 1), ("v_proj", 1)):
                full = get_hf(hf + f"{proj}.weight")
                part = full.chunk(layout.tp_size, dim=0)[layout.tp_rank]
                parts.append(part.reshape(-1, heads, layout.head_dim, part.shape[-1]))
            return torch.cat(parts, dim=1).reshape(-1, parts[0].shape[-1])
        return super().hf_to_megatron(name, layout, get_hf, layer_offset)


class Qwen3VLMoeBridge(Qwen3VLBridge):
    """Qwen3-VL MoE (`Qwen3VLMoeForConditionalGeneration`): vision tower + Qwen3-MoE text model."""

    model_types = ("qwen3_vl_moe",)
    vl_model_types = ("qwen3_vl_moe",)
    moe = True
    vision_class = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe:Qwen3VLMoeVisionModel"
    hf_class = "transformers:Qwen3VLMoeForConditionalGeneration"


__all__ = ["DeepStackFeatures", "InterleavedMRoPE", "Qwen3VLBridge", "Qwen3VLMoeBridge", "visual_inputs"]
