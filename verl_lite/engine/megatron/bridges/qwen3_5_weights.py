"""Qwen3.5's weight names and their split over TP / EP ranks, HF <-> megatron: the mapping half of
`qwen3_5.Qwen3_5Bridge` (the architecture and the layer spec are in qwen3_5.py).

Weights (per TP rank; E experts, EP ranks hold E/EP each, expert TP splits their FFN):
  GDN in_proj     [q | k | v | z | b | a] of this rank's heads  <- in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
  GDN conv1d      [q | k | v] channels of this rank              <- conv1d.weight
  A_log, dt_bias  this rank's value heads; out_norm replicated; out_proj row-parallel
  linear_qkv      per query group [n queries | n gates | k | v]  <- q_proj (per head [query | gate]), k_proj, v_proj
  experts         local_experts.i.linear_fc1 [gate | up], linear_fc2 <- experts.gate_up_proj[e], experts.down_proj[e]
                  (checkpoints with per-expert tensors, experts.{e}.gate_proj/up_proj/down_proj, load too)
Export gives transformers' state-dict names (fused experts), full tensors, gathered over TP, expert
TP and EP by `verl_lite.engine.megatron.hf.stage_hf_tensors`.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges.base import ExpertPiece, HFShard, ModelShard, top_params

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


class Qwen3_5Weights:
    """HF <-> megatron tensors of a Qwen3.5 bridge, mixed in before ModelBridge. The bridge provides
    `_int(name)` (an HF config field), `hf_prefix` and `moe`; the per-load `_expert_cache` (the fused expert
    tensor read last) is this mixin's, emptied when a load finishes."""

    hf_prefix: str
    moe: bool
    _int: Callable[..., int]

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)  # type: ignore[call-arg]
        self._expert_cache: Dict[str, Optional[torch.Tensor]] = {}

    def finish_load(self) -> None:
        self._expert_cache = {}

    # -- weight names ----------------------------------------------------------------------------

    def _hf_layer(self, index: int) -> str:
        return f"{self.hf_prefix}layers.{index}."

    def _top(self, name: str) -> Optional[Tuple[str, str]]:
        return top_params(self.hf_prefix).get(name)

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
        # without torch.distributed's default group Megatron's groups are stale ones: none
        if mpu is None or not torch.distributed.is_initialized() or not mpu.model_parallel_is_initialized():
            return 1, 0, 1, 0
        return (mpu.get_expert_model_parallel_world_size(), mpu.get_expert_model_parallel_rank(),
                mpu.get_expert_tensor_parallel_world_size(), mpu.get_expert_tensor_parallel_rank())

    # -- export --------------------------------------------------------------------------------

    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: ModelShard, layer_offset: int = 0) -> List[HFShard]:
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

    def finish_hf_tensor(self, hf_name: str, full: torch.Tensor, layout: ModelShard) -> torch.Tensor:
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

    def _vocab(self, hf: str, layout: ModelShard, get_hf: Callable[[str], torch.Tensor]) -> torch.Tensor:
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

    def hf_to_megatron(self, name: str, layout: ModelShard, get_hf: Callable[[str], torch.Tensor],
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
