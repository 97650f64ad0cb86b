"""What `python -m verl_lite.check` prints for a config that passed: the target device, the model,
each role's parallel layout, engine class, batches, bridge and repatch dict, the rollout engine, Ray
and the worker runtime env. Read from the same decisions the run makes (registry, packing, bridge,
optimizer overrides, repatch), so the summary is what the run does.
"""

from __future__ import annotations

from typing import Any, List, Optional

from verl_lite import device as devices
from verl_lite import registry
from verl_lite.config import roles
from verl_lite.config.shapes import ModelShape, expert_count, model_shape, text_config
from verl_lite.config.generated import ascend_facts
from verl_lite.decisions import ascend_stack, bridge_choice, optimizer_overrides, packing_mode
from verl_lite.decisions.layout import rollout_layout, train_pool, train_world
from verl_lite.decisions.repatch import build_repatch_dict
from verl_lite.decisions.switches import switch
from verl_lite.decisions import fsdp_settings
from verl_lite.models import is_gdn_model, resolve_model_dir
from verl_lite.decisions.async_pools import step_prompts
from verl_lite.preflight.bridge import choose_role_bridge, role_stack, vision_tower
from verl_lite.preflight.memory import summary_lines as memory_lines
from verl_lite.preflight.roles import RoleView, role_views
from verl_lite.preflight.rollout import rollout_summary
from verl_lite.runtime_env import (describe_ray, get_runtime_env, launcher_env, needs_max_connections,
                                   query_gpu_capability, uses_megatron)
from verl_lite.secrets import mask_env, redact


def summarize(cfg: Any) -> str:
    """What the run would do: device, layouts, engine classes, repatch dicts, worker env."""
    device = devices.resolve_device(cfg.trainer.device)
    t, pool = cfg.trainer, train_pool(cfg)
    model = model_shape(cfg.actor_rollout_ref.model.path)  # config.json, else a shipped shape of that name
    batch, n = step_prompts(cfg), cfg.actor_rollout_ref.rollout.n
    lines = [
        f"target device : {device} (trainer.device={t.device})",
        f"devices       : {pool.nodes} node(s) x {pool.per_node} = {pool.world}",
        f"algorithm     : {cfg.algorithm.adv_estimator}, {batch} prompts x n {n} = {batch * n} sequences per step",
        _model_line(cfg, model),
    ]
    views = {view.role: view for view in role_views(cfg, device)}
    lines += _stack_lines(cfg, list(views.values()))
    for role in roles.ROLES:
        if role not in views:
            lines.append(_inactive_line(cfg, role, device))
            continue
        view = views[role]
        layout = view.layout
        shape = (
            "fsdp (FSDP2, fully_shard: verl's fsdp2; verl's fsdp, FSDP1, runs on it too)"
            + (f" Ulysses SP {layout.sp}" if layout.sp > 1 else "")
            if layout.strategy == "fsdp"
            else (
                f"megatron TP {layout.tp} PP {layout.pp} CP {layout.cp} EP {layout.ep} ETP {layout.etp}"
                + (f" VPP {layout.vpp}" if layout.vpp else "")
            )
        )
        lines.append(f"{role:<14}: {shape} -> DP {layout.dp}")
        lines.append(f"  engine      : {registry.resolve_engine(cfg, role, device)}")
        lines.append(f"  batches     : {packing_mode.role_decision(cfg, role, device).why}")
        if layout.strategy == "fsdp":  # mesh, dtypes, offload policy, prefetch, wrap (decisions/fsdp_settings.py)
            lines += fsdp_settings.summary_lines(view.section.fsdp_config, role, device, train_world(cfg))
        if layout.strategy == "megatron":
            lines += _bridge_lines(cfg, view)
            optim_line = optimizer_overrides.summary_line(cfg, role, device)  # override_optimizer_config
            lines += [optim_line] if optim_line else []
            if layout.tp > 1:
                sp = view.section.megatron.sequence_parallel
                lines.append(f"  seq parallel: on (sequence split over TP, padded to a multiple of {layout.tp})" if sp
                             else "  seq parallel: off (megatron.sequence_parallel=False)")
        if layout.strategy == "megatron" and device == "npu":
            lines.append(f"  repatch     : {build_repatch_dict(view.section.megatron)!r}")
    rollout = cfg.actor_rollout_ref.rollout
    lines.append(
        f"rollout       : {rollout.name} TP {rollout_layout(cfg).tp} -> "
        f"{registry.ROLLOUTS.resolve(rollout.name)}"
    )
    lines.append(rollout_summary(cfg, device, model.hf if model is not None else None))
    lines += memory_lines(cfg, device)
    lines.append(f"ray           : {describe_ray(cfg, device)}")
    capability = query_gpu_capability() if device == "cuda" and uses_megatron(cfg) else None
    runtime_env = get_runtime_env(cfg, device, gpu_capability=capability)
    env = mask_env(runtime_env.pop("env_vars"))
    lines.append("runtime env   : " + redact(" ".join(f"{k}={v}" for k, v in sorted(env.items()))))
    lines += _launcher_env_lines(device)
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


