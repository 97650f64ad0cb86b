"""Preflight rules of the machine that trains (`for_training` only: a laptop checks a cluster's
layout): the model directory, its config.json and tokenizer, a writable checkpoint dir with room for
a checkpoint, a checkpoint to resume from, the device and how many of them this node shows, the
packages the run needs, wandb credentials, and a C++ compiler for torch.compile on cpu.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence

from verl_lite import device as devices
from verl_lite.checkpoint_files import MANIFEST
from verl_lite.config import roles
from verl_lite.config.choices import LOGGER_PACKAGES
from verl_lite.config.shapes import expert_count, text_config
from verl_lite.data.tokenizer import CHAR_TOKENIZER_FILE, DEFAULT_CHARS, SPECIAL_TOKENS, tokenizer_problem
from verl_lite.decisions.layout import train_pool
from verl_lite.models import model_dir_problem, resolve_model_dir
from verl_lite.preflight.roles import RoleView, view_of
from verl_lite.runtime_env import ray_join_address

# Bytes per trained parameter in a checkpoint: fp32 weights + Adam's two fp32 moments.
CKPT_BYTES_PER_PARAM = 12
DEVICE_NODES = {"cuda": ("CUDA_VISIBLE_DEVICES", "nvidia[0-9]*"), "npu": ("ASCEND_RT_VISIBLE_DEVICES", "davinci[0-9]*")}


def model_dir_problems(cfg: Any) -> List[str]:
    """The critic's own model directory (when it runs with one) and the actor's."""
    problems = []
    for role in roles.active_roles(cfg):
        if role == "critic" and cfg.critic.model.path:
            problem = model_dir_problem(cfg.critic.model.path)
            if problem:
                problems.append(f"critic.model.path: {problem}")
    problem = model_dir_problem(cfg.actor_rollout_ref.model.path)
    if problem:
        problems.append(problem)
    return problems


def checkpoint_dir_problems(cfg: Any) -> List[str]:
    """trainer.default_local_dir must be a directory this user can create and write."""
    path = cfg.trainer.default_local_dir
    target = os.path.abspath(os.path.expanduser(path))
    probe = _nearest_existing(path)
    if not os.path.isdir(probe):
        return [f"trainer.default_local_dir: {path} cannot be created: {probe} is a file"]
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == target else f"cannot be created: {probe} is not writable"
        return [f"trainer.default_local_dir: {path} {what} (point it at a writable directory)"]
    return []


def environment_problems(cfg: Any, views: Sequence[RoleView], device: str, explicit: bool) -> List[str]:
    """The device, when set explicitly, is usable here, and the packages the run's roles (`views`), its
    profiler and its loggers need are installed."""
    problems = []
    if explicit and not devices.device_available(device):
        problems.append(
            f"trainer.device={device}, but no {device} device is usable here (its driver, device nodes or "
            f"{'torch_npu' if device == 'npu' else 'a CUDA build of torch'} is missing); use trainer.device=auto or cpu"
        )
    needed = []
    if any(view.megatron for view in views):
        needed.append(("megatron", "megatron-core (pip install 'verl_lite[megatron]')"))
        if device == "npu":
            needed.append(("mindspeed", "MindSpeed (source install, see the README's Ascend section)"))
    # a missing vllm is reported by preflight/rollout.py (with the install line per device)
    if cfg.global_profiler.tool == "npu" and cfg.global_profiler.steps:
        needed.append(("torch_npu", "torch_npu for global_profiler.tool=npu (its profiler, torch_npu.profiler)"))
    if cfg.global_profiler.tool == "torch_memory" and cfg.global_profiler.steps and device == "npu":
        needed.append(("torch_npu", "torch_npu for global_profiler.tool=torch_memory on npu (its allocation history, "
                                    "torch_npu.npu.memory)"))
    loggers = list(cfg.trainer.logger or ())
    for name in loggers:
        if name in LOGGER_PACKAGES:
            module, install = LOGGER_PACKAGES[name]
            needed.append((module, f"{name} for trainer.logger (pip install {install})"))
    if "wandb" in loggers:
        problems += wandb_problems()
    problems += tracker_credential_problems(loggers)
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



def tracker_credential_problems(loggers: Sequence[str], environ: Optional[Dict[str, str]] = None) -> List[str]:
    """swanlab's cloud mode (verl's default SWANLAB_MODE) and clearml's server need credentials, else
    they ask for them on a terminal the run does not have."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    problems = []
    if "swanlab" in loggers and env.get("SWANLAB_MODE", "cloud") in ("cloud", "online") \
            and not env.get("SWANLAB_API_KEY"):
        root = env.get("SWANLAB_ROOT") or env.get("SWANLAB_SAVE_DIR") or os.path.join(home, ".swanlab")
        if not any(os.path.isfile(p) for p in (os.path.join(".swanlab", ".netrc"), os.path.join(root, ".netrc"))):
            problems.append("trainer.logger has swanlab in cloud mode (SWANLAB_MODE, default cloud as in verl), but no "
                            "swanlab credentials are set (SWANLAB_API_KEY or `swanlab login`); set them, or "
                            "SWANLAB_MODE=offline (or local) to write the run under SWANLAB_LOG_DIR")
    if "clearml" in loggers and env.get("CLEARML_OFFLINE_MODE", "").lower() not in ("1", "true", "yes") \
            and not env.get("CLEARML_API_ACCESS_KEY"):
        conf = env.get("CLEARML_CONFIG_FILE") or os.path.join(home, "clearml.conf")
        if not os.path.isfile(conf):
            problems.append(f"trainer.logger has clearml, but no clearml credentials are set (CLEARML_API_ACCESS_KEY/"
                            f"CLEARML_API_SECRET_KEY, or {conf} from `clearml-init`); set them, or "
                            "CLEARML_OFFLINE_MODE=1 to write the task locally")
    return problems


