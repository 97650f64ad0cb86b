"""CPU snapshots of a training engine's weights: the copy-to-CPU / restore-from-CPU handlers of the
fully-async train worker, one pair per strategy.

The train worker keeps the weights it last published to the rollouters as a snapshot and computes
old log-probs with them while its own weights have moved on (trigger_parameter_sync_step > 1).
`handlers(strategy)` is called on first use, never when a worker is constructed: the Megatron
pair lives in `async_snapshot_megatron`, which imports megatron.core, and on Ascend nothing may
import megatron.core before MindSpeed has patched it (the engine's initialize() does that).
verl's fully-async worker resolved these handlers in `__init__` and broke NPU runs that way.

A snapshot holds this rank's local shards only (no collective): FSDP2 DTensor parameters are
copied as their local shard, so copy and restore run on every rank independently.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import torch

Snapshot = Any
Handlers = Tuple[Callable[[Any], Snapshot], Callable[[Any, Snapshot], None]]


def handlers(strategy: str) -> Handlers:
    """(copy_to_cpu(engine) -> snapshot, restore_from_cpu(engine, snapshot)) for a strategy."""
    if strategy == "fsdp":
        return fsdp_copy_to_cpu, fsdp_restore_from_cpu
    if strategy == "megatron":
        from verl_lite.trainer import async_snapshot_megatron as megatron

        return megatron.copy_to_cpu, megatron.restore_from_cpu
    raise ValueError(
        f"fully-async training keeps CPU snapshots of the actor's weights, and strategy {strategy!r} has no "
        "CPU snapshot support: set actor_rollout_ref.actor.strategy=fsdp or megatron, or async_training.enable=False")


def _local(param: torch.Tensor) -> torch.Tensor:
    """The tensor that holds this rank's values: a DTensor's local shard, else the tensor itself."""
    return param.to_local() if hasattr(param, "to_local") else param


@torch.no_grad()
def fsdp_copy_to_cpu(engine: Any) -> Dict[str, torch.Tensor]:
    return {name: _local(p).detach().to("cpu", copy=True) for name, p in engine.module.named_parameters()}


@torch.no_grad()
def fsdp_restore_from_cpu(engine: Any, snapshot: Dict[str, torch.Tensor]) -> None:
    params = dict(engine.module.named_parameters())
    if set(params) != set(snapshot):
        diff = sorted(set(params) ^ set(snapshot))[:3]
        raise ValueError(f"{engine.role}: the CPU snapshot does not match the model's parameters (e.g. {diff})")
    for name, p in params.items():
        local = _local(p)
        local.copy_(snapshot[name].to(local.device, non_blocking=True))
