"""The torch side of the torch engine's FSDP2 settings: the one-rank group, the mesh, the wrap targets,
fully_shard with its policies, the compute context and gradient clipping. What each setting means and
how it is resolved (torch-free, read by the preflight too): decisions/fsdp_settings.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from verl_lite.decisions.fsdp_settings import Precision, mesh_shape, settings_dict
from verl_lite.device import DIST_BACKENDS, init_one_rank_group

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------- torch side


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def ensure_one_rank_group(device: str, role: str) -> None:
    """A one-process group for a single rank that needs fully_shard (no group of its own)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        raise RuntimeError(f"torch.distributed is not initialized but WORLD_SIZE={os.environ['WORLD_SIZE']}: the "
                           "worker must call init_process_group before the engine's initialize()")
    logger.info("%s: single rank with FSDP2 settings that need fully_shard: starting a one-process %s group",
                role, DIST_BACKENDS[device])
    init_one_rank_group(DIST_BACKENDS[device])


def build_mesh(device_type: str, fsdp_size: Any, world: int):
    """The FSDP2 mesh: 1-D ("fsdp",) or verl's 2-D ("ddp", "fsdp") for hybrid sharding."""
    from torch.distributed.device_mesh import init_device_mesh

    replicate, shard = mesh_shape(fsdp_size, world)
    if replicate == 1:
        return init_device_mesh(device_type, (world,), mesh_dim_names=("fsdp",))
    return init_device_mesh(device_type, (replicate, shard), mesh_dim_names=("ddp", "fsdp"))


def wrap_targets(module, wrap_policy: Any) -> List[Any]:
    """The modules that get their own fully_shard (the root comes last, separately), in module order."""
    import torch.nn as nn

    policy = settings_dict(wrap_policy)
    min_params = int(policy.get("min_num_params", 0) or 0)
    if min_params > 0:
        return _size_targets(module, min_params)
    names = policy.get("transformer_layer_cls_to_wrap")
    if names is None:  # the model's own list; a wrapper (the critic's value head model) takes its backbone's
        names = next((m._no_split_modules for m in module.modules() if getattr(m, "_no_split_modules", None)), [])
    names = [names] if isinstance(names, str) else list(names)
    present = {type(m).__name__ for m in module.modules()}
    if names and not present & set(names):
        raise ValueError(f"wrap_policy.transformer_layer_cls_to_wrap={names}: none of these classes is in the model "
                         f"(its classes: {', '.join(sorted(present))})")
    tied = bool(getattr(getattr(module, "config", None), "tie_word_embeddings", False))
    by_name = set() if tied else {"embed_tokens", "lm_head"}
    targets = []
    for name, m in module.named_modules():
        if m is module:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if type(m).__name__ in names or (isinstance(m, nn.Embedding) and not tied) or \
                (leaf in by_name and hasattr(m, "weight")):
            targets.append(m)
    return targets


def _size_targets(module, min_num_params: int) -> List[Any]:
    """FSDP1's size-based auto wrap (verl's min_num_params): post-order, a module is wrapped when the
    parameters not already under a wrapped child reach min_num_params (torch's own decision function)."""
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

    targets: List[Any] = []

    def visit(m) -> int:
        unwrapped = sum(visit(child) for child in m.children()) + sum(p.numel() for p in m.parameters(recurse=False))
        if m is not module and size_based_auto_wrap_policy(m, recurse=False, nonwrapped_numel=unwrapped,
                                                           min_num_params=min_num_params):
            targets.append(m)
            return 0
        return unwrapped

    visit(module)
    return targets


@dataclass
class Sharding:
    """What `shard` did, for the engine and the summary."""

    mesh_shape: Tuple[int, int]
    wrapped: int  # modules with their own fully_shard, the root not counted
    cpu_offload: bool
    forward_prefetch: bool


def cast_buffers(module, precision: Precision) -> None:
    dtype = torch_dtype(precision.buffer)
    for sub in module.modules():
        for key, buf in sub._buffers.items():
            if buf is not None and buf.is_floating_point() and buf.dtype != dtype:
                sub._buffers[key] = buf.to(dtype)


def shard(module, fsdp_config: Any, precision: Precision, offload: bool, device_type: str, world: int) -> Sharding:
    """fully_shard each wrap target and then the root, as verl's apply_fsdp2."""
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = build_mesh(device_type, fsdp_config.fsdp_size, world)
    kwargs: Dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": bool(fsdp_config.reshard_after_forward),
        "mp_policy": MixedPrecisionPolicy(param_dtype=torch_dtype(precision.param),
                                          reduce_dtype=torch_dtype(precision.reduce), cast_forward_inputs=True),
    }
    if offload:  # pinned host memory only where there is a device to copy to
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device_type != "cpu" and torch.cuda.is_available())
    targets = wrap_targets(module, fsdp_config.wrap_policy)
    for target in targets:
        fully_shard(target, **kwargs)
    fully_shard(module, **kwargs)
    prefetch = bool(fsdp_config.forward_prefetch)
    if prefetch:  # depth 1, as verl (FSDP1's forward_prefetch_limit)
        units = [m for m in targets if isinstance(m, FSDPModule)]
        for current, following in zip(units, units[1:]):
            current.set_modules_to_forward_prefetch([following])
    return Sharding(tuple(int(s) for s in mesh.shape) if mesh.ndim == 2 else (1, world), len(targets), offload,
                    prefetch)


def compute_context(precision: Precision, device_type: str):
    """verl's forward_step: torch.autocast in the compute dtype unless it is fp32."""
    import torch

    if precision.param == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=torch_dtype(precision.param))


def clip_grad_norm(params, max_norm: float, device):
    """The gradients' total L2 norm, computed on `device`, and the clip by it (max_norm 0: no clip), for
    gradients that FSDP2's CPU offload keeps on the host (a DTensor norm is reduced over the mesh's device)."""
    from torch.nn.utils import clip_grads_with_norm_, get_total_norm

    total = get_total_norm([p.grad for p in params]).to(device)
    if max_norm > 0:
        clip_grads_with_norm_(params, max_norm, total)
    return total
