"""The torch engine's FSDP2 settings (`<role>.fsdp_config`), resolved as verl's FSDP engine resolves them
(verl/workers/engine/fsdp/transformer_impl.py, verl/utils/fsdp_utils.py at the pinned commit):

  model_dtype        the dtype the parameters are stored in: the optimizer's master weights and its state.
                     verl: "fp32" for every role; null = fp32 for trained roles, bf16 for the ref (forward only).
  mixed_precision    {param_dtype, reduce_dtype, buffer_dtype}: the dtype forward and backward compute in
                     (FSDP2's MixedPrecisionPolicy.param_dtype, plus torch.autocast in it, as verl's
                     forward_step), the dtype gradients are reduced in, the dtype of the model's floating
                     buffers (cast once at build, as FSDP1's buffer_dtype; verl's fsdp2 path leaves them in
                     model_dtype, the same at verl's defaults). verl's null = bf16 / fp32 / fp32; a key left
                     out of the dict takes that default.
                     verl_lite's empty dict (its null) is that on cuda and npu, and no mixed precision on cpu
                     (the compute dtype is model_dtype there); a key set applies on every device.
  fsdp_size          ranks per shard group: -1 (or >= the world size) shards over all ranks, a smaller one
                     builds verl's 2-D mesh (replicate world/fsdp_size, shard fsdp_size): hybrid sharding.
  offload_policy     FSDP2's CPUOffloadPolicy (parameters, gradients and optimizer step on the host). As
                     verl: when it is on, and always for the ref on cuda/npu (verl's forward-only engine),
                     param_offload/optimizer_offload (the phase moves) are off.
  forward_prefetch   each wrapped layer prefetches the next one's all-gather in forward (depth 1, verl's).
  reshard_after_forward  FSDP2's own switch, passed to every fully_shard.
  wrap_policy        which modules get their own fully_shard: verl's fsdp2 (apply_fsdp2) wraps the classes
                     in transformer_layer_cls_to_wrap (default: the model's _no_split_modules) and, untied,
                     the embeddings and the LM head; min_num_params > 0 wraps by size instead, as verl's
                     FSDP1 policy (torch's size_based_auto_wrap_policy; verl's fsdp2 does not read it).

FSDP2 applies a MixedPrecisionPolicy only to fully_shard'ed modules, and verl always shards, even on one
rank. verl_lite shards a single process only when a setting needs it (compute dtype other than the stored
one, or the CPU offload policy), on a one-rank group it starts itself (gloo on cpu); otherwise one process
runs the plain module.

This module is the torch-free part (names, validation, the mesh shape, the summary's words), which the
preflight reads; engine/torch/fsdp_policy.py applies it with torch (fully_shard, the mesh, the policies).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

logger = logging.getLogger(__name__)

# verl's precision names (verl/utils/torch_dtypes.py) -> torch dtype names
DTYPE_NAMES = {"fp32": "float32", "float32": "float32", "32": "float32", "bf16": "bfloat16",
               "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16", "16": "float16"}
SUPPORTED = ("float32", "bfloat16")
MIXED_PRECISION_KEYS = {"param_dtype": "bfloat16", "reduce_dtype": "float32", "buffer_dtype": "float32"}
WRAP_POLICY_KEYS = ("min_num_params", "transformer_layer_cls_to_wrap")
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Precision:
    """One role's dtypes (torch names)."""

    storage: str  # parameters as stored (master weights, gradients, optimizer state)
    param: str  # forward and backward compute
    reduce: str  # gradient reduction over ranks
    buffer: str  # floating buffers of the model

    @property
    def mixed(self) -> bool:
        """Compute in another dtype than the stored one: needs FSDP2's policy even on one rank."""
        return self.param != self.storage

    def describe(self) -> str:
        return (f"params stored {SHORT[self.storage]}, compute {SHORT[self.param]}, reduce {SHORT[self.reduce]}, "
                f"buffers {SHORT[self.buffer]}")


def _name(value: Any) -> Optional[str]:
    return DTYPE_NAMES.get(str(value).lower()) if value is not None else None


def _fsdp_problem(key: str, value: Any) -> Optional[str]:
    name = _name(value)
    if name is None:
        return f"{key}={value!r} is not a dtype: choose fp32 (float32) or bf16 (bfloat16)"
    if name not in SUPPORTED:
        return (f"{key}={value!r}: float16 is not supported by verl_lite (verl trains fp16 with a loss scaler the "
                "torch engine does not have): use bf16")
    return None


