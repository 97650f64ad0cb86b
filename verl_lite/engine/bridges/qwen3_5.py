"""Qwen3.5 bridges: HF `Qwen3_5ForCausalLM` (model_type qwen3_5_text) and `Qwen3_5MoeForCausalLM`
(qwen3_5_moe_text) on megatron-core 0.16's GPT model, and the conditional-generation checkpoints
`Qwen3_5ForConditionalGeneration` / `Qwen3_5MoeForConditionalGeneration`, of which the text model
(`text_config`, weights under `model.language_model.`) is built and the vision tower is left out:
RL on text does not run it (a log line says so when such a bridge is made). Their export carries
the text model under transformers' CausalLM names, as AutoModelForCausalLM builds it from such a
config. Multi-token-prediction layers (`mtp_num_hidden_layers`, `mtp.*` weights) are not built,
as in transformers' CausalLM.

The model (semantics read from transformers' qwen3_5 / qwen3_5_moe modeling):
- hybrid layers from the HF config's `layer_types` ("linear_attention" / "full_attention"; older
  configs give `full_attention_interval`): Gated DeltaNet layers (megatron's GatedDeltaNet via
  `verl_lite.engine.megatron_gdn.GatedDeltaLayer`) and gated full attention (megatron's
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

Weights (per TP rank; E experts, EP ranks hold E/EP each, expert TP splits their FFN):
  GDN in_proj     [q | k | v | z | b | a] of this rank's heads  <- in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
  GDN conv1d      [q | k | v] channels of this rank              <- conv1d.weight
  A_log, dt_bias  this rank's value heads; out_norm replicated; out_proj row-parallel
  linear_qkv      per query group [n queries | n gates | k | v]  <- q_proj (per head [query | gate]), k_proj, v_proj
  experts         local_experts.i.linear_fc1 [gate | up], linear_fc2 <- experts.gate_up_proj[e], experts.down_proj[e]
                  (checkpoints with per-expert tensors, experts.{e}.gate_proj/up_proj/down_proj, load too)
Export gives transformers' state-dict names (fused experts), full tensors, gathered over TP, expert
TP and EP by `verl_lite.engine.megatron_hf.stage_hf_tensors`.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.bridges.base import ExpertPiece, HFShard, Layout, ModelBridge, UnsupportedModelError, hf_field

logger = logging.getLogger(__name__)

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^mlp\.experts\.local_experts\.(\d+)\.(linear_fc1|linear_fc2)\.weight$")
_NORMS = {
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "self_attention.out_norm.weight": "linear_attn.norm.weight",
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.shared_experts.gate_weight": "mlp.shared_expert_gate.weight",
}
_ROWS = {
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "self_attention.out_proj.weight": "linear_attn.out_proj.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
    "mlp.shared_experts.linear_fc2.weight": "mlp.shared_expert.down_proj.weight",
}
_COLS = {  # split along dim 0 by TP, one HF tensor each
    "self_attention.A_log": "linear_attn.A_log",
    "self_attention.dt_bias": "linear_attn.dt_bias",
}
_FC1 = {
    "mlp.linear_fc1.weight": "mlp.",
    "mlp.shared_experts.linear_fc1.weight": "mlp.shared_expert.",
}


def _cut(full: torch.Tensor, dim: int, size: int, rank: int) -> torch.Tensor:
    return full.chunk(size, dim=dim)[rank]


class Qwen3_5Bridge(ModelBridge):
    """Qwen3.5 dense (`Qwen3_5ForCausalLM`, model_type qwen3_5_text)."""

    model_types: Tuple[str, ...] = ("qwen3_5_text",)
    moe = False
    hf_prefix = "model."  # the text model's weights in transformers' CausalLM state dict

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)
        self.text = self.text_config(hf_config)
        self._expert_cache: Dict[str, Optional[torch.Tensor]] = {}
        mtp = int(hf_field(self.text, "mtp_num_hidden_layers", 0) or 0)
        if mtp:
            logger.info("%s: the %d multi-token-prediction layer(s) (mtp.* weights) are not built, as transformers' "
                        "Qwen3.5 CausalLM does not build them; RL trains the next-token model", type(self).__name__, mtp)

    def finish_load(self) -> None:
        self._expert_cache = {}

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
        if hf_field(text, "attention_bias", False):
            problems.append("attention_bias=True")
        if str(hf_field(text, "hidden_act", "silu")) != "silu":
            problems.append(f"hidden_act={hf_field(text, 'hidden_act')!r}")
        rope = cls._rope_parameters(text)
        if str(rope.get("rope_type", "default")) != "default":
            problems.append(f"rope_type={rope.get('rope_type')!r}")
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
    def _rope_parameters(text: Any) -> Dict[str, Any]:
        params = hf_field(text, "rope_parameters", None) or hf_field(text, "rope_scaling", None) or {}
        return dict(params) if isinstance(params, dict) else {}

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
        value = hf_field(self.text, name, default)
        if value is None:
            raise UnsupportedModelError(f"the HF config has no {name!r}")
        return int(value)

    def transformer_config_kwargs(self) -> Dict[str, Any]:
        heads = self._int("num_attention_heads")
        hidden = self._int("hidden_size")
        kinds = self.layer_kinds(self.text)
        kwargs = dict(
            num_layers=self._int("num_hidden_layers"),
            hidden_size=hidden,
            ffn_hidden_size=self._ffn_hidden_size(),
            num_attention_heads=heads,
            num_query_groups=self._int("num_key_value_heads", heads),
            kv_channels=self._int("head_dim", hidden // heads),
            layernorm_epsilon=float(hf_field(self.text, "rms_norm_eps", 1e-6)),
            normalization="RMSNorm",
            layernorm_zero_centered_gamma=True,
            gated_linear_unit=True,
            add_bias_linear=False,
            qk_layernorm=True,
            attention_output_gate=True,
            experimental_attention_variant="gated_delta_net",
            linear_attention_freq=[1 if k == "linear_attention" else 0 for k in kinds],
            linear_conv_kernel_dim=self._int("linear_conv_kernel_dim"),
            linear_key_head_dim=self._int("linear_key_head_dim"),
            linear_value_head_dim=self._int("linear_value_head_dim"),
            linear_num_key_heads=self._int("linear_num_key_heads"),
            linear_num_value_heads=self._int("linear_num_value_heads"),
            init_method_std=float(hf_field(self.text, "initializer_range", 0.02)),
            hidden_dropout=0.0,
            attention_dropout=0.0,
        )
        kwargs.update(self._moe_kwargs())
        return kwargs

    def _ffn_hidden_size(self) -> int:
        return self._int("intermediate_size")

    def _moe_kwargs(self) -> Dict[str, Any]:
        return {}

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

        from verl_lite.engine import megatron_gdn, megatron_norm

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
            module=megatron_gdn.gated_delta_layer_class(),
            submodules=GatedDeltaNetSubmodules(
                in_proj=ColumnParallelLinear, out_norm=megatron_gdn.GatedOutputRMSNorm, out_proj=RowParallelLinear),
        )
        kinds = self.layer_kinds(self.text)
        offset = get_transformer_layer_offset(config, vp_stage=vp_stage)
        count = get_num_layers_to_build(config, vp_stage=vp_stage)
        specs = [gdn if kinds[i] == "linear_attention" else attention for i in range(offset, offset + count)]
        return TransformerBlockSubmodules(layer_specs=specs, layer_norm=norm)

    def gpt_model_kwargs(self) -> Dict[str, Any]:
        rope = self._rope_parameters(self.text)
        theta = rope.get("rope_theta", hf_field(self.text, "rope_theta", 10000.0))
        return dict(
            max_sequence_length=self._int("max_position_embeddings", 4096),
            position_embedding_type="rope",
            rotary_base=float(theta or 10000.0),
            rotary_percent=float(rope.get("partial_rotary_factor", hf_field(self.text, "partial_rotary_factor", 1.0))),
        )

    def layout(self, tp_size: int, tp_rank: int) -> Layout:
        base = Layout.from_hf(self._layout_fields(), tp_size, tp_rank)
        for what in ("linear_num_key_heads", "linear_num_value_heads"):
            n = self._int(what)
            if n % tp_size:
                raise UnsupportedModelError(
                    f"{what}={n} is not divisible by tensor_model_parallel_size={tp_size} "
                    f"(choose a TP size that divides it)")
        return base

    def _layout_fields(self) -> Dict[str, Any]:
        text = self.text
        fields = {k: hf_field(text, k) for k in (
            "num_attention_heads", "hidden_size", "num_key_value_heads", "head_dim", "vocab_size",
            "tie_word_embeddings")}
        fields["intermediate_size"] = self._ffn_hidden_size()
        return fields

    # -- weight names ----------------------------------------------------------------------------

    def _hf_layer(self, index: int) -> str:
        return f"{self.hf_prefix}layers.{index}."

    def _top(self, name: str) -> Optional[Tuple[str, str]]:
        return {
            "embedding.word_embeddings.weight": ("vocab", f"{self.hf_prefix}embed_tokens.weight"),
            "decoder.final_layernorm.weight": ("norm", f"{self.hf_prefix}norm.weight"),
            "output_layer.weight": ("vocab", "lm_head.weight"),
            "value_head.weight": ("norm", "score.weight"),
            "value_head.bias": ("norm", "score.bias"),
        }.get(name)

    def _split(self, name: str, layer_offset: int) -> Tuple[str, str, int]:
        """(kind, HF name or layer prefix, layer index) of a megatron parameter."""
        top = self._top(name)
        if top is not None:
            return top[0], top[1], -1
        match = _LAYER.match(name)
        if not match:
            raise UnsupportedModelError(f"no HF name for megatron parameter {name!r}")
        index = int(match.group(1)) + layer_offset
        prefix, rest = self._hf_layer(index), match.group(2)
        for table, kind in ((_NORMS, "norm"), (_ROWS, "row"), (_COLS, "col")):
            if rest in table:
                return kind, prefix + table[rest], index
        if rest in _FC1:
            return "fc1", prefix + _FC1[rest], index
        if rest == "self_attention.linear_qkv.weight":
            return "qkv", prefix + "self_attn.", index
        if rest == "self_attention.in_proj.weight":
            return "in_proj", prefix + "linear_attn.", index
        if rest == "self_attention.conv1d.weight":
            return "conv", prefix + "linear_attn.conv1d.weight", index
        expert = _EXPERT.match(rest)
        if expert and self.moe:
            return f"expert_{expert.group(2)}:{expert.group(1)}", prefix + "mlp.experts.", index
        raise UnsupportedModelError(f"no HF name for megatron parameter {name!r}")

    # GDN sizes on this rank
    def _gdn_sizes(self, tp: int) -> Dict[str, int]:
        kd, vd = self._int("linear_key_head_dim"), self._int("linear_value_head_dim")
        nk, nv = self._int("linear_num_key_heads"), self._int("linear_num_value_heads")
        return dict(qk=kd * nk // tp, v=vd * nv // tp, heads=nv // tp)

    def _expert_layout(self) -> Tuple[int, int, int, int]:
        """(EP size, EP rank, expert-TP size, expert-TP rank) of this process (1, 0, 1, 0 without groups)."""
        import sys

        mpu = sys.modules.get("megatron.core.parallel_state")  # not imported: no groups, no megatron import
        if mpu is None or not mpu.model_parallel_is_initialized():
            return 1, 0, 1, 0
        return (mpu.get_expert_model_parallel_world_size(), mpu.get_expert_model_parallel_rank(),
                mpu.get_expert_tensor_parallel_world_size(), mpu.get_expert_tensor_parallel_rank())

    # -- export --------------------------------------------------------------------------------

    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: Layout, layer_offset: int = 0) -> List[HFShard]:
        kind, hf, _ = self._split(name, layer_offset)
        if kind == "norm":
            return [(hf, shard, None)]
        if kind == "row":
            return [(hf, shard, 1)]
        if kind in ("vocab", "col", "conv"):
            return [(hf, shard, 0)]
        if kind == "fc1":
            gate, up = shard.chunk(2, dim=0)
            return [(hf + "gate_proj.weight", gate, 0), (hf + "up_proj.weight", up, 0)]
        if kind == "qkv":
            n = layout.heads // layout.groups
            grouped = shard.reshape(-1, 2 * n + 2, layout.head_dim, shard.shape[-1])
            query = grouped[:, :n].reshape(-1, layout.head_dim, shard.shape[-1])
            gate = grouped[:, n : 2 * n].reshape(-1, layout.head_dim, shard.shape[-1])
            q_proj = torch.stack([query, gate], dim=1).reshape(-1, shard.shape[-1])  # per head [query | gate]
            return [(hf + "q_proj.weight", q_proj, 0),
                    (hf + "k_proj.weight", grouped[:, 2 * n].reshape(-1, shard.shape[-1]), 0),
                    (hf + "v_proj.weight", grouped[:, 2 * n + 1].reshape(-1, shard.shape[-1]), 0)]
        if kind == "in_proj":
            s = self._gdn_sizes(layout.tp_size)
            qkv, z, b, a = torch.split(shard, [2 * s["qk"] + s["v"], s["v"], s["heads"], s["heads"]], dim=0)
            # in_proj_qkv is gathered as [q_r | k_r | v_r] per rank; finish_hf_tensor regroups it
            return [(hf + "in_proj_qkv.weight", qkv, 0), (hf + "in_proj_z.weight", z, 0),
                    (hf + "in_proj_b.weight", b, 0), (hf + "in_proj_a.weight", a, 0)]
        if kind.startswith("expert_"):
            which, local_index = kind[len("expert_"):].split(":")
            ep, _, _, _ = self._expert_layout()
            local_count = self._int("num_experts") // ep
            piece = ExpertPiece(local_index=int(local_index), local_count=local_count)
            if which == "linear_fc1":  # [gate | up] of this expert-TP rank -> [2, I/etp, H], gathered on dim 1
                return [(hf + "gate_up_proj", shard.reshape(2, -1, shard.shape[-1]), 1, piece)]
            return [(hf + "down_proj", shard, 1, piece)]
        raise UnsupportedModelError(f"no HF name for megatron parameter {name!r}")

    def finish_hf_tensor(self, hf_name: str, full: torch.Tensor, layout: Layout) -> torch.Tensor:
        full = super().finish_hf_tensor(hf_name, full, layout)
        if hf_name.endswith("linear_attn.in_proj_qkv.weight") or hf_name.endswith("linear_attn.conv1d.weight"):
            if layout.tp_size > 1:
                s = self._gdn_sizes(layout.tp_size)
                ranks = [torch.split(part, [s["qk"], s["qk"], s["v"]], dim=0) for part in full.chunk(layout.tp_size, 0)]
                full = torch.cat([torch.cat([r[i] for r in ranks]) for i in range(3)])
        if hf_name.endswith("mlp.experts.gate_up_proj") and full.dim() == 4:
            full = full.reshape(full.shape[0], -1, full.shape[-1])  # [E, 2, I, H] -> [E, 2I, H]
        return full

    # -- load ----------------------------------------------------------------------------------

    def _vocab(self, hf: str, layout: Layout, get_hf: Callable[[str], torch.Tensor]) -> torch.Tensor:
        if hf == "lm_head.weight" and layout.tied:
            hf = f"{self.hf_prefix}embed_tokens.weight"
        full = get_hf(hf)
        pad = layout.padded_vocab - full.shape[0]
        if pad:
            full = torch.cat([full, full.new_zeros(pad, full.shape[1])])
        return _cut(full, 0, layout.tp_size, layout.tp_rank)

    def _expert_tensor(self, prefix: str, which: str, expert: int, get_hf: Callable[[str], torch.Tensor]) -> torch.Tensor:
        """[2I, H] (gate_up) or [H, I] (down) of one expert: from the fused tensor of transformers'
        state dict, or from a checkpoint's per-expert tensors."""
        fused = prefix + ("gate_up_proj" if which == "linear_fc1" else "down_proj")
        if fused not in self._expert_cache:
            try:
                self._expert_cache = {fused: get_hf(fused)}  # one fused tensor held at a time
            except KeyError:
                self._expert_cache = {fused: None}
        tensor = self._expert_cache[fused]
        if tensor is not None:
            return tensor[expert]
        if which == "linear_fc1":
            return torch.cat([get_hf(f"{prefix}{expert}.gate_proj.weight"), get_hf(f"{prefix}{expert}.up_proj.weight")])
        return get_hf(f"{prefix}{expert}.down_proj.weight")

    @staticmethod
    def _reader(get_hf: Callable[[str], torch.Tensor]) -> Callable[[str], torch.Tensor]:
        """`get_hf` that also finds a text-model tensor under `model.language_model.` (the names in
        a conditional-generation checkpoint; transformers' CausalLM strips that prefix on load)."""
        def read(name: str) -> torch.Tensor:
            try:
                return get_hf(name)
            except KeyError:
                if not name.startswith("model."):
                    raise
                return get_hf("model.language_model." + name[len("model."):])

        return read

    def hf_to_megatron(self, name: str, layout: Layout, get_hf: Callable[[str], torch.Tensor],
                       layer_offset: int = 0) -> torch.Tensor:
        get_hf = self._reader(get_hf)
        kind, hf, _ = self._split(name, layer_offset)
        tp, rank = layout.tp_size, layout.tp_rank
        if kind == "norm":
            return get_hf(hf)
        if kind == "row":
            return _cut(get_hf(hf), 1, tp, rank)
        if kind == "col":
            return _cut(get_hf(hf), 0, tp, rank)
        if kind == "vocab":
            return self._vocab(hf, layout, get_hf)
        if kind == "fc1":
            return torch.cat([_cut(get_hf(hf + "gate_proj.weight"), 0, tp, rank),
                              _cut(get_hf(hf + "up_proj.weight"), 0, tp, rank)])
        if kind == "qkv":
            n = layout.heads // layout.groups
            q_proj = _cut(get_hf(hf + "q_proj.weight"), 0, tp, rank)
            cols = q_proj.shape[-1]
            q_proj = q_proj.reshape(-1, n, 2, layout.head_dim, cols)  # groups, heads per group, [query | gate]
            k = _cut(get_hf(hf + "k_proj.weight"), 0, tp, rank).reshape(-1, 1, layout.head_dim, cols)
            v = _cut(get_hf(hf + "v_proj.weight"), 0, tp, rank).reshape(-1, 1, layout.head_dim, cols)
            query = q_proj[:, :, 0]
            gate = q_proj[:, :, 1]
            return torch.cat([query, gate, k, v], dim=1).reshape(-1, cols)
        if kind in ("in_proj", "conv"):
            s = self._gdn_sizes(1)
            full = get_hf(hf + "in_proj_qkv.weight" if kind == "in_proj" else hf)
            q, k, v = torch.split(full, [s["qk"], s["qk"], s["v"]], dim=0)
            parts = [_cut(x, 0, tp, rank) for x in (q, k, v)]
            if kind == "in_proj":
                parts += [_cut(get_hf(hf + f"in_proj_{x}.weight"), 0, tp, rank) for x in ("z", "b", "a")]
            return torch.cat(parts)
        if kind.startswith("expert_"):
            which, local_index = kind[len("expert_"):].split(":")
            ep, ep_rank, etp, etp_rank = self._expert_layout()
            local_count = self._int("num_experts") // ep
            expert = ep_rank * local_count + int(local_index)
            full = self._expert_tensor(hf, which, expert, get_hf)
            if which == "linear_fc1":
                gate, up = full.chunk(2, dim=0)
                return torch.cat([_cut(gate, 0, etp, etp_rank), _cut(up, 0, etp, etp_rank)])
            return _cut(full, 1, etp, etp_rank)
        raise UnsupportedModelError(f"no HF name for megatron parameter {name!r}")


