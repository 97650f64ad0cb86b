"""verl's spellings on the way in: its config groups and trainer configs, renamed keys, and the
settings of verl that verl_lite does not support (refused by name, with what to use instead).

- `model_engine=megatron|dp` is a verl config group: it picks the strategy of actor, ref and critic
  (`dp` is verl's name for fsdp). Like any Hydra group choice it applies before the key=value
  overrides, wherever it stands on the line, so an explicit `...strategy=` still wins.
- `--config-name=ppo_megatron_trainer` (verl's megatron defaults) and
  `--config-name=fully_async_ppo_megatron_trainer` (the fully-async trainer on megatron) likewise;
  `ppo_trainer` is verl's default. `--config-path` is accepted only as verl's own `config` dir.
- Renamed keys (`ALIASES`): verl's current spelling -> the verl_lite key that does the same thing.
- A key verl has but verl_lite does not (`verl_keys.KEYS`) is refused with
  "<key>=<value>: verl's setting ... not supported by verl_lite: <what to use instead>", not as a typo.

No omegaconf or torch import; used by `compose` before an override is applied.
"""

from __future__ import annotations

import fnmatch
from typing import List, Optional, Sequence, Tuple

from verl_lite.config import keys
from verl_lite.config.generated import verl_accepted, verl_keys

# verl's trainer config names (--config-name) -> the group choices they stand for
CONFIG_NAMES = {
    "ppo_trainer": [],
    "ppo_megatron_trainer": ["actor_rollout_ref.actor.strategy=megatron"],
    "fully_async_ppo_megatron_trainer": ["actor_rollout_ref.actor.strategy=megatron", "async_training.enable=True"],
    "fully_async_ppo_trainer": ["async_training.enable=True"],
}
# verl's model_engine group -> the strategy of actor, ref and critic (null ref/critic follow the actor)
MODEL_ENGINES = {"dp": "fsdp", "fsdp": "fsdp", "megatron": "megatron"}

# verl's key (or section prefix ending in ".") -> the verl_lite key (or prefix)
ALIASES = {
    "critic.fsdp.": "critic.fsdp_config.",
    "actor_rollout_ref.actor.megatron.use_remove_padding": "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.ref.megatron.use_remove_padding": "actor_rollout_ref.model.use_remove_padding",
    "critic.megatron.use_remove_padding": "critic.model.use_remove_padding",
    # verl's engine sections follow the role's log-prob memory settings (oc.select): the same keys
    "actor_rollout_ref.actor.use_fused_kernels": "actor_rollout_ref.model.use_fused_kernels",
    **{f"actor_rollout_ref.{role}.{engine}.{name}": f"actor_rollout_ref.{role}.{name}"
       for role in ("actor", "ref") for engine in ("fsdp_config", "megatron")
       for name in ("entropy_from_logits_with_chunking", "entropy_from_logits_chunk_size", "entropy_checkpointing")},
    "rollout.nnodes": "actor_rollout_ref.rollout.nnodes",
    "rollout.n_gpus_per_node": "actor_rollout_ref.rollout.n_gpus_per_node",
    "ray_kwargs.ray_init.num_cpus": "ray_init.num_cpus",
    "ray_kwargs.ray_init.address": "ray_init.address",
    "ray_kwargs.ray_init._temp_dir": "ray_init.temp_dir",
    "ray_kwargs.ray_init.include_dashboard": "ray_init.include_dashboard",
    "ray_kwargs.ray_init.runtime_env.": "ray_init.runtime_env.",
    # verl's current reward section (verl migrates the legacy reward_model.* / custom_reward_function.* to it)
    "reward.reward_manager.name": "reward_model.reward_manager",
    "reward.custom_reward_function.": "custom_reward_function.",
    "reward.reward_model.enable": "reward_model.enable",
    "reward.reward_kwargs.": "reward_model.reward_kwargs.",
}
# verl's names of a value -> verl_lite's: verl's `fsdp2` is the FSDP2 engine (`fully_shard`) that
# verl_lite's strategy `fsdp` runs; verl's `fsdp` (FSDP1) runs on the same engine (the summary says so)
VALUE_ALIASES = {key: {"fsdp2": "fsdp"} for key in (
    "actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")}
