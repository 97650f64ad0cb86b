"""HF <-> Megatron weights for the Qwen3 dense family (built-in mapping, no bridge).

mbridge and Megatron-Bridge do not install next to megatron-core 0.16 on Python 3.11 / CPU, so
the Megatron engines carry this mapping. It covers what a Qwen3 dense checkpoint holds (GQA with
per-head q/k RMSNorm, SwiGLU MLP, RMSNorm, RoPE, optionally tied embeddings) and the value head
of a token-classification critic (`score.weight`, `score.bias`). Qwen3.5 (Gated DeltaNet) and
MoE checkpoints are refused with a message: megatron-core's GDN layer needs the Triton `fla`
kernels and this mapping has no GDN or expert entries.

Everything works on one tensor-parallel shard at a time, so the conversion never depends on the
TP size: a Megatron shard becomes HF-named shards that the caller concatenates along `tp_dim`
(export), and full HF tensors are cut into this rank's shard (load). Names follow megatron's
local layer spec; the Transformer Engine spec's fused layer-norm names map too.

Layouts (per TP rank, hd = head dim, G = query groups on this rank, n = heads per group):
  linear_qkv.weight  [G * (n + 2) * hd, H]: per group n query heads, then its key and value head
  linear_fc1.weight  [2 * I / tp, H]:        gate rows then up rows
  linear_proj / linear_fc2 are row-parallel (split along dim 1); embeddings and the LM head are
  split along the (padded) vocabulary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

SUPPORTED_MODEL_TYPES = ("qwen3",)


class UnsupportedModelError(ValueError):
    """An HF config the built-in Megatron mapping cannot build."""


def _field(hf_config: Any, name: str, default: Any = None) -> Any:
    if isinstance(hf_config, dict):
        return hf_config.get(name, default)
    return getattr(hf_config, name, default)


def check_supported(hf_config: Any) -> None:
    """Raise UnsupportedModelError naming the model type, what is supported and what to use instead."""
    model_type = str(_field(hf_config, "model_type", ""))
    if model_type in SUPPORTED_MODEL_TYPES:
        extras = [k for k in ("attention_bias", "num_experts") if _field(hf_config, k)]
        if str(_field(hf_config, "hidden_act", "silu")) != "silu":
            extras.append("hidden_act")
        if not extras:
            return
        raise UnsupportedModelError(
            f"model_type {model_type!r} with {', '.join(extras)} set is not covered by verl_lite's "
            f"HF<->Megatron mapping (it maps dense Qwen3: no attention bias, no experts, SiLU)"
        )
    if "qwen3_5" in model_type or "qwen3_next" in model_type:
        why = (
            "its Gated DeltaNet layers need megatron-core's GatedDeltaNet, which requires the Triton "
            "'fla' kernels (flash-linear-attention), and a GDN weight mapping verl_lite does not ship"
        )
    else:
        why = "the built-in HF<->Megatron mapping covers the Qwen3 dense family only"
    raise UnsupportedModelError(
        f"model_type {model_type!r} cannot be built by verl_lite's Megatron engines: {why}. "
        f"Supported: {', '.join(SUPPORTED_MODEL_TYPES)} (dense). For a CPU run use "
        f"actor_rollout_ref.model.path=tiny-qwen3, or strategy=fsdp for Qwen3.5."
    )


def rope_theta(hf_config: Any) -> float:
    params = _field(hf_config, "rope_parameters") or {}
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or _field(hf_config, "rope_theta", 10000.0) or 10000.0)


def padded_vocab_size(vocab_size: int, tp_size: int) -> int:
    """The vocabulary rounded up to a multiple of the TP size (megatron splits it evenly)."""
    return -(-vocab_size // tp_size) * tp_size


@dataclass(frozen=True)
class Layout:
    """Model sizes and this rank's tensor-parallel position."""

    hidden: int
    ffn: int
    heads: int
    groups: int
    head_dim: int
    vocab: int
    tp_size: int = 1
    tp_rank: int = 0
    tied: bool = False

    @classmethod
    def from_hf(cls, hf_config: Any, tp_size: int = 1, tp_rank: int = 0) -> "Layout":
        heads = int(_field(hf_config, "num_attention_heads"))
        hidden = int(_field(hf_config, "hidden_size"))
        layout = cls(
            hidden=hidden,
            ffn=int(_field(hf_config, "intermediate_size")),
            heads=heads,
            groups=int(_field(hf_config, "num_key_value_heads", heads) or heads),
            head_dim=int(_field(hf_config, "head_dim", None) or hidden // heads),
            vocab=int(_field(hf_config, "vocab_size")),
            tp_size=tp_size,
            tp_rank=tp_rank,
            tied=bool(_field(hf_config, "tie_word_embeddings", False)),
        )
        for what, n in (("num_key_value_heads", layout.groups), ("intermediate_size", layout.ffn)):
            if n % tp_size:
                raise UnsupportedModelError(
                    f"{what}={n} is not divisible by tensor_model_parallel_size={tp_size} "
                    f"(choose a TP size that divides it)"
                )
        return layout

    @property
    def padded_vocab(self) -> int:
        return padded_vocab_size(self.vocab, self.tp_size)


# megatron local name pattern -> kind. Layer names carry the layer index.
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
_TOP_PARAMS = {
    "embedding.word_embeddings.weight": ("vocab", "model.embed_tokens.weight"),
    "decoder.final_layernorm.weight": ("norm", "model.norm.weight"),
    "output_layer.weight": ("vocab", "lm_head.weight"),
    "value_head.weight": ("norm", "score.weight"),
    "value_head.bias": ("norm", "score.bias"),
}


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


# One HF tensor shard: (HF name, local shard, dim along which TP shards concatenate or None).
HFShard = Tuple[str, torch.Tensor, Optional[int]]


def megatron_to_hf(name: str, shard: torch.Tensor, layout: Layout, layer_offset: int = 0) -> List[HFShard]:
    """Split one local megatron parameter into HF-named local shards."""
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


def _cut(full: torch.Tensor, dim: int, layout: Layout) -> torch.Tensor:
    return full.chunk(layout.tp_size, dim=dim)[layout.tp_rank]


def hf_to_megatron(
    name: str, layout: Layout, get_hf: Callable[[str], torch.Tensor], layer_offset: int = 0
) -> torch.Tensor:
    """This rank's shard of megatron parameter `name`, from full HF tensors given by `get_hf`.

    With tied embeddings the LM head is read from `model.embed_tokens.weight`.
    """
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


def finish_hf_tensor(hf_name: str, full: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Drop the vocabulary padding megatron added (embeddings, LM head)."""
    if hf_name in ("model.embed_tokens.weight", "lm_head.weight") and full.shape[0] != layout.vocab:
        return full[: layout.vocab]
    return full


def transformer_config_kwargs(hf_config: Any) -> Dict[str, Any]:
    """TransformerConfig fields that describe the HF architecture (Qwen3 dense)."""
    heads = int(_field(hf_config, "num_attention_heads"))
    hidden = int(_field(hf_config, "hidden_size"))
    return dict(
        num_layers=int(_field(hf_config, "num_hidden_layers")),
        hidden_size=hidden,
        ffn_hidden_size=int(_field(hf_config, "intermediate_size")),
        num_attention_heads=heads,
        num_query_groups=int(_field(hf_config, "num_key_value_heads", heads) or heads),
        kv_channels=int(_field(hf_config, "head_dim", None) or hidden // heads),
        layernorm_epsilon=float(_field(hf_config, "rms_norm_eps", 1e-6)),
        normalization="RMSNorm",
        gated_linear_unit=True,
        add_bias_linear=False,
        qk_layernorm=True,
        init_method_std=float(_field(hf_config, "initializer_range", 0.02)),
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
