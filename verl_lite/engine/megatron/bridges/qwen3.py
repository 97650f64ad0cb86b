"""The Qwen3 dense bridge: HF `Qwen3ForCausalLM` (and a `Qwen3ForTokenClassification` critic) on
megatron-core's GPT model with the local layer spec.

mbridge and Megatron-Bridge do not install next to megatron-core 0.16 on Python 3.11 / CPU, so the
Megatron engines carry this mapping. It covers what a Qwen3 dense checkpoint holds (GQA with
per-head q/k RMSNorm, SwiGLU MLP, RMSNorm, RoPE, optionally tied embeddings) and the value head of
a token-classification critic (`score.weight`, `score.bias`). Names follow megatron's local layer
spec; the Transformer Engine spec's fused layer-norm names map too.

Layouts (per TP rank, hd = head dim, G = query groups on this rank, n = heads per group):
  linear_qkv.weight  [G * (n + 2) * hd, H]: per group n query heads, then its key and value head
  linear_fc1.weight  [2 * I / tp, H]:        gate rows then up rows
  linear_proj / linear_fc2 are row-parallel (split along dim 1); embeddings and the LM head are
  split along the (padded) vocabulary.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron import norm as megatron_norm
from verl_lite.engine.megatron.bridges.base import (HFShard, ModelShard, ModelBridge, gpt_config_kwargs, hf_field,
                                                    top_params)

# megatron local name pattern -> (kind, HF name or suffix). Layer names carry the layer index.
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_LAYER_PARAMS = {
    "input_layernorm.weight": ("norm", "input_layernorm.weight"),
    "self_attention.linear_qkv.layer_norm_weight": ("norm", "input_layernorm.weight"),
    "self_attention.q_layernorm.weight": ("norm", "self_attn.q_norm.weight"),
    "self_attention.k_layernorm.weight": ("norm", "self_attn.k_norm.weight"),
    "pre_mlp_layernorm.weight": ("norm", "post_attention_layernorm.weight"),
    "mlp.linear_fc1.layer_norm_weight": ("norm", "post_attention_layernorm.weight"),
    "self_attention.linear_qkv.weight": ("qkv", None),
    "self_attention.linear_proj.weight": ("row", "self_attn.o_proj.weight"),
    "mlp.linear_fc1.weight": ("fc1", None),
    "mlp.linear_fc2.weight": ("row", "mlp.down_proj.weight"),
}
_TOP_PARAMS = top_params("model.")


def _kind(name: str, layer_offset: int) -> Tuple[str, Optional[str]]:
    match = _LAYER.match(name)
    if match:
        entry = _LAYER_PARAMS.get(match.group(2))
        if entry is None:
            raise UnsupportedModelError(f"no HF name for megatron parameter {name!r}")
        kind, suffix = entry
        prefix = f"model.layers.{int(match.group(1)) + layer_offset}."
        return kind, (prefix + suffix if suffix else prefix)
    entry = _TOP_PARAMS.get(name)
    if entry is None:
        raise UnsupportedModelError(f"no HF name for megatron parameter {name!r}")
    return entry


def local_block_spec(spec: Any, config: Any, vp_stage: Optional[int]) -> Any:
    """The block spec of this chunk's layers, each megatron's local layer spec `spec` (a Qwen3 text layer,
    dense or MoE; changed in place) with verl_lite's RMSNorm (norm.py: it takes sequence parallelism,
    which megatron's torch norm refuses) and per-head q/k RMSNorm."""
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    spec.submodules.input_layernorm = megatron_norm.RMSNorm
    spec.submodules.pre_mlp_layernorm = megatron_norm.RMSNorm
    spec.submodules.self_attention.submodules.q_layernorm = megatron_norm.HeadRMSNorm
    spec.submodules.self_attention.submodules.k_layernorm = megatron_norm.HeadRMSNorm
    count = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[spec] * count, layer_norm=megatron_norm.RMSNorm)


def _cut(full: torch.Tensor, dim: int, layout: ModelShard) -> torch.Tensor:
    return full.chunk(layout.tp_size, dim=dim)[layout.tp_rank]


