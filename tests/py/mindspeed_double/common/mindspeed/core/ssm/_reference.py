"""What every GDN kernel double computes: the gated delta rule, one sequence at a time (per packed
segment with `cu_seqlens`, per batch row otherwise), with megatron-core's pure-torch
`torch_chunk_gated_delta_rule` in fp32, after the argument checks of the real entry it stands for.
Calls are recorded in CALLS (entry, batch, tokens, sequences, packed, dtype) so tests can see which
kernel the engine reached. Not MindSpeed's code: its kernels are Triton-Ascend / AscendC."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

CALLS: List[Dict[str, Any]] = []


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6) -> torch.Tensor:
    """fla's l2norm: x / sqrt(sum(x^2) + eps)."""
    return x / torch.sqrt((x * x).sum(dim=dim, keepdim=True) + eps)


def check_fla_form(q, k, v, g, beta, cu_seqlens, initial_state, float32_message: str) -> Optional[List[int]]:
    """The checks MindSpeed's fla-form entries make (q/k/v [B, T, H, K|V], g/beta [B, T, H]):
    core_r0.16.0 ops/flash_gated_delta_rule.py:364-399, chunk_gated_delta_rule.py, core_r0.18.0
    npu_chunk_gated_delta_rule.py:239-270. Returns the segment bounds of cu_seqlens (None without)."""
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise ValueError(f"q current type is {q.dtype} , k current type is {k.dtype} ,v current type is {v.dtype} , "
                         "they should are equal")
    if q.dtype == torch.float32:
        raise ValueError(float32_message)
    if len(beta.shape) != 3:
        raise ValueError(f"beta current shape len is {len(beta.shape)}, beta must be of shape [B, T, H] if "
                         "head_first=False, or [B, H, T] otherwise.")
    if q.ndim != 4 or g.shape != q.shape[:3] or beta.shape != q.shape[:3]:  # the real kernels fail later on it
        raise ValueError(f"expected q/k/v [B, T, H, K] and g/beta [B, T, H], got q {tuple(q.shape)}, "
                         f"g {tuple(g.shape)}, beta {tuple(beta.shape)}")
    if cu_seqlens is None:
        return None
    if q.shape[0] != 1:
        raise ValueError(f"The batch size is expected to be 1 rather than {q.shape[0]} when using `cu_seqlens`."
                         f"Please flatten variable-length inputs before processing.")
    bounds = [int(x) for x in cu_seqlens.reshape(-1).tolist()]
    if initial_state is not None and initial_state.shape[0] != len(bounds) - 1:
        raise ValueError("The number of initial states is expected to be equal to the number of input sequences, "
                         f"i.e., {len(bounds) - 1} rather than {initial_state.shape[0]}.")
    if bounds[0] != 0 or bounds[-1] != q.shape[1] or any(b < a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"cu_seqlens must run from 0 to T={q.shape[1]} without decreasing, got {bounds}")
    return bounds


def rule(entry: str, q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
         use_qk_l2norm_in_kernel=False, bounds: Optional[List[int]] = None, chunk_size: int = 64):
    """o [B, T, H, V] in q's dtype and the final state [N, H, K, V] (or None), from fla-form inputs."""
    from megatron.core.ssm.gated_delta_net import torch_chunk_gated_delta_rule

    batch, tokens, heads, k_dim = q.shape
    scale = k_dim ** -0.5 if scale is None else float(scale)
    qf, kf, vf = (x.float() for x in (q, k, v))
    if use_qk_l2norm_in_kernel:
        qf, kf = l2norm(qf), l2norm(kf)
    qf = qf * (scale * k_dim ** 0.5)  # the torch rule scales q by K ** -0.5 itself
    gf, bf = g.float(), beta.float()
    segments = [(b, 0, tokens) for b in range(batch)] if bounds is None else \
        [(0, s, e) for s, e in zip(bounds[:-1], bounds[1:])]
    out = torch.zeros(batch, tokens, heads, v.shape[-1], dtype=torch.float32, device=q.device)
    finals = []
    for n, (b, s, e) in enumerate(segments):
        init = None if initial_state is None else initial_state[n: n + 1].float()
        if e == s:
            finals.append(torch.zeros(1, heads, k_dim, v.shape[-1]) if init is None else init)
            continue
        o, final = torch_chunk_gated_delta_rule(
            qf[b: b + 1, s:e], kf[b: b + 1, s:e], vf[b: b + 1, s:e], g=gf[b: b + 1, s:e], beta=bf[b: b + 1, s:e],
            chunk_size=chunk_size, initial_state=init, output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=False)
        out[b, s:e] = o[0]
        finals.append(final)
    CALLS.append(dict(entry=entry, batch=batch, tokens=tokens, sequences=len(segments), packed=bounds is not None,
                      dtype=str(q.dtype).replace("torch.", "")))
    final_state = torch.cat(finals).to(q.dtype) if output_final_state else None
    return out.to(q.dtype), final_state


def causal_conv1d(x, weight, bias=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                  activation="silu"):
    """fla's causal_conv1d form (x [B, T, D] or packed [1, T, D], weight [D, W]), per packed segment."""
    import torch.nn.functional as F

    if x.dim() != 3:
        raise ValueError(f"causal_conv1d expects a 3D input, but got x.dim()={x.dim()}")
    if weight.dim() != 2:
        raise ValueError(f"causal_conv1d expects a 2D weight, but got weight.dim()={weight.dim()}")
    if initial_state is not None or output_final_state:
        raise NotImplementedError("the double's causal_conv1d keeps no conv state")
    width = weight.shape[1]

    def conv(part):  # part [B, t, D]
        y = F.conv1d(part.transpose(1, 2), weight.unsqueeze(1), bias, padding=width - 1, groups=weight.shape[0])
        return y[..., : part.shape[1]].transpose(1, 2)

    if cu_seqlens is None:
        y = conv(x)
    else:
        bounds = [int(b) for b in cu_seqlens.reshape(-1).tolist()]
        y = torch.cat([conv(x[:, s:e]) for s, e in zip(bounds[:-1], bounds[1:])], dim=1)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y, None
