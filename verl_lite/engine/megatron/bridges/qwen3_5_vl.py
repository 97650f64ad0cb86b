"""Qwen3.5 vision-language bridges: HF `Qwen3_5ForConditionalGeneration` (model_type qwen3_5) and
`Qwen3_5MoeForConditionalGeneration` (qwen3_5_moe) on megatron-core 0.16's GPT model: the Qwen3.5
text model of qwen3_5.py (Gated DeltaNet + gated attention, dense or MoE with the shared expert)
with Qwen3.5's own vision tower.

The model (read from transformers' modeling_qwen3_5 / modeling_qwen3_5_moe):
- the vision tower (`model.visual`, `Qwen3_5VisionModel`: patch embedding, learned position grid,
  vision blocks, one patch merger; no DeepStack) turns `pixel_values` / `image_grid_thw` into one
  embedding per merged patch (its `pooler_output`), which replaces the embedding of each image
  placeholder token (`image_token_id`); nothing else of the tower enters the text model;
- the text model's full-attention layers rotate the first `partial_rotary_factor` of each head with
  3-D positions whose frequency channels are interleaved T H W T H W ... (`mrope_section` channels
  each, the rest T; `Qwen3_5TextRotaryEmbedding.recomposition_frequencies`); the GDN layers take no
  positions. Text-only rows carry the same position in all three rows.

The tower, its hook and the interleaved mrope are `vision.VisionTower` (shared with Qwen3-VL): the
tower is replicated on every TP rank of the first pipeline stage.

Weights: transformers' conditional-generation state dict: `model.visual.*` as they are (megatron
names `vision.*`), the text model under `model.language_model.*` (qwen3_5_weights: GDN, gated q_proj,
fused experts), `lm_head.weight`. These are the checkpoints' names, which vLLM's
Qwen3_5(Moe)ForConditionalGeneration `load_weights` maps with its own `hf_to_vllm_mapper`.
Multi-token-prediction layers (`mtp.*`) are not built, as in transformers.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges.base import hf_field
from verl_lite.engine.megatron.bridges.qwen3_5 import Qwen3_5Bridge, Qwen3_5MoeBridge
from verl_lite.engine.megatron.bridges.qwen3_text import rope_parameters
from verl_lite.engine.megatron.bridges.vision import VisionTower

# transformers' Qwen3_5TextRotaryEmbedding takes these sections when the config gives none
MROPE_SECTION = [11, 11, 10]


class _Qwen3_5Vision(VisionTower):
    """The vision half of the Qwen3.5 conditional-generation bridges (mixed in before the text bridge)."""

    family = "Qwen3.5"
    hf_prefix = "model.language_model."  # the text model in the conditional-generation state dict

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        super().check_supported(hf_config)  # type: ignore[misc]  # the text model (Qwen3_5Bridge)
        problems = []
        model_type = str(hf_field(hf_config, "model_type", ""))
        if model_type not in cls.vl_model_types:  # type: ignore[attr-defined]
            problems.append(f"model_type={model_type!r} (expected {' or '.join(cls.vl_model_types)})")  # type: ignore[attr-defined]
        if hf_field(hf_config, "vision_config", None) is None:
            problems.append("no vision_config")
        if hf_field(hf_config, "image_token_id", None) is None:
            problems.append("no image_token_id")
        rope = rope_parameters(cls.text_config(hf_config))  # type: ignore[attr-defined]
        section = rope.get("mrope_section", MROPE_SECTION)
        if not isinstance(section, (list, tuple)) or len(section) != 3:
            problems.append(f"mrope_section={section!r} (three sections expected: T, H, W)")
        if problems:
            raise UnsupportedModelError(
                f"model_type {model_type!r} with {'; '.join(problems)} is not covered by verl_lite's {cls.__name__} "
                f"(it maps Qwen3.5's conditional-generation model: its vision tower, image placeholders, 3-D "
                f"interleaved rotary positions)")

    def mrope_section(self) -> List[int]:
        rope = rope_parameters(self.text)  # type: ignore[attr-defined]
        return [int(s) for s in rope.get("mrope_section", MROPE_SECTION)]

    def rope_theta(self) -> float:
        return float(self.gpt_model_kwargs()["rotary_base"])  # type: ignore[attr-defined]

    def rotary_dim(self, head_dim: int) -> int:
        """The rotated channels of a head: transformers' int(head_dim * partial_rotary_factor)."""
        return int(head_dim * float(self.gpt_model_kwargs()["rotary_percent"]))  # type: ignore[attr-defined]

    def _layout_fields(self) -> Dict[str, Any]:
        fields = super()._layout_fields()  # type: ignore[misc]
        # transformers ties the LM head to the top-level config's tie_word_embeddings
        fields["tie_word_embeddings"] = bool(hf_field(self.hf_config, "tie_word_embeddings", False))  # type: ignore[attr-defined]
        return fields


class Qwen3_5VLBridge(_Qwen3_5Vision, Qwen3_5Bridge):
    """`Qwen3_5ForConditionalGeneration`: Qwen3.5's vision tower + the dense Qwen3.5 text model."""

    vl_model_types: Tuple[str, ...] = ("qwen3_5",)
    vision_class = "transformers.models.qwen3_5.modeling_qwen3_5:Qwen3_5VisionModel"
    hf_class = "transformers:Qwen3_5ForConditionalGeneration"


class Qwen3_5MoeVLBridge(_Qwen3_5Vision, Qwen3_5MoeBridge):
    """`Qwen3_5MoeForConditionalGeneration`: Qwen3.5's vision tower + the Qwen3.5 MoE text model."""

    vl_model_types = ("qwen3_5_moe",)
    vision_class = "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe:Qwen3_5MoeVisionModel"
    hf_class = "transformers:Qwen3_5MoeForConditionalGeneration"


__all__ = ["Qwen3_5MoeVLBridge", "Qwen3_5VLBridge"]
