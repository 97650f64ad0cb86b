"""Preflight refusals for verl settings that verl_lite's schema accepts (so verl's lines compose)
but whose non-default value it cannot act on yet: each is refused with
"<key>=<value>: ... not supported by verl_lite yet: <what to use instead>", never accepted and ignored.

A value equal to what verl_lite does is accepted (`shuffle=False`,
`hybrid_engine=True` in a synchronous run): the setting then means what it says.

`verl_problems(cfg)` works on the composed DictConfig or the dataclass (attribute access only);
no torch import.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, List, Optional

from verl_lite import device as devices
from verl_lite.config import roles, schema
from verl_lite.config.choices import (KL_CTRL_TYPES, KL_PENALTIES, RAY_RUNTIME_ENV_KEYS,
                                     ROLLOUT_MODES)
from verl_lite.config.verl_names import NOT, YET
from verl_lite.decisions import fsdp_settings, lr_schedule, optimizer_overrides, packing_mode, ulysses
from verl_lite.preflight.layout import moe_sequence_parallel_problems, token_budget_problems, token_budget_warnings, token_budgets
from verl_lite.preflight.machine import torch_compile_problems
from verl_lite.preflight.reward import custom_reward_warnings, reward_problems
from verl_lite.decisions.dynamic_sampling import filter_groups_problems
from verl_lite.decisions.rollout_correction import rollout_correction_problems
from verl_lite.preflight.roles import RoleView, role_views, world_size


def _device(cfg: Any) -> str:
    try:
        return devices.resolve_device(cfg.trainer.device)
    except devices.DeviceError:
        return str(cfg.trainer.device)


def _megatron_dtype(cfg: Any) -> str:
    """What verl_lite's Megatron engines train in (engine/megatron/engine.py): float32 on cpu, bfloat16 on devices."""
    return "float32" if _device(cfg) == "cpu" else "bfloat16"


def _role_problems(cfg: Any, view: RoleView) -> List[str]:
    role, section, prefix, megatron = view.role, view.section, view.prefix, view.megatron
    problems = []
    # offload flags are honoured by every engine (trainer/offload.py); verl_warnings says where they do nothing
    problems += moe_sequence_parallel_problems(view)
    dtype = section.megatron.dtype if megatron else None
    if dtype is not None and dtype != _megatron_dtype(cfg):
        problems.append(f"{role}: {prefix}.megatron.dtype={dtype!r}: another training dtype is {YET}: the Megatron "
                        f"engine trains in {_megatron_dtype(cfg)} on {_device(cfg)}; leave it null")
    cp = section.megatron.context_parallel_size if megatron else 1
    if isinstance(cp, int) and cp > 1:
        problems.append(f"{role}: {prefix}.megatron.context_parallel_size={cp}: context parallelism is {YET}: the "
                        "Megatron forward keeps each sequence whole on a rank (verl's example scripts use 1); set it "
                        "to 1")
    if megatron and section.megatron.dist_checkpointing_path:
        problems.append(f"{role}: {prefix}.megatron.dist_checkpointing_path={section.megatron.dist_checkpointing_path!r}: "
                        f"loading a Megatron dist checkpoint is {YET}; point the model path at the HF model and "
                        "leave it null")
    # fsdp_config's dtypes, mesh and wrap policy (engine/fsdp_settings.py); megatron reads none of them
    fsdp_problems = (fsdp_settings.megatron_problems(section.fsdp_config, prefix) if megatron
                     else fsdp_settings.problems(section.fsdp_config, prefix, world_size(cfg)))
    problems += [f"{role}: {p}" for p in fsdp_problems]
    problems += lora_problems(cfg, view)
    problems += token_budget_problems(cfg, role)
    problems += _ulysses_problems(cfg, view)
    problems += optimizer_overrides.override_config_problems(cfg, role, view.strategy, view.device)
    problems += lr_schedule.optim_section_problems(cfg, role, view.strategy)
    problems += torch_compile_problems(view)
    problems += memory_knob_problems(cfg, view)
    model_key = "critic.model" if role == "critic" else "actor_rollout_ref.model"
    why = _remove_padding_blocker(cfg, role)
    # the ref runs with the actor's model section: said once, unless the ref's engine has its own reason
    if why and not (role == "ref" and why == _remove_padding_blocker(cfg, "actor")):
        problems.append(f"{role}: {model_key}.use_remove_padding=True: {why}")
    return problems