def resume_problems(cfg: Any) -> List[str]:
    """trainer.resume_mode=resume_path needs a checkpoint dir with a manifest (its hashes are
    checked when the run loads it: hashing a large checkpoint is not a sub-second check)."""
    t = cfg.trainer
    if t.resume_mode != "resume_path":
        return []
    fix = "(point it at a global_step_N directory of a finished save, or set trainer.resume_mode=auto)"
    if not t.resume_from_path:
        return [f"trainer.resume_mode=resume_path needs trainer.resume_from_path {fix}"]
    path = os.path.abspath(os.path.expanduser(t.resume_from_path))
    if not os.path.isdir(path):
        return [f"trainer.resume_from_path={t.resume_from_path} does not exist {fix}"]
    if not os.path.isfile(os.path.join(path, MANIFEST)):
        return [f"trainer.resume_from_path={t.resume_from_path} has no {MANIFEST}: its save never finished {fix}"]
    return []


def model_file_problems(cfg: Any) -> List[str]:
    """A config.json that transformers would choke on, a missing tokenizer, a vocab too small for it."""
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
        if hf is not None and not (hf.get("model_type") or text_config(hf).get("model_type")):
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
    vocab = text_config(hf).get("vocab_size") or hf.get("vocab_size")
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
    text = text_config(hf)
    h, layers, vocab = text.get("hidden_size"), text.get("num_hidden_layers"), text.get("vocab_size")
    if not all(isinstance(x, int) and x > 0 for x in (h, layers, vocab)):
        return None
    inter = text.get("intermediate_size") or 4 * h
    experts = expert_count(hf)
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


def disk_problems(cfg: Any, hf: Optional[Dict[str, Any]], views: Sequence[RoleView]) -> List[str]:
    """The checkpoint dir's disk must hold one checkpoint (actor, plus critic when it trains)."""
    if cfg.trainer.save_freq is not None and cfg.trainer.save_freq <= 0:
        return []
    params = estimate_params(hf)
    if params is None:
        return []
    trained = 2 if view_of(views, "critic") is not None else 1
    need = params * CKPT_BYTES_PER_PARAM * trained
    where = _nearest_existing(cfg.trainer.default_local_dir)
    if not os.path.isdir(where):
        return []  # checkpoint_dir_problems already says the dir cannot be created
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
    t, pool = cfg.trainer, train_pool(cfg)
    world = pool.world
    if not t.ray and world > 1:
        return [f"trainer.ray=false runs one in-process worker, but the layout has {world} ranks "
                f"({pool.describe()}); set trainer.ray=true or trainer.n_gpus_per_node=1"]
    if device == "cpu" or pool.nodes != 1 or ray_join_address(cfg):
        return []  # CPU ranks are processes; other nodes' devices are not visible from here
    found = visible_devices(device, probe)
    if found is None or found >= pool.per_node:
        return []
    var = DEVICE_NODES[device][0]
    return [f"trainer.n_gpus_per_node={pool.per_node}, but this node shows {found} {device} device(s) "
            f"(device nodes and {var}); lower trainer.n_gpus_per_node and the parallel sizes to fit {found}, "
            f"or run on a node with {pool.per_node}"]



def torch_compile_problems(view: RoleView) -> List[str]:
    """use_torch_compile on cpu: inductor builds C++ kernels with $CXX, else g++ (clang++ on macOS)."""
    if view.role == "critic" or not view.section.use_torch_compile or view.device != "cpu":
        return []
    compiler = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    if shutil.which(compiler):
        return []
    return [f"{view.role}: {view.prefix}.use_torch_compile=True on trainer.device=cpu: torch.compile's inductor "
            f"builds C++ kernels with {compiler!r} ($CXX, else g++), which is not on PATH; install a C++ compiler "
            "(e.g. apt-get install g++) or point CXX at one, or set it to False"]