# verl's null where verl reads it as a value verl_lite spells out: no warm-up step count (the ratio
# applies, verl_lite's -1), and the reward function's name (verl falls back to compute_score)
VALUE_ALIASES.update({f"{section}.optim.lr_warmup_steps": {None: -1}
                      for section in ("actor_rollout_ref.actor", "critic")})
VALUE_ALIASES["custom_reward_function.name"] = {None: "compute_score"}
# verl's null mixed precision (its bf16/fp32/fp32) is verl_lite's empty mapping (engine/fsdp_policy.py)
VALUE_ALIASES.update({f"{section}.fsdp_config.mixed_precision": {None: {}}
                      for section in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")})
# verl's `file` logger writes one JSON line of metrics per step: verl_lite's jsonl logger
# (trainer.default_local_dir/metrics.jsonl; verl: $VERL_FILE_LOGGER_PATH)
LIST_VALUE_ALIASES = {"trainer.logger": {"file": "jsonl"}}
# verl < 0.5 spelled the policy loss as a string: `actor.policy_loss=gspo` means `policy_loss.loss_mode=gspo`
STRING_ALIASES = {"actor_rollout_ref.actor.policy_loss": "actor_rollout_ref.actor.policy_loss.loss_mode"}

YET = "not supported by verl_lite yet"
NOT = "not supported by verl_lite"
# verl key patterns (fnmatch, first match wins) -> why and what to use instead (each text says "not supported")
INSTEAD: List[Tuple[str, str]] = [
    ("critic.forward_max_token_len_per_gpu", f"a token budget of the critic's value pass of its own is {NOT}: with "
                                             "critic.use_dynamic_bsz the value pass uses critic.ppo_max_token_len_per_gpu "
                                             "(verl's default for it); remove it"),
    # verl's top-level precision-aware optimizer keys: verl_lite takes them as the OptimizerConfig fields they set
    ("*.optim.use_precision_aware_optimizer", f"a top-level copy is {NOT}: set the megatron-core OptimizerConfig "
                                              "field in the same optim section's override_optimizer_config (e.g. "
                                              "+<role>.optim.override_optimizer_config."
                                              "use_precision_aware_optimizer=True; megatron strategy)"),
    ("*.optim.*_dtype", f"a top-level copy is {NOT}: set the megatron-core OptimizerConfig field in the same optim "
                        "section's override_optimizer_config, beside use_precision_aware_optimizer=True (e.g. "
                        "+<role>.optim.override_optimizer_config.exp_avg_dtype=bf16; megatron strategy)"),
    ("*.fsdp_config.use_torch_compile", f"{NOT}: actor_rollout_ref.actor.use_torch_compile (and the ref's "
                                        "actor_rollout_ref.ref.use_torch_compile) compiles the log-prob and entropy "
                                        "computation on every engine; remove it"),
    ("*.fsdp_config.dtype", f"{NOT} on the torch engine (verl's FSDP engine does not read it either; it is the "
                            "Megatron engine's): the compute dtype is <role>.fsdp_config.mixed_precision.param_dtype "
                            "(bf16 or fp32); remove it"),
    ("*.model.lora.merge", f"sending the LoRA adapters to the rollout as adapters (vLLM's LoRA, verl's "
                           f"lora.merge=False) is {YET}: the rollout gets the merged weights; set lora.merge=True or "
                           "leave it out"),
    ("*.model.lora.*", f"verl's Megatron LoRA section is {NOT}: on strategy fsdp set model.lora_rank, lora_alpha, "
                       "target_modules, exclude_modules (LoRA on the megatron strategy is not supported)"),
    ("*.megatron.use_dist_checkpointing", f"loading initial weights from a Megatron dist checkpoint is {YET}: "
                                          "point actor_rollout_ref.model.path at the HF model"),
    ("*.checkpoint.mbridge_config*", f"mbridge's save_weights arguments are {NOT}: hf_model is written by "
                                     "verl_lite's own exporter (safetensors shards); remove it"),
    ("actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs*",
     f"keyword arguments of verl's checkpoint-engine backends are {NOT}: the one backend here, naive (the weights "
     "go to the vLLM engine in its own process), takes none; remove it"),
    ("actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module",
     f"custom checkpoint-engine backends are {NOT}: the weights go to the vLLM engine in its own process "
     "(backend=naive); remove it"),
    ("*.rollout.checkpoint_engine*", f"{NOT}: of verl's checkpoint-engine settings verl_lite reads backend "
                                     "(naive) and update_weights_bucket_megabytes; remove it"),
    ("algorithm.filter_groups.max_inflight_gen_batches",
     f"{NOT}: verl's streaming refill of single prompts in flight (its V1 replay buffer); dynamic sampling here "
     "generates one batch of data.gen_batch_size prompts at a time, as verl's DAPO recipe does; remove it"),
    ("actor_rollout_ref.actor.calculate_sum_pi_squared", f"the sum of squared token probabilities over the vocabulary "
                                                         f"is {YET}: it feeds algorithm.adv_estimator="
                                                         "optimal_token_baseline, which is refused; remove it"),
    ("algorithm.gdpo_reward_*", f"per-component rewards (GDPO) are {YET}: the reward keeps one score per response; "
                                "use algorithm.adv_estimator=grpo and remove it"),
    ("actor_rollout_ref.model.mtp*", f"multi-token prediction (MTP) is {YET}: remove it"),
    ("actor_rollout_ref.rollout.multi_turn*", f"multi-turn rollouts and tools are {YET}: each "
                                              "prompt gets one response"),
    ("actor_rollout_ref.rollout.agent*", f"agent loops are {YET}: each prompt gets one response"),
    ("rollout.total_rollout_steps", f"{NOT}: the fully-async run's length is trainer.total_training_steps (or total_epochs)"),
    ("*.engine_kwargs.sglang*", f"the sglang rollout is {NOT}: use actor_rollout_ref.rollout.name=hf or vllm"),
    ("data.video_key", f"videos in the prompts are {YET} (vision-language data): the run would train without its "
                       "videos; for a text-only dataset leave the line out"),
    ("*.veomni.*", f"the VeOmni engine is {NOT}: use model_engine=dp (FSDP2) or model_engine=megatron"),
    ("*.torchtitan.*", f"the torchtitan engine is {NOT}: use model_engine=dp (FSDP2) or model_engine=megatron"),
    ("*.optim.min_lr_factor", f"the torchtitan engine's optimizer setting is {NOT}: verl_lite's engines read "
                              "optim.min_lr_ratio"),
    ("actor_rollout_ref.*.engine.*", f"verl's Megatron-Lite engine is {NOT}: use model_engine=megatron and its "
                                     "megatron.* settings"),
    ("*.fsdp_config.turbo_config*", f"verl's FSDP-turbo engine is {NOT}: use strategy=fsdp2 (FSDP2)"),
    ("distillation*", f"on-policy distillation is {YET}"),
    ("*profiler*", f"this profiler setting is {YET}: verl_lite profiles with global_profiler.tool=torch, "
                   "global_profiler.steps and save_path, and actor_rollout_ref.actor.profiler / critic.profiler "
                   "(enable, all_ranks, ranks, tool_config.torch.contents); leave the line out"),
    ("hydra.*", f"Hydra's own settings are {NOT}: verl_lite composes its own schema; leave the line out"),
]


def _instead(key: str) -> str:
    for pattern, text in INSTEAD:
        if fnmatch.fnmatchcase(key, pattern) or fnmatch.fnmatchcase(alias(key), pattern):
            return text
    return f"{NOT}: remove it (verl_lite has no such setting; docs/config.md lists the keys it reads)"


# sections of verl's other config groups (its engines verl_lite lacks) and Hydra's own: keys below them
# are verl's, refused by name, not taken for typos
VERL_GROUP_SECTIONS = ("*.veomni.*", "*.torchtitan.*", "actor_rollout_ref.*.engine.*", "*.fsdp_config.turbo_config.*",
                       "*.optim.min_lr_factor", "hydra.*", "distillation.*")


def is_verl_key(key: str, adding: bool = False) -> bool:
    """True for a key of verl's trainer configs, or one below a verl section that takes new keys (or,
    `adding` a `+key` line, below any verl section verl_lite lacks: verl's Hydra adds keys anywhere)."""
    if key in verl_keys.KEYS or key.startswith("ray_kwargs.ray_init.runtime_env."):
        return True
    if any(fnmatch.fnmatchcase(key, pattern) for pattern in VERL_GROUP_SECTIONS):
        return True
    parts = key.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts))]
    if any(p in verl_keys.OPEN for p in prefixes):
        return True
    # `+reward.reward_kwargs.x=...`: verl adds it below its section `reward`; a `+` below a section
    # verl_lite has (`+actor_rollout_ref.actor.typo`) stays an unknown key with the nearest names
    return adding and any(p in verl_keys.KEYS and p not in keys.key_table()
                          for p in prefixes)


