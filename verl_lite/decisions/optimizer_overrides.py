"""`optim.override_optimizer_config`: verl's Megatron optimizer overrides, fields of megatron-core's
`OptimizerConfig` merged into the config the Megatron engine builds its optimizer from
(`engine/megatron/optim.py`), as verl's `init_megatron_optim_config` merges them.

What is checked here, before anything starts (no torch or megatron import):
- on the fsdp strategy the section is the torch optimizer's keyword arguments, as verl's build_optimizer
  passes them (`torch_problems`: its keywords, lr / betas / weight_decay refused naming their keys);
- every key is a field of megatron-core 0.16's OptimizerConfig (`OPTIMIZER_CONFIG_FIELDS`, checked
  against the installed megatron-core by tests/py/test_optimizer_overrides.py; the engine checks
  again against the megatron-core the workers import);
- a field verl_lite sets from a key of its own (`OWN`: lr, weight decay, betas, clip, dtype, the
  distributed optimizer) is refused naming that key, so one value is not set in two places;
- a field that cannot act in verl_lite's engine (`NO_EFFECT`: fp16 loss scaling, SGD/Muon, zero
  counting, timers, overlapped parameter gather, FP8) is refused with the reason;
- dtype fields take verl's names (fp32, bf16, fp16 or torch's float32, bfloat16, float16);
- device: the CPU optimizer offload fields (`CPU_OFFLOAD_FIELDS`, megatron's HybridDeviceOptimizer)
  move Adam's state and step to host memory, where a cpu run keeps it already: on cpu they have no
  effect (warned, named in the summary; the engine leaves them out) and act on cuda/npu;
  use_precision_aware_optimizer needs Transformer Engine's FusedAdam (a CUDA kernel) and the
  distributed optimizer: refused on cpu, passed on cuda/npu (the workers need Transformer Engine:
  megatron-core 0.16 reads its version for the precision-aware optimizer even with
  optimizer_cpu_offload, and the engine fails its build without it, naming the fix).

verl's top-level spellings (optim.use_precision_aware_optimizer, main_grads_dtype, exp_avg_dtype,
exp_avg_sq_dtype) are refused in `verl_names.INSTEAD` with the override key to use.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from verl_lite.config import roles

# megatron-core 0.16.1's OptimizerConfig fields, in its order (dataclasses.fields).
OPTIMIZER_CONFIG_FIELDS = (
    "lr", "min_lr", "decoupled_lr", "decoupled_min_lr", "weight_decay", "apply_wd_to_qk_layernorm", "fp8_recipe",
    "fp16", "bf16", "reuse_grad_buf_for_mxfp8_param_ag", "params_dtype", "use_precision_aware_optimizer",
    "store_param_remainders", "main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
    "optimizer", "loss_scale", "initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis",
    "adam_beta1", "adam_beta2", "adam_eps", "decoupled_weight_decay", "sgd_momentum", "muon_momentum",
    "muon_split_qkv", "muon_use_nesterov", "muon_scale_mode", "muon_fp32_matmul_prec", "muon_num_ns_steps",
    "muon_tp_mode", "muon_extra_scale_factor", "use_distributed_optimizer", "overlap_param_gather",
    "overlap_param_gather_with_optimizer_step", "optimizer_cpu_offload", "optimizer_offload_fraction",
    "use_torch_optimizer_for_cpu_offload", "overlap_cpu_optimizer_d2h_h2d", "pin_cpu_grads", "pin_cpu_params",
    "clip_grad", "log_num_zeros_in_grad", "barrier_with_L1_time", "timers", "config_logger_dir",
)
# fields the engine sets from verl_lite's own keys (<section> is the role's prefix)
OWN = {
    "lr": "<section>.optim.lr",
    "min_lr": "<section>.optim.min_lr",
    "weight_decay": "<section>.optim.weight_decay",
    "decoupled_weight_decay": "<section>.optim.weight_decay (always decoupled, AdamW-style)",
    "adam_beta1": "<section>.optim.betas",
    "adam_beta2": "<section>.optim.betas",
    "clip_grad": "<section>.optim.clip_grad",
    "bf16": "<section>.megatron.dtype (the engine's training dtype)",
    "fp16": "<section>.megatron.dtype (the engine's training dtype)",
    "params_dtype": "<section>.megatron.dtype (the engine's training dtype)",
    "use_distributed_optimizer": "<section>.megatron.use_distributed_optimizer",
    "optimizer": "<section>.optim.optimizer (adam)",
    "timers": "no key: megatron's timers are a callable, which a config line cannot give",
}
# fields that cannot act in verl_lite's Megatron engine, refused with the reason
_LOSS_SCALING = ("fp16 loss scaling: verl_lite trains in float32 (cpu) or bfloat16 and never scales the loss, so "
                 "megatron would only divide the gradients by it")
_NOT_ADAM = "the Megatron engine's optimizer is megatron's Adam (OptimizerConfig.optimizer is not settable)"
NO_EFFECT = {
    **{name: _LOSS_SCALING for name in ("loss_scale", "initial_loss_scale", "min_loss_scale", "loss_scale_window",
                                        "hysteresis")},
    **{name: _NOT_ADAM for name in OPTIMIZER_CONFIG_FIELDS if name == "sgd_momentum" or name.startswith("muon_")},
    "log_num_zeros_in_grad": "verl_lite's optimizer step does not count or log zero gradients",
    "barrier_with_L1_time": "verl_lite runs megatron's optimizer without timers",
    "config_logger_dir": "verl_lite does not call megatron's config logger",
    "overlap_param_gather": "verl_lite's Megatron DDP config has no overlapped parameter all-gather",
    "overlap_param_gather_with_optimizer_step": "verl_lite's Megatron DDP config has no overlapped parameter all-gather",
    "fp8_recipe": "FP8 training is not supported by verl_lite yet",
    "reuse_grad_buf_for_mxfp8_param_ag": "FP8 training is not supported by verl_lite yet",
}
# megatron's HybridDeviceOptimizer: Adam's state and step on the host for a fraction of the parameters
CPU_OFFLOAD_FIELDS = ("optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d",
                      "use_torch_optimizer_for_cpu_offload", "pin_cpu_grads", "pin_cpu_params")
PRECISION_AWARE = "use_precision_aware_optimizer"
DTYPE_FIELDS = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
# verl's precision names (verl.utils.torch_dtypes.PrecisionType) and torch's -> torch dtype attribute
DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
          "fp16": "float16", "float16": "float16"}
ROLES_WITH_OPTIM = ("actor", "critic")
# fsdp strategy: verl's build_optimizer passes the section to the torch optimizer as keyword arguments.
# torch 2.13's keywords of the classes the fsdp engine builds (inspect.signature; checked against the
# installed torch by tests/py/test_lr_schedule.py), less params and the ones set from verl_lite's keys.
TORCH_OPTIMIZER_KWARGS = {
    "AdamW": ("eps", "amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused"),
    "Adam": ("eps", "amsgrad", "foreach", "maximize", "capturable", "differentiable", "fused",
             "decoupled_weight_decay"),
}
TORCH_OWN = {"lr": "<section>.optim.lr", "betas": "<section>.optim.betas",
             "weight_decay": "<section>.optim.weight_decay"}


def _key(prefix: str, name: str) -> str:
    return f"{prefix}.optim.override_optimizer_config.{name}"


def _items(optim: Any) -> Dict[str, Any]:
    node = getattr(optim, "override_optimizer_config", None) or {}
    return {str(k): v for k, v in node.items()}


def dtype_name(value: Any) -> Optional[str]:
    """torch's dtype attribute name for a dtype given as verl or torch spell it, else None."""
    text = str(value).removeprefix("torch.")
    return DTYPES.get(text)