def _ulysses_problems(cfg: Any, view: RoleView) -> List[str]:
    key, sp = ulysses.setting(view.section, view.prefix)
    if view.role == "ref" and sp == ulysses.setting(cfg.actor_rollout_ref.actor, "actor_rollout_ref.actor")[1]:
        return []  # the ref follows the actor with the actor's model: said once, for the actor
    found = ulysses.problems(key, sp, world_size(cfg) or None, view.hf, view.model.use_remove_padding, view.strategy)
    return [f"{view.role}: {p}" for p in found]


def memory_knob_problems(cfg: Any, view: RoleView) -> List[str]:
    """The log-prob and activation memory settings a role's engine cannot act on (engine/fused.py,
    engine/activations.py): fused kernels need an LM head on the torch engine, activation offload the
    torch engine; the entropy settings run on both engines."""
    role, model = view.role, view.model
    model_key = "critic.model" if role == "critic" else "actor_rollout_ref.model"
    problems = []
    # the ref loads with the actor's model section: its problems are said once, for the actor
    shared = role == "ref" and view.strategy == roles.strategy(cfg, "actor")
    if model.use_fused_kernels and not shared:
        if role == "critic":
            problems.append(f"critic: critic.model.use_fused_kernels=True is {NOT}: the critic has a value head, no LM "
                            "head to fuse; set it to False")
        elif view.megatron:
            problems.append(f"{role}: {model_key}.use_fused_kernels=True is {NOT} on the megatron strategy (its "
                            "logits are split over TP ranks; use entropy_from_logits_with_chunking and "
                            "entropy_checkpointing there); set it to False")
    backend = model.fused_kernel_options.impl_backend
    if backend != "torch" and not shared:
        problems.append(f"{role}: {model_key}.fused_kernel_options.impl_backend={backend!r} is {NOT}: verl's Triton "
                        "kernels are not part of verl_lite; choose torch")
    if model.enable_activation_offload and view.megatron and not shared:
        problems.append(f"{role}: {model_key}.enable_activation_offload=True is {NOT} on the megatron strategy (the "
                        "Megatron engine does not offload activations; use its recompute settings in "
                        "override_transformer_config); set it to False")
    if role != "critic":
        size = view.section.entropy_from_logits_chunk_size
        if view.section.entropy_from_logits_with_chunking and (not isinstance(size, int) or size < 1):
            problems.append(f"{role}: {view.prefix}.entropy_from_logits_chunk_size={size!r}: a chunk holds at least "
                            "1 token; set a positive number of tokens (verl's 2048)")
    return problems


def _log_prob_memory_warnings(cfg: Any, views: List[RoleView]) -> List[str]:
    """The entropy settings of a role that has nothing for them to act on: with use_fused_kernels the
    torch engine never holds the logits (its fused pass is chunked and recomputed already), and the
    chunk size matters only with chunking."""
    warnings = []
    for view in views:
        if view.role == "critic":
            continue
        section, prefix = view.section, view.prefix
        if view.model.use_fused_kernels and not view.megatron:
            on = [f"{prefix}.{k}" for k in ("entropy_from_logits_with_chunking", "entropy_checkpointing")
                  if getattr(section, k)]
            if on:
                warnings.append(f"{', '.join(on)} {'has' if len(on) == 1 else 'have'} no effect with "
                                "actor_rollout_ref.model.use_fused_kernels=True (the fused pass already goes chunk by "
                                "chunk and recomputes in backward)")
        elif not section.entropy_from_logits_with_chunking and section.entropy_from_logits_chunk_size != 2048:
            warnings.append(f"{prefix}.entropy_from_logits_chunk_size={section.entropy_from_logits_chunk_size} has no "
                            f"effect: {prefix}.entropy_from_logits_with_chunking is False")
    return warnings