def unsupported(key: str, value: object = None, instead: Optional[str] = None) -> str:
    """The one message for a verl setting verl_lite does not support."""
    shown = f"{key}={'null' if value is None else repr(value)}"
    return f"{shown}: {instead or _instead(key)}"


def verl_key_problem(key: str, value: object, adding: bool = False) -> Optional[str]:
    """The refusal for a verl key that verl_lite lacks, or None when `key` is not verl's either."""
    if key == "model_engine" or not is_verl_key(key, adding):
        return None
    return unsupported(key, value)


def classify(key: str) -> Tuple[str, str]:
    """What verl_lite does with verl's key `key` (a leaf of verl's configs), as the composer decides:
    ("read", verl_lite's key) when the schema has it (after verl's spellings are mapped), ("open",
    the open section) when it falls inside a section that passes keys on, else ("refused", the message)."""
    ours = alias(key)
    if ours in keys.key_table():
        return "read", ours
    section = keys.open_section_of(ours)
    if section:
        return "open", section
    return "refused", _instead(key)


def leaf_keys() -> List[str]:
    """verl's keys that are not sections of other keys, sorted."""
    ordered = sorted(verl_keys.KEYS)
    return [k for i, k in enumerate(ordered) if not (i + 1 < len(ordered) and ordered[i + 1].startswith(k + "."))]

