"""Qwen3.5 bridges: HF `Qwen3_5ForCausalLM` (model_type qwen3_5_text) and `Qwen3_5MoeForCausalLM`
(qwen3_5_moe_text) on megatron-core 0.16's GPT model. The conditional-generation checkpoints
(`Qwen3_5ForConditionalGeneration` / `Qwen3_5MoeForConditionalGeneration`: this text model with
Qwen3.5's vision tower) are qwen3_5_vl.py's bridges, built on these. Multi-token-prediction layers
(`mtp_num_hidden_layers`, `mtp.*` weights) are not built, as in transformers.

The model (semantics read from transformers' qwen3_5 / qwen3_5_moe modeling):
- hybrid layers from the HF config's `layer_types` ("linear_attention" / "full_attention"; older
  configs give `full_attention_interval`): Gated DeltaNet layers (megatron's GatedDeltaNet via
  `verl_lite.engine.megatron.gdn.GatedDeltaLayer`, or MindSpeed's own GatedDeltaNet where the npu
  run's Ascend stack swaps it in: `gdn.gdn_layer_class`) and gated full attention (megatron's
  `attention_output_gate`: q_proj yields a query and a sigmoid output gate per head) with q/k
  RMSNorm and RoPE on the first `partial_rotary_factor` of the head dim (`rotary_percent`);
- RMSNorm everywhere is (1 + w) (`layernorm_zero_centered_gamma`); the GDN output norm is the
  plain w form (transformers' Qwen3_5RMSNormGated), so every norm weight maps as it is;
- dense SwiGLU MLP, or MoE on every layer: softmax top-k router (megatron's top-k-then-softmax is
  transformers' softmax, top-k, renormalise), routed experts, a shared expert and its sigmoid gate.
  Router settings come from the HF config (num_experts, num_experts_per_tok, router_aux_loss_coef
  when output_router_logits) and can be changed with override_transformer_config (moe_*).

The block spec is assembled here from megatron's local (torch) modules on every device: megatron's
own Qwen3.5-style block spec needs Transformer Engine.

The weight names and their TP / EP split: `qwen3_5_weights.Qwen3_5Weights`."""

from __future__ import annotations

import copy
import logging
from typing import Any, Dict, List, Optional, Tuple

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron import gdn as megatron_gdn
from verl_lite.engine.megatron import norm as megatron_norm
from verl_lite.engine.megatron.bridges.base import (ModelShard, ModelBridge, check_divides_tp,
                                                    gpt_config_kwargs, hf_field)
from verl_lite.engine.megatron.bridges.qwen3_5_weights import Qwen3_5Weights
from verl_lite.engine.megatron.bridges.qwen3_text import (Qwen3TextMLP, required_int, rope_parameters, text_problems,
                                                          use_torch_router_gemm)

logger = logging.getLogger(__name__)