def field_problems(items: Dict[str, Any], prefix: str, fields: tuple = OPTIMIZER_CONFIG_FIELDS) -> List[str]:
    """Keys that are not OptimizerConfig fields, that verl_lite sets itself, or badly typed dtypes."""
    problems = []
    for name, value in items.items():
        key = _key(prefix, name)
        if name not in fields:
            problems.append(f"{key}: megatron-core's OptimizerConfig has no field {name!r}; its fields are: "
                            f"{', '.join(fields)}")
        elif name in OWN:
            own = OWN[name].replace("<section>", prefix)
            problems.append(f"{key}={value!r}: verl_lite sets OptimizerConfig.{name} itself: "
                            + (f"{own}; remove this line" if own.startswith("no key")
                               else f"set {own} instead and remove this line"))
        elif name in NO_EFFECT:
            problems.append(f"{key}={value!r} would have no effect: {NO_EFFECT[name]}; remove it")
        elif name in DTYPE_FIELDS and dtype_name(value) is None:
            problems.append(f"{key}={value!r}: not a dtype; choose one of {', '.join(DTYPES)}")
    return problems


def torch_problems(items: Dict[str, Any], prefix: str, optimizer: str) -> List[str]:
    """fsdp: keys that are not keyword arguments of torch.optim.<optimizer>, or that verl_lite sets itself."""
    valid = TORCH_OPTIMIZER_KWARGS.get(optimizer)
    if valid is None:  # an optimizer name the engine does not build: refused by decisions/lr_schedule.py
        return []
    problems = []
    for name, value in items.items():
        key = _key(prefix, name)
        if name in TORCH_OWN:
            problems.append(f"{key}={value!r}: verl_lite sets torch.optim.{optimizer}'s {name} itself: set "
                            f"{TORCH_OWN[name].replace('<section>', prefix)} instead and remove this line")
        elif name not in valid:
            problems.append(f"{key}={value!r}: torch.optim.{optimizer} (the fsdp strategy's optimizer) takes no "
                            f"keyword {name!r}; its keywords are: {', '.join(valid)} (megatron-core OptimizerConfig "
                            "fields act on the megatron strategy only)")
    return problems


def _on(items: Dict[str, Any], name: str) -> bool:
    return bool(items.get(name, False)) and str(items.get(name)).lower() != "false"


