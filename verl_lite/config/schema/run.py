"""The schema's run-wide sections: data, the critic, fully-async training, the trainer, Ray, and
VerlLiteConfig, the whole config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from verl_lite.config.schema.actor import ActorRolloutRefConfig, CheckpointConfig
from verl_lite.config.schema.algorithm import AlgorithmConfig, CustomRewardFunctionConfig, RewardModelConfig
from verl_lite.config.schema.engine import FSDPConfig, MegatronConfig, ModelConfig, OptimConfig
from verl_lite.config.schema.profiler import GlobalProfilerConfig, ProfilerConfig


# ---------------------------------------------------------------------------- data


@dataclass
class DataConfig:
    # Parquet files (a path or a list of paths) in verl's row format: prompt (chat messages),
    # data_source, reward_model.ground_truth, extra_info.
    train_files: Any = "~/data/verl_lite/tiny/train.parquet"
    # Validation parquet files, same format; scored every trainer.test_freq steps and with val_before_train.
    # null or [] = no validation; a listed file that does not exist is refused before training.
    val_files: Any = "~/data/verl_lite/tiny/val.parquet"
    # Parquet column holding the prompt: chat messages [{role, content}], or a plain string with
    # apply_chat_template=False.
    prompt_key: str = "prompt"
    # Prompts per step (before repetition by rollout.n).
    train_batch_size: int = 32
    # Prompts generated per round of DAPO's dynamic sampling (algorithm.filter_groups); null =
    # train_batch_size. Without filter_groups each step still trains on train_batch_size prompts (as
    # verl's trainer, which fetches them gen_batch_size at a time): a value must divide it. Refused in
    # fully-async mode, where verl gives it another meaning.
    gen_batch_size: Optional[int] = None
    # verl: prompts per validation batch (null = the whole set at once). Not supported by verl_lite yet:
    # validation generates the whole validation set in one call; a value is refused.
    val_batch_size: Optional[int] = None
    # Longest prompt in tokens (after the chat template); longer ones follow data.truncation, or are
    # dropped with filter_overlong_prompts.
    max_prompt_length: int = 512
    # Most tokens generated per response, in training and validation (generation stops at EOS).
    # verl_lite reads this, not rollout.response_length.
    max_response_length: int = 512
    # "error" rejects a longer prompt, "left"/"right" truncate it.
    truncation: str = "error"
    # True: drop prompts longer than max_prompt_length when the data is loaded (wins over truncation).
    filter_overlong_prompts: bool = False
    # Processes that tokenize (and filter) the prompts when the data is loaded, capped at the CPU
    # count as verl caps it. verl's default is 1 too.
    filter_overlong_prompts_workers: int = 1
    # Shuffle the prompt order every epoch (a permutation of data.seed and the epoch, so a resumed run
    # keeps its order). False = file order.
    shuffle: bool = True
    # Seed of the prompt shuffle (data.shuffle).
    seed: int = 1
    # verl's key, taken for its scripts; either value behaves as verl's. verl (pinned commit) stores it
    # but never reads it: its dataset always keeps the chat messages as raw_prompt, read by its agent
    # loop (which templates them) and reward-model scoring (not supported here), never passed to a
    # reward function (compute_score gets data_source, solution_str, ground_truth, extra_info, as
    # here). verl_lite templates the prompt once (data.apply_chat_template): the same tokens. True
    # is refused with data.apply_chat_template=False (the prompt text encoded as is, untemplated).
    return_raw_chat: bool = False
    # True: each prompt goes through the tokenizer's chat template (with a generation prompt), as
    # verl does. False: the prompt's message contents (or a plain-string prompt) are encoded as
    # text, with the tokenizer's special tokens; for base models without a chat template.
    # verl_lite's own key (verl always applies the template).
    apply_chat_template: bool = True
    # Extra keyword arguments of tokenizer.apply_chat_template, as verl's key (e.g. {enable_thinking: false}).
    apply_chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Let the driver's tokenizer and processor run the model directory's own Python code (transformers'
    # trust_remote_code), as verl's fully-async and one-step-off trainers read it; the workers follow
    # actor_rollout_ref.model.trust_remote_code, which also applies to the driver. verl's sync trainer
    # does not read it: True there gets a warning that it has no effect.
    trust_remote_code: bool = False
    # Parquet column holding each row's images, verl's layout: a list of {bytes} / {path} / {image}
    # entries or paths, one per <image> placeholder in the prompt's message contents. Rows with images
    # are encoded by the model's processor (a vision-language model: docs/vl.md); a text model refuses them.
    image_key: str = "images"
    # Images are resized before the processor as verl's qwen_vl_utils.fetch_image does: sides a multiple
    # of image_patch_size * 2, within 4..16384 such tiles; once, for the prompt-length filter and for the
    # model's inputs alike. null = the processor's own patch size (what verl's agent loop resizes the
    # model's images with; verl's yaml writes 14, which its dataset uses for the length filter only).
    image_patch_size: Optional[int] = None
    # True (verl's default): the processor's pixel inputs (pixel_values, image_grid_thw) travel with each
    # sample as multi_modal_inputs to the actor, ref and critic forward. False is refused: verl (pinned
    # commit) reads the key and acts on it nowhere, and the engines need the pixel inputs.
    return_multi_modal_inputs: bool = True


# ---------------------------------------------------------------------------- critic


@dataclass
class CriticConfig:
    # Train a value model (the critic).
    enable: Optional[bool] = None  # None = on when algorithm.adv_estimator == gae
    # Backend of the critic.
    strategy: Optional[str] = None  # None = same as the actor
    # verl: seconds a collective of the critic workers' process group may wait before it fails.
    nccl_timeout: int = 600
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    model: ModelConfig = field(default_factory=lambda: ModelConfig(path=""))
    # What the critic's checkpoints save and load (as actor_rollout_ref.actor.checkpoint).
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # torch.profiler on the critic's workers in the profiled steps (as actor_rollout_ref.actor.profiler).
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    # Prompts per critic mini-batch, one optimizer step each; null = actor.ppo_mini_batch_size.
    ppo_mini_batch_size: Optional[int] = None
    # verl's deprecated global micro batch. Not supported: a value is refused (set
    # ppo_micro_batch_size_per_gpu).
    ppo_micro_batch_size: Optional[int] = None
    # Sequences per forward/backward on each rank in the critic update and value pass; null = 64.
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    # Token-sized micro-batches for the critic's update and value pass (as actor.use_dynamic_bsz). verl's
    # default follows actor.use_dynamic_bsz; here it is False unless set.
    use_dynamic_bsz: bool = False
    # Token budget per rank of the critic's dynamic micro-batches (update and value pass); read only
    # with use_dynamic_bsz (otherwise a changed value gets a warning that it has no effect).
    ppo_max_token_len_per_gpu: int = 32768
    # Critic passes over each batch; null = actor.ppo_epochs.
    ppo_epochs: Optional[int] = None
    # Value clipping: new values are clipped to old values +- cliprange_value in the value loss.
    cliprange_value: float = 0.5
    # How per-token value losses are aggregated (as actor.loss_agg_mode); not copied from the actor.
    loss_agg_mode: str = "token-mean"
    # verl's legacy clip key, no longer read by verl 0.9: critic.optim.clip_grad is the clip applied.
    # Not read by verl_lite either; the preflight refuses a changed value and names optim.clip_grad.
    grad_clip: float = 1.0
    # Ulysses sequence parallelism of the critic (as actor_rollout_ref.actor.ulysses_sequence_parallel_size;
    # not copied from the actor, as in verl). 1 = off.
    ulysses_sequence_parallel_size: int = 1
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)


# ---------------------------------------------------------------------------- async training


@dataclass
class AsyncTrainingConfig:
    # Fully-async training: replicas on the rollout pool (rollout.nnodes x n_gpus_per_node) generate
    # while the training pool trains; GRPO only, needs trainer.ray.
    enable: bool = False
    # verl's freshness control, a fraction >= 0: between two weight syncs the rollouter starts at most
    # int(required * (1 + staleness_threshold) * trigger_parameter_sync_step) prompt groups, counting
    # the ones queued or in flight at the sync (required = the prompts of a step), so at most
    # staleness_threshold * required * trigger_parameter_sync_step groups are generated with weights
    # older than the trainer's. 0 = each version generates exactly what its steps train on.
    staleness_threshold: float = 1.0
    # Training steps between weight pushes to the rollout replicas (version = step // this).
    trigger_parameter_sync_step: int = 1
    # verl: mini-batches of actor.ppo_mini_batch_size prompts a step takes, with data.train_batch_size=0
    # (a step then trains on ppo_mini_batch_size * require_batches prompts). With
    # data.train_batch_size > 0 only 1 (the step is that batch; others are refused).
    require_batches: int = 1
    # At a weight sync: True cuts the responses in flight at the next segment boundary
    # (rollout_segment_tokens) and resumes them from their partial response under the new weights;
    # False lets the chunk in flight finish first.
    partial_rollout: bool = True
    # verl: validate on the trainer's devices (hybrid rollout replicas beside the training engine).
    # Not supported: only False, validation runs on rollout replica 0 (verl's default path).
    use_trainer_do_validate: bool = False
    # Seconds the trainer waits on an empty rollout queue before it stops with an error.
    queue_timeout_s: float = 600.0
    # Groups more than ceil(staleness_threshold) weight versions old when trained on (the rollouter's
    # budget keeps them from arising, except a rollout resumed across several syncs or replicas that
    # finish out of order): drop them, or train on them with advantages scaled by a truncated
    # importance weight (reweight_cap). reweight is refused with algorithm.rollout_correction (which
    # corrects the same gap).
    stale_policy: str = "drop"
    # New tokens a rollout generates between two looks for new weights; 0 = whole responses (a
    # sync then waits for the responses in flight). Smaller values cut rollouts at a sync sooner.
    rollout_segment_tokens: int = 0
    # stale_policy=reweight: per-token importance weights of stale samples are truncated here.
    reweight_cap: float = 2.0


# ---------------------------------------------------------------------------- trainer


@dataclass
class TrainerConfig:
    # Project name for the trackers (wandb project); part of default_local_dir.
    project_name: str = "verl_lite"
    # Run name for the trackers (wandb run name); part of default_local_dir.
    experiment_name: str = "default"
    # Metric backends: console lines, jsonl (default_local_dir/metrics.jsonl), and verl's trackers through
    # their own libraries, configured as verl configures them (docs/trackers.md): tensorboard, wandb,
    # mlflow, swanlab, clearml, trackio, file; `tracking` is verl's old name of wandb. A single string is
    # taken as a one-element list.
    logger: List[str] = field(default_factory=lambda: ["console", "jsonl"])
    # Validation samples (input, output, score) to log at each validation, chosen as verl chooses
    # them (sorted by input, shuffled with seed 42, the first N): a table on the console, a
    # val/generations list in the step's metrics.jsonl row, tensorboard text, a wandb table. 0 = none.
    log_val_generations: int = 0
    # A directory for each training step's samples as JSONL, {step}.jsonl, as verl writes them
    # (ray_trainer.py _log_rollout_data): one row per response with input, output, gts, score, step and the
    # reward function's extra values. null = none.
    rollout_data_dir: Optional[str] = None
    # The same for each validation's samples (with the reward as `reward`); null = none.
    validation_data_dir: Optional[str] = None
    # Nodes of the training pool; ranks = nnodes * n_gpus_per_node, one worker each.
    nnodes: int = 1
    # Devices per node for training (GPUs or NPUs; CPU processes on cpu).
    n_gpus_per_node: int = 1
    # Device to train on: auto probes npu, then cuda, else cpu; gpu (any case) is accepted as cuda.
    device: str = "auto"
    # device npu: the documented Ascend stack the nodes run (docs/ascend.md): core_r0.16.0 (Megatron-LM 0.16 +
    # MindSpeed core_r0.16.0) or core_r0.18.0 (Megatron-LM core_v0.18.0 + MindSpeed/MegatronAdaptor core_r0.18.0 +
    # MindSpeed-Bridge); auto = the installed MindSpeed's, found by its files; with none installed (a laptop's
    # check) core_r0.18.0 when use_ascend_gdn=True (USE_MINDSPEED_BRIDGE=True), else core_r0.16.0. The check and
    # the engines read what the stack offers from config/generated/ascend_facts.json. verl_lite's own key.
    ascend_stack: str = "auto"
    # The accelerator model, for the check's memory prediction (docs/memory.md): one of the table in
    # config/devices.py (H100-80GB, H200, H20, A100-80GB, A100-40GB, H800-80GB, 910B, 910B4, 910C).
    # null = detected where the workers run (nvidia-smi / npu-smi, `check --training`), else assumed
    # (H100-80GB on cuda, 910B on npu) with a warning instead of a refusal.
    device_name: Optional[str] = None
    # Memory per device in GiB that the run may use, for the memory prediction; null = the usable
    # figure of device_name (or of the detected device). Wins over device_name.
    device_memory_gib: Optional[float] = None
    # What the check does when the predicted peak exceeds the device's memory: refuse (the run does not
    # start), warn, or off (no prediction).
    memory_check: str = "refuse"
    # Passes over train_files (steps per epoch = prompts // train_batch_size). As in verl, the run
    # ends after this many epochs even when total_training_steps asks for more.
    total_epochs: int = 30
    # Steps of the run, at most total_epochs epochs of them; null = total_epochs * steps per epoch.
    # It (else total_epochs epochs) also fills each role's optim.total_training_steps when that is -1,
    # as verl's trainer does.
    total_training_steps: Optional[int] = None
    # Save a checkpoint every N steps and after the last one; <= 0 = no periodic saves (a run stopped
    # by a signal still saves).
    save_freq: int = -1
    # Validate every N steps and after the last one; <= 0 = never (val_before_train aside).
    test_freq: int = -1
    # Validate once before the first step (not on a resumed run).
    val_before_train: bool = False
    # Steps in which only the critic trains; the actor updates from step critic_warmup + 1 on.
    critic_warmup: int = 0
    # Regroup the rows of each mini-batch before an update so each data-parallel rank's part has
    # balanced total tokens (verl's _balance_batch, keep_minibatch style: each mini-batch keeps its
    # samples); logs global_seqlen/*. No effect with one DP rank.
    balance_batch: bool = True
    # Output dir: checkpoints (global_step_N), metrics.jsonl, reward_curve.png, tensorboard, last_error.txt.
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    # auto: resume from the newest complete checkpoint in default_local_dir; resume_path: from
    # resume_from_path; disable: start afresh.
    resume_mode: str = "auto"
    # A global_step_N checkpoint dir to resume from (resume_mode=resume_path).
    resume_from_path: Optional[str] = None
    # Keep the actor part of only the newest N checkpoints; null or <= 0 = all. A global_step_N dir goes
    # when it holds neither an actor nor a critic part.
    max_actor_ckpt_to_keep: Optional[int] = None
    # Keep the critic part of only the newest N checkpoints (verl's setting); null or <= 0 = all. Follows
    # max_actor_ckpt_to_keep unless set. A dir whose critic part went cannot resume a run with a critic.
    max_critic_ckpt_to_keep: Optional[int] = "${trainer.max_actor_ckpt_to_keep}"  # type: ignore[assignment]
    # Seed of torch's RNG in each worker (seed * 1000 + rank), which drives the rollout's sampling.
    seed: int = 1
    # false runs the workers in-process (unit tests); the default path is Ray.
    ray: bool = True
    # Seconds the driver waits for one call to the workers before it fails the run; <= 0 = no limit.
    ray_timeout_s: float = 60.0
    # Seconds the driver waits for a joined Ray cluster (ray_init.address / RAY_ADDRESS) to show
    # nnodes nodes and their devices before it fails naming what is missing; 0 = look once. A local
    # cluster started for the job is looked at once.
    ray_wait_nodes_s: float = 600.0
    # Write a reward-curve PNG next to the metrics at the end.
    plot_rewards: bool = True


@dataclass
class RayInitConfig:
    # CPUs of a local cluster started for the job; null = this machine's count (at least ranks + 1
    # on cpu). Not used when joining a cluster: that cluster keeps its own.
    num_cpus: Optional[int] = None
    # The Ray cluster to join (host:port); null = RAY_ADDRESS if set, else a local cluster is
    # started for the job: bound to 127.0.0.1, token auth off for it, workers at nice 0, call
    # objects up to 1 MiB inline (RAY_AUTH_MODE, RAY_worker_niceness, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
    # and RAY_max_direct_call_object_size exported by the user win). A joined cluster keeps its own
    # settings; docs/reliability.md lists which apply when.
    address: Optional[str] = None
    # Temp dir of a local cluster; null = RAY_TMPDIR, else <tmp>/verl_lite_ray. Not used when joining.
    temp_dir: Optional[str] = None
    # Start the dashboard with a local cluster (on 127.0.0.1). Not used when joining.
    include_dashboard: bool = False
    # Other keyword arguments of ray.init, passed as they are (verl: ray_kwargs.ray_init.<name>, e.g.
    # `+ray_kwargs.ray_init.num_gpus=4`); they win over verl_lite's own for a local cluster.
    extra: Dict[str, Any] = field(default_factory=dict)
    # Ray runtime_env keys for the job (verl: ray_kwargs.ray_init.runtime_env.<key>, e.g.
    # py_executable, working_dir, pip, env_vars.<NAME>), merged into the runtime env verl_lite builds:
    # env_vars win over verl_lite's own variables (the check names each one replaced); null keys are
    # left out (verl's default py_executable=null: the workers run the driver's Python); env_vars
    # values are passed as strings (true/false for booleans). A key Ray's runtime_env does not know
    # is refused.
    runtime_env: Dict[str, Any] = field(default_factory=lambda: {"py_executable": None})


@dataclass
class VerlLiteConfig:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    # Which steps to profile, with which tool, and where the traces go (verl's global_profiler).
    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)
