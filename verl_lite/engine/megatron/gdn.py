"""Qwen3.5's layers on megatron-core 0.16 without Transformer Engine: the Gated DeltaNet layer with
the GDN kernel chosen per layer, and the RMSNorm forms Qwen3.5 uses.

megatron-core 0.16 has the GDN layer (`megatron.core.ssm.gated_delta_net.GatedDeltaNet`) but
builds Qwen3.5-style blocks only through Transformer Engine (its experimental block spec asserts
`transformer_impl == "transformer_engine"`), refuses to construct the layer without the Triton
`fla` package, ignores the attention mask and refuses packed (THD) input. `GatedDeltaLayer`
keeps megatron's layer (its parameters, in/out projections, conv, gated output norm) and
replaces its forward so that:

- the GDN kernel is the one `decisions.bridge_choice.gdn_kernel` chose for the run, as the Ascend/verl stack
  chooses it: `fla.ops.gated_delta_rule.chunk_gated_delta_rule` as megatron binds it when `fla` imports
  and `use_triton_gdn` (default True) on a cuda/npu device (on cuda the Triton fla package; on npu
  the name always imports and is MindSpeed's own kernel, decisions/ascend_stack.py); the Ascend kernel
  (the AscendC `flash_gated_delta_rule` entry the stack's MindSpeed ships, from the facts table, in
  that entry's tensor layout) when `use_ascend_gdn` on npu; else megatron's pure-torch
  `torch_chunk_gated_delta_rule`, with the chunk of
  `model.linear_attention_chunk_size` (`config.gdn_chunk_size`; None = by sequence length, as the
  torch engine chooses it: `verl_lite.models.hf.auto_chunk_size`);
- padded (BSHD) batches are exact: hidden states at padding positions (taken from the 4D mask's
  diagonal, True = masked) are zeroed before the input projection, as transformers' Qwen3.5 does
  (`apply_mask_to_padding_states`). With no bias, a zero input leaves the conv and the recurrent
  state at zero, so left padding does not leak into the tokens after it;
- packed (THD) input with `cu_seqlens` (remove-padding): fla and the Ascend kernel take cu_seqlens
  and start each sequence from a zero state; the torch rule takes none, so it runs once per packed
  sequence (initial state None each time: the same reset, in a loop). The conv runs per packed
  segment. Which of them auto packs: decisions/packing_mode.py.

The l2norm of q/k is fla's form (x / sqrt(sum(x^2) + 1e-6)); the fla kernel path uses fla's own.
Nothing here is CPU-specific: the same modules run on cuda/npu when the torch or Ascend kernel is
chosen. Megatron is imported inside the functions and classes built on first use (MindSpeed must
patch megatron before anything imports it).

Where MindSpeed replaces megatron's GatedDeltaNet with its own class (decisions/ascend_stack.py:
core_r0.16.0 under use_naive_l2norm, context parallelism or EOD packing), the GDN layers are that class,
as verl builds them, and `GatedDeltaLayer` is not used (`gdn_layer_class`). MindSpeed's forward ignores
the attention mask, so `mask_padding` zeroes the padding positions of its input, as GatedDeltaLayer
does, for left-padded micro-batches.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable, Optional

import torch

from verl_lite.decisions.bridge_choice import FLA, GDN_KERNELS
from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.norm import RMSNorm
from verl_lite.models.hf import auto_chunk_size

logger = logging.getLogger(__name__)

TESTED_MEGATRON = "0.16."
FLA_L2NORM_EPS = 1e-6


def check_megatron_version(version: Optional[str] = None) -> None:
    """GatedDeltaLayer's forward mirrors megatron-core 0.16's GatedDeltaNet: refuse other releases
    (`version`: the installed megatron-core's when None)."""
    if version is None:
        from megatron.core import package_info

        version = str(package_info.__version__)
    if not version.startswith(TESTED_MEGATRON):
        raise UnsupportedModelError(
            f"Qwen3.5 (Gated DeltaNet) on the Megatron engines is built for megatron-core {TESTED_MEGATRON}x "
            f"(its GatedDeltaNet layer and parameter layout); this process has megatron-core {version}. "
            f"Install megatron-core==0.16.1 or use strategy=fsdp"
        )


def megatron_gdn_packed_refusal() -> Optional[str]:
    """Why the installed megatron-core's own GatedDeltaNet takes no packed (THD) input, or None: releases
    before 0.18 raise for packed_seq_params (core_v0.16.1 ssm/gated_delta_net.py:295-297; THD arrives in
    core_v0.18.0, l.305-345). What a model Megatron-Bridge / mbridge built from megatron's spec runs."""
    from megatron.core import package_info

    if (int(package_info.MAJOR), int(package_info.MINOR)) >= (0, 18):
        return None
    return (f"Gated DeltaNet layers take no packed input on megatron-core {package_info.__version__} "
            f"(ssm/gated_delta_net.py: 'GDN does not support packed sequence for now.')")


def fla_installed() -> bool:
    try:
        importlib.import_module("fla.ops.gated_delta_rule")
        return True
    except Exception:  # ImportError, or a Triton without a driver
        return False


def torch_l2norm(x: torch.Tensor, dim: int = -1, eps: float = FLA_L2NORM_EPS) -> torch.Tensor:
    """fla's l2norm: x / sqrt(sum(x^2) + eps)."""
    return x / torch.sqrt((x * x).sum(dim=dim, keepdim=True) + eps)


def load_ascend_kernel(entry: Optional[dict]) -> Callable[..., Any]:
    """The Ascend kernel entry of the run's stack (`ascend_stack.ascend_kernel_entry`: module, function,
    where it was read)."""
    if not entry:
        raise ImportError("use_ascend_gdn=True: the Ascend stack of this run ships no AscendC GDN kernel entry in "
                          "MindSpeed (decisions/ascend_stack.py); set use_ascend_gdn=False")
    name = f"{entry['module']}:{entry['function']}"
    try:
        return getattr(importlib.import_module(entry["module"]), entry["function"])
    except (ImportError, AttributeError) as e:
        raise ImportError(
            f"use_ascend_gdn=True needs the Ascend GDN kernel {name} ({entry['source']}; it needs "
            f"{', '.join(entry['needs']) or 'nothing else'}), which does not import here ({type(e).__name__}: {e}); "
            f"install flash-linear-attention-npu (fla_npu) beside MindSpeed, or set use_ascend_gdn=False"
        ) from e


class GatedOutputRMSNorm(RMSNorm):
    """The GDN output norm (before the SiLU output gate): scaled by w, as transformers'
    Qwen3_5RMSNormGated (megatron's TE spec would make it zero-centred with the other norms).
    It acts per value head on the gathered sequence, so with TP > 1 each rank's grad covers its own
    heads only: as TE's norm in megatron's GDN spec, its weight carries `sequence_parallel` =
    config.sequence_parallel (with SP megatron sums it over TP), and `tp_partial_grad`, by which
    `model.wrap_ddp` sums it over TP without SP (megatron sums only q/k norms by name)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6):
        super().__init__(config, hidden_size, eps, zero_centered=False)
        setattr(self.weight, "tp_partial_grad", True)


def padding_positions(attention_mask: Optional[torch.Tensor], batch: int, seq_len: int) -> Optional[torch.Tensor]:
    """(B, T) bool, True at padding, from the engines' (B, 1, T, T) mask (True = masked): a token's
    own position is masked only when it is padding."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 4 or attention_mask.shape[-1] != seq_len or attention_mask.shape[-2] != seq_len:
        raise ValueError(
            f"GDN layer: expected a (batch, 1, {seq_len}, {seq_len}) boolean attention mask, got shape "
            f"{tuple(attention_mask.shape)}"
        )
    pad = attention_mask[:, 0].diagonal(dim1=-2, dim2=-1).to(torch.bool)
    return pad.expand(batch, seq_len) if pad.shape[0] == 1 else pad


_LAYER_CLASS = None
MEGATRON_GDN_MODULE = "megatron.core.ssm.gated_delta_net"


def gdn_layer_class(config: Any) -> type:
    """The module class of the GDN layers: MindSpeed's GatedDeltaNet where the run's Ascend stack swaps it
    in (`config.gdn_layer == "mindspeed"`, set by the MindSpeed engines: the class megatron's module
    holds after the repatch, checked against the facts table's `config.mindspeed_gdn_class`), else
    `GatedDeltaLayer`."""
    if getattr(config, "gdn_layer", "verl_lite") != "mindspeed":
        return gated_delta_layer_class()
    from megatron.core.ssm import gated_delta_net as gdn

    cls = gdn.GatedDeltaNet
    found, expected = f"{cls.__module__}:{cls.__qualname__}", getattr(config, "mindspeed_gdn_class", None)
    if found != expected:
        raise RuntimeError(
            f"MindSpeed's repatch should have replaced {MEGATRON_GDN_MODULE}.GatedDeltaNet with {expected} on this run's "
            f"Ascend stack, but it holds {found}: the installed MindSpeed is not the stack the engine chose "
            f"(trainer.ascend_stack), or something imported the class before the repatch")
    return cls


def mask_padding(module: Any, config: Any) -> int:
    """Zero the padding positions of the input of every MindSpeed GatedDeltaNet in `module` (its forward
    ignores the attention mask), as GatedDeltaLayer does: a forward pre-hook reading the (B, 1, T, T)
    mask. Returns how many layers were hooked; nothing where verl_lite's own layer runs."""
    if getattr(config, "gdn_layer", "verl_lite") != "mindspeed":
        return 0
    cls = gdn_layer_class(config)
    hooked = 0
    for layer in module.modules():
        if type(layer) is cls:
            layer.register_forward_pre_hook(_zero_padding, with_kwargs=True)
            hooked += 1
    return hooked


def _zero_padding(layer: Any, args: tuple, kwargs: dict):
    hidden = args[0] if args else kwargs["hidden_states"]
    mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
    if kwargs.get("packed_seq_params") is not None:
        return None  # packed: each sequence's padding follows its tokens (batch.prepare_packed_batch)
    seq_len, batch, _ = hidden.shape
    sp = int(getattr(layer, "sp_size", 1) or 1)
    pad = padding_positions(mask, batch, seq_len * sp)
    if pad is None or not bool(pad.any()):
        return None
    keep = (~pad).transpose(0, 1).unsqueeze(-1).to(hidden.dtype)  # (T, B, 1)
    if sp > 1:  # sequence parallel: this rank holds its slice of the sequence
        keep = keep.chunk(sp, dim=0)[layer.pg_collection.tp.rank()]
    hidden = hidden * keep
    if args:
        return (hidden,) + tuple(args[1:]), kwargs
    return args, dict(kwargs, hidden_states=hidden)


def gated_delta_layer_class() -> type:
    """`GatedDeltaLayer` (built on first use: it subclasses megatron's GatedDeltaNet)."""
    global _LAYER_CLASS
    if _LAYER_CLASS is None:
        _LAYER_CLASS = _build_layer_class()
    return _LAYER_CLASS


def _build_layer_class() -> type:
    import torch.nn.functional as F
    from megatron.core.ssm import gated_delta_net as gdn

    if gdn.GatedDeltaNet.__module__ != MEGATRON_GDN_MODULE:  # MindSpeed swapped its own in: gdn_layer_class uses it
        raise RuntimeError(f"GatedDeltaLayer mirrors megatron's GatedDeltaNet, but {MEGATRON_GDN_MODULE}.GatedDeltaNet "
                           f"is {gdn.GatedDeltaNet.__module__}'s here (MindSpeed's repatch swapped it): build the "
                           f"GDN layers with gdn_layer_class(config)")

    class GatedDeltaLayer(gdn.GatedDeltaNet):
        """megatron's GatedDeltaNet with the kernel of `config.gdn_kernel`, padding masked, and
        packed input for the kernels that take it (see the module docstring)."""

        def __init__(self, config: Any, *args: Any, **kwargs: Any):
            kernel = getattr(config, "gdn_kernel", None)
            if kernel not in GDN_KERNELS:
                raise ValueError(
                    f"GatedDeltaLayer: config.gdn_kernel={kernel!r}; expected one of {', '.join(GDN_KERNELS)} "
                    f"(set by verl_lite.engine.megatron.model.transformer_config)"
                )
            if kernel == FLA and not gdn.HAVE_FLA:
                raise ImportError("gdn_kernel='fla' needs flash-linear-attention (pip install flash-linear-attention)")
            saved = gdn.HAVE_FLA
            gdn.HAVE_FLA = True  # megatron refuses to build the layer without fla; only fla's kernel needs it
            try:
                super().__init__(config, *args, **kwargs)
            finally:
                gdn.HAVE_FLA = saved
            self.gdn_kernel = kernel
            entry = getattr(config, "ascend_kernel", None)
            self._ascend = load_ascend_kernel(entry) if kernel == "ascend" else None
            self._head_first = bool(entry) and entry.get("qkv_layout") == "B,H,T,K"
            # MindSpeed's kernels (the Ascend entry, and on npu whatever the fla name is) refuse fp32
            self._kernel_dtype = getattr(config, "gdn_kernel_dtype", None)

        def _conv(self, qkv: torch.Tensor, seq_len: int, cu_seqlens: Optional[torch.Tensor]) -> torch.Tensor:
            """Causal depthwise conv + activation on (B, D, T); per segment for packed input."""
            if cu_seqlens is None:
                return self.act_fn(self.conv1d(qkv)[..., :seq_len])
            bounds = cu_seqlens.tolist()
            parts = [self.conv1d(qkv[..., s:e])[..., : e - s] for s, e in zip(bounds[:-1], bounds[1:])]
            return self.act_fn(torch.cat(parts, dim=-1))

        def _rule(self, query, key, value, g, beta, cu_seqlens):
            if self.gdn_kernel == "torch":
                if cu_seqlens is not None:  # no cu_seqlens in the torch rule: one call per packed sequence
                    bounds = cu_seqlens.tolist()
                    parts = [self._rule(*(x[:, s:e] for x in (query, key, value, g, beta)), None)
                             for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
                    return torch.cat(parts, dim=1)
                chunk = getattr(self.config, "gdn_chunk_size", None) or auto_chunk_size(query.shape[1])
                out, _ = gdn.torch_chunk_gated_delta_rule(
                    query, key, value, g=g, beta=beta, chunk_size=chunk, initial_state=None,
                    output_final_state=False, use_qk_l2norm_in_kernel=False)
                return out
            q, k, v = query, key, value
            if self._kernel_dtype is not None and q.dtype not in (torch.float16, torch.bfloat16):
                q, k, v = (x.to(self._kernel_dtype) for x in (q, k, v))  # MindSpeed's kernels refuse fp32
            if self.gdn_kernel == FLA:
                out, _ = gdn.chunk_gated_delta_rule(
                    q, k, v, g=g, beta=beta, initial_state=None, output_final_state=False,
                    use_qk_l2norm_in_kernel=False, cu_seqlens=cu_seqlens)
                return out.to(query.dtype)
            # Ascend: q/k/v in the entry's layout ([B, T, H, K] for MindSpeed's, head-first for
            # MindSpeed-MM's port), g/beta [B, T, H]; cu_seqlens int64 with batch 1
            if self._head_first:
                q, k, v = (x.transpose(1, 2) for x in (q, k, v))
            out, _ = self._ascend(q, k, v, g=g, beta=beta, output_final_state=False,
                                  use_qk_l2norm_in_kernel=False,
                                  cu_seqlens=None if cu_seqlens is None else cu_seqlens.to(torch.long))
            return out.to(query.dtype)

        def forward(self, hidden_states, attention_mask, key_value_states=None, inference_context=None,
                    attention_bias=None, packed_seq_params=None, sequence_len_offset=None, *,
                    inference_params=None, **kwargs):
            if inference_context is not None or inference_params is not None:
                raise NotImplementedError("GatedDeltaLayer: inference contexts (KV/state caches) are not supported")
            seq_len, batch, _ = hidden_states.shape
            seq_len = seq_len * self.sp_size
            cu_seqlens = None
            if packed_seq_params is not None:
                if batch != 1:
                    raise ValueError(f"packed GDN input must have batch 1 (tokens of all sequences in one row), got {batch}")
                cu_seqlens = packed_seq_params.cu_seqlens_q
            else:
                pad = padding_positions(attention_mask, batch, seq_len)
                if pad is not None and bool(pad.any()):
                    keep = (~pad).transpose(0, 1).unsqueeze(-1).to(hidden_states.dtype)  # (T, B, 1)
                    if self.sp_size > 1:  # sequence parallel: this rank holds its slice of the sequence
                        keep = keep.chunk(self.sp_size, dim=0)[self.pg_collection.tp.rank()]
                    hidden_states = hidden_states * keep

            qkvzba, _ = self.in_proj(hidden_states)
            qkvzba = qkvzba.transpose(0, 1)  # s b x -> b s x
            tp = self.tp_size
            qkv, gate, beta, alpha = torch.split(
                qkvzba,
                [(self.qk_dim * 2 + self.v_dim) // tp, self.v_dim // tp,
                 self.num_value_heads // tp, self.num_value_heads // tp],
                dim=-1,
            )
            gate = gate.reshape(batch, seq_len, -1, self.value_head_dim)
            beta = beta.reshape(batch, seq_len, -1)
            alpha = alpha.reshape(batch, seq_len, -1)

            qkv = self._conv(qkv.transpose(1, 2).contiguous(), seq_len, cu_seqlens).transpose(1, 2)
            query, key, value = torch.split(
                qkv, [self.qk_dim // tp, self.qk_dim // tp, self.v_dim // tp], dim=-1)
            query = query.reshape(batch, seq_len, -1, self.key_head_dim)
            key = key.reshape(batch, seq_len, -1, self.key_head_dim)
            value = value.reshape(batch, seq_len, -1, self.value_head_dim)
            if self.use_qk_l2norm:
                norm = gdn.l2norm if self.gdn_kernel == FLA else torch_l2norm
                query, key = norm(query.contiguous()), norm(key.contiguous())
            repeat = self.num_value_heads // self.num_key_heads
            if repeat > 1:
                query = query.repeat_interleave(repeat, dim=2)
                key = key.repeat_interleave(repeat, dim=2)

            g = -self.A_log.exp() * F.softplus(alpha.float() + self.dt_bias)  # fp32
            beta = beta.sigmoid()
            core = self._rule(query.contiguous(), key.contiguous(), value.contiguous(), g, beta.contiguous(),
                              cu_seqlens)

            # gated output norm (megatron's _apply_gated_norm, without its torch.compile)
            normed = self.out_norm(core.reshape(-1, core.shape[-1]))
            out = (normed * self.act_fn(gate.reshape(-1, gate.shape[-1]).float())).to(core.dtype)
            out = out.reshape(batch, seq_len, -1).transpose(0, 1).contiguous()
            return self.out_proj(out)

    return GatedDeltaLayer