def lora_problems(cfg: Any, view: RoleView) -> List[str]:
    """LoRA (model.lora_rank / lora_adapter_path) runs on the torch engine only (engine/lora.py); the ref
    has none of its own (it is the actor with its adapters disabled)."""
    if view.role == "ref":
        return []
    key = "critic.model" if view.role == "critic" else "actor_rollout_ref.model"
    model = cfg.critic.model if view.role == "critic" else cfg.actor_rollout_ref.model
    rank, path = model.lora_rank, model.lora_adapter_path
    problems = []
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        problems.append(f"{key}.lora_rank={rank!r}: the LoRA rank is an integer >= 0 (0 = off, e.g. 16)")
        return problems
    if not (rank > 0 or path):
        return problems
    what = f"{key}.lora_rank={rank}" if rank > 0 else f"{key}.lora_adapter_path={path!r}"
    if view.megatron:
        problems.append(f"{view.role}: {what}: LoRA on the megatron strategy is {NOT} (verl's Megatron LoRA, "
                        f"{key}.lora.*, is not implemented): use {view.prefix}.strategy=fsdp, or set {key}.lora_rank=0")
    return problems


def lora_adapter_problems(cfg: Any) -> List[str]:
    """On the machine that trains: each lora_adapter_path is a PEFT adapter dir (nothing is downloaded)."""
    sections = [("actor_rollout_ref.model", cfg.actor_rollout_ref.model)]
    if roles.critic_enabled(cfg):
        sections.append(("critic.model", cfg.critic.model))
    return [f"{key}.lora_adapter_path={model.lora_adapter_path!r} holds no adapter_config.json: give a PEFT adapter "
            "dir (e.g. a checkpoint's actor/lora_adapter); nothing is downloaded"
            for key, model in sections
            if model.lora_adapter_path and not os.path.isfile(os.path.join(str(model.lora_adapter_path),
                                                                           "adapter_config.json"))]


def _remove_padding_blocker(cfg: Any, role: str) -> Optional[str]:
    """Why an explicit use_remove_padding=True cannot run for the role, or None (decisions/packing_mode.py:
    null = auto packs where the engine can, True is refused only where it cannot)."""
    return packing_mode.role_decision(cfg, role, _device(cfg)).refusal


def _actor_problems(cfg: Any) -> List[str]:
    actor, prefix = cfg.actor_rollout_ref.actor, "actor_rollout_ref.actor"
    problems = []
    if actor.shuffle:
        problems.append(f"{prefix}.shuffle=True: shuffling between PPO epochs is {YET} (mini-batches keep their "
                        "order); set it to False")
    problems += _checkpoint_problems(actor.checkpoint, f"{prefix}.checkpoint")
    ref = cfg.actor_rollout_ref.ref
    for key, value in (("actor_rollout_ref.ref.log_prob_micro_batch_size", ref.log_prob_micro_batch_size),
                       ("critic.ppo_micro_batch_size", cfg.critic.ppo_micro_batch_size)):
        if value is not None:
            per_gpu = key.replace("micro_batch_size", "micro_batch_size_per_gpu")
            problems.append(f"{key}={value}: verl's deprecated global micro-batch is {NOT} here: set {per_gpu}")
    return problems


def _checkpoint_problems(section: Any, prefix: str) -> List[str]:
    """verl's checkpoint section (save_contents, load_contents and strict are honoured by the engines'
    save/load, trainer/checkpoint.py the parts' layout); what cannot be honoured yet is refused."""
    if section.async_save:
        return [f"{prefix}.async_save=True: asynchronous saving is {YET}: checkpoints are written synchronously "
                "(and atomically); set it to False"]
    return []


OTB_ESTIMATORS = ("optimal_token_baseline", "tir_optimal_token_baseline")