class Qwen3Bridge(ModelBridge):
    """Qwen3 dense: no attention bias, no experts, SiLU."""

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        model_type = str(hf_field(hf_config, "model_type", ""))
        extras = [k for k in ("attention_bias", "num_experts") if hf_field(hf_config, k)]
        if str(hf_field(hf_config, "hidden_act", "silu")) != "silu":
            extras.append("hidden_act")
        if model_type != "qwen3":
            extras.insert(0, f"model_type={model_type!r}")
        if extras:
            raise UnsupportedModelError(
                f"model_type {model_type!r} with {', '.join(extras)} set is not covered by verl_lite's "
                f"Qwen3 bridge (it maps dense Qwen3: model_type qwen3, no attention bias, no experts, SiLU)"
            )

    # -- the megatron model --------------------------------------------------------------------

    def transformer_config_kwargs(self) -> Dict[str, Any]:
        return gpt_config_kwargs(self.hf_config, int(hf_field(self.hf_config, "intermediate_size")))

    def layer_spec(self) -> Any:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        return get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")

    def model_spec(self, config: Any, vp_stage: Optional[int] = None) -> Any:
        """The local layer spec with verl_lite's RMSNorm, one spec per layer of this chunk."""
        return local_block_spec(self.layer_spec(), config, vp_stage)

    def rope_theta(self) -> float:
        params = hf_field(self.hf_config, "rope_parameters") or {}
        theta = params.get("rope_theta") if isinstance(params, dict) else None
        return float(theta or hf_field(self.hf_config, "rope_theta", 10000.0) or 10000.0)

    def gpt_model_kwargs(self) -> Dict[str, Any]:
        return dict(
            max_sequence_length=int(hf_field(self.hf_config, "max_position_embeddings", 4096)),
            position_embedding_type="rope",
            rotary_base=self.rope_theta(),
        )

    # -- weights -------------------------------------------------------------------------------

    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: ModelShard, layer_offset: int = 0) -> List[HFShard]:
        kind, hf = _kind(name, layer_offset)
        if kind == "norm":
            return [(hf, shard, None)]
        if kind == "row":
            return [(hf, shard, 1)]
        if kind == "vocab":
            return [(hf, shard, 0)]
        if kind == "fc1":
            gate, up = shard.chunk(2, dim=0)
            return [(hf + "mlp.gate_proj.weight", gate, 0), (hf + "mlp.up_proj.weight", up, 0)]
        # qkv
        per_group = layout.heads // layout.groups
        grouped = shard.reshape(-1, per_group + 2, layout.head_dim, shard.shape[-1])
        q = grouped[:, :per_group].reshape(-1, shard.shape[-1])
        k = grouped[:, per_group].reshape(-1, shard.shape[-1])
        v = grouped[:, per_group + 1].reshape(-1, shard.shape[-1])
        return [
            (hf + "self_attn.q_proj.weight", q, 0),
            (hf + "self_attn.k_proj.weight", k, 0),
            (hf + "self_attn.v_proj.weight", v, 0),
        ]

    def hf_to_megatron(self, name: str, layout: ModelShard, get_hf: Callable[[str], torch.Tensor],
                       layer_offset: int = 0) -> torch.Tensor:
        """With tied embeddings the LM head is read from `model.embed_tokens.weight`."""
        kind, hf = _kind(name, layer_offset)
        if kind == "norm":
            return get_hf(hf)
        if kind == "row":
            return _cut(get_hf(hf), 1, layout)
        if kind == "vocab":
            if hf == "lm_head.weight" and layout.tied:
                hf = "model.embed_tokens.weight"
            full = get_hf(hf)
            pad = layout.padded_vocab - full.shape[0]
            if pad:
                full = torch.cat([full, full.new_zeros(pad, full.shape[1])])
            return _cut(full, 0, layout)
        if kind == "fc1":
            gate = _cut(get_hf(hf + "mlp.gate_proj.weight"), 0, layout)
            up = _cut(get_hf(hf + "mlp.up_proj.weight"), 0, layout)
            return torch.cat([gate, up])
        per_group = layout.heads // layout.groups
        q = _cut(get_hf(hf + "self_attn.q_proj.weight"), 0, layout)
        k = _cut(get_hf(hf + "self_attn.k_proj.weight"), 0, layout)
        v = _cut(get_hf(hf + "self_attn.v_proj.weight"), 0, layout)
        cols = q.shape[-1]
        q = q.reshape(-1, per_group, layout.head_dim, cols)
        k = k.reshape(-1, 1, layout.head_dim, cols)
        v = v.reshape(-1, 1, layout.head_dim, cols)
        return torch.cat([q, k, v], dim=1).reshape(-1, cols)
