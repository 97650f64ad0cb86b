"""Megatron CPU snapshots for the fully-async train worker (see `async_snapshot`).

Imports megatron.core at import time, like any Megatron utility module: load it only through
`async_snapshot.handlers("megatron")`, after the engine's initialize() (which lets MindSpeed
patch megatron first on Ascend).

A DDP-wrapped chunk whose parameters are views of flat `param_data` buffers (the distributed
optimizer) is copied buffer by buffer, one flat copy each; other chunks (the ref, a CPU run)
parameter by parameter. Offloaded (parked) buffers cannot be copied: load the model first.
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch
from megatron.core.distributed import DistributedDataParallel


def _param_buffers(chunk: Any) -> List[torch.Tensor]:
    if not isinstance(chunk, DistributedDataParallel):
        return []
    buffers = list(getattr(chunk, "buffers", [])) + list(getattr(chunk, "expert_parallel_buffers", []))
    return [b.param_data for b in buffers if getattr(b, "param_data", None) is not None]


@torch.no_grad()
def copy_to_cpu(engine: Any) -> List[Dict[str, Any]]:
    snapshot = []
    for i, chunk in enumerate(engine.model):
        flat = _param_buffers(chunk)
        if flat:
            if any(t.untyped_storage().size() == 0 for t in flat):
                raise RuntimeError(f"{engine.role}: model chunk {i} is offloaded to CPU; load it before a snapshot")
            snapshot.append({"buffers": [t.detach().to("cpu", copy=True) for t in flat]})
        else:
            snapshot.append({"params": {n: p.detach().to("cpu", copy=True) for n, p in chunk.named_parameters()}})
    return snapshot


@torch.no_grad()
def restore_from_cpu(engine: Any, snapshot: List[Dict[str, Any]]) -> None:
    if len(snapshot) != len(engine.model):
        raise ValueError(f"{engine.role}: snapshot of {len(snapshot)} model chunks for {len(engine.model)}")
    for i, (chunk, saved) in enumerate(zip(engine.model, snapshot)):
        if "buffers" in saved:
            flat = _param_buffers(chunk)
            if len(flat) != len(saved["buffers"]):
                raise ValueError(f"{engine.role}: chunk {i} has {len(flat)} parameter buffers, "
                                 f"the snapshot {len(saved['buffers'])}")
            for live, cpu in zip(flat, saved["buffers"]):
                live.copy_(cpu.to(live.device, non_blocking=True))
            continue
        params = dict(chunk.named_parameters())
        if set(params) != set(saved["params"]):
            raise ValueError(f"{engine.role}: chunk {i}: the snapshot does not match the model's parameters")
        for name, p in params.items():
            p.data.copy_(saved["params"][name].to(p.device, non_blocking=True))
