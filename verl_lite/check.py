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

import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from verl_lite import device as devices
from verl_lite import registry
from verl_lite.config import choices, roles, rules
from verl_lite.models import is_gdn_model, read_hf_config, resolve_model_dir
from verl_lite.repatch import build_repatch_dict

PROG = "verl_lite.check"


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
    active = [r for r in roles.active_roles(cfg) if roles.strategy(cfg, r) in choices.STRATEGIES]
    hf_cache: Dict[str, Optional[Dict[str, Any]]] = {}
    for role in active:
        layout = rules.role_layout(cfg, role)
        problems += rules.layout_problems(cfg, layout)
        problems += rules.batch_problems(cfg, layout)
        path = roles.model_path(cfg, role)
        if path not in hf_cache:
            hf_cache[path] = read_hf_config(path)
        problems += rules.model_problems(cfg, layout, hf_cache[path])
        if layout.strategy == "megatron":
            problems += rules.bridge_problems(cfg, role, device)
            if device == "npu":
                problems += rules.npu_problems(cfg, layout)
        try:
            registry.resolve_engine(cfg, role, device)
        except registry.RegistryError as e:
            problems.append(f"{role}: {e}")
    problems += rules.rollout_problems(cfg)
    if for_training:
        problems += rules.path_problems(cfg)
        problems += rules.environment_problems(cfg, device, explicit=cfg.trainer.device != "auto")
    return list(dict.fromkeys(problems))


def summarize(cfg: Any) -> str:
    """What the run would do: device, layouts, engine classes, repatch dicts, worker env."""
    from verl_lite.runtime_env import get_runtime_env, needs_max_connections, query_gpu_capability, uses_megatron

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
    experts = rules.expert_count(hf)
    traits = [str(rules.text_config(hf).get("model_type") or hf.get("model_type", "?"))]
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
