"""The Ray runtime env for worker processes, by verl's rules.

- CUDA_DEVICE_MAX_CONNECTIONS=1 only when the actor or critic runs Megatron on an Ampere or
  Hopper GPU (compute capability 8.x or 9.x): Megatron's TP/CP communication overlap needs
  kernel launches serialised there. Blackwell (10+) does not need it, torch FSDP must not have it,
  and on NPU Python never sets it (the NPU launcher exports it for MindSpeed).
- Tokenizer, NCCL (cuda) and HCCL (npu) log and port settings are defaults.
- A variable the user already exported wins: its value is forwarded instead of ours, so workers
  on other nodes see it too.
- The launcher's environment (verl's per-device variables, launch/verl_names.sh vl_device_env) is
  forwarded as the launcher exported it: VERL_LITE_LAUNCHER_ENV names each variable and where its
  value came from (`NAME:verl_lite` its default, `NAME:caller` the caller's), so a Ray worker on any
  node sees what the launching shell had.

- `ray_init.runtime_env` (verl: `ray_kwargs.ray_init.runtime_env.*`) is merged in: its keys
  (py_executable, working_dir, pip, ...) are passed to Ray as they are, and its env_vars win over
  verl_lite's own; `runtime_env_overrides` names each variable verl_lite sets that they replace.

The GPU's capability is injectable for tests; on a cuda target without it, `nvidia-smi` is asked
(no torch import). Unknown capability means the variable is not set.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verl_lite.config import roles
from verl_lite.decisions import placement
from verl_lite.decisions.layout import rollout_replicas, train_world

logger = logging.getLogger(__name__)

COMMON_ENV = {"TOKENIZERS_PARALLELISM": "true"}
DEVICE_ENV = {
    "cuda": {"NCCL_DEBUG": "WARN"},
    # Several processes share one NPU when engines are colocated; fixed port ranges collide.
    "npu": {"HCCL_HOST_SOCKET_PORT_RANGE": "auto", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"},
    "cpu": {},
}
VLLM_ENV = {"VLLM_LOGGING_LEVEL": "WARN"}
MEGATRON_CAPABILITY_MAJORS = (8, 9)  # Ampere, Hopper


def query_gpu_capability(environ: Mapping[str, str] = os.environ, timeout_s: float = 5.0) -> Optional[Tuple[int, int]]:
    """(major, minor) of the first GPU from `nvidia-smi`, or None when it is absent or fails."""
    exe = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout
        major, _, minor = out.strip().splitlines()[0].strip().partition(".")
        return int(major), int(minor or 0)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        logger.warning("could not read the GPU compute capability from nvidia-smi: %s", e)
        return None


def uses_megatron(cfg: Any) -> bool:
    """True when a trained model (the actor, or the critic when it runs) uses Megatron."""
    trained = ["actor"] + (["critic"] if roles.critic_enabled(cfg) else [])
    return any(roles.strategy(cfg, role) == "megatron" for role in trained)


def needs_max_connections(cfg: Any, device: str, gpu_capability: Optional[Tuple[int, int]]) -> bool:
    return (
        device == "cuda"
        and gpu_capability is not None
        and gpu_capability[0] in MEGATRON_CAPABILITY_MAJORS
        and uses_megatron(cfg)
    )


def get_runtime_env(
    cfg: Any,
    device: str,
    gpu_capability: Optional[Tuple[int, int]] = None,
    environ: Mapping[str, str] = os.environ,
) -> Dict[str, Any]:
    """`{"env_vars": {...}, ...}` for `ray.init(runtime_env=...)` on a resolved device (cuda, npu, cpu):
    verl_lite's variables, then the run's ray_init.runtime_env merged in (its env_vars win)."""
    env = _own_env(cfg, device, gpu_capability, environ)
    user = user_runtime_env(cfg)
    env.update(user.pop("env_vars", {}))
    return {**user, "env_vars": env}


def _own_env(cfg: Any, device: str, gpu_capability: Optional[Tuple[int, int]],
             environ: Mapping[str, str]) -> Dict[str, str]:
    """The variables verl_lite sets for its workers (a value the user exported wins)."""
    if device not in DEVICE_ENV:
        raise ValueError(f"device {device!r} is not resolved: expected one of {', '.join(DEVICE_ENV)}")
    env: Dict[str, str] = dict(COMMON_ENV)
    env.update(DEVICE_ENV[device])
    if cfg.actor_rollout_ref.rollout.name == "vllm":
        env.update(VLLM_ENV)
    if device == "cuda" and gpu_capability is None and uses_megatron(cfg):
        gpu_capability = query_gpu_capability(environ)
    if needs_max_connections(cfg, device, gpu_capability):
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    for key in env:
        if key in environ:
            env[key] = environ[key]
    env.update({name: value for name, (value, _) in launcher_env(environ).items()})
    return env


LAUNCHER_ENV = "VERL_LITE_LAUNCHER_ENV"
LAUNCHER_ORIGINS = ("verl_lite", "caller")


def launcher_env(environ: Mapping[str, str] = os.environ) -> Dict[str, Tuple[str, str]]:
    """The variables the launcher set, from VERL_LITE_LAUNCHER_ENV (`NAME:origin ...`): name -> (value,
    origin), origin `verl_lite` (the launcher's default, as verl's scripts export it) or `caller`.
    A listed name no longer in the environment is left out (the process that unset it decided)."""
    found: Dict[str, Tuple[str, str]] = {}
    for word in environ.get(LAUNCHER_ENV, "").split():
        name, _, origin = word.partition(":")
        if origin not in LAUNCHER_ORIGINS:
            raise ValueError(f"{LAUNCHER_ENV} entry {word!r}: expected NAME:origin with origin one of "
                             f"{', '.join(LAUNCHER_ORIGINS)} (launch/verl_names.sh writes it; unset it to run without)")
        if name in environ:
            found[name] = (environ[name], origin)
    return found


def user_runtime_env(cfg: Any) -> Dict[str, Any]:
    """The run's `ray_init.runtime_env` as plain values: null keys left out (verl's default
    `py_executable=null` is Ray's default), env_vars as strings (Ray takes only strings; a boolean
    is written true/false)."""
    raw = getattr(getattr(cfg, "ray_init", None), "runtime_env", None) or {}
    if not isinstance(raw, dict):
        from omegaconf import OmegaConf

        raw = OmegaConf.to_container(raw, resolve=True)
    user = {k: v for k, v in raw.items() if v is not None}
    if "env_vars" in user:
        user["env_vars"] = {str(k): (str(v).lower() if isinstance(v, bool) else str(v))
                            for k, v in (user["env_vars"] or {}).items() if v is not None}
    return user


def runtime_env_overrides(cfg: Any, device: str, gpu_capability: Optional[Tuple[int, int]] = None,
                          environ: Mapping[str, str] = os.environ) -> List[str]:
    """A line for each variable verl_lite sets for its workers that ray_init.runtime_env.env_vars
    replaces with another value (the user's value is used)."""
    user = user_runtime_env(cfg).get("env_vars", {})
    if not user:
        return []
    ours = _own_env(cfg, device, gpu_capability, environ)
    return [f"ray_init.runtime_env.env_vars.{k}={v!r} replaces verl_lite's {k}={ours[k]!r} for the workers "
            f"(the value given is used; remove it to keep verl_lite's)"
            for k, v in sorted(user.items()) if k in ours and ours[k] != v]


# ---------------------------------------------------------------------------- which Ray cluster

# A local cluster that the trainer starts is private to the job. Ray reads these variables when the
# cluster starts; a value the user exported wins. A cluster the job joins is left as it is.
LOCAL_RAY_ENV = {
    # Ray's single-machine mode: the node address is 127.0.0.1, so the GCS, raylet and workers
    # listen on the loopback interface only (by default they listen on every interface).
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # Token auth protects a cluster that others can reach; this one is loopback-only and lives as
    # long as the job. Setting the mode also stops Ray's token warning on every run.
    "RAY_AUTH_MODE": "disabled",
    # Ray starts workers at nice 15; on a local cluster they do all the work while the driver
    # waits, and at 15 any other job on the box starves them.
    "RAY_worker_niceness": "0",
    # Call arguments and answers up to this size travel inside the call instead of through the object
    # store (Ray's default: 100 KiB). On one machine the store's path costs a round trip about 3 ms
    # more (a 120 KiB batch to an actor and back: 5.3 ms, 1.7 ms inline; docs/benchmarks.md), and the
    # main job's batches are 40-250 KiB. Larger objects (real batches, weights) still use the store.
    "RAY_max_direct_call_object_size": str(1 << 20),
}


def ray_join_address(cfg: Any) -> Optional[str]:
    """The cluster to join: `ray_init.address`, else RAY_ADDRESS; None means a local cluster is
    started for the job ("local" means that too, as in Ray)."""
    address = cfg.ray_init.address or os.environ.get("RAY_ADDRESS") or None
    return None if address == "local" else address


def ray_workers(cfg: Any) -> int:
    """Ray actors of the run's ranks: the training devices, or for fully-async the training
    pool's ranks plus the rollout replicas."""
    if cfg.async_training.enable:
        return train_world(cfg) + rollout_replicas(cfg)
    return train_world(cfg)


def uses_ray(cfg: Any) -> bool:
    """Whether the run starts or joins Ray: trainer.ray, and fully-async always."""
    return bool(cfg.trainer.ray) or bool(cfg.async_training.enable)


def local_ray_cpus(cfg: Any, device: str, world: int) -> int:
    """CPUs of a local cluster: `ray_init.num_cpus`, else the machine's, at least one per rank + the driver's actors on CPU."""
    return int(cfg.ray_init.num_cpus or max(os.cpu_count() or 1, world + 1 if device == "cpu" else 1))


def describe_ray(cfg: Any, device: str) -> str:
    """Which Ray cluster the run uses and with which settings (the preflight summary's line)."""
    if not uses_ray(cfg):
        return "not used (trainer.ray=false: one in-process worker)"
    address = ray_join_address(cfg)
    need = placement.cluster_need(cfg, device)
    if address:
        source = "ray_init.address" if cfg.ray_init.address else "RAY_ADDRESS"
        wait = float(cfg.trainer.ray_wait_nodes_s)
        return (f"joins {address} ({source}); that cluster keeps its own settings (CPUs, dashboard, auth, temp dir); "
                + (f"waits up to {wait:.0f} s for {need.describe()}" if wait > 0 else f"needs {need.describe()} "
                   "at once (trainer.ray_wait_nodes_s=0)"))
    env = {**LOCAL_RAY_ENV, **{k: os.environ[k] for k in LOCAL_RAY_ENV if k in os.environ}}
    loopback = env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"].lower() not in ("1", "true")
    parts = [
        "127.0.0.1 only" if loopback else "every interface (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is set)",
        f"{local_ray_cpus(cfg, device, ray_workers(cfg))} CPUs",
        "dashboard on" if cfg.ray_init.include_dashboard else "dashboard off",
        f"RAY_AUTH_MODE={env['RAY_AUTH_MODE']}" + ("" if "RAY_AUTH_MODE" in os.environ else " for this cluster"),
    ]
    text = "local cluster started for this job: " + ", ".join(parts)
    if need.nodes > 1:
        text += (f" (the run needs {need.describe()}: start the other nodes with launch/ray_cluster.sh "
                 "and set RAY_ADDRESS or ray_init.address to the head; a local cluster has one node)")
    return text
