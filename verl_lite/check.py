"""Preflight check: `python -m verl_lite.check <overrides...>` composes the config, reports every
problem at once (exit 1, no traceback) or prints what the run would do (exit 0): the target
device, each role's parallel layout and engine class, the MindSpeed repatch dict on npu+megatron,
and the worker runtime env. No torch, megatron, ray or transformers is imported, so it answers in
well under a second on a laptop, for a cluster's layout.

`collect_problems(cfg, for_training=True)` adds what only matters on the machine that trains:
data and model paths, a writable checkpoint dir, the device and packages being present.
`python -m verl_lite.main` runs it before training.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from verl_lite import device as devices
from verl_lite import registry
from verl_lite.config import choices, roles
from verl_lite.models import is_gdn_model, model_dir_problem, read_hf_config, resolve_model_dir
from verl_lite.repatch import RepatchError, build_repatch_dict

PROG = "verl_lite.check"
BRIDGE_KEYS = ("use_ascend_gdn", "use_triton_gdn")
# Megatron settings that place layers unevenly over pipeline stages; with them the layer count
# need not divide by PP.
UNEVEN_PP_KEYS = (
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "pipeline_model_parallel_layout",
)


@dataclass
class Layout:
    """One role's parallel layout over the training devices."""

    role: str
    strategy: str
    prefix: str  # where the role's megatron settings live
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: Optional[int] = None
    dp: Optional[int] = None  # None when the devices do not divide

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp


def _world(cfg: Any) -> int:
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def _layout(cfg: Any, role: str) -> Layout:
    strategy = roles.strategy(cfg, role)
    prefix = f"{roles.SECTION[role]}.megatron"
    layout = Layout(role, strategy, prefix)
    if strategy == "megatron":
        m = roles.section(cfg, role).megatron
        layout.tp, layout.pp, layout.cp = (
            m.tensor_model_parallel_size,
            m.pipeline_model_parallel_size,
            m.context_parallel_size,
        )
        layout.ep, layout.vpp = m.expert_model_parallel_size, m.virtual_pipeline_model_parallel_size
        layout.etp = m.expert_tensor_parallel_size if m.expert_tensor_parallel_size is not None else layout.tp
    world = _world(cfg)
    if world > 0 and layout.model_parallel > 0 and world % layout.model_parallel == 0:
        layout.dp = world // layout.model_parallel
    return layout


def _text_config(hf: Dict[str, Any]) -> Dict[str, Any]:
    return hf.get("text_config") or hf


def expert_count(hf: Optional[Dict[str, Any]]) -> Optional[int]:
    """Routed experts of a model config (Qwen3.5 MoE: num_experts, possibly under text_config)."""
    if not hf:
        return None
    for source in (_text_config(hf), hf):
        for key in ("num_experts", "num_local_experts", "n_routed_experts"):
            if source.get(key):
                return int(source[key])
    return 0


# ---------------------------------------------------------------------------- config-only rules


def _positive_problems(cfg: Any) -> List[str]:
    keys = [
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
        "data.train_batch_size",
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
    ]
    for role in roles.active_roles(cfg):
        if roles.strategy(cfg, role) == "megatron":
            prefix = f"{roles.SECTION[role]}.megatron."
            keys += [
                prefix + k
                for k in (
                    "tensor_model_parallel_size",
                    "pipeline_model_parallel_size",
                    "context_parallel_size",
                    "expert_model_parallel_size",
                )
            ]
    problems = []
    for key in keys:
        value = _select(cfg, key)
        if not isinstance(value, int) or value < 1:
            problems.append(f"{key}={value!r} must be a positive integer")
    return problems