def settings_dict(value: Any) -> Dict[str, Any]:
    """A mapping setting (mixed_precision, wrap_policy) as a plain dict; {} for null."""
    if value is None:
        return {}
    if hasattr(value, "items"):
        return {str(k): v for k, v in value.items()}
    raise ValueError(f"expected a mapping, got {value!r}")


def precision_problems(fsdp_config: Any, prefix: str) -> List[str]:
    """What is wrong with the role's model_dtype and mixed_precision (empty: fine)."""
    problems = []
    if fsdp_config.model_dtype is not None:
        problems.append(_fsdp_problem(f"{prefix}.model_dtype", fsdp_config.model_dtype))
    mp = fsdp_config.mixed_precision
    if mp:
        if not hasattr(mp, "items"):
            return [p for p in problems if p] + [
                f"{prefix}.mixed_precision={mp!r} is not a mapping: set its keys, e.g. "
                f"+{prefix}.mixed_precision.param_dtype=bf16 ({', '.join(MIXED_PRECISION_KEYS)})"]
        for key, value in settings_dict(mp).items():
            if key not in MIXED_PRECISION_KEYS:
                problems.append(f"{prefix}.mixed_precision.{key} is not supported by verl_lite: the keys are "
                                f"{', '.join(MIXED_PRECISION_KEYS)} (verl's)")
            else:
                problems.append(_fsdp_problem(f"{prefix}.mixed_precision.{key}", value))
    return [p for p in problems if p]


def resolve_precision(fsdp_config: Any, role: str, device: str) -> Precision:
    """The role's dtypes; raises ValueError naming the bad setting."""
    problems = precision_problems(fsdp_config, f"{role}.fsdp_config")
    if problems:
        raise ValueError("; ".join(problems))
    storage = _name(fsdp_config.model_dtype) or ("bfloat16" if role == "ref" else "float32")
    mp = fsdp_config.mixed_precision
    if not mp and device == "cpu":
        return Precision(storage, storage, MIXED_PRECISION_KEYS["reduce_dtype"], MIXED_PRECISION_KEYS["buffer_dtype"])
    given = settings_dict(mp)
    names = {key: _name(given[key]) if key in given else default for key, default in MIXED_PRECISION_KEYS.items()}
    return Precision(storage, names["param_dtype"], names["reduce_dtype"], names["buffer_dtype"])


def cpu_offload(fsdp_config: Any, role: str, device: str) -> bool:
    """FSDP2's CPUOffloadPolicy for this role: offload_policy=True, or the ref on cuda/npu (verl forces it on
    its forward-only engine; on cpu the parameters are on the host anyway, so the ref is not sharded for it)."""
    return bool(fsdp_config.offload_policy) or (role == "ref" and device != "cpu")


def phase_offload(fsdp_config: Any, role: str, device: str) -> Tuple[bool, bool]:
    """(param_offload, optimizer_offload) as the phases apply them: both off under the CPU offload policy
    (it owns where the tensors live), as verl's engine turns them off."""
    if cpu_offload(fsdp_config, role, device):
        return False, False
    return bool(fsdp_config.param_offload), bool(fsdp_config.optimizer_offload)


def mesh_shape(fsdp_size: Any, world: int) -> Tuple[int, int]:
    """(replicate, shard) as verl's create_device_mesh: fsdp_size < 0 or >= world -> (1, world), else
    (world // fsdp_size, fsdp_size), which needs fsdp_size to divide world (ValueError otherwise)."""
    size = int(fsdp_size if fsdp_size is not None else -1)
    if size == 0:
        raise ValueError("fsdp_config.fsdp_size=0: choose -1 (shard over all ranks) or a divisor of the "
                         f"data-parallel size {world}")
    if size < 0 or size >= world:
        return 1, world
    if world % size:
        divisors = [d for d in range(1, world + 1) if world % d == 0]
        raise ValueError(f"fsdp_config.fsdp_size={size} does not divide the {world} data-parallel ranks: choose -1 "
                         f"or one of {divisors}")
    return world // size, size


def describe_mesh(fsdp_size: Any, world: int) -> str:
    replicate, shard = mesh_shape(fsdp_size, world)
    if replicate > 1:
        return f"FSDP2 mesh (replicate {replicate}, shard {shard})"
    return f"FSDP2 mesh (shard {shard})"