class Qwen3_5Bridge(Qwen3TextMLP, Qwen3_5Weights, ModelBridge):
    """Qwen3.5 dense (`Qwen3_5ForCausalLM`, model_type qwen3_5_text)."""

    model_types: Tuple[str, ...] = ("qwen3_5_text",)
    moe = False
    hf_prefix = "model."  # the text model's weights in transformers' CausalLM state dict

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)
        self.text = self.text_config(hf_config)
        mtp = int(hf_field(self.text, "mtp_num_hidden_layers", 0) or 0)
        if mtp:
            logger.info("%s: the %d multi-token-prediction layer(s) (mtp.* weights) are not built, as transformers' "
                        "Qwen3.5 CausalLM does not build them; RL trains the next-token model", type(self).__name__, mtp)

    @staticmethod
    def text_config(hf_config: Any) -> Any:
        return hf_field(hf_config, "text_config", None) or hf_config

    # -- what is covered ---------------------------------------------------------------------

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        text = cls.text_config(hf_config)
        model_type = str(hf_field(text, "model_type", ""))
        problems = []
        if model_type not in cls.model_types:
            problems.append(f"model_type={model_type!r} (expected {' or '.join(cls.model_types)})")
        problems += text_problems(text)
        try:
            kinds = cls.layer_kinds(text)
        except UnsupportedModelError as e:
            problems.append(str(e))
            kinds = []
        if kinds and "linear_attention" not in kinds:
            problems.append("no linear_attention layer")
        if problems:
            raise UnsupportedModelError(
                f"model_type {model_type!r} with {'; '.join(problems)} is not covered by verl_lite's {cls.__name__} "
                f"(it maps Qwen3.5 {'MoE' if cls.moe else 'dense'}: GDN + gated attention, default RoPE, SiLU)"
            )

    @staticmethod
    def layer_kinds(text: Any) -> List[str]:
        """"linear_attention" / "full_attention" per layer, from `layer_types` or, in older configs,
        `full_attention_interval` (every N-th layer is full attention)."""
        n = int(hf_field(text, "num_hidden_layers"))
        kinds = hf_field(text, "layer_types", None)
        if kinds:
            kinds = [str(k) for k in kinds]
            bad = sorted({k for k in kinds if k not in ("linear_attention", "full_attention")})
            if len(kinds) != n or bad:
                raise UnsupportedModelError(
                    f"layer_types must list num_hidden_layers={n} entries of linear_attention/full_attention, "
                    f"got {len(kinds)} entries{f' with {bad}' if bad else ''}")
            return kinds
        interval = hf_field(text, "full_attention_interval", None)
        if interval:
            return ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(n)]
        raise UnsupportedModelError("the config has neither layer_types nor full_attention_interval")

    # -- the megatron model --------------------------------------------------------------------

    def _int(self, name: str, default: Any = None) -> int:
        return required_int(hf_field(self.text, name, default), name, "the HF config")

    def transformer_config_kwargs(self) -> Dict[str, Any]:
        kinds = self.layer_kinds(self.text)
        kwargs = gpt_config_kwargs(self.text, self._ffn_hidden_size())
        kwargs.update(
            layernorm_zero_centered_gamma=True,
            attention_output_gate=True,
            experimental_attention_variant="gated_delta_net",
            linear_attention_freq=[1 if k == "linear_attention" else 0 for k in kinds],
            linear_conv_kernel_dim=self._int("linear_conv_kernel_dim"),
            linear_key_head_dim=self._int("linear_key_head_dim"),
            linear_value_head_dim=self._int("linear_value_head_dim"),
            linear_num_key_heads=self._int("linear_num_key_heads"),
            linear_num_value_heads=self._int("linear_num_value_heads"),
        )
        kwargs.update(self._moe_kwargs())
        return kwargs

    def _mlp_spec(self, local_spec: Any) -> Any:
        return local_spec.submodules.mlp

    def model_spec(self, config: Any, vp_stage: Optional[int] = None) -> Any:
        """The block spec of this rank's layers (hybrid GDN / gated attention, per PP stage)."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.ssm.gated_delta_net import GatedDeltaNetSubmodules
        from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
        from megatron.core.transformer.spec_utils import ModuleSpec
        from megatron.core.transformer.transformer_block import (
            TransformerBlockSubmodules,
            get_num_layers_to_build,
        )
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

        megatron_gdn.check_megatron_version()
        local = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, moe_grouped_gemm=False,
                                         qk_layernorm=True, normalization="RMSNorm")
        norm = megatron_gdn.RMSNorm
        attention = copy.deepcopy(local)
        attention.submodules.input_layernorm = norm
        attention.submodules.pre_mlp_layernorm = norm
        # q/k norms act per head after the gather: not sequence-parallel (megatron_norm)
        attention.submodules.self_attention.submodules.q_layernorm = megatron_norm.HeadRMSNorm
        attention.submodules.self_attention.submodules.k_layernorm = megatron_norm.HeadRMSNorm
        attention.submodules.mlp = self._mlp_spec(local)
        gdn = copy.deepcopy(attention)
        gdn.submodules.self_attention = ModuleSpec(
            module=megatron_gdn.gdn_layer_class(config),
            submodules=GatedDeltaNetSubmodules(
                in_proj=ColumnParallelLinear, out_norm=megatron_gdn.GatedOutputRMSNorm, out_proj=RowParallelLinear),
        )
        kinds = self.layer_kinds(self.text)
        offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
        count = get_num_layers_to_build(config, vp_stage=vp_stage)
        specs = [gdn if kinds[i] == "linear_attention" else attention for i in range(offset, offset + count)]
        return TransformerBlockSubmodules(layer_specs=specs, layer_norm=norm)

    def gpt_model_kwargs(self) -> Dict[str, Any]:
        rope = rope_parameters(self.text)
        theta = rope.get("rope_theta", hf_field(self.text, "rope_theta", 10000.0))
        return dict(
            max_sequence_length=self._int("max_position_embeddings", 4096),
            position_embedding_type="rope",
            rotary_base=float(theta or 10000.0),
            rotary_percent=float(rope.get("partial_rotary_factor", hf_field(self.text, "partial_rotary_factor", 1.0))),
        )

    def layout(self, tp_size: int, tp_rank: int) -> ModelShard:
        base = ModelShard.from_hf(self._layout_fields(), tp_size, tp_rank)
        for what in ("linear_num_key_heads", "linear_num_value_heads"):
            check_divides_tp(what, self._int(what), tp_size)
        return base

    def _layout_fields(self) -> Dict[str, Any]:
        text = self.text
        fields = {k: hf_field(text, k) for k in (
            "num_attention_heads", "hidden_size", "num_key_value_heads", "head_dim", "vocab_size",
            "tie_word_embeddings")}
        fields["intermediate_size"] = self._ffn_hidden_size()
        return fields


class Qwen3_5MoeBridge(Qwen3_5Bridge):
    """Qwen3.5 MoE (`Qwen3_5MoeForCausalLM`, model_type qwen3_5_moe_text): MoE on every layer."""

    model_types = ("qwen3_5_moe_text",)
    moe = True
    shared_expert = True

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        super().check_supported(hf_config)
        text = cls.text_config(hf_config)
        missing = [k for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                               "shared_expert_intermediate_size") if not hf_field(text, k, None)]
        if missing:
            raise UnsupportedModelError(f"Qwen3.5 MoE config lacks {', '.join(missing)}")

    def _mlp_spec(self, local_spec: Any) -> Any:
        use_torch_router_gemm()
        return local_spec.submodules.mlp  # MoELayer with SequentialMLP experts and the shared expert
