"""The text model the Qwen3.5 and Qwen3-VL bridges share, besides its weights (qwen3_5_weights.py): what of
the HF text config they cover (no attention bias, SiLU, default RoPE), its rope parameters, and its MLP as
megatron builds it: dense SwiGLU of `intermediate_size`, or MoE on every layer (routed experts of
`moe_intermediate_size`, with `base.moe_config_kwargs`'s routing, and Qwen3.5 MoE's gated shared expert)
on megatron's local (torch) MoE layer."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges.base import hf_field, moe_config_kwargs


def required_int(value: Any, name: str, where: str) -> int:
    """The config field `name` (its `value`, None when absent) as an int; refused naming `where` it was looked
    for (the HF config, or its text_config)."""
    if value is None:
        raise UnsupportedModelError(f"{where} has no {name!r}")
    return int(value)


def rope_parameters(text: Any) -> Dict[str, Any]:
    """The text config's rope parameters (`rope_parameters`, older configs' `rope_scaling`); {} when none."""
    params = hf_field(text, "rope_parameters", None) or hf_field(text, "rope_scaling", None) or {}
    return dict(params) if isinstance(params, dict) else {}


def text_problems(text: Any) -> List[str]:
    """What of the HF text config the bridges do not cover, one entry each: an attention bias, an
    activation other than SiLU, a RoPE other than the default."""
    problems = []
    if hf_field(text, "attention_bias", False):
        problems.append("attention_bias=True")
    if str(hf_field(text, "hidden_act", "silu")) != "silu":
        problems.append(f"hidden_act={hf_field(text, 'hidden_act')!r}")
    rope = rope_parameters(text)
    if str(rope.get("rope_type", "default")) != "default":
        problems.append(f"rope_type={rope.get('rope_type')!r}")
    return problems


class Qwen3TextMLP:
    """The MLP half of a Qwen3.5 / Qwen3-VL bridge's TransformerConfig. The bridge provides `text` (the
    HF text config), `moe` and `_int(name)` (a required integer field of the text config); `shared_expert`
    adds Qwen3.5 MoE's gated shared expert."""

    text: Any
    moe: bool
    shared_expert = False
    _int: Callable[..., int]

    def _ffn_hidden_size(self) -> int:
        """The FFN width: the dense MLP's, or one routed expert's."""
        return self._int("moe_intermediate_size" if self.moe else "intermediate_size")

    def _moe_kwargs(self) -> Dict[str, Any]:
        """megatron's MoE TransformerConfig fields; none for a dense model."""
        return moe_config_kwargs(self.text, self._int, shared_expert=self.shared_expert) if self.moe else {}


def use_torch_router_gemm() -> None:
    """Let megatron-core 0.16's MoE router run without Transformer Engine: its router GEMM reads
    `moe_utils.te_general_gemm` unguarded, a name only bound when Transformer Engine imports; None
    selects its torch.mm path."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