RAY_INIT = "ray_kwargs.ray_init."


def value_alias(key: str, value: object) -> object:
    """verl_lite's name for verl's value of `key` (the value itself when it has no alias)."""
    if key in LIST_VALUE_ALIASES:
        names = LIST_VALUE_ALIASES[key]
        if isinstance(value, str):
            return names.get(value, value)
        if isinstance(value, list):
            return list(dict.fromkeys(names.get(v, v) if isinstance(v, str) else v for v in value))
        return value
    names = VALUE_ALIASES.get(key)
    return names.get(value, value) if names and (value is None or isinstance(value, str)) else value


def alias(key: str, value: object = None) -> str:
    """verl_lite's key for verl's current spelling `key` (the key itself when it has no alias)."""
    if key in STRING_ALIASES and isinstance(value, str):
        return STRING_ALIASES[key]
    if key.startswith(RAY_INIT) and key not in ALIASES and not key.startswith(RAY_INIT + "runtime_env"):
        return "ray_init.extra." + key[len(RAY_INIT):]  # any other ray.init keyword argument, passed as it is
    if key in ALIASES:
        return ALIASES[key]
    for prefix, target in ALIASES.items():
        if prefix.endswith(".") and key.startswith(prefix):
            return target + key[len(prefix):]
    return key