def override_config_problems(cfg: Any, role: str, strategy: str, device: str) -> List[str]:
    """The refusals for one role's optim.override_optimizer_config (actor and critic; the ref has none)."""
    if role not in ROLES_WITH_OPTIM:
        return []
    prefix = roles.SECTION[role]
    section = roles.section(cfg, role)
    items = _items(section.optim)
    if not items:
        return []
    if strategy != "megatron":
        return [f"{role}: {p}" for p in torch_problems(items, prefix, section.optim.optimizer or "AdamW")]
    problems = [f"{role}: {p}" for p in field_problems(items, prefix)]
    aware = _on(items, PRECISION_AWARE)
    if aware and device == "cpu":
        problems.append(f"{role}: {_key(prefix, PRECISION_AWARE)}=True cannot run on trainer.device=cpu: megatron-core's "
                        "precision-aware optimizer is Transformer Engine's FusedAdam (a CUDA kernel) over the "
                        "distributed optimizer, which cpu runs do not use; remove it (cpu trains in float32)")
    elif aware and not bool(section.megatron.use_distributed_optimizer):
        problems.append(f"{role}: {_key(prefix, PRECISION_AWARE)}=True needs the distributed optimizer "
                        f"(megatron-core asserts it): set {prefix}.megatron.use_distributed_optimizer=True")
    for name in DTYPE_FIELDS:
        if name not in items or dtype_name(items[name]) in (None, "float32"):
            continue
        if not aware:
            problems.append(f"{role}: {_key(prefix, name)}={items[name]!r} acts only with the precision-aware "
                            f"optimizer (megatron-core keeps fp32 otherwise): set "
                            f"{_key(prefix, PRECISION_AWARE)}=True, or remove it")
        elif name == "main_grads_dtype":
            problems.append(f"{role}: {_key(prefix, name)}={items[name]!r}: gradient buffers below fp32 are not "
                            "supported by verl_lite yet (its Megatron DDP reduces gradients in fp32); remove it")
    return problems


def cpu_offload_fields(items: Dict[str, Any]) -> List[str]:
    return [name for name in CPU_OFFLOAD_FIELDS if name in items]


def role_warnings(cfg: Any, role: str, strategy: str, device: str) -> List[str]:
    """The CPU optimizer's settings without optimizer_cpu_offload=True have no effect (megatron-core reads
    them only under it); on cpu none of them has: Adam's state already lives in host memory."""
    if role not in ROLES_WITH_OPTIM or strategy != "megatron":
        return []
    items = _items(roles.section(cfg, role).optim)
    names = ", ".join(_key(roles.SECTION[role], n) for n in cpu_offload_fields(items))
    if not _on(items, "optimizer_cpu_offload"):
        idle = [n for n in cpu_offload_fields(items) if n != "optimizer_cpu_offload"]
        return [f"{', '.join(_key(roles.SECTION[role], n) for n in idle)} {'has' if len(idle) == 1 else 'have'} no "
                f"effect without {_key(roles.SECTION[role], 'optimizer_cpu_offload')}=True (megatron-core's CPU "
                "optimizer reads them)"] if idle else []
    if device != "cpu":
        return []
    return [f"{names} {'has' if ',' not in names else 'have'} no effect on trainer.device=cpu: megatron's CPU "
            "optimizer offload moves Adam's state and step to host memory, where a cpu run keeps them already "
            "(the engine builds megatron's Adam without it)"]


def summary_line(cfg: Any, role: str, device: str) -> Optional[str]:
    """The preflight summary line of a Megatron role with overrides: what reaches OptimizerConfig."""
    if role not in ROLES_WITH_OPTIM:
        return None
    items = _items(roles.section(cfg, role).optim)
    if not items:
        return None
    shown = ", ".join(f"{k}={v}" for k, v in items.items())
    notes = []
    if device == "cpu" and cpu_offload_fields(items):
        notes.append(f"{', '.join(cpu_offload_fields(items))} left out on cpu (Adam's state is in host memory already)")
    elif _on(items, "optimizer_cpu_offload"):
        notes.append(f"megatron's HybridDeviceOptimizer: Adam's state and step on the host for a fraction "
                     f"{items.get('optimizer_offload_fraction', 0.0)} of the parameters")
    if _on(items, PRECISION_AWARE) and device != "cpu":
        notes.append("the workers need Transformer Engine (FusedAdam) for use_precision_aware_optimizer")
    return f"  optimizer   : megatron Adam + OptimizerConfig({shown})" + (f"; {'; '.join(notes)}" if notes else "")


def engine_overrides(items: Dict[str, Any], device: str, fields: tuple, prefix: str = "optim") -> Dict[str, Any]:
    """The overrides as OptimizerConfig keyword arguments for an engine on `device`: checked against
    the installed OptimizerConfig's `fields` (ValueError naming the valid ones), dtype names as torch
    dtypes, and on cpu without the CPU offload fields (they would move nothing)."""
    import torch

    problems = field_problems(items, prefix, fields)
    if problems:
        raise ValueError("; ".join(problems))
    out = {}
    for name, value in items.items():
        if device == "cpu" and name in CPU_OFFLOAD_FIELDS:
            continue
        out[name] = getattr(torch, dtype_name(value)) if name in DTYPE_FIELDS else value
    return out
