"""The preflight rules: each function returns the problems of one kind, as messages that carry
the arithmetic and the fix. `verl_lite.check` runs them; the trainer's entry runs them with
`for_training=True` (paths, packages, device presence).

Layouts follow Megatron and verl: DP = devices / (TP*PP*CP) (fsdp: all devices), expert groups
EP*ETP*PP (ETP defaults to TP), and a step's `train_batch_size * rollout.n` sequences split over
DP ranks and into mini-batches.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from verl_lite import device as devices
from verl_lite.config import roles
from verl_lite.decisions import bridge_choice
from verl_lite.models import model_dir_problem
from verl_lite.decisions.repatch import RepatchError, build_repatch_dict
from verl_lite.decisions.switches import switch

BRIDGE_KEYS = ("use_ascend_gdn", "use_triton_gdn")
# Megatron settings that place layers unevenly over pipeline stages; with them the layer count
# need not divide by PP.
MEGATRON_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
)
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


def world_size(cfg: Any) -> int:
    return int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)


def role_layout(cfg: Any, role: str) -> Layout:
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
    world = world_size(cfg)
    if world > 0 and layout.model_parallel > 0 and world % layout.model_parallel == 0:
        layout.dp = world // layout.model_parallel
    return layout


def text_config(hf: Dict[str, Any]) -> Dict[str, Any]:
    return hf.get("text_config") or hf


def expert_count(hf: Optional[Dict[str, Any]]) -> Optional[int]:
    """Routed experts of a model config (Qwen3.5 MoE: num_experts, possibly under text_config)."""
    if not hf:
        return None
    for source in (text_config(hf), hf):
        for key in ("num_experts", "num_local_experts", "n_routed_experts"):
            if source.get(key):
                return int(source[key])
    return 0


# ---------------------------------------------------------------------------- config-only rules


def positive_problems(cfg: Any) -> List[str]:
    """Sizes the arithmetic divides by must be >= 1 (optional ones only when set)."""
    required = [
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
        "data.train_batch_size",
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.nccl_timeout",
        "critic.nccl_timeout",
        "data.filter_overlong_prompts_workers",
    ]
    optional = ["critic.ppo_mini_batch_size", "actor_rollout_ref.model.linear_attention_chunk_size",
                "critic.model.linear_attention_chunk_size"]
    for role in roles.active_roles(cfg):
        if roles.strategy(cfg, role) == "megatron":
            prefix = f"{roles.SECTION[role]}.megatron."
            required += [prefix + k for k in MEGATRON_SIZES]
            optional += [prefix + "expert_tensor_parallel_size", prefix + "virtual_pipeline_model_parallel_size"]
    problems = []
    for key in required + optional:
        value = _select(cfg, key)
        if value is None and key in optional:
            continue
        if not isinstance(value, int) or value < 1:
            problems.append(f"{key}={value!r} must be a positive integer")
    return problems


def clip_problems(cfg: Any) -> List[str]:
    """verl 0.9's engines (FSDP and Megatron alike) clip gradients at `<section>.optim.clip_grad`;
    `<section>.grad_clip` is the legacy key they no longer read. A grad_clip the user changed is
    refused with the key to set instead, never silently dropped."""
    from verl_lite.config.schema import ActorConfig, CriticConfig

    defaults = {"actor": ActorConfig().grad_clip, "critic": CriticConfig().grad_clip}
    problems = []
    for role in ("actor", "critic"):
        if role not in roles.active_roles(cfg):
            continue
        section = roles.SECTION[role]
        value = roles.section(cfg, role).grad_clip
        if value != defaults[role]:
            problems.append(f"{section}.grad_clip={value} is not read: verl's engines clip gradients at "
                            f"{section}.optim.clip_grad (now {roles.section(cfg, role).optim.clip_grad}); "
                            f"set {section}.optim.clip_grad={value} instead")
    return problems


def _select(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def layout_problems(cfg: Any, layout: Layout) -> List[str]:
    if layout.strategy != "megatron":
        return []
    world, p = world_size(cfg), layout.prefix
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


def batch_problems(cfg: Any, layout: Layout) -> List[str]:
    """verl's batch arithmetic: a step's sequences split over DP ranks and into mini-batches."""
    if layout.dp is None:
        return []
    batch, n, dp, role = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n, layout.dp, layout.role
    how = (
        f"{world_size(cfg)} devices / TP*PP*CP {layout.model_parallel}"
        if layout.strategy == "megatron"
        else f"{world_size(cfg)} devices, fsdp"
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


def rollout_problems(cfg: Any) -> List[str]:
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


def _same_as_actor(cfg: Any, role: str) -> bool:
    """The ref inherits the actor's overrides by default: report their problems once, on the actor."""
    return role == "ref" and _override_config(cfg, "ref") == _override_config(cfg, "actor")


def bridge_problems(cfg: Any, role: str, device: str, hf: Optional[Dict[str, Any]] = None,
                    installed: Optional[Dict[str, bool]] = None, registered: Any = (),
                    nodes_elsewhere: bool = False) -> List[str]:
    """MindSpeed-Bridge keys off npu, and the bridge switches (`decisions/bridge_choice.py`): the bridge
    the role's engine would build with, or why none can. `installed` defaults to this machine's packages."""
    problems = []
    if device != "npu" and not _same_as_actor(cfg, role):
        overrides = _override_config(cfg, role)
        problems += [
            f"{roles.SECTION[role]}.megatron.override_transformer_config.{k} is a MindSpeed-Bridge setting for "
            f"device npu, but the target device is {device}: remove it "
            "(USE_MINDSPEED_BRIDGE=True applies only with DEVICE=npu)"
            for k in BRIDGE_KEYS
            if k in overrides
        ]
    try:
        choose_role_bridge(cfg, role, device, hf, installed, registered, nodes_elsewhere)
    except bridge_choice.BridgeRefusal as e:
        problems.append(f"{role}: {e}")
    return problems


