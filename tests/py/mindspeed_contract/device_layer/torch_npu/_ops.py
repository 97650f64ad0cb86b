"""CPU implementations of the torch_npu kernels MindSpeed's code calls on the engines' path, from their
documented semantics (torch_npu API reference: npu_fusion_attention). Differentiable torch code."""

from typing import List, Optional, Sequence

import torch


def _bounds(lengths: Optional[Sequence[int]]) -> Optional[List[int]]:
    """actual_seq_qlen / kvlen: cumulative lengths (MindSpeed passes cu_seqlens, with its leading 0)."""
    if lengths is None:
        return None
    out = [int(x) for x in lengths]
    return out if out and out[0] == 0 else [0] + out


def _attend(q, k, v, scale, masked):
    """q [B, N, Sq, D], k/v [B, Nkv, Skv, D]; masked: bool broadcastable to [B, N, Sq, Skv] (True = masked)."""
    if k.shape[1] != q.shape[1]:  # grouped-query attention
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.nan_to_num(probs)  # rows with every key masked (padding) give 0, not nan
    return torch.matmul(probs, v.float()).to(q.dtype)


def _causal(sq: int, skv: int, sparse_mode: int, device) -> torch.Tensor:
    # sparse_mode 2: left-up causal; 3: right-down causal (the same for Sq == Skv)
    offset = skv - sq if sparse_mode == 3 else 0
    return torch.triu(torch.ones(sq, skv, dtype=torch.bool, device=device), diagonal=1 + offset)


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1.0, keep_prob=1.0, pre_tockens=2147483647, next_tockens=2147483647, inner_precise=0,
                         prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False):
    if pse is not None or padding_mask is not None or keep_prob != 1.0:
        raise NotImplementedError("the CPU npu_fusion_attention takes no pse, padding_mask or dropout")
    if sparse_mode not in (0, 2, 3):
        raise NotImplementedError(f"sparse_mode={sparse_mode} is not implemented on CPU (0, 2, 3 are)")
    layout = input_layout.upper()
    if layout == "TND":
        qb, kb = _bounds(actual_seq_qlen), _bounds(actual_seq_kvlen)
        if qb is None or kb is None:
            raise ValueError("input_layout TND needs actual_seq_qlen and actual_seq_kvlen")
        outs = []
        for (qs, qe), (ks, ke) in zip(zip(qb[:-1], qb[1:]), zip(kb[:-1], kb[1:])):
            q = query[qs:qe].permute(1, 0, 2).unsqueeze(0)
            k = key[ks:ke].permute(1, 0, 2).unsqueeze(0)
            v = value[ks:ke].permute(1, 0, 2).unsqueeze(0)
            mask = _causal(qe - qs, ke - ks, sparse_mode, query.device) if sparse_mode else None
            outs.append(_attend(q, k, v, scale, mask)[0].permute(1, 0, 2))
        out = torch.cat(outs, dim=0)
    else:
        if layout in ("SBH", "BSH"):
            if layout == "SBH":
                query, key, value = (x.transpose(0, 1) for x in (query, key, value))
            d = query.shape[-1] // head_num
            q = query.reshape(query.shape[0], query.shape[1], head_num, d).transpose(1, 2)
            k = key.reshape(key.shape[0], key.shape[1], -1, d).transpose(1, 2)
            v = value.reshape(value.shape[0], value.shape[1], -1, d).transpose(1, 2)
        elif layout == "BSND":
            q, k, v = (x.transpose(1, 2) for x in (query, key, value))
        elif layout == "BNSD":
            q, k, v = query, key, value
        else:
            raise NotImplementedError(f"input_layout {input_layout!r}")
        sq, skv = q.shape[2], k.shape[2]
        if sparse_mode == 0:
            mask = None if atten_mask is None else atten_mask.bool()
            if mask is not None and mask.dim() == 2:
                mask = mask[None, None]
        else:
            mask = _causal(sq, skv, sparse_mode, q.device)
        o = _attend(q, k, v, scale, mask)  # [B, N, Sq, D]
        if layout in ("SBH", "BSH"):
            out = o.transpose(1, 2).reshape(o.shape[0], sq, -1)
            out = out.transpose(0, 1) if layout == "SBH" else out
        else:
            out = o.transpose(1, 2) if layout == "BSND" else o
    empty = torch.empty(0)
    return out.contiguous(), empty, empty, empty, 0, 0, 0