class Qwen3_5MoeBridge(Qwen3_5Bridge):
    """Qwen3.5 MoE (`Qwen3_5MoeForCausalLM`, model_type qwen3_5_moe_text): MoE on every layer."""

    model_types = ("qwen3_5_moe_text",)
    moe = True

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        super().check_supported(hf_config)
        text = cls.text_config(hf_config)
        missing = [k for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                               "shared_expert_intermediate_size") if not hf_field(text, k, None)]
        if missing:
            raise UnsupportedModelError(f"Qwen3.5 MoE config lacks {', '.join(missing)}")

    def _ffn_hidden_size(self) -> int:
        return self._int("moe_intermediate_size")

    def _moe_kwargs(self) -> Dict[str, Any]:
        aux = float(hf_field(self.text, "router_aux_loss_coef", 0.0) or 0.0)
        aux_on = bool(hf_field(self.text, "output_router_logits", False)) and aux > 0
        return dict(
            num_moe_experts=self._int("num_experts"),
            moe_router_topk=self._int("num_experts_per_tok"),
            moe_ffn_hidden_size=self._int("moe_intermediate_size"),
            moe_shared_expert_intermediate_size=self._int("shared_expert_intermediate_size"),
            moe_shared_expert_gate=True,
            moe_router_pre_softmax=False,  # top-k, then softmax over the k = softmax, top-k, renormalise
            moe_router_load_balancing_type="aux_loss" if aux_on else "none",
            moe_aux_loss_coeff=aux if aux_on else 0.0,
            moe_token_dispatcher_type="alltoall",
            moe_grouped_gemm=False,
            moe_layer_freq=1,
        )

    def _mlp_spec(self, local_spec: Any) -> Any:
        from megatron.core.transformer.moe import moe_utils

        if not hasattr(moe_utils, "te_general_gemm"):
            # megatron-core 0.16's router GEMM reads this name unguarded; it is only bound when
            # Transformer Engine imports. None selects its torch.mm path.
            moe_utils.te_general_gemm = None
        return local_spec.submodules.mlp  # MoELayer with SequentialMLP experts and the shared expert


class _VisionLeftOut:
    """Conditional-generation checkpoints: the text model only. Its weights load from
    `model.language_model.*` (or `model.*`); the export uses transformers' Qwen3_5(Moe)ForCausalLM
    names (`model.*`, `lm_head.weight`), which is what AutoModelForCausalLM builds from such a config
    and what the torch engine exports."""

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)  # type: ignore[call-arg]
        if hf_field(hf_config, "vision_config", None) is not None:
            logger.info("%s: building the text model of %s; its vision tower is left out (text RL does not run it)",
                        type(self).__name__, (hf_field(hf_config, "architectures") or ["?"])[0])


class Qwen3_5VLBridge(_VisionLeftOut, Qwen3_5Bridge):
    """`Qwen3_5ForConditionalGeneration`: the dense text model; the vision tower is left out."""


class Qwen3_5MoeVLBridge(_VisionLeftOut, Qwen3_5MoeBridge):
    """`Qwen3_5MoeForConditionalGeneration`: the MoE text model; the vision tower is left out."""