def _config_name(value: str) -> Tuple[List[str], Optional[str]]:
    name = value[:-5] if value.endswith(".yaml") else value
    if name in CONFIG_NAMES:
        return CONFIG_NAMES[name], None
    if name.startswith("one_step_off"):
        return [], (f"--config-name={value}: verl's one-step-off-policy trainer is {YET}: use "
                    "--config-name=fully_async_ppo_trainer (or fully_async_ppo_megatron_trainer) for a rollout "
                    "on devices of its own, or leave it out for synchronous training")
    return [], (f"--config-name={value}: this trainer config is {NOT}: choose one of "
                f"{', '.join(CONFIG_NAMES)} (or leave it out: verl's default is ppo_trainer)")


def split_options(lines: Sequence[object]) -> Tuple[List[str], List[object], List[str]]:
    """(group lines applied first, the remaining override lines in order, problems).

    Takes verl's `--config-name X`/`--config-name=X`, `--config-path X`/`=X` and `model_engine=X`
    out of the line; each becomes the verl_lite overrides it stands for."""
    groups: List[str] = []
    rest: List[object] = []
    problems: List[str] = []
    items = list(lines)
    i = 0
    while i < len(items):
        line = items[i]
        i += 1
        if not isinstance(line, str):
            rest.append(line)
            continue
        option, eq, value = line.partition("=")
        if option in ("--config-name", "--config-path", "-cn", "-cp"):
            if not eq:
                if i >= len(items) or not isinstance(items[i], str):
                    problems.append(f"{option} needs a value")
                    continue
                value = items[i]
                i += 1
            value = value.strip("'\"")
            if option in ("--config-name", "-cn"):
                chosen, problem = _config_name(value)
                groups += chosen
            else:
                problem = None if value in ("config", "./config") else (
                    f"--config-path={value} is not supported by verl_lite: it reads its own schema; "
                    "leave --config-path out, or give verl's own 'config' dir")
            if problem:
                problems.append(problem)
            continue
        if option.lstrip("+") == "model_engine" and eq:
            name = value.strip("'\"")
            if name in MODEL_ENGINES:
                groups.append(f"actor_rollout_ref.actor.strategy={MODEL_ENGINES[name]}")
                continue
        rest.append(line)
    return groups, rest, problems


def same_as_verl_lite(key: str, value: object) -> bool:
    """Whether `key=value` is a verl line that asks for exactly what verl_lite does (the reviewed table
    config/generated/verl_accepted.json, written by tools/gen_verl_accepted.py): taken, changing nothing."""
    entry = verl_accepted.ACCEPTED.get(key)
    return entry is not None and any(v == value and type(v) is type(value) for v in entry["values"])


def value_problem(key: str, value: object) -> Optional[str]:
    """A verl value whose meaning differs in verl_lite, refused before it is applied (else None)."""
    if key == "async_training.staleness_threshold" and isinstance(value, float) and not value.is_integer():
        return (f"async_training.staleness_threshold={value!r}: verl's fraction of stale samples is not supported "
                "by verl_lite: here it counts the weight versions a sample may lag behind (an integer >= 0, "
                "e.g. async_training.staleness_threshold=1)")
    return None


