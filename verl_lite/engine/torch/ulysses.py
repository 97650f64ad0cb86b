"""Ulysses sequence parallelism on the torch engine (verl's `ulysses_sequence_parallel_size`).

The ranks are laid out as verl's (dp, sp) device mesh: ranks `d * sp .. d * sp + sp - 1` form sequence
parallel group `d`, and every rank of a group receives the same micro-batches (the engine reports the
group as one data-parallel rank, `d`, of `world / sp`; only the group's first rank is a leader whose
outputs the driver collects). FSDP still shards over all ranks, as in verl.

Each micro-batch runs packed (remove-padding, as verl requires for SP): its real tokens in one row,
padded to a multiple of sp (`ulysses_pad`: pad positions count 0, 1, ...), and each rank runs the
model on its own contiguous 1/sp of that row. Every attention layer swaps its split around the
attention itself (DeepSpeed-Ulysses): an all-to-all turns (sequence/sp, all heads) into (whole
sequence, heads/sp), the packed sequences are kept apart by a block-causal mask built from the
all-gathered position ids, and a second all-to-all turns the result back. The model's output
(logits, values) is all-gathered along the sequence before the engine's loss; the gather's backward
hands each rank the gradient of its own slice times sp, so that FSDP's average over all
`dp * sp` ranks with the loss scaled by the DP size gives the gradient of the global loss (verl's
grad_scaler). The whole output is gathered (not only the log-probs, as verl's engine does): the
logits of a micro-batch are held whole on each rank, as without SP; attention and the layers'
activations are what SP divides.

Gated DeltaNet layers (Qwen3.5, Qwen3-Next) need whole sequences: verl runs them under Ulysses
with flash-linear-attention's context-parallel kernels (`cp_context`, Triton), which the torch engine
does not have; such models are refused with the layer named.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Optional, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

from verl_lite.decisions.ulysses import problems
from verl_lite.engine.torch.packing import pack, unpack

ATTENTION = "verl_lite_ulysses"  # the name the SP engine's model config points its attention at
_TAG = "_verl_lite_ulysses"  # the attribute of each attention layer holding its SequenceParallel


def checked(key: str, sp: Any, world_size: int, hf_config: Any, use_remove_padding: Any) -> int:
    """The SP size `key=sp` (decisions/layout.ulysses_setting's); raises what makes it impossible for this model and world."""
    found = problems(key, sp, world_size, hf_config, use_remove_padding)
    if found:
        raise ValueError("; ".join(found))
    return sp


# -- collectives with autograd -------------------------------------------------------------------


def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group) -> torch.Tensor:
    size = dist.get_world_size(group)
    inputs = [c.contiguous() for c in x.chunk(size, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(size)]
    dist.all_to_all(outputs, inputs, group=group)
    return torch.cat(outputs, dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    """Split `x` along scatter_dim over the group, join what arrives along gather_dim (in rank order)."""

    @staticmethod
    def forward(ctx, x, scatter_dim: int, gather_dim: int, group):
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return _all_to_all(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, gather_dim, scatter_dim, ctx.group), None, None, None


class _GatherSeq(torch.autograd.Function):
    """All-gather along `dim`; backward: this rank's slice of the gradient times the group size."""

    @staticmethod
    def forward(ctx, x, dim: int, group):
        size = dist.get_world_size(group)
        ctx.dim, ctx.group, ctx.part, ctx.rank, ctx.size = dim, group, x.shape[dim], dist.get_rank(group), size
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(ctx.dim, ctx.rank * ctx.part, ctx.part) * ctx.size, None, None


# -- attention -----------------------------------------------------------------------------------


class _Groups:
    """`module` as the base attention sees it after K/V were expanded to one head per query head."""

    def __init__(self, module):
        self._module = module
        self.num_key_value_groups = 1

    def __getattr__(self, name):
        return getattr(self._module, name)


def _block_causal_mask(position_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, N, N) additive mask: a token sees earlier tokens of its own packed sequence (each starts at
    position 0)."""
    seq = (position_ids[0] == 0).cumsum(0)
    n = seq.shape[0]
    idx = torch.arange(n, device=position_ids.device)
    allowed = (idx[None, :] <= idx[:, None]) & (seq[None, :] == seq[:, None])
    mask = torch.zeros(n, n, dtype=dtype, device=position_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def _base_attention(module, name: str):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if name == "eager":
        return getattr(sys.modules[type(module).__module__], "eager_attention_forward")
    return ALL_ATTENTION_FUNCTIONS[name]


def ulysses_attention(module, query, key, value, attention_mask, position_ids=None, **kwargs):
    """transformers' attention interface: query (B, H, S/sp, D), key/value (B, H_kv, S/sp, D) in,
    (B, S/sp, H, D) out, attending over the whole (packed) sequence of the SP group."""
    sp: Optional[SequenceParallel] = getattr(module, _TAG, None)
    if sp is None or position_ids is None:
        raise RuntimeError(f"{type(module).__name__}: the {ATTENTION} attention runs only inside a sequence-parallel "
                           "packed forward (verl_lite.engine.torch.ulysses.SequenceParallel.packed_forward)")
    group = sp.group
    if key.shape[1] % sp.size:  # too few K/V heads to split: one per query head (GQA expanded)
        reps = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(reps, dim=1), value.repeat_interleave(reps, dim=1)
        module = _Groups(module)
    query, key, value = (_AllToAll.apply(t, 1, 2, group) for t in (query, key, value))
    parts = [torch.empty_like(position_ids) for _ in range(sp.size)]
    dist.all_gather(parts, position_ids.contiguous(), group=group)
    mask = _block_causal_mask(torch.cat(parts, dim=-1), query.dtype)
    if kwargs.pop("sliding_window", None) is not None:
        raise NotImplementedError(f"{type(module).__name__}: sliding-window attention is not supported with "
                                  "ulysses_sequence_parallel_size > 1 (the block-causal mask spans whole sequences)")
    out, weights = _base_attention(module, sp.base_attention)(module, query, key, value, mask, **kwargs)
    return _AllToAll.apply(out, 1, 2, group), weights  # (B, S, H/sp, D) -> (B, S/sp, H, D)


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, ulysses_attention)


# -- the engine's side ---------------------------------------------------------------------------


class SequenceParallel:
    """One rank's place in the (dp, sp) layout and the packed forward over its SP group."""

    def __init__(self, size: int, device_type: str):
        from torch.distributed.device_mesh import init_device_mesh

        world, rank = dist.get_world_size(), dist.get_rank()
        self.size = size
        self.dp_size, self.dp_rank, self.rank = world // size, rank // size, rank % size
        # every rank builds every group (a collective); this rank keeps its own
        mesh = init_device_mesh(device_type, (self.dp_size, size), mesh_dim_names=("dp", "sp"))
        self.group = mesh.get_group("sp")
        self.base_attention = "sdpa"

    def attach(self, module: torch.nn.Module) -> None:
        """Point `module`'s attention at the Ulysses attention; its own implementation runs inside it."""
        _register()
        config = module.config
        self.base_attention = config._attn_implementation or "sdpa"
        config._attn_implementation = ATTENTION
        tagged = 0
        for sub in module.modules():
            if hasattr(sub, "num_key_value_groups") and hasattr(sub, "config"):
                setattr(sub, _TAG, self)
                tagged += 1
        if not tagged:
            raise ValueError(f"ulysses_sequence_parallel_size={self.size}: no attention layers found in "
                             f"{type(module).__name__}")

    def packed_forward(self, module: Any, batch: Dict[str, torch.Tensor], output: Union[str, Callable, None],
                       **kwargs: Any) -> torch.Tensor:
        """`module(...)`'s `output` for the packed batch, each rank running 1/sp of it; the whole result,
        in the padded (B, T, ...) layout. `output` as in engine/torch/packing.py:packed_forward: an attribute
        name ("logits"), a callable picking the tensor (the log-prob head's: logits or hidden states), or
        None for a module returning a tensor; `kwargs` go to the model call."""
        ids, pos, mask = pack(batch["input_ids"], batch["attention_mask"], batch["position_ids"])
        n = ids.shape[1]
        pad = (-n) % self.size
        if pad:  # pad positions restart at 0: a sequence of their own, seen by no real token
            ids = F.pad(ids, (0, pad))
            pos = torch.cat([pos, torch.arange(pad, device=pos.device, dtype=pos.dtype)[None]], dim=1)
        part = (n + pad) // self.size
        ids, pos = (t[:, self.rank * part:(self.rank + 1) * part] for t in (ids, pos))
        if output is None:
            local = module(input_ids=ids, attention_mask=None, position_ids=pos, **kwargs)
        else:
            result = module(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False, **kwargs)
            local = output(result) if callable(output) else getattr(result, output)
        whole = _GatherSeq.apply(local, 1, self.group)[:, :n]
        return unpack(whole, mask)