def _otb_and_gdpo_problems(cfg: Any) -> List[str]:
    """The optimal token baselines need sum_pi_squared from the actor's log-prob pass; gdpo needs its keys."""
    problems = []
    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    spsq = bool(actor.calculate_sum_pi_squared)
    if algo.adv_estimator in OTB_ESTIMATORS and not spsq:
        problems.append(f"algorithm.adv_estimator={algo.adv_estimator} needs sum_pi_squared from the actor's log-prob "
                        "pass (verl asserts it): set actor_rollout_ref.actor.calculate_sum_pi_squared=True")
    if spsq and cfg.actor_rollout_ref.model.use_fused_kernels:
        problems.append("actor_rollout_ref.actor.calculate_sum_pi_squared=True with actor_rollout_ref.model."
                        "use_fused_kernels=True is not supported (as in verl): the fused kernels never form the "
                        "logits sum_pi_squared sums over; set use_fused_kernels=False")
    if spsq and algo.rollout_correction.bypass_mode:
        problems.append("actor_rollout_ref.actor.calculate_sum_pi_squared=True with algorithm.rollout_correction."
                        "bypass_mode=True: bypass mode takes the rollout's log-probs as the old ones and runs no "
                        "actor log-prob pass, where sum_pi_squared is computed; set bypass_mode=False")
    if spsq and cfg.async_training.enable:
        problems.append(f"actor_rollout_ref.actor.calculate_sum_pi_squared=True with async_training.enable=True is "
                        f"{YET}: the fully-async trainer's advantages read no sum_pi_squared; use the synchronous "
                        "trainer (async_training.enable=False)")
    if algo.adv_estimator == "gdpo":
        keys, weights = list(algo.gdpo_reward_keys or []), algo.gdpo_reward_weights
        if not keys:
            problems.append("algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the keys of the reward "
                            "components the score function returns in its dict (e.g. ['accuracy_reward', "
                            "'format_reward'])")
        elif weights is not None and len(weights) != len(keys):
            problems.append(f"algorithm.gdpo_reward_weights has {len(weights)} weights for {len(keys)} "
                            f"gdpo_reward_keys {keys}: give one weight per key, or null for 1 each")
        if cfg.async_training.enable:
            problems.append(f"algorithm.adv_estimator=gdpo with async_training.enable=True is {YET}: the fully-async "
                            "trainer's advantages read no reward components; use async_training.enable=False")
    elif algo.gdpo_reward_keys or algo.gdpo_reward_weights is not None:
        problems.append(f"algorithm.gdpo_reward_keys / gdpo_reward_weights are set with algorithm.adv_estimator="
                        f"{algo.adv_estimator}: only gdpo reads them (as in verl); set adv_estimator=gdpo, or remove "
                        "them")
    return problems


