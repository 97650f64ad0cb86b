"""Where a Megatron engine's tensors live: offloading model chunks, gradients and optimizer state
to the host and back (`MegatronLMEngine.to`), and CPU snapshots of the weights (fully-async).

Megatron's DDP keeps gradients (and, with the distributed optimizer, parameters) in flat buffers
that the parameters view into. Replacing such a buffer would orphan the views, so it is *parked*
(`StorageParking`): copied to the host with its storage freed, and re-grown in place later.
Megatron is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch


class StorageParking:
    """Move tensors' storage off the device and back while every view of them stays valid.

    Parking copies the data to the host and frees the storage (`resize_(0)`); restoring re-grows
    it and copies back.
    """

    def __init__(self) -> None:
        self._parked: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def park(self, tensor: torch.Tensor) -> None:
        if id(tensor) in self._parked or tensor.untyped_storage().size() == 0:
            return
        host = tensor.detach().to("cpu", copy=True)
        self._parked[id(tensor)] = (tensor, host)
        tensor.untyped_storage().resize_(0)

    def restore(self, tensor: torch.Tensor) -> None:
        entry = self._parked.pop(id(tensor), None)
        if entry is None:
            return
        _, host = entry
        tensor.untyped_storage().resize_(host.numel() * host.element_size())
        tensor.copy_(host)

    def move(self, tensor: torch.Tensor, target: torch.device) -> None:
        """Park on a move to the host, restore on a move back."""
        self.park(tensor) if target.type == "cpu" else self.restore(tensor)

    def __contains__(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self._parked


def ddp_buffers(chunk: Any) -> List[Any]:
    """The flat grad (and, with the distributed optimizer, param) buffers of a DDP-wrapped chunk;
    none for an unwrapped one (the ref), whose `buffers` is torch's Module.buffers method."""
    from megatron.core.distributed import DistributedDataParallel

    if not isinstance(chunk, DistributedDataParallel):
        return []
    return list(chunk.buffers) + list(getattr(chunk, "expert_parallel_buffers", []))


def param_buffers(chunk: Any) -> List[torch.Tensor]:
    """Flat buffers the chunk's parameters view into (distributed optimizer only)."""
    return [buf.param_data for buf in ddp_buffers(chunk) if getattr(buf, "param_data", None) is not None]


# ------------------------------------------------------------------------------ offload


def move_model(chunks: List[Any], target: torch.device, parking: StorageParking) -> None:
    flat = [t for chunk in chunks for t in param_buffers(chunk)]
    if flat:  # distributed optimizer: parameters are views of flat buffers
        for buf in flat:
            parking.move(buf, target)
        return
    for chunk in chunks:
        for param in chunk.parameters():
            param.data = param.data.to(target, non_blocking=True)


def move_grads(chunks: List[Any], target: torch.device, parking: StorageParking) -> None:
    for chunk in chunks:
        for buf in ddp_buffers(chunk):
            parking.move(buf.grad_data, target)


def move_optimizer_state(chunks: List[Any], optimizer: Any, target: torch.device) -> None:
    """Adam moments, and the fp32 main copies of bf16 parameters (model parameters move with the model).
    With megatron's HybridDeviceOptimizer (optim.override_optimizer_config.optimizer_cpu_offload) only
    its device share moves (`move_hybrid_state`)."""
    model_params = {id(p) for chunk in chunks for p in chunk.parameters()}
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(opt, "optimizer", opt)
        if inner is None:  # a rank without parameters of this kind
            continue
        for group in inner.param_groups:
            for p in group["params"]:
                if id(p) not in model_params:
                    p.data = p.data.to(target, non_blocking=True)
        if hasattr(inner, "sub_optimizers"):
            move_hybrid_state(inner, target)
            continue
        for state in inner.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(target, non_blocking=True)


def move_hybrid_state(hybrid: Any, target: torch.device) -> None:
    """A HybridDeviceOptimizer's state, as verl offloads and loads it: the state of its host
    sub-optimizer (torch's AdamW over the offloaded fraction) stays on the host; its device
    sub-optimizer's state and fp32 parameter copies move to `target`. Its own `state` mirrors the
    sub-optimizers' and is kept pointing at the same tensors."""
    host = [id(sub) for sub in hybrid.cpu_optimizers]  # by identity: without TE both kinds are torch's AdamW
    for sub in hybrid.sub_optimizers:
        if id(sub) in host:
            continue
        for group in sub.param_groups:
            for p in group["params"]:
                p.data = p.data.to(target, non_blocking=True)
        for param, state in sub.state.items():
            orig = hybrid.inner_param_to_orig_param.get(param, param)
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(target, non_blocking=True)
                    hybrid.state[orig][key] = state[key]


# ------------------------------------------------------------------------------ CPU snapshots


@torch.no_grad()
def snapshot_chunks(chunks: List[Any], role: str) -> List[Dict[str, Any]]:
    """The chunks' weights on CPU, one entry per chunk: a chunk whose parameters view into flat
    buffers (the distributed optimizer) is copied buffer by buffer, one flat copy each; other
    chunks (the ref, a CPU run) parameter by parameter. Offloaded buffers cannot be copied."""
    snapshot = []
    for i, chunk in enumerate(chunks):
        flat = param_buffers(chunk)
        if flat:
            if any(t.untyped_storage().size() == 0 for t in flat):
                raise RuntimeError(f"{role}: model chunk {i} is offloaded to CPU; load it before a snapshot")
            snapshot.append({"buffers": [t.detach().to("cpu", copy=True) for t in flat]})
        else:
            snapshot.append({"params": {n: p.detach().to("cpu", copy=True) for n, p in chunk.named_parameters()}})
    return snapshot


@torch.no_grad()
def restore_chunks(chunks: List[Any], snapshot: List[Dict[str, Any]], role: str) -> None:
    if len(snapshot) != len(chunks):
        raise ValueError(f"{role}: snapshot of {len(snapshot)} model chunks for {len(chunks)}")
    for i, (chunk, saved) in enumerate(zip(chunks, snapshot)):
        if "buffers" in saved:
            flat = param_buffers(chunk)
            if len(flat) != len(saved["buffers"]):
                raise ValueError(f"{role}: chunk {i} has {len(flat)} parameter buffers, the snapshot {len(saved['buffers'])}")
            for live, cpu in zip(flat, saved["buffers"]):
                live.copy_(cpu.to(live.device, non_blocking=True))
            continue
        params = dict(chunk.named_parameters())
        if set(params) != set(saved["params"]):
            raise ValueError(f"{role}: chunk {i}: the snapshot does not match the model's parameters")
        for name, p in params.items():
            p.data.copy_(saved["params"][name].to(p.device, non_blocking=True))