def _select(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _layout_problems(cfg: Any, layout: Layout) -> List[str]:
    if layout.strategy != "megatron":
        return []
    world, p = _world(cfg), layout.prefix
    nodes = (
        f"trainer.nnodes={cfg.trainer.nnodes} x trainer.n_gpus_per_node={cfg.trainer.n_gpus_per_node} = {world} devices"
    )
    problems = []
    if world % layout.model_parallel:
        problems.append(
            f"{layout.role}: {nodes} is not divisible by TP*PP*CP = {layout.tp}*{layout.pp}*{layout.cp} = "
            f"{layout.model_parallel} ({p}.tensor/pipeline_model_parallel_size, context_parallel_size): "
            f"{world} % {layout.model_parallel} = {world % layout.model_parallel}"
        )
    expert_group = layout.ep * layout.etp * layout.pp
    if layout.ep > 1 and world % expert_group:
        problems.append(
            f"{layout.role}: {nodes} is not divisible by EP*ETP*PP = {layout.ep}*{layout.etp}*{layout.pp} = "
            f"{expert_group} ({p}.expert_model_parallel_size, expert_tensor_parallel_size): "
            f"{world} % {expert_group} = {world % expert_group}"
        )
    return problems


def _batch_problems(cfg: Any, layout: Layout) -> List[str]:
    """verl's batch arithmetic: a step's sequences split over DP ranks and into mini-batches."""
    if layout.dp is None:
        return []
    batch, n, dp, role = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n, layout.dp, layout.role
    how = (
        f"{_world(cfg)} devices / TP*PP*CP {layout.model_parallel}"
        if layout.strategy == "megatron"
        else f"{_world(cfg)} devices, fsdp"
    )
    sequences = batch * n
    problems = []
    if sequences % dp:
        problems.append(
            f"{role}: data.train_batch_size * rollout.n = {batch}*{n} = {sequences} is not divisible by the "
            f"data-parallel size {dp} ({how}): {sequences} % {dp} = {sequences % dp}"
        )
    if role == "ref":
        return problems
    if role == "critic":
        mini_key = (
            "critic.ppo_mini_batch_size"
            if cfg.critic.ppo_mini_batch_size is not None
            else "actor_rollout_ref.actor.ppo_mini_batch_size"
        )
        mini = cfg.critic.ppo_mini_batch_size or cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        micro, micro_key, dynamic = (
            cfg.critic.ppo_micro_batch_size_per_gpu,
            "critic.ppo_micro_batch_size_per_gpu",
            cfg.critic.use_dynamic_bsz,
        )
    else:
        mini_key, mini = "actor_rollout_ref.actor.ppo_mini_batch_size", cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        micro_key = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
        micro, dynamic = (
            cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu,
            cfg.actor_rollout_ref.actor.use_dynamic_bsz,
        )
    if mini < 1:
        return problems
    if mini > batch:
        problems.append(
            f"{role}: {mini_key}={mini} is larger than data.train_batch_size={batch}; lower it to at most {batch}"
        )
    elif sequences % (mini * n):
        problems.append(
            f"{role}: data.train_batch_size * rollout.n = {sequences} is not divisible by {mini_key} * rollout.n = "
            f"{mini}*{n} = {mini * n}: {sequences} % {mini * n} = {sequences % (mini * n)} "
            "(a step must split into whole mini-batches)"
        )
    if (mini * n) % dp:
        problems.append(
            f"{role}: {mini_key} * rollout.n = {mini}*{n} = {mini * n} is not divisible by the data-parallel size "
            f"{dp} ({how}): {mini * n} % {dp} = {(mini * n) % dp}"
        )
    elif micro and not dynamic and ((mini * n) // dp) % micro:
        per_rank = (mini * n) // dp
        problems.append(
            f"{role}: a mini-batch gives each of the {dp} data-parallel ranks {mini * n}/{dp} = {per_rank} sequences, "
            f"not divisible by {micro_key}={micro}: {per_rank} % {micro} = {per_rank % micro}"
        )
    return problems


def _rollout_problems(cfg: Any) -> List[str]:
    rollout = cfg.actor_rollout_ref.rollout
    tp = rollout.tensor_model_parallel_size
    per_node, key = cfg.trainer.n_gpus_per_node, "trainer.n_gpus_per_node"
    if rollout.n_gpus_per_node > 0:  # fully-async: rollout has its own devices
        per_node, key = rollout.n_gpus_per_node, "actor_rollout_ref.rollout.n_gpus_per_node"
    if tp >= 1 and per_node >= 1 and per_node % tp:
        return [
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} does not divide {key}={per_node} "
            f"({per_node} % {tp} = {per_node % tp}): a rollout TP group must fit in one node"
        ]
    return []


def _override_config(cfg: Any, role: str) -> Dict[str, Any]:
    node = roles.section(cfg, role).megatron.override_transformer_config
    return dict(node.items()) if hasattr(node, "items") else dict(node)


def _bridge_problems(cfg: Any, role: str, device: str) -> List[str]:
    if device == "npu":
        return []
    overrides = _override_config(cfg, role)
    return [
        f"{roles.SECTION[role]}.megatron.override_transformer_config.{k} is a MindSpeed-Bridge setting for "
        f"device npu, but the target device is {device}: remove it "
        "(USE_MINDSPEED_BRIDGE=True applies only with DEVICE=npu)"
        for k in BRIDGE_KEYS
        if k in overrides
    ]


def _npu_problems(cfg: Any, layout: Layout) -> List[str]:
    prefix = f"{layout.prefix}.override_transformer_config"
    try:
        build_repatch_dict(roles.section(cfg, layout.role).megatron)
    except RepatchError as e:
        return [f"{layout.role}: {e}"]
    if _truthy(_override_config(cfg, layout.role).get("use_flash_attn_npu_batch_invariant")) and layout.cp > 1:
        return [
            f"{layout.role}: {prefix}.use_flash_attn_npu_batch_invariant does not work with context parallelism "
            f"(CP={layout.cp}); MindSpeed rejects it ('--use-flash-attn-npu-batch-invariant does not support context "
            f"parallelism yet.'): set {layout.prefix}.context_parallel_size=1 or drop the flag"
        ]
    return []


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


# ---------------------------------------------------------------------------- model-config rules


def _model_problems(cfg: Any, layout: Layout, hf: Optional[Dict[str, Any]]) -> List[str]:
    if not hf or layout.strategy != "megatron":
        return []
    text, role, p = _text_config(hf), layout.role, layout.prefix
    path = roles.model_path(cfg, role)
    problems = []
    experts = expert_count(hf)
    if layout.ep > 1 and not experts:
        problems.append(
            f"{role}: {p}.expert_model_parallel_size={layout.ep} but {path} has no experts (dense model): set it to 1"
        )
    elif experts and experts % layout.ep:
        problems.append(
            f"{role}: {p}.expert_model_parallel_size={layout.ep} does not divide the {experts} experts of {path}: "
            f"{experts} % {layout.ep} = {experts % layout.ep}"
        )
    for hf_key, what in (("num_attention_heads", "attention heads"), ("num_key_value_heads", "key/value heads")):
        heads = text.get(hf_key)
        if heads and heads % layout.tp:
            problems.append(
                f"{role}: {p}.tensor_model_parallel_size={layout.tp} does not divide the {heads} {what} of {path}: "
                f"{heads} % {layout.tp} = {heads % layout.tp}"
            )
    layers, stages = text.get("num_hidden_layers"), layout.pp * (layout.vpp or 1)
    uneven = any(k in _override_config(cfg, role) for k in UNEVEN_PP_KEYS)
    if layers and not uneven and layers % stages:
        problems.append(
            f"{role}: {layers} layers of {path} do not split evenly over PP*VPP = {layout.pp}*{layout.vpp or 1} = "
            f"{stages} stages: {layers} % {stages} = {layers % stages} (or set num_layers_in_first/last_pipeline_stage)"
        )
    if is_gdn_model(hf):
        problems.extend(_gdn_problems(cfg, role))
    return problems


def _gdn_problems(cfg: Any, role: str) -> List[str]:
    arr = cfg.actor_rollout_ref
    flags = {
        "actor": [
            ("actor_rollout_ref.model.use_remove_padding", arr.model.use_remove_padding),
            ("actor_rollout_ref.actor.use_dynamic_bsz", arr.actor.use_dynamic_bsz),
            ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", arr.rollout.log_prob_use_dynamic_bsz),
        ],
        "ref": [("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", arr.ref.log_prob_use_dynamic_bsz)],
        "critic": [
            ("critic.model.use_remove_padding", cfg.critic.model.use_remove_padding),
            ("critic.use_dynamic_bsz", cfg.critic.use_dynamic_bsz),
        ],
    }[role]
    return [
        f"{role}: {key}=True is not supported for Gated DeltaNet models (Qwen3.5) on megatron: Megatron cannot pack "
        f"GDN sequences (THD); set {key}=False"
        for key, on in flags
        if on
    ]


# ---------------------------------------------------------------------------- training-machine rules


def _as_list(value: Any) -> List[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _path_problems(cfg: Any) -> List[str]:
    problems = []
    for key in ("data.train_files", "data.val_files"):
        files = _as_list(_select(cfg, key))
        if key == "data.train_files" and not files:
            problems.append("data.train_files is empty: point it at parquet files")
        for f in files:
            if not os.path.isfile(os.path.expanduser(os.path.expandvars(f))):
                problems.append(f"{key}: {f} does not exist (point {key} at parquet files)")
    for role in roles.active_roles(cfg):
        if role == "critic" and cfg.critic.model.path:
            problem = model_dir_problem(cfg.critic.model.path)
            if problem:
                problems.append(f"critic.model.path: {problem}")
    problem = model_dir_problem(cfg.actor_rollout_ref.model.path)
    if problem:
        problems.append(problem)
    reward = cfg.custom_reward_function.path
    if reward and not os.path.isfile(os.path.expanduser(reward)):
        problems.append(f"custom_reward_function.path: {reward} does not exist")
    problems.extend(_checkpoint_dir_problems(cfg.trainer.default_local_dir))
    return problems


def _checkpoint_dir_problems(path: str) -> List[str]:
    target = os.path.abspath(os.path.expanduser(path))
    probe = target
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return [f"trainer.default_local_dir: {path} cannot be created: {probe} is a file"]
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == target else f"cannot be created: {probe} is not writable"
        return [f"trainer.default_local_dir: {path} {what} (point it at a writable directory)"]
    return []


def _environment_problems(cfg: Any, device: str, explicit: bool) -> List[str]:
    problems = []
    if explicit and not devices.device_available(device):
        problems.append(
            f"trainer.device={device}, but no {device} device is usable here (its driver, device nodes or "
            f"{'torch_npu' if device == 'npu' else 'a CUDA build of torch'} is missing); use trainer.device=auto or cpu"
        )
    needed = []
    if any(roles.strategy(cfg, r) == "megatron" for r in roles.active_roles(cfg)):
        needed.append(("megatron", "megatron-core (pip install 'verl_lite[megatron]')"))
        if device == "npu":
            needed.append(("mindspeed", "MindSpeed (source install, see the README's Ascend section)"))
    if cfg.actor_rollout_ref.rollout.name == "vllm":
        needed.append(("vllm", "vllm (or use actor_rollout_ref.rollout.name=hf)"))
    for module, what in needed:
        if importlib.util.find_spec(module) is None:
            problems.append(f"this run needs {what}: module {module!r} is not installed")
    return problems


# ---------------------------------------------------------------------------- entry points


def _target_device(cfg: Any) -> str:
    return devices.resolve_device(cfg.trainer.device)


def collect_problems(cfg: Any, for_training: bool) -> List[str]:
    """Every problem of a composed config; [] when the run can start. Paths, packages and the
    device's presence are checked only `for_training` (a laptop checks a cluster's layout)."""
    try:
        device = _target_device(cfg)
    except devices.DeviceError as e:
        return [str(e)]
    problems = _positive_problems(cfg)
    if problems:  # the arithmetic below divides by these
        return problems
    active = [r for r in roles.active_roles(cfg) if roles.strategy(cfg, r) in choices.STRATEGIES]
    hf_cache: Dict[str, Optional[Dict[str, Any]]] = {}
    for role in active:
        layout = _layout(cfg, role)
        problems += _layout_problems(cfg, layout)
        problems += _batch_problems(cfg, layout)
        path = roles.model_path(cfg, role)
        if path not in hf_cache:
            hf_cache[path] = read_hf_config(path)
        problems += _model_problems(cfg, layout, hf_cache[path])
        if layout.strategy == "megatron":
            problems += _bridge_problems(cfg, role, device)
            if device == "npu":
                problems += _npu_problems(cfg, layout)
        try:
            registry.resolve_engine(cfg, role, device)
        except registry.RegistryError as e:
            problems.append(f"{role}: {e}")
    problems += _rollout_problems(cfg)
    if for_training:
        problems += _path_problems(cfg)
        problems += _environment_problems(cfg, device, explicit=cfg.trainer.device != "auto")
    return list(dict.fromkeys(problems))


def summarize(cfg: Any) -> str:
    """What the run would do: device, layouts, engine classes, repatch dicts, worker env."""
    from verl_lite.runtime_env import get_runtime_env, needs_max_connections, query_gpu_capability, uses_megatron

    device = _target_device(cfg)
    t = cfg.trainer
    batch, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    lines = [
        f"target device : {device} (trainer.device={t.device})",
        f"devices       : {t.nnodes} node(s) x {t.n_gpus_per_node} = {_world(cfg)}",
        f"algorithm     : {cfg.algorithm.adv_estimator}, {batch} prompts x n {n} = {batch * n} sequences per step",
        _model_line(cfg),
    ]
    active = roles.active_roles(cfg)
    for role in roles.ROLES:
        if role not in active:
            lines.append(_inactive_line(cfg, role, device))
            continue
        layout = _layout(cfg, role)
        shape = (
            "fsdp"
            if layout.strategy == "fsdp"
            else (
                f"megatron TP {layout.tp} PP {layout.pp} CP {layout.cp} EP {layout.ep} ETP {layout.etp}"
                + (f" VPP {layout.vpp}" if layout.vpp else "")
            )
        )
        lines.append(f"{role:<14}: {shape} -> DP {layout.dp}")
        lines.append(f"  engine      : {registry.resolve_engine(cfg, role, device)}")
        if layout.strategy == "megatron" and device == "npu":
            lines.append(f"  repatch     : {build_repatch_dict(roles.section(cfg, role).megatron)!r}")
    rollout = cfg.actor_rollout_ref.rollout
    lines.append(
        f"rollout       : {rollout.name} TP {rollout.tensor_model_parallel_size} -> "
        f"{registry.ROLLOUTS.resolve(rollout.name)}"
    )
    capability = query_gpu_capability() if device == "cuda" and uses_megatron(cfg) else None
    env = get_runtime_env(cfg, device, gpu_capability=capability)["env_vars"]
    lines.append("runtime env   : " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    if device == "cuda" and uses_megatron(cfg) and capability is None:
        lines.append(
            f"{'':16}(GPU capability unknown here: CUDA_DEVICE_MAX_CONNECTIONS=1 is added on compute capability "
            "8.x/9.x)"
        )
    elif needs_max_connections(cfg, device, capability):
        lines.append(
            f"{'':16}(CUDA_DEVICE_MAX_CONNECTIONS=1: megatron on compute capability {capability[0]}.{capability[1]})"
        )
    return "\n".join(lines)


def _inactive_line(cfg: Any, role: str, device: str) -> str:
    if role == "ref":
        why = "actor_rollout_ref.actor.use_kl_loss=False, algorithm.use_kl_in_reward=False"
    elif cfg.critic.enable is None:
        why = f"algorithm.adv_estimator={cfg.algorithm.adv_estimator}"
    else:
        why = "critic.enable=False"
    try:
        engine = registry.resolve_engine(cfg, role, device)
    except registry.RegistryError as e:
        engine = f"none ({e})"
    return f"{role:<14}: not used ({why}); its engine would be {roles.strategy(cfg, role)} -> {engine}"


def _model_line(cfg: Any) -> str:
    path = cfg.actor_rollout_ref.model.path
    hf = read_hf_config(path)
    if hf is None:
        return f"model         : {path} (config.json not readable here: expert, head and GDN checks skipped)"
    experts = expert_count(hf)
    traits = [str(_text_config(hf).get("model_type") or hf.get("model_type", "?"))]
    traits.append(f"{experts} experts" if experts else "dense")
    if is_gdn_model(hf):
        traits.append("Gated DeltaNet")
    return f"model         : {resolve_model_dir(path)} ({', '.join(traits)})"


USAGE = f"""usage: python -m {PROG} [--training] key=value [+key=value ++key=value ~key ...]

Compose a verl_lite run config and check it without starting anything: print every problem
(exit 1) or a summary of devices, layouts, engine classes, repatch dicts and worker env (exit 0).
  --training  also check data and model paths, the checkpoint dir, the device and packages
Overrides are applied in order (the last one wins); see docs/config.md."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return 0
    for_training = "--training" in args
    overrides = [a for a in args if a != "--training"]  # order kept: later overrides win
    start = time.perf_counter()
    from verl_lite.config.compose import compose_config

    cfg, problems = compose_config(overrides)
    problems += [p for p in collect_problems(cfg, for_training=for_training) if p not in problems]
    if problems:
        print(f"{PROG}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(summarize(cfg))
    print(f"{PROG}: OK ({time.perf_counter() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