def wrap_policy_problems(fsdp_config: Any, prefix: str) -> List[str]:
    policy = fsdp_config.wrap_policy
    if policy is None:
        return []
    if not hasattr(policy, "items"):
        return [f"{prefix}.wrap_policy={policy!r} is not a mapping: set {prefix}.wrap_policy.min_num_params or "
                f"+{prefix}.wrap_policy.transformer_layer_cls_to_wrap=[...]"]
    problems = []
    for key, value in settings_dict(policy).items():
        if key not in WRAP_POLICY_KEYS:
            problems.append(f"{prefix}.wrap_policy.{key} is not supported by verl_lite: the keys are "
                            f"{', '.join(WRAP_POLICY_KEYS)}")
        elif key == "min_num_params" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            problems.append(f"{prefix}.wrap_policy.min_num_params={value!r}: a parameter count >= 0 (0 = wrap by "
                            "layer class)")
    return problems


def problems(fsdp_config: Any, prefix: str, world: int) -> List[str]:
    """Every fsdp_config problem of one role on the torch engine, for the preflight (`prefix`: the role's
    section, e.g. actor_rollout_ref.actor)."""
    key = f"{prefix}.fsdp_config"
    out = precision_problems(fsdp_config, key) + wrap_policy_problems(fsdp_config, key)
    try:
        mesh_shape(fsdp_config.fsdp_size, max(world, 1))
    except ValueError as e:
        out.append(f"{prefix}.{e}")
    return out


def shards_one_rank(fsdp_config: Any, role: str, device: str) -> bool:
    """Whether a single process runs fully_shard (on a one-rank group): compute in another dtype than the
    stored one, or the CPU offload policy."""
    return resolve_precision(fsdp_config, role, device).mixed or cpu_offload(fsdp_config, role, device)


def summary_lines(fsdp_config: Any, role: str, device: str, world: int) -> List[str]:
    """The check's lines for one fsdp role: mesh, dtypes, offload, prefetch, wrap policy."""
    precision = resolve_precision(fsdp_config, role, device)
    if world <= 1 and not shards_one_rank(fsdp_config, role, device):
        mesh = "one process, unsharded (nothing in fsdp_config needs fully_shard)"
    else:
        mesh = describe_mesh(fsdp_config.fsdp_size, max(world, 1))
        mesh += " on a one-rank group" if world <= 1 else ""
    policy = settings_dict(fsdp_config.wrap_policy)
    min_params = int(policy.get("min_num_params", 0) or 0)
    if min_params > 0:
        wrap = f"modules of >= {min_params} parameters (min_num_params)"
    else:
        classes = policy.get("transformer_layer_cls_to_wrap")
        wrap = (f"layer classes {list(classes) if not isinstance(classes, str) else [classes]}" if classes
                else "the model's _no_split_modules") + " (+ the embeddings and LM head when untied)"
    offload = ("CPU offload policy on (offload_policy)" if fsdp_config.offload_policy
               else "CPU offload policy on (the ref's, as verl)" if cpu_offload(fsdp_config, role, device)
               else "CPU offload policy off")
    on = {True: "on", False: "off"}
    return [f"  fsdp        : {mesh}; wrap {wrap}",
            f"  dtypes      : {precision.describe()}",
            f"  fsdp knobs  : {offload}, forward prefetch {on[bool(fsdp_config.forward_prefetch)]}, reshard after "
            f"forward {on[bool(fsdp_config.reshard_after_forward)]}"]


# verl's defaults of the keys the Megatron engine does not read (it has megatron.dtype and its own
# sharding): a role on megatron must leave them there
MEGATRON_DEFAULTS = {"model_dtype": "fp32", "mixed_precision": {}, "fsdp_size": -1, "offload_policy": False,
                     "forward_prefetch": False, "wrap_policy": {"min_num_params": 0}}


def megatron_problems(fsdp_config: Any, prefix: str) -> List[str]:
    out = []
    for key, default in MEGATRON_DEFAULTS.items():
        value = getattr(fsdp_config, key)
        same = settings_dict(value) == default if isinstance(default, dict) and hasattr(value, "items") else value == default
        if key == "model_dtype" and _name(value) == "float32":
            same = True
        if not same:
            out.append(f"{prefix}.fsdp_config.{key}={value!r} is not supported on strategy=megatron (the Megatron "
                       f"engine has its own dtype handling, {prefix}.megatron.dtype, and sharding): leave it at "
                       f"{default!r} or use strategy=fsdp")
    return out