def choose_role_bridge(cfg: Any, role: str, device: str, hf: Optional[Dict[str, Any]],
                       installed: Optional[Dict[str, bool]], registered: Any,
                       nodes_elsewhere: bool = False) -> bridge_choice.BridgeChoice:
    return bridge_choice.choose_bridge(
        f"{roles.SECTION[role]}.megatron", roles.section(cfg, role).megatron, hf, device,
        bridge_choice.installed_here() if installed is None else installed, registered,
        value_model=roles.MODEL_TYPE[role] == "value_model", nodes_elsewhere=nodes_elsewhere)


def npu_problems(cfg: Any, layout: Layout) -> List[str]:
    prefix = f"{layout.prefix}.override_transformer_config"
    if _same_as_actor(cfg, layout.role):
        return []
    try:
        build_repatch_dict(roles.section(cfg, layout.role).megatron)
    except RepatchError as e:
        return [f"{layout.role}: {e}"]
    if switch(_override_config(cfg, layout.role).get("use_flash_attn_npu_batch_invariant")) and layout.cp > 1:
        return [
            f"{layout.role}: {prefix}.use_flash_attn_npu_batch_invariant does not work with context parallelism "
            f"(CP={layout.cp}); MindSpeed rejects it ('--use-flash-attn-npu-batch-invariant does not support context "
            f"parallelism yet.'): set {layout.prefix}.context_parallel_size=1 or drop the flag"
        ]
    return []


# ---------------------------------------------------------------------------- model-config rules


def model_problems(cfg: Any, layout: Layout, hf: Optional[Dict[str, Any]], device: Optional[str] = None,
                   replicate_kv: bool = False, shape: Optional[str] = None) -> List[str]:
    """The layout against the model's shape. replicate_kv: the bridge (Megatron-Bridge, mbridge) runs
    megatron-core's attention, which takes TP > key/value heads; verl_lite's own bridges do not.
    shape: how the model is named in messages (e.g. a shipped shape), default the model path."""
    if not hf or layout.strategy != "megatron":
        return []
    text, role, p = text_config(hf), layout.role, layout.prefix
    path = shape or roles.model_path(cfg, role)
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
    for hf_key, what in (("num_attention_heads", "attention heads"), ("num_key_value_heads", "key/value heads"),
                         ("linear_num_key_heads", "Gated DeltaNet key heads"),
                         ("linear_num_value_heads", "Gated DeltaNet value heads")):
        heads = text.get(hf_key)
        if not heads or heads % layout.tp == 0:
            continue
        if hf_key == "num_key_value_heads" and replicate_kv and layout.tp % heads == 0:
            continue  # megatron-core gives each TP rank one replicated key/value group
        problems.append(
            f"{role}: {p}.tensor_model_parallel_size={layout.tp} does not divide the {heads} {what} of {path}: "
            f"{heads} % {layout.tp} = {heads % layout.tp}"
            + (f" (TP > key/value heads works only through Megatron-Bridge/mbridge, where megatron-core "
               f"replicates them: TP must then be a multiple of {heads})" if hf_key == "num_key_value_heads" else "")
        )
    layers, stages = text.get("num_hidden_layers"), layout.pp * (layout.vpp or 1)
    uneven = any(k in _override_config(cfg, role) for k in UNEVEN_PP_KEYS)
    if layers and not uneven and layers % stages:
        problems.append(
            f"{role}: {layers} layers of {path} do not split evenly over PP*VPP = {layout.pp}*{layout.vpp or 1} = "
            f"{stages} stages: {layers} % {stages} = {layers % stages} (or set num_layers_in_first/last_pipeline_stage)"
        )
    # remove-padding (packed GDN input included) is decided in decisions/packing_mode.py (verl_rules refuses)
    return problems


# ---------------------------------------------------------------------------- training-machine rules


def _as_list(value: Any) -> List[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def path_problems(cfg: Any) -> List[str]:
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


def environment_problems(cfg: Any, device: str, explicit: bool) -> List[str]:
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
    # a missing vllm is reported by rollout_rules (with the install line per device)
    loggers = list(cfg.trainer.logger or ())
    if "tensorboard" in loggers:
        needed.append(("tensorboard", "tensorboard for trainer.logger (pip install tensorboard)"))
    if "wandb" in loggers:
        needed.append(("wandb", "wandb for trainer.logger (pip install wandb)"))
        problems += wandb_problems()
    for module, what in needed:
        if importlib.util.find_spec(module) is None:
            problems.append(f"this run needs {what}: module {module!r} is not installed")
    return problems


def wandb_problems(environ: Optional[Dict[str, str]] = None) -> List[str]:
    """wandb online needs credentials, else it stops the run after Ray has started to ask for them."""
    env = os.environ if environ is None else environ
    if env.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") or env.get("WANDB_API_KEY"):
        return []
    netrc = env.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        with open(netrc, encoding="utf-8") as f:
            if "api.wandb.ai" in f.read():
                return []
    except OSError:
        pass
    return ["trainer.logger has wandb, but no wandb credentials are set (WANDB_API_KEY or `wandb login`); "
            "set them, or WANDB_MODE=offline to write the run locally (`wandb sync` uploads it later)"]