def _run_problems(cfg: Any) -> List[str]:
    problems = []
    algo = cfg.algorithm
    if algo.kl_ctrl.type not in KL_CTRL_TYPES:
        problems.append(f"algorithm.kl_ctrl.type={algo.kl_ctrl.type!r} is {NOT}: choose one of {', '.join(KL_CTRL_TYPES)}")
    if str(algo.kl_penalty).removesuffix("+") not in KL_PENALTIES:
        problems.append(f"algorithm.kl_penalty={algo.kl_penalty!r} is {NOT}: choose one of {', '.join(KL_PENALTIES)} "
                        "(each may end in '+'; verl's full needs the whole distribution)")
    if algo.adv_estimator == "grpo_passk" and int(cfg.actor_rollout_ref.rollout.n) < 2:
        problems.append(f"algorithm.adv_estimator=grpo_passk with actor_rollout_ref.rollout.n="
                        f"{cfg.actor_rollout_ref.rollout.n}: Pass@k compares each prompt's best and second-best "
                        "responses (verl raises on a group of one); set actor_rollout_ref.rollout.n >= 2")
    problems.extend(_otb_and_gdpo_problems(cfg))
    if cfg.algorithm.use_kl_in_reward and cfg.async_training.enable:
        problems.append(f"algorithm.use_kl_in_reward=True with async_training.enable=True is {YET}: the fully-async "
                        "trainer builds no ref model; use actor_rollout_ref.actor.use_kl_loss=True")
    hybrid = cfg.actor_rollout_ref.hybrid_engine  # null: follows async_training.enable
    if hybrid is False and not cfg.async_training.enable:
        problems.append(f"actor_rollout_ref.hybrid_engine=False: {NOT} in synchronous training (actor and rollout "
                        "always share their devices); set it to True, or use async_training.enable=True")
    if hybrid is True and cfg.async_training.enable:
        problems.append(f"actor_rollout_ref.hybrid_engine=True with async_training.enable=True is {NOT}: "
                        "fully-async training puts the rollout on a pool of its own; set it to False")
    if cfg.data.return_multi_modal_inputs is not True:
        problems.append("data.return_multi_modal_inputs=False is refused: the actor, ref and critic forward take the "
                        "processor's pixel inputs that travel with each sample (verl at the pinned commit reads the "
                        "key and acts on it nowhere); remove the line")
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.mode not in ROLLOUT_MODES:
        problems.append(f"actor_rollout_ref.rollout.mode={rollout.mode!r} is {NOT}: choose async (verl's only mode; "
                        "verl_lite generates single-turn responses inside the actor's worker, sampling as verl's "
                        "servers do) or sync, verl_lite's earlier name for the same")
    for key, data_key in (("response_length", "max_response_length"), ("prompt_length", "max_prompt_length")):
        value, data_value = getattr(rollout, key), getattr(cfg.data, data_key)
        if value is not None and int(value) != int(data_value):
            problems.append(f"actor_rollout_ref.rollout.{key}={value} differs from data.{data_key}={data_value}: a "
                            f"separate rollout length is {NOT} (generation uses data.{data_key}); set "
                            f"data.{data_key}={value} and remove the rollout line")
    if rollout.log_prob_micro_batch_size is not None:
        problems.append(f"actor_rollout_ref.rollout.log_prob_micro_batch_size={rollout.log_prob_micro_batch_size}: "
                        f"verl's deprecated global micro-batch is {NOT} here: set "
                        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")
    if cfg.data.val_batch_size is not None:
        problems.append(f"data.val_batch_size={cfg.data.val_batch_size}: validation batches are {YET}: the whole "
                        "validation set is generated in one call; leave it null")
    if cfg.data.return_raw_chat and not cfg.data.apply_chat_template:
        problems.append("data.return_raw_chat=True with data.apply_chat_template=False: verl's rollout templates the "
                        "raw chat messages, while apply_chat_template=False encodes the prompt text as is; set "
                        "data.return_raw_chat=False for untemplated prompts, or data.apply_chat_template=True")
    problems += reward_problems(cfg)  # reward_model.enable, reward_manager and reward_kwargs
    problems += filter_groups_problems(cfg)  # algorithm.filter_groups and data.gen_batch_size
    problems += rollout_correction_problems(cfg)  # algorithm.rollout_correction
    if int(cfg.trainer.log_val_generations) < 0:
        problems.append(f"trainer.log_val_generations={cfg.trainer.log_val_generations}: the number of validation "
                        "samples to log must be >= 0 (0 logs none)")
    return problems


def clip_problems(cfg: Any) -> List[str]:
    """verl 0.9's engines (FSDP and Megatron alike) clip gradients at `<section>.optim.clip_grad`;
    `<section>.grad_clip` is the legacy key they no longer read. A grad_clip the user changed is
    refused with the key to set instead, never silently dropped."""
    defaults = {"actor": schema.ActorConfig().grad_clip, "critic": schema.CriticConfig().grad_clip}
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


def runtime_env_problems(cfg: Any) -> List[str]:
    """ray_init.runtime_env keys Ray's runtime_env does not know, and env_vars that are not a mapping."""
    env = getattr(cfg.ray_init, "runtime_env", None) or {}
    problems = [f"ray_init.runtime_env.{key}: Ray's runtime_env has no key {key!r} (verl: "
                f"ray_kwargs.ray_init.runtime_env.{key}); use one of {', '.join(RAY_RUNTIME_ENV_KEYS)}, or remove it"
                for key in env if key not in RAY_RUNTIME_ENV_KEYS]
    env_vars = env.get("env_vars") if "env_vars" in env else None
    if env_vars is not None and not hasattr(env_vars, "items"):
        problems.append(f"ray_init.runtime_env.env_vars={env_vars!r}: Ray's env_vars is a mapping of variable names "
                        "to values; set each with ray_init.runtime_env.env_vars.<NAME>=<value>")
    return problems


def verl_problems(cfg: Any) -> List[str]:
    """Refusals for verl settings verl_lite accepts but cannot act on, for the roles that run."""
    problems = _actor_problems(cfg) + _run_problems(cfg) + runtime_env_problems(cfg)
    if roles.critic_enabled(cfg):
        problems += _checkpoint_problems(cfg.critic.checkpoint, "critic.checkpoint")
    for view in role_views(cfg, _device(cfg)):
        problems += _role_problems(cfg, view)
    return problems


def _ref_in_actor_warnings(cfg: Any) -> List[str]:
    """With LoRA the ref is the actor's engine with its adapters disabled (as in verl): the ref's own
    engine settings build nothing. Its log-prob micro-batch and token budget still cut its pass."""
    if not (roles.ref_enabled(cfg) and roles.ref_in_actor(cfg)):
        return []
    ref, prefix = cfg.actor_rollout_ref.ref, "actor_rollout_ref.ref"
    changed = [f"{prefix}.strategy"] if ref.strategy is not None else []
    changed += _changed(ref.fsdp_config, schema.FSDPConfig, f"{prefix}.fsdp_config")
    actor = cfg.actor_rollout_ref.actor
    for key in ("use_torch_compile", "ulysses_sequence_parallel_size"):  # they follow the actor's unless set
        if getattr(ref, key) != getattr(actor, key):
            changed.append(f"{prefix}.{key}")
    default = schema.RefConfig()
    changed += [f"{prefix}.{key}" for key in ("entropy_from_logits_with_chunking", "entropy_from_logits_chunk_size",
                                              "entropy_checkpointing") if getattr(ref, key) != getattr(default, key)]
    if not changed:
        return []
    return [f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: with LoRA "
            "(actor_rollout_ref.model.lora_rank > 0 or lora_adapter_path) the ref is the actor with its adapters "
            "disabled, not a model of its own (as in verl); the actor's engine settings apply"]


def _changed(section: Any, cls: type, prefix: str, skip: tuple = ()) -> List[str]:
    """Dotted keys of a section whose value differs from the schema's default."""
    default = cls()
    return [f"{prefix}.{f.name}" for f in dataclasses.fields(cls)
            if f.name not in skip and getattr(section, f.name) != getattr(default, f.name)]


def verl_warnings(cfg: Any) -> List[str]:
    """verl settings that are valid but have no effect in this run (as in verl): said, not silently dropped."""
    warnings = []
    views = role_views(cfg, _device(cfg))
    if not cfg.async_training.enable:
        changed = _changed(cfg.async_training, schema.AsyncTrainingConfig, "async_training", skip=("enable",))
        if changed:
            warnings.append(f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: fully-async "
                            "training is off (async_training.enable=False)")
    algo = cfg.algorithm
    warnings += estimator_setting_warnings(algo)
    if not algo.use_kl_in_reward:
        changed = _changed(algo.kl_ctrl, schema.KLControlConfig, "algorithm.kl_ctrl")
        changed += ["algorithm.kl_penalty"] if algo.kl_penalty != schema.AlgorithmConfig().kl_penalty else []
        if changed:
            warnings.append(f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: the KL penalty "
                            "in the reward is off (algorithm.use_kl_in_reward=False)")
    actor = cfg.actor_rollout_ref.actor
    warnings += loss_setting_warnings(actor)
    if not actor.use_kl_loss:
        default = schema.ActorConfig()
        changed = [f"actor_rollout_ref.actor.{k}" for k in ("kl_loss_coef", "kl_loss_type")
                   if getattr(actor, k) != getattr(default, k)]
        if changed:
            warnings.append(f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: the KL loss is "
                            "off (actor_rollout_ref.actor.use_kl_loss=False)")
    warnings += custom_reward_warnings(cfg)
    if cfg.trainer.resume_from_path and cfg.trainer.resume_mode != "resume_path":
        warnings.append(f"trainer.resume_from_path has no effect with trainer.resume_mode={cfg.trainer.resume_mode} "
                        "(set trainer.resume_mode=resume_path to resume from it)")
    if cfg.data.trust_remote_code and not cfg.async_training.enable:
        warnings.append("data.trust_remote_code=True has no effect in the sync trainer, as in verl (its tokenizer "
                        "loads with actor_rollout_ref.model.trust_remote_code: set that instead)")
    warnings += _offload_warnings(views)
    warnings += _log_prob_memory_warnings(cfg, views)
    for view in views:
        warnings += token_budget_warnings(cfg, view.role, view.layout.sp)
    warnings += _ref_in_actor_warnings(cfg)
    for view in views:
        warnings += optimizer_overrides.role_warnings(cfg, view.role, view.strategy, view.device)
    warnings += _checkpoint_warnings(cfg)
    world = world_size(cfg)
    actor = cfg.actor_rollout_ref.actor
    if actor.clip_ratio_low is not None and actor.clip_ratio_high is not None and \
            actor.clip_ratio != schema.ActorConfig().clip_ratio:
        warnings.append(f"actor_rollout_ref.actor.clip_ratio={actor.clip_ratio} has no effect: clip_ratio_low and "
                        "clip_ratio_high are both set (clip_ratio is only their default)")
    for view in views:
        role, section, prefix = view.role, view.section, view.prefix
        budgets = [(f"{section_key}.{key}", budget, default, f"{section_key}.{switch}", on)
                   for section_key, switch, on, key, budget, default in token_budgets(cfg, role)]
        for key, budget, default, switch, on in budgets:
            if budget != default and not on:
                warnings.append(f"{key}={budget} has no effect: it is the token budget of dynamic batch size, "
                                f"which is off ({switch}=False)")
        optim = getattr(section, "optim", None)
        no_ratio = schema.OptimConfig().lr_warmup_steps_ratio
        if optim is not None and optim.lr_warmup_steps >= 0 and optim.lr_warmup_steps_ratio != no_ratio:
            warnings.append(f"{prefix}.optim.lr_warmup_steps_ratio={optim.lr_warmup_steps_ratio} has no effect: "
                            f"{prefix}.optim.lr_warmup_steps={optim.lr_warmup_steps} is set (the ratio applies when it is negative)")
        if view.strategy == "fsdp" and world == 1 and not _shards_one_rank(section.fsdp_config, role, view.device):
            f = section.fsdp_config
            idle = [f"{key}={value}" for key, value, default in (
                ("reshard_after_forward", f.reshard_after_forward, True),
                ("forward_prefetch", f.forward_prefetch, False),
                ("wrap_policy", dict(f.wrap_policy or {}), {"min_num_params": 0})) if value != default]
            for setting in idle:
                warnings.append(f"{prefix}.fsdp_config.{setting} has no effect on one rank (nothing is sharded)")
    return warnings


def _checkpoint_warnings(cfg: Any) -> List[str]:
    """checkpoint.strict acts on the hf_model export only (as in verl, where it goes to mbridge's
    save_hf_weights); max_critic_ckpt_to_keep only where a critic runs."""
    warnings = []
    for role in ("actor", "critic"):
        if role == "critic" and not roles.critic_enabled(cfg):
            continue
        section = roles.section(cfg, role).checkpoint
        if not section.strict and "hf_model" not in list(section.save_contents):
            warnings.append(f"{roles.SECTION[role]}.checkpoint.strict=False has no effect: it checks the names of "
                            "the hf_model export, and save_contents has no hf_model")
        if cfg.trainer.resume_mode == "disable" and section.load_contents is not None:
            warnings.append(f"{roles.SECTION[role]}.checkpoint.load_contents has no effect: trainer.resume_mode=disable "
                            "loads no checkpoint")
    t = cfg.trainer
    if not roles.critic_enabled(cfg) and t.max_critic_ckpt_to_keep != t.max_actor_ckpt_to_keep:
        warnings.append(f"trainer.max_critic_ckpt_to_keep={t.max_critic_ckpt_to_keep} has no effect: this run has no "
                        "critic (critic.enable, algorithm.adv_estimator)")
    return warnings


def _shards_one_rank(fsdp_config: Any, role: str, device: Optional[str]) -> bool:
    try:
        return fsdp_settings.shards_one_rank(fsdp_config, role, device or "cpu")
    except ValueError:  # a bad dtype: refused by verl_problems
        return False


def _offload_warnings(views: List[RoleView]) -> List[str]:
    """Offload flags that are on where they move nothing: on a cpu run, under FSDP2's CPU offload policy
    (offload_policy, the ref's on a device), and the ref's optimizer and gradient flags (it keeps neither)."""
    warnings = []
    for view in views:
        role, section, prefix = view.role, view.section, view.prefix
        engine = "megatron" if view.megatron else "fsdp_config"
        names = ("param_offload", "grad_offload", "optimizer_offload") if engine == "megatron" else (
            "param_offload", "optimizer_offload")
        on = [f"{prefix}.{engine}.{n}" for n in names if getattr(getattr(section, engine), n)]
        policy = (not view.megatron and view.device not in (None, "cpu")
                  and fsdp_settings.cpu_offload(section.fsdp_config, role, view.device))
        held = [key for key in on if role != "ref" or key.endswith(".param_offload")] if policy else []
        if held:  # FSDP2's CPUOffloadPolicy already holds them on the host (verl turns the flags off)
            why = (f"{prefix}.fsdp_config.offload_policy=True" if section.fsdp_config.offload_policy
                   else "the ref's FSDP2 CPU offload policy (verl's, for its forward-only engine)")
            warnings.append(f"{', '.join(held)}=True {'has' if len(held) == 1 else 'have'} no effect: {why} keeps "
                            "the tensors on the host, as in verl")
            on = [key for key in on if key not in held]
        if on and view.device == "cpu":
            warnings.append(f"{', '.join(on)}=True {'has' if len(on) == 1 else 'have'} no effect on trainer.device=cpu "
                            "(the tensors already live on the host)")
        elif role == "ref":
            idle = [key for key in on if not key.endswith(".param_offload")]
            if idle:
                warnings.append(f"{', '.join(idle)}=True {'has' if len(idle) == 1 else 'have'} no effect: the ref "
                                "model keeps no gradients or optimizer state (param_offload moves its parameters)")
    return warnings


# settings each policy loss does not read (as in verl), and the loss's own settings -> the losses reading them
_LOSS_IGNORES = {
    "gspo": ("loss_agg_mode", "clip_ratio_c"), "geo_mean": ("loss_agg_mode", "clip_ratio_c"),
    "sapo": ("loss_agg_mode", "clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "gpg": ("clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "clip_cov": ("clip_ratio_c",), "cispo": ("clip_ratio_c",),
    "kl_cov": ("clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "dro": ("clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
}
_LOSS_OWN = {"tau_pos": ("sapo",), "tau_neg": ("sapo",), "policy_loss.clip_cov_ratio": ("clip_cov",),
             "policy_loss.clip_cov_lb": ("clip_cov",), "policy_loss.clip_cov_ub": ("clip_cov",),
             "policy_loss.kl_cov_ratio": ("kl_cov",), "policy_loss.ppo_kl_coef": ("kl_cov",),
             "policy_loss.dro_beta": ("dro",)}


def _plain(section: Any) -> Any:
    """A config section as plain values, without reading its fields one by one: a key only compared with its
    default for a warning is not one the run acts on (tests/py/test_read_tracking.py tells the two apart)."""
    from omegaconf import OmegaConf  # a composed config has loaded it; importing the preflight does not

    if OmegaConf.is_config(section):
        return OmegaConf.to_container(section, resolve=True)
    if dataclasses.is_dataclass(section):
        return {k: _plain(v) for k, v in vars(section).items()}
    return section


def _dotted(values: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        values = values[part]
    return values


def loss_setting_warnings(actor: Any) -> List[str]:
    """A changed actor setting that the chosen policy loss does not read (verl ignores it too)."""
    mode = actor.policy_loss.loss_mode
    values, default = _plain(actor), _plain(schema.ActorConfig())
    unread = [k for k in _LOSS_IGNORES.get(mode, ()) if _dotted(values, k) != _dotted(default, k)]
    unread += [k for k, modes in _LOSS_OWN.items() if mode not in modes and _dotted(values, k) != _dotted(default, k)]
    if not unread:
        return []
    keys = ", ".join(f"actor_rollout_ref.actor.{k}" for k in unread)
    return [f"{keys} {'has' if len(unread) == 1 else 'have'} no effect with policy_loss.loss_mode={mode} (as in "
            "verl: the loss does not read it)"]


# algorithm settings -> the estimators that read them (verl's compute_advantage passes them only there)
_ESTIMATOR_READS = {"norm_adv_by_std_in_grpo": ("grpo", "grpo_vectorized", "grpo_passk"),
                    "gamma": ("gae", "reinforce_plus_plus"), "lam": ("gae",)}


def estimator_setting_warnings(algo: Any) -> List[str]:
    """A changed algorithm setting that the chosen advantage estimator does not read."""
    values, default = _plain(algo), _plain(schema.AlgorithmConfig())
    unread = [k for k, readers in _ESTIMATOR_READS.items()
              if algo.adv_estimator not in readers and values[k] != default[k]]
    if not unread:
        return []
    keys = ", ".join(f"algorithm.{k}" for k in unread)
    return [f"{keys} {'has' if len(unread) == 1 else 'have'} no effect with algorithm.adv_estimator="
            f"{algo.adv_estimator} (as in verl: the estimator does not read it)"]