# Keys in both verl and verl_lite whose defaults differ, and why (docs/config.md lists them; a test
# fails when a default differs from verl's without a reason here).
DEFAULT_DIFFERENCES = {
    **{f"{section}.optim.optimizer": "null = the strategy's verl default (AdamW on fsdp, adam on megatron): one "
                                     "section serves both of verl's optimizer configs"
       for section in ("actor_rollout_ref.actor", "critic")},
    "data.train_files": "a local tiny data set (verl_lite trains a tiny model out of the box)",
    "data.val_files": "the tiny data set's validation split",
    "data.train_batch_size": "sized for the tiny CPU run (verl's 1024 is for a cluster)",
    "data.image_patch_size": ("null = the processor's patch size, which verl's agent loop resizes the model's "
                              "images with; verl's dataset uses this key (yaml 14) only to count prompt lengths for "
                              "filter_overlong_prompts. verl_lite resizes once, so the filter counts the tokens the "
                              "model gets; 14 is accepted"),
    "data.seed": "a fixed seed, so a resumed run keeps its prompt order (verl: null = unseeded)",
    "data.return_raw_chat": "False, so data.apply_chat_template=False (prompt text encoded as is) needs no second "
                            "line; verl never reads the key (its raw_prompt is always kept), so both values run "
                            "as verl's",
    "actor_rollout_ref.model.path": "a shipped tiny config; nothing is downloaded",
    "actor_rollout_ref.model.use_remove_padding": ("null = auto: packed where the engine packs natively (torch engine: "
                                                   "attention-only models and Qwen3.5 / Qwen3-Next GDN models; Megatron: "
                                                   "attention layers, and Gated DeltaNet layers on fla or the Ascend "
                                                   "kernel), padded otherwise (Megatron's GDN layers on the pure-torch "
                                                   "rule, which True packs one sequence at a time); True is refused where "
                                                   "it cannot be honoured, with the reason (other linear-attention models "
                                                   "on the torch engine); verl's True packs everywhere"),
    "critic.model.use_remove_padding": "as actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "the tiny models do not need it; it costs time",
    "critic.model.enable_gradient_checkpointing": "as for the actor",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "sized for the tiny CPU run",
    "actor_rollout_ref.actor.clip_ratio_low": "null = clip_ratio, which gives verl's 0.2 (verl writes the value out)",
    "actor_rollout_ref.actor.clip_ratio_high": "null = clip_ratio, which gives verl's 0.2",
    "actor_rollout_ref.actor.use_torch_compile": "compiling costs seconds per worker (inductor), which dominates tiny "
                                                 "CPU runs; True compiles the log-prob and entropy computation",
    "actor_rollout_ref.rollout.name": "hf runs anywhere, CPU included (verl requires a value)",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "one device per replica by default",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "null = verl's 0.5 on cuda/npu, a small share on cpu",
    "critic.strategy": "null = the actor's strategy (verl: fsdp unless model_engine says otherwise)",
    "critic.model.path": "\"\" = the actor's model (verl repeats the path)",
    "reward_model.enable": "False: reward models are not supported (verl: null = off)",
    "reward_model.reward_manager": "naive, what verl's null (and reward.reward_manager.name's default) means",
    "custom_reward_function.name": "compute_score, verl's own fallback for null",
    "trainer.project_name": "verl_lite's own name",
    "trainer.experiment_name": "verl_lite's own name",
    "trainer.logger": "jsonl instead of wandb: no account or network needed",
    "trainer.n_gpus_per_node": "one device (or CPU process) by default",
    "trainer.device": "auto picks npu, then cuda, else cpu (verl: cuda)",
    "trainer.val_before_train": "off so a tiny run starts training at once (verl: on)",
    "trainer.max_critic_ckpt_to_keep": "follows trainer.max_actor_ckpt_to_keep unless set, so one setting bounds "
                                       "the disk used (verl's default null keeps every critic checkpoint); set it "
                                       "to null to keep them all",
    "actor_rollout_ref.rollout.calculate_log_probs": "null = follows the rollout: the vllm rollout returns them "
                                                     "(verl's True), the hf rollout (the default) only with True",
    "actor_rollout_ref.actor.megatron.dtype": "null = what the engine trains in on the target device (float32 on cpu, "
                                              "bfloat16 on cuda and npu, verl's value there)",
    "actor_rollout_ref.ref.megatron.dtype": "as the actor's",
    "critic.megatron.dtype": "as the actor's",
    "actor_rollout_ref.hybrid_engine": "null = True for synchronous training, False with async_training.enable, "
                                       "as verl's two trainer configs set it",
}