def _launcher_env_lines(device: str) -> List[str]:
    """Which of verl's per-device variables the launcher set (docs/ascend.md) and where each came from."""
    passed = launcher_env()
    if not passed:
        return [f"{'':16}(Ascend env: none from the launcher; the examples/ scripts export verl's Ascend "
                "variables, or export them yourself: docs/ascend.md)"] if device == "npu" else []
    label = "Ascend env" if device == "npu" else "launcher env"
    lines = []
    for origin, said in (("verl_lite", "launcher defaults, as verl's scripts"), ("caller", "from the caller")):
        values = mask_env({k: v for k, (v, o) in sorted(passed.items()) if o == origin})
        if values:
            lines.append(f"{'':16}({label}, {said}: {' '.join(f'{k}={v}' for k, v in values.items())})")
    return lines


def _stack_lines(cfg: Any, views: List[RoleView]) -> List[str]:
    """On npu with a Megatron role: the Ascend stack, how it was chosen, and what of it is unverified."""
    megatron = [view for view in views if view.megatron]
    stack = role_stack(cfg, megatron[0]) if megatron else None
    if stack is None:
        return []
    lines = [f"ascend stack  : {stack.describe()}"]
    parts = [u["part"].split(" (")[0] for u in ascend_facts.unverified(stack.name)]
    if parts:
        lines.append(f"{'':16}(unverified, no source reachable: {', '.join(parts)}; docs/ascend.md)")
    return lines


def _inactive_line(cfg: Any, role: str, device: str) -> str:
    """A role that does not run (it has no RoleView): why not, and the engine it would build."""
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


def _bridge_lines(cfg: Any, view: RoleView) -> List[str]:
    """The bridge the role's engine builds with and, for GDN models, the kernel of its GDN layers."""
    installed = bridge_choice.installed_here()
    device, hf = view.device, view.hf
    # the summary follows a passed check: a package missing here was accepted only for other machines
    choice = choose_role_bridge(cfg, view, hf, installed, [k[0] for k in registry.BRIDGES.keys()],
                                nodes_elsewhere=device != "cpu")
    here = ", ".join(f"{name} {'yes' if installed[mod] else 'no'}" for mod, name in
                     (("megatron.bridge", "Megatron-Bridge"), ("mbridge", "mbridge"),
                      ("mindspeed_bridge", "MindSpeed-Bridge"), ("fla", "fla")))
    lines = [f"  bridge      : {choice.describe()} (installed here: {here})"]
    tower = vision_tower(hf) if choice.kind == bridge_choice.VERL_LITE else None
    if tower is not None:
        deep = tower["deepstack"]
        blocks = f"{tower['depth']} blocks, " if tower["depth"] else ""
        lines.append(f"  vision tower: {blocks}replicated on every TP rank (not tensor-parallel), on the "
                     f"first pipeline stage{f' with the DeepStack layers 0..{deep - 1}' if deep else ''}")
    overrides = bridge_choice.overrides_of(view.section.megatron)
    if choice.kind == bridge_choice.VERL_LITE and bridge_choice.mindspeed_bridge_requested(device, overrides):
        lines.append(f"{'':16}(use_ascend_gdn=True on npu: where Megatron-Bridge is installed, its AutoBridge + MindSpeed-Bridge "
                     "instead, with `import mindspeed_bridge.models` after the repatch, before the model build)")
    if hf is not None and is_gdn_model(hf):
        kernel = bridge_choice.gdn_kernel(device, overrides, bridge_choice.fla_importable(device, installed["fla"]))
        stack = role_stack(cfg, view)
        if stack is not None and choice.kind != bridge_choice.VERL_LITE:
            lines.append(f"  GDN layers  : {ascend_stack.external_gdn(stack, overrides, choice.mindspeed_bridge)}")
            return lines
        if stack is not None:  # verl_lite's own layers: what the stack makes of them
            plan = ascend_stack.role_gdn_plan(stack, view.section.megatron, kernel)
            if plan.layer == "mindspeed":
                lines.append(f"  GDN layers  : {plan.why}")
                return lines
            packs = "takes packed input" if kernel != bridge_choice.TORCH else "packed: one call per sequence"
            lines.append(f"  GDN kernel  : {ascend_stack.describe_kernel(stack, kernel)} ({packs})")
            return lines
        note = ""
        if kernel == bridge_choice.TORCH and device != "cpu" and switch(overrides.get("use_triton_gdn", True)):
            note = " here; Triton fla where flash-linear-attention is installed"
        packs = "takes packed input" if kernel != bridge_choice.TORCH else "packed: one call per sequence"
        lines.append(f"  GDN kernel  : {bridge_choice.KERNEL_NAMES[kernel]}{note} ({packs})")
    return lines


def _model_line(cfg: Any, shape: Optional[ModelShape]) -> str:
    path = cfg.actor_rollout_ref.model.path
    if shape is None:
        return f"model         : {path} (config.json not readable here: expert, head and GDN checks skipped)"
    hf = shape.hf
    experts = expert_count(hf)
    text = text_config(hf)
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
