"""Preflight check: `python -m verl_lite.check <overrides...>` composes the config, reports every
problem at once (exit 1, no traceback) or prints what the run would do (exit 0): the target
device, each role's parallel layout and engine class, the MindSpeed repatch dict on npu+megatron,
and the worker runtime env. No torch, megatron, ray or transformers is imported, so it answers in
well under a second on a laptop, for a cluster's layout.

`collect_problems(cfg, for_training=True)` adds what only matters on the machine that trains:
data and model paths, a readable model config and a tokenizer, a writable checkpoint dir with room
for a checkpoint, the device, enough devices on a one-node run, and packages being present.
`python -m verl_lite.main` runs it before training, so all of this is refused before Ray starts.

Secrets: values of env vars whose names contain KEY, TOKEN (not TOKENIZER), SECRET or PASSWORD
are printed as <masked> (`redact`), here and in the trainer's logs, wherever they appear.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from verl_lite import device as devices
from verl_lite import registry
from verl_lite.config import choices, roles, rollout_rules, rules, verl_rules
from verl_lite.decisions import bridge_choice, packing_mode
from verl_lite.decisions import optimizer_overrides
from verl_lite.config.shapes import ModelShape, model_shape
from verl_lite.models import is_gdn_model, read_hf_config, resolve_model_dir
from verl_lite.decisions.repatch import build_repatch_dict
from verl_lite.decisions.switches import switch
from verl_lite.secrets import mask_env, redact

PROG = "verl_lite.check"
# Bytes per trained parameter in a checkpoint: fp32 weights + Adam's two fp32 moments.
CKPT_BYTES_PER_PARAM = 12
DEVICE_NODES = {"cuda": ("CUDA_VISIBLE_DEVICES", "nvidia[0-9]*"), "npu": ("ASCEND_RT_VISIBLE_DEVICES", "davinci[0-9]*")}


def _target_device(cfg: Any) -> str:
    return devices.resolve_device(cfg.trainer.device)


def collect_problems(cfg: Any, for_training: bool) -> List[str]:
    """Every problem of a composed config; [] when the run can start. Paths, packages and the
    device's presence are checked only `for_training` (a laptop checks a cluster's layout)."""
    try:
        device = _target_device(cfg)
    except devices.DeviceError as e:
        return [str(e)]
    problems = rules.positive_problems(cfg)
    if problems:  # the arithmetic below divides by these
        return problems
    problems += rules.clip_problems(cfg)
    active = [r for r in roles.active_roles(cfg) if roles.strategy(cfg, r) in choices.STRATEGIES]
    hf_cache: Dict[str, Optional[Dict[str, Any]]] = {}
    installed = bridge_choice.installed_here()
    registered = [key[0] for key in registry.BRIDGES.keys()]
    for role in active:
        layout = rules.role_layout(cfg, role)
        problems += rules.layout_problems(cfg, layout)
        problems += rules.batch_problems(cfg, layout)
        path = roles.model_path(cfg, role)
        shape = model_shape(path)
        if path not in hf_cache:
            hf_cache[path] = shape.hf if shape and shape.origin == "config" else None
        if layout.strategy == "megatron":
            hf = shape.hf if shape else None
            problems += rules.bridge_problems(cfg, role, device, hf, installed, registered,
                                              nodes_elsewhere=_nodes_elsewhere(device, for_training))
            problems += rules.model_problems(cfg, layout, hf, device,
                                             _replicates_kv(cfg, role, device, hf, installed, registered,
                                                            _nodes_elsewhere(device, for_training)),
                                             shape=_shape_name(shape, path))
            if device == "npu":
                problems += rules.npu_problems(cfg, layout)
        try:
            registry.resolve_engine(cfg, role, device)
        except registry.RegistryError as e:
            problems.append(f"{role}: {e}")
    problems += rules.rollout_problems(cfg)
    problems += verl_rules.verl_problems(cfg)  # verl settings accepted by the schema but not acted on yet
    if cfg.async_training.enable:
        from verl_lite.config.async_rules import async_problems  # pure config arithmetic, no torch/ray

        problems += async_problems(cfg)
    if for_training:
        problems += rules.path_problems(cfg)
        problems += model_file_problems(cfg)
        problems += external_bridge_weight_problems(cfg, device, installed, registered)
        problems += disk_problems(cfg, hf_cache.get(cfg.actor_rollout_ref.model.path))
        problems += rules.environment_problems(cfg, device, explicit=cfg.trainer.device != "auto")
        problems += device_count_problems(cfg, device)
        problems += resume_problems(cfg)
        problems += data_source_problems(cfg)
    problems += rollout_rules.rollout_problems(cfg, device, read_hf_config(cfg.actor_rollout_ref.model.path),
                                               for_training)
    return list(dict.fromkeys(problems))


def _shape_name(shape: Optional[ModelShape], path: str) -> str:
    if shape is None or shape.origin == "config":
        return path
    return f"{path} (shipped shape {shape.name})"


def _nodes_elsewhere(device: str, for_training: bool) -> bool:
    """Whether the workers run on other machines than this one: a cuda/npu run checked without
    `--training` (a laptop or login node checking a cluster's run). Packages the nodes need are then
    named in the summary instead of refused."""
    return device != "cpu" and not for_training


def _replicates_kv(cfg: Any, role: str, device: str, hf: Optional[Dict[str, Any]], installed: Dict[str, bool],
                   registered: List[str], nodes_elsewhere: bool = False) -> bool:
    """Megatron-Bridge and mbridge build megatron-core's attention, which takes TP > key/value heads."""
    try:
        choice = rules.choose_role_bridge(cfg, role, device, hf, installed, registered, nodes_elsewhere)
    except bridge_choice.BridgeRefusal:
        return False
    return choice.kind != bridge_choice.VERL_LITE


def external_bridge_weight_problems(cfg: Any, device: str, installed: Dict[str, bool], registered: List[str]) -> List[str]:
    """Megatron-Bridge and mbridge load HF weights from the model directory: no random init there."""
    problems = []
    for role in roles.active_roles(cfg):
        if roles.strategy(cfg, role) != "megatron":
            continue
        path = roles.model_path(cfg, role)
        hf = read_hf_config(path)
        if hf is None:
            continue  # path_problems reports it
        try:
            choice = rules.choose_role_bridge(cfg, role, device, hf, installed, registered)
        except bridge_choice.BridgeRefusal:
            continue  # bridge_problems reports it
        if choice.kind != bridge_choice.VERL_LITE and not glob.glob(os.path.join(resolve_model_dir(path), "*.safetensors")):
            problems.append(f"{role}: {path} has no *.safetensors, but {choice.describe()} loads the HF weights from the "
                            "model directory (random init is verl_lite's own bridges only): point the model path at a "
                            "checkpoint with weights")
    return problems


def collect_warnings(cfg: Any) -> List[str]:
    """Settings that are valid but make a run that cannot learn, or that nothing reads in this run."""
    warnings = []
    algo, rollout = cfg.algorithm, cfg.actor_rollout_ref.rollout
    if algo.adv_estimator == "grpo" and int(rollout.n) == 1:
        warnings.append(
            "algorithm.adv_estimator=grpo with actor_rollout_ref.rollout.n=1: each group holds one response, so "
            "every advantage is 0 and the policy does not learn; set actor_rollout_ref.rollout.n >= 2 (verl's GRPO "
            "scripts use 5-8), or algorithm.adv_estimator=gae to train a critic")
    if not roles.critic_enabled(cfg):
        from omegaconf import OmegaConf

        from verl_lite.config.schema import CriticConfig

        set_keys = _differing_keys(OmegaConf.to_container(cfg.critic, resolve=False),
                                   OmegaConf.to_container(OmegaConf.structured(CriticConfig), resolve=False), "critic")
        set_keys = [k for k in set_keys if k != "critic.enable"]
        if set_keys:
            shown = ", ".join(set_keys[:3]) + (f" and {len(set_keys) - 3} more" if len(set_keys) > 3 else "")
            warnings.append(
                f"{shown} {'is' if len(set_keys) == 1 else 'are'} set, but no critic runs "
                f"(algorithm.adv_estimator={algo.adv_estimator}{', critic.enable=False' if cfg.critic.enable is False else ''}"
                "): the critic trains only with algorithm.adv_estimator=gae (verl's default) or critic.enable=True")
    warnings += verl_rules.verl_warnings(cfg)  # verl settings with no effect in this run
    from verl_lite.runtime_env import DEVICE_ENV, runtime_env_overrides

    try:
        device = _target_device(cfg)
    except devices.DeviceError:
        device = None  # collect_problems reports the device
    if device in DEVICE_ENV:  # ray_init.runtime_env.env_vars that replace verl_lite's own variables
        warnings += runtime_env_overrides(cfg, device)
    return warnings


def _differing_keys(value: Any, default: Any, prefix: str) -> List[str]:
    """Dotted keys under `prefix` whose value differs from the default (the user set them)."""
    if isinstance(value, dict) and isinstance(default, dict):
        out: List[str] = []
        for k in value:
            out += _differing_keys(value[k], default.get(k), f"{prefix}.{k}") if k in default else [f"{prefix}.{k}"]
        return out
    return [] if value == default else [prefix]


def data_source_problems(cfg: Any) -> List[str]:
    """Rows whose data_source no built-in scorer handles, when no custom reward function is set:
    found here from the data_source column alone, before Ray starts and any model is built."""
    if cfg.custom_reward_function.path:
        return []
    import pyarrow.parquet as pq

    from verl_lite.data.dataset import as_file_list, expand
    from verl_lite.reward.manager import SUPPORTED_SOURCES, has_default_scorer

    problems = []
    for key, files in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        for raw in as_file_list(files):
            path = expand(raw)
            try:
                sources = pq.read_table(path, columns=["data_source"]).column(0).to_pylist()
            except Exception:  # a missing or unreadable file, or no such column: the data checks say so
                continue
            unknown: Dict[str, int] = {}
            for source in sources:  # empty or non-string values are the row checks' to report
                if isinstance(source, str) and source and not has_default_scorer(source):
                    unknown[repr(source)] = unknown.get(repr(source), 0) + 1
            if unknown:
                shown = ", ".join(f"{name} ({n} row{'s' if n != 1 else ''})" for name, n in list(unknown.items())[:3])
                problems.append(f"{key}: {raw} has data_source {shown}{' and more' if len(unknown) > 3 else ''}, "
                                f"which no built-in scorer handles (it scores {SUPPORTED_SOURCES}); set "
                                f"custom_reward_function.path to a reward function for them")
    return problems


def resume_problems(cfg: Any) -> List[str]:
    """trainer.resume_mode=resume_path needs a checkpoint dir with a manifest (its hashes are
    checked when the run loads it: hashing a large checkpoint is not a sub-second check)."""
    t = cfg.trainer
    if t.resume_mode != "resume_path":
        return []
    from verl_lite.trainer.checkpoint import MANIFEST

    fix = "(point it at a global_step_N directory of a finished save, or set trainer.resume_mode=auto)"
    if not t.resume_from_path:
        return [f"trainer.resume_mode=resume_path needs trainer.resume_from_path {fix}"]
    path = os.path.abspath(os.path.expanduser(t.resume_from_path))
    if not os.path.isdir(path):
        return [f"trainer.resume_from_path={t.resume_from_path} does not exist {fix}"]
    if not os.path.isfile(os.path.join(path, MANIFEST)):
        return [f"trainer.resume_from_path={t.resume_from_path} has no {MANIFEST}: its save never finished {fix}"]
    return []


# ---------------------------------------------------------------------------- training-machine checks


def model_file_problems(cfg: Any) -> List[str]:
    """A config.json that transformers would choke on, a missing tokenizer, a vocab too small for it."""
    from verl_lite.data.tokenizer import tokenizer_problem
    from verl_lite.models import model_dir_problem

    model = cfg.actor_rollout_ref.model
    problems = []
    hf = None
    if model_dir_problem(model.path) is None:
        config = os.path.join(resolve_model_dir(model.path), "config.json")
        try:
            with open(config, encoding="utf-8") as f:
                hf = json.load(f)
        except ValueError as e:
            problems.append(f"actor_rollout_ref.model.path: {config} is not valid JSON ({e}); fix or replace the file")
        except OSError as e:
            problems.append(f"actor_rollout_ref.model.path: {config} is not readable ({e.strerror})")
        if hf is not None and not isinstance(hf, dict):
            problems.append(f"actor_rollout_ref.model.path: {config} holds a {type(hf).__name__}, not a JSON object")
            hf = None
        if hf is not None and not (hf.get("model_type") or rules.text_config(hf).get("model_type")):
            problems.append(f"actor_rollout_ref.model.path: {config} has no model_type, so transformers cannot "
                            f"pick a model class (add e.g. \"model_type\": \"qwen3_5_text\")")
    tok_path = model.tokenizer_path or model.path
    if model.tokenizer_path or model_dir_problem(model.path) is None:
        problem = tokenizer_problem(tok_path, needs_chat_template=bool(cfg.data.apply_chat_template))
        if problem:
            problems.append(f"actor_rollout_ref.model.tokenizer_path: {problem}")
        elif hf is not None:
            problems += _vocab_problems(hf, resolve_model_dir(tok_path), model.path)
    return problems


def _tokenizer_ids(tok_dir: str) -> Optional[tuple]:
    """(number of ids, file) of the tokenizer in tok_dir: the char tokenizer's alphabet, or the
    largest id in an HF tokenizer.json (its vocab and added tokens) + 1; None when unknown."""
    from verl_lite.data.tokenizer import CHAR_TOKENIZER_FILE, DEFAULT_CHARS, SPECIAL_TOKENS

    char_file = os.path.join(tok_dir, CHAR_TOKENIZER_FILE)
    if os.path.isfile(char_file):
        with open(char_file, encoding="utf-8") as f:
            return len(SPECIAL_TOKENS) + len(json.load(f).get("chars", DEFAULT_CHARS)), char_file
    tok_file = os.path.join(tok_dir, "tokenizer.json")
    if os.path.isfile(tok_file):
        with open(tok_file, encoding="utf-8") as f:
            spec = json.load(f)
        vocab = (spec.get("model") or {}).get("vocab") or {}
        ids = [int(i) for i in (vocab.values() if isinstance(vocab, dict) else [])]
        ids += [int(t["id"]) for t in spec.get("added_tokens") or [] if isinstance(t, dict) and "id" in t]
        return (max(ids) + 1, tok_file) if ids else None
    return None


def _vocab_problems(hf: Dict[str, Any], tok_dir: str, path: str) -> List[str]:
    """The tokenizer's ids must fit the model's embedding (else an IndexError deep in a worker)."""
    vocab = rules.text_config(hf).get("vocab_size") or hf.get("vocab_size")
    if not isinstance(vocab, int):
        return []
    try:
        found = _tokenizer_ids(tok_dir)
    except (OSError, ValueError, AttributeError, TypeError) as e:
        return [f"actor_rollout_ref.model.tokenizer_path: the tokenizer in {tok_dir} is not readable ({e})"]
    if found and vocab < found[0]:
        return [f"actor_rollout_ref.model.path: vocab_size={vocab} in {path} is smaller than the {found[0]} ids of its "
                f"tokenizer ({found[1]}); set vocab_size >= {found[0]}"]
    return []


def estimate_params(hf: Optional[Dict[str, Any]]) -> Optional[int]:
    """A rough parameter count from an HF config (embeddings, attention, dense or expert MLPs)."""
    if not hf:
        return None
    text = rules.text_config(hf)
    h, layers, vocab = text.get("hidden_size"), text.get("num_hidden_layers"), text.get("vocab_size")
    if not all(isinstance(x, int) and x > 0 for x in (h, layers, vocab)):
        return None
    inter = text.get("intermediate_size") or 4 * h
    experts = rules.expert_count(hf)
    if experts:
        mlp = experts * 3 * h * (text.get("moe_intermediate_size") or inter)
        mlp += 3 * h * (text.get("shared_expert_intermediate_size") or 0)
    else:
        mlp = 3 * h * inter
    tied = text.get("tie_word_embeddings", hf.get("tie_word_embeddings", False))
    return vocab * h * (1 if tied else 2) + layers * (4 * h * h + mlp)


def _nearest_existing(path: str) -> str:
    probe = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return probe


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _count(n: int) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def disk_problems(cfg: Any, hf: Optional[Dict[str, Any]]) -> List[str]:
    """The checkpoint dir's disk must hold one checkpoint (actor, plus critic when it trains)."""
    if cfg.trainer.save_freq is not None and cfg.trainer.save_freq <= 0:
        return []
    params = estimate_params(hf)
    if params is None:
        return []
    trained = 2 if roles.critic_enabled(cfg) else 1
    need = params * CKPT_BYTES_PER_PARAM * trained
    where = _nearest_existing(cfg.trainer.default_local_dir)
    if not os.path.isdir(where):
        return []  # rules.path_problems already says the dir cannot be created
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return []
    if free >= need:
        return []
    return [f"trainer.default_local_dir: {cfg.trainer.default_local_dir} has {_size(free)} free on its disk, but one "
            f"checkpoint of this run needs about {_size(need)} (~{_count(params)} parameters x {trained} trained "
            f"model(s) x {CKPT_BYTES_PER_PARAM} bytes); free space or point it at a bigger disk"]


def visible_devices(device: str, probe: Optional[devices.Probe] = None) -> Optional[int]:
    """How many `device` devices this machine shows (device nodes, narrowed by *_VISIBLE_DEVICES);
    None when it cannot tell."""
    if device not in DEVICE_NODES:
        return None
    probe = probe or devices.Probe()
    var, pattern = DEVICE_NODES[device]
    prefix = pattern.split("[")[0]
    count = len([p for p in glob.glob(os.path.join(probe.root, "dev", pattern))
                 if os.path.basename(p)[len(prefix):].isdigit()])
    gpus = os.path.join(probe.root, "proc", "driver", "nvidia", "gpus")
    if device == "cuda" and os.path.isdir(gpus):
        count = max(count, len(os.listdir(gpus)))
    visible = probe.environ.get(var)
    if visible is not None and visible.strip():
        listed = len([v for v in visible.split(",") if v.strip()])
        count = min(count, listed) if count else listed
    return count or None


def device_count_problems(cfg: Any, device: str, probe: Optional[devices.Probe] = None) -> List[str]:
    """A one-node run needs nnodes x n_gpus_per_node ranks here; trainer.ray=false runs exactly one."""
    from verl_lite.runtime_env import ray_join_address

    t = cfg.trainer
    world = rules.world_size(cfg)
    if not t.ray and world > 1:
        return [f"trainer.ray=false runs one in-process worker, but the layout has {world} ranks "
                f"(trainer.nnodes={t.nnodes} x trainer.n_gpus_per_node={t.n_gpus_per_node}); set trainer.ray=true "
                f"or trainer.n_gpus_per_node=1"]
    if device == "cpu" or t.nnodes != 1 or ray_join_address(cfg):
        return []  # CPU ranks are processes; other nodes' devices are not visible from here
    found = visible_devices(device, probe)
    if found is None or found >= t.n_gpus_per_node:
        return []
    var = DEVICE_NODES[device][0]
    return [f"trainer.n_gpus_per_node={t.n_gpus_per_node}, but this node shows {found} {device} device(s) "
            f"(device nodes and {var}); lower trainer.n_gpus_per_node and the parallel sizes to fit {found}, "
            f"or run on a node with {t.n_gpus_per_node}"]


def summarize(cfg: Any) -> str:
    """What the run would do: device, layouts, engine classes, repatch dicts, worker env."""
    from verl_lite.runtime_env import (describe_ray, get_runtime_env, needs_max_connections, query_gpu_capability,
                                       uses_megatron)

    device = _target_device(cfg)
    t = cfg.trainer
    batch, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    lines = [
        f"target device : {device} (trainer.device={t.device})",
        f"devices       : {t.nnodes} node(s) x {t.n_gpus_per_node} = {rules.world_size(cfg)}",
        f"algorithm     : {cfg.algorithm.adv_estimator}, {batch} prompts x n {n} = {batch * n} sequences per step",
        _model_line(cfg),
    ]
    active = roles.active_roles(cfg)
    for role in roles.ROLES:
        if role not in active:
            lines.append(_inactive_line(cfg, role, device))
            continue
        layout = rules.role_layout(cfg, role)
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
        lines.append(f"  batches     : {packing_mode.role_decision(cfg, role, device).why}")
        if layout.strategy == "megatron":
            lines += _bridge_lines(cfg, role, device)
            optim_line = optimizer_overrides.summary_line(cfg, role, device)  # override_optimizer_config
            lines += [optim_line] if optim_line else []
            if layout.tp > 1:
                sp = roles.section(cfg, role).megatron.sequence_parallel
                lines.append(f"  seq parallel: on (sequence split over TP, padded to a multiple of {layout.tp})" if sp
                             else "  seq parallel: off (megatron.sequence_parallel=False)")
        if layout.strategy == "megatron" and device == "npu":
            lines.append(f"  repatch     : {build_repatch_dict(roles.section(cfg, role).megatron)!r}")
    rollout = cfg.actor_rollout_ref.rollout
    lines.append(
        f"rollout       : {rollout.name} TP {rollout.tensor_model_parallel_size} -> "
        f"{registry.ROLLOUTS.resolve(rollout.name)}"
    )
    lines.append(rollout_rules.rollout_summary(cfg, device, read_hf_config(cfg.actor_rollout_ref.model.path)))
    lines.append(f"ray           : {describe_ray(cfg, device)}")
    capability = query_gpu_capability() if device == "cuda" and uses_megatron(cfg) else None
    runtime_env = get_runtime_env(cfg, device, gpu_capability=capability)
    env = mask_env(runtime_env.pop("env_vars"))
    lines.append("runtime env   : " + redact(" ".join(f"{k}={v}" for k, v in sorted(env.items()))))
    if runtime_env:  # the run's ray_init.runtime_env keys besides env_vars, passed to Ray as they are
        lines.append(f"{'':16}" + redact("; ".join(f"{k}={v}" for k, v in sorted(runtime_env.items()))))
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


def _bridge_lines(cfg: Any, role: str, device: str) -> List[str]:
    """The bridge the role's engine builds with and, for GDN models, the kernel of its GDN layers."""
    installed = bridge_choice.installed_here()
    shape = model_shape(roles.model_path(cfg, role))
    hf = shape.hf if shape else None
    # the summary follows a passed check: a package missing here was accepted only for other machines
    choice = rules.choose_role_bridge(cfg, role, device, hf, installed, [k[0] for k in registry.BRIDGES.keys()],
                                      nodes_elsewhere=device != "cpu")
    here = ", ".join(f"{name} {'yes' if installed[mod] else 'no'}" for mod, name in
                     (("megatron.bridge", "Megatron-Bridge"), ("mbridge", "mbridge"),
                      ("mindspeed_bridge", "MindSpeed-Bridge"), ("fla", "fla")))
    lines = [f"  bridge      : {choice.describe()} (installed here: {here})"]
    overrides = bridge_choice.overrides_of(roles.section(cfg, role).megatron)
    if choice.kind == bridge_choice.VERL_LITE and bridge_choice.mindspeed_bridge_requested(device, overrides):
        lines.append(f"{'':16}(use_ascend_gdn=True on npu: where Megatron-Bridge is installed, its AutoBridge + MindSpeed-Bridge "
                     "instead, with `import mindspeed_bridge.models` after the repatch, before the model build)")
    if hf is not None and is_gdn_model(hf):
        kernel = bridge_choice.gdn_kernel(device, overrides, installed["fla"])
        note = ""
        if kernel == bridge_choice.TORCH and device != "cpu" and switch(overrides.get("use_triton_gdn", True)):
            note = " here; Triton fla where flash-linear-attention is installed"
        packs = "takes packed input" if kernel != bridge_choice.TORCH else "packed: one call per sequence"
        lines.append(f"  GDN kernel  : {bridge_choice.KERNEL_NAMES[kernel]}{note} ({packs})")
    return lines


def _model_line(cfg: Any) -> str:
    path = cfg.actor_rollout_ref.model.path
    shape = model_shape(path)
    if shape is None:
        return f"model         : {path} (config.json not readable here: expert, head and GDN checks skipped)"
    hf = shape.hf
    experts = rules.expert_count(hf)
    text = rules.text_config(hf)
    traits = [str(text.get("model_type") or hf.get("model_type", "?"))]
    traits.append(f"{experts} experts" if experts else "dense")
    if is_gdn_model(hf):
        traits.append("Gated DeltaNet")
    where = resolve_model_dir(path) if shape.origin == "config" else path
    line = f"model         : {where} ({', '.join(traits)})"
    dims = [f"{text[k]} {label}" for k, label in
            (("num_hidden_layers", "layers"), ("num_attention_heads", "heads"), ("num_key_value_heads", "kv heads"),
             ("linear_num_key_heads", "GDN key heads"), ("linear_num_value_heads", "GDN value heads"))
            if isinstance(text.get(k), int)]
    if experts:
        dims.append(f"{experts} experts")
    return line + f"\nshape         : {shape.describe()}: {', '.join(dims)}"


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
            print(f"  - {redact(p)}", file=sys.stderr)
        return 1
    print(redact(summarize(cfg)))
    for warning in collect_warnings(cfg):
        print(redact(f"{PROG}: warning: {warning}"), file=sys.stderr)
    print(f"{PROG}: OK ({time.perf_counter() - start:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
