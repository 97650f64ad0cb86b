"""RMSNorm for verl_lite's Megatron layer specs (local, torch modules on every device).

megatron's torch norm (`transformer/torch_norm.py: WrappedTorchNorm`) refuses sequence parallelism
and the zero-centred form; Transformer Engine and Apex, which take both, are not installed on every
device this runs on (CPU, some Ascend stacks). This norm takes both, as TE's does:

- With sequence parallelism the hidden-state norms (input, pre-MLP, final) see only this rank's
  slice of the sequence, so their weight gradient is a partial sum: the weight carries
  `sequence_parallel=True` and megatron's `finalize_model_grads` sums it over the TP group
  (`_allreduce_non_tensor_model_parallel_grads`), as TE's norm marks it.
- q/k layernorms (`HeadRMSNorm`) act per attention head after the input projection has gathered the
  sequence: they are not sequence-parallel (their grads over this rank's heads are summed over TP by
  megatron by name, `q_layernorm` / `k_layernorm`, with or without SP).

Computed in fp32 and cast back, as transformers' Qwen3 / Qwen3.5 RMSNorm. `zero_centered` (default:
`config.layernorm_zero_centered_gamma`) scales by (1 + w) with w starting at 0 (Qwen3.5's RMSNorm),
otherwise by w. Nothing here imports megatron.
"""

from __future__ import annotations

from typing import Any, Optional

import torch


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dim; `sequence_parallel` (default: config.sequence_parallel) marks the
    weight for megatron's TP all-reduce of norm grads (see the module docstring)."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6, zero_centered: Optional[bool] = None,
                 sequence_parallel: Optional[bool] = None):
        super().__init__()
        self.config = config
        self.eps = float(eps)
        self.zero_centered = bool(config.layernorm_zero_centered_gamma if zero_centered is None else zero_centered)
        init = torch.zeros if self.zero_centered else torch.ones
        self.weight = torch.nn.Parameter(init(hidden_size, dtype=config.params_dtype))
        sp = bool(config.sequence_parallel) if sequence_parallel is None else bool(sequence_parallel)
        setattr(self.weight, "sequence_parallel", sp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        if self.zero_centered:
            return (normed * (1.0 + self.weight.float())).type_as(x)
        return self.weight * normed.to(x.dtype)


class HeadRMSNorm(RMSNorm):
    """q/k layernorm: per head, on the gathered sequence, so never sequence-parallel."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6, zero_centered: Optional[bool] = None):
        super().__init__(config, hidden_size, eps, zero_centered=zero_centered, sequence_parallel=False)
