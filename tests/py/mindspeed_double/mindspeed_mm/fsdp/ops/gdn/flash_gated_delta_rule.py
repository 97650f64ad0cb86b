"""Double of the Ascend GDN kernel entry `flash_gated_delta_rule` (MindSpeed-MM,
mindspeed_mm/fsdp/ops/gdn/flash_gated_delta_rule.py, which calls the AscendC ops of
flash-linear-attention-npu). It enforces the entry's argument contract as that file checks it
and computes the real gated delta rule with megatron-core's pure-torch
`torch_chunk_gated_delta_rule`, one sequence at a time (per packed segment with `cu_seqlens`,
per batch row otherwise), in fp32.

Contract (from the real entry):
- q, k: [B, H, T, K]; v: [B, H, T, V]; g, beta: [B, T, H]; q/k/v of one dtype, fp16 or bf16
  ("ChunkGatedDeltaRuleFunction does not support float32. Please use float16/bfloat16.");
- `cu_seqlens` (int64, starting at 0, ending at T, non-decreasing) requires B == 1 ("The batch
  size is expected to be 1 rather than {B} when using cu_seqlens. ...");
- chunk_size a power of 2; scale defaults to K ** -0.5;
- returns o [B, T, H, V] in q's dtype and the final state [N, H, K, V] (N sequences) or None.
Every call is recorded in CALLS (batch, tokens, number of sequences, packed or not).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

CALLS: List[Dict[str, Any]] = []


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _check(q, k, v, g, beta, cu_seqlens, chunk_size, initial_state):
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise ValueError(f"q current type is {q.dtype}, k current type is {k.dtype}, "
                         f"v current type is {v.dtype}; they should be equal")
    if q.dtype == torch.float32:
        raise ValueError("ChunkGatedDeltaRuleFunction does not support float32. Please use float16/bfloat16.")
    if beta.ndim != 3 or g.ndim != 3:
        raise ValueError("g and beta must be rank-3 tensors with shape [B, T, H].")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("q, k and v must be rank-4 tensors with shape [B, H, T, D].")
    if q.shape[:3] != k.shape[:3] or q.shape[:3] != v.shape[:3]:
        raise ValueError(f"q/k/v shape prefixes must match, got {q.shape}, {k.shape}, {v.shape}.")
    if g.shape != beta.shape:
        raise ValueError(f"g and beta shapes must match, got {g.shape} and {beta.shape}.")
    if g.shape[0] != q.shape[0] or g.shape[1] != q.shape[2] or g.shape[2] != q.shape[1]:
        raise ValueError("Expected q/k/v in [B, H, T, D] and g/beta in [B, T, H]; "
                         f"got q={tuple(q.shape)}, g={tuple(g.shape)}.")
    if chunk_size != 2 ** (chunk_size.bit_length() - 1):
        raise ValueError(f"chunk_size must be a power of 2, got {chunk_size}.")
    if cu_seqlens is None:
        return None
    if cu_seqlens.dtype != torch.int64 or cu_seqlens.ndim != 1:
        raise ValueError(f"cu_seqlens must be a 1-D int64 (LongTensor), got {cu_seqlens.dtype} {tuple(cu_seqlens.shape)}")
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != q.shape[2] or any(b < a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"cu_seqlens must start at 0, end at T={q.shape[2]} and not decrease, got {bounds}")
    if q.shape[0] != 1:
        raise ValueError(f"The batch size is expected to be 1 rather than {q.shape[0]} when using cu_seqlens. "
                         "Please flatten variable-length inputs before processing.")
    if initial_state is not None and initial_state.shape[0] != len(bounds) - 1:
        raise ValueError("The number of initial states is expected to match the number of input sequences, "
                         f"got initial_state.shape[0]={initial_state.shape[0]} and sequences={len(bounds) - 1}.")
    return bounds


def flash_gated_delta_rule(q, k, v, g, beta, scale: Optional[float] = None, initial_state=None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           cu_seqlens=None, cu_seqlens_list=None, chunk_indices=None, chunk_indices_list=None,
                           chunk_size: int = 64, head_first: bool = False):
    bounds = _check(q, k, v, g, beta, cu_seqlens, chunk_size, initial_state)
    from megatron.core.ssm.gated_delta_net import torch_chunk_gated_delta_rule

    batch, heads, tokens, k_dim = q.shape
    scale = k_dim ** -0.5 if scale is None else float(scale)
    # the torch rule takes [B, T, H, D] and scales q by K ** -0.5 itself
    qf, kf, vf = (x.transpose(1, 2).float() for x in (q, k, v))
    if use_qk_l2norm_in_kernel:
        qf, kf = _l2norm(qf), _l2norm(kf)
    qf = qf * (scale * k_dim ** 0.5)
    gf, bf = g.float(), beta.float()
    if bounds is None:
        segments = [(b, 0, tokens) for b in range(batch)]
    else:
        segments = [(0, s, e) for s, e in zip(bounds[:-1], bounds[1:])]
    out = torch.zeros(batch, tokens, heads, v.shape[-1], dtype=torch.float32, device=q.device)
    finals = []
    for n, (b, s, e) in enumerate(segments):
        init = None if initial_state is None else initial_state[n : n + 1].float()
        if e == s:
            finals.append(torch.zeros(1, heads, k_dim, v.shape[-1]) if init is None else init)
            continue
        o, final = torch_chunk_gated_delta_rule(
            qf[b : b + 1, s:e], kf[b : b + 1, s:e], vf[b : b + 1, s:e], g=gf[b : b + 1, s:e],
            beta=bf[b : b + 1, s:e], chunk_size=chunk_size, initial_state=init,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=False)
        out[b, s:e] = o[0]
        finals.append(final)
    CALLS.append(dict(batch=batch, tokens=tokens, sequences=len(segments), packed=bounds is not None,
                      dtype=str(q.dtype).replace("torch.", "")))
    final_state = torch.cat(finals).to(q.dtype) if output_final_state else None
    return out.to(q.dtype), final_state
