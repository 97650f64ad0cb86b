"""Structured config for verl_lite: dataclasses whose key names are the ones verl users type.

Only what verl_lite supports is here; an unknown key is an error with a suggestion (see
`verl_lite.config.compose`). Open dicts (`override_transformer_config`, `override_config`) take
new keys with Hydra's `+key=value`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

# ---------------------------------------------------------------------------- data


@dataclass
class DataConfig:
    # Parquet files (a path or a list of paths) in verl's row format: prompt (chat messages),
    # data_source, reward_model.ground_truth, extra_info.
    train_files: Any = "~/data/verl_lite/tiny/train.parquet"
    val_files: Any = "~/data/verl_lite/tiny/val.parquet"
    prompt_key: str = "prompt"
    # Prompts per step (before repetition by rollout.n).
    train_batch_size: int = 32
    val_batch_size: Optional[int] = None
    max_prompt_length: int = 512
    max_response_length: int = 512
    # "error" rejects a longer prompt, "left"/"right" truncate it.
    truncation: str = "error"
    filter_overlong_prompts: bool = False
    shuffle: bool = True
    seed: int = 1
    return_raw_chat: bool = False
    # True: each prompt goes through the tokenizer's chat template (with a generation prompt), as
    # verl does. False: the prompt's message contents (or a plain-string prompt) are encoded as
    # text, with the tokenizer's special tokens; for base models without a chat template.
    # verl_lite's own key (verl always applies the template).
    apply_chat_template: bool = True
    # Extra keyword arguments of tokenizer.apply_chat_template, as verl's key (e.g. {enable_thinking: false}).
    apply_chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- optimizer


@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    # Warm-up: explicit steps win over the ratio (-1 = use the ratio).
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    # constant | cosine
    lr_scheduler_type: str = "constant"
    min_lr_ratio: float = 0.0
    clip_grad: float = 1.0
    total_training_steps: int = -1


# ---------------------------------------------------------------------------- megatron


@dataclass
class MegatronConfig:
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: Optional[int] = None
    sequence_parallel: bool = True
    use_distributed_optimizer: bool = True
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    seed: int = 42
    # Passed to megatron's TransformerConfig and to MindSpeed's repatch on NPU. Open: `+key=value`.
    override_transformer_config: Dict[str, Any] = field(default_factory=dict)
    use_mbridge: bool = False
    dist_checkpointing_path: Optional[str] = None


@dataclass
class FSDPConfig:
    param_offload: bool = False
    optimizer_offload: bool = False
    # -1 = shard over all data-parallel ranks.
    fsdp_size: int = -1
    reshard_after_forward: bool = True


# ---------------------------------------------------------------------------- model


@dataclass
class ModelConfig:
    # A local directory with config.json (and weights, else random init) or a shipped tiny
    # config name such as "tiny-qwen3_5". Nothing is ever downloaded.
    path: str = "tiny-qwen3_5"
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    use_remove_padding: bool = False
    enable_gradient_checkpointing: bool = False
    # Extra HF config fields for the model (`+...override_config.x=y`).
    override_config: Dict[str, Any] = field(default_factory=dict)
    # Random init seed when the path holds no weights.
    init_seed: int = 0
    # Chunk of the pure-torch GDN (linear_attention) rule, used where flash-linear-attention is not
    # installed (CPU): null = by sequence length (16 up to 128 tokens); 64 = transformers' own.
    linear_attention_chunk_size: Optional[int] = None


# ---------------------------------------------------------------------------- actor / ref / rollout


@dataclass
class ActorConfig:
    # fsdp (torch-native) | megatron. On device npu, megatron is served by MindSpeed engines.
    strategy: str = "fsdp"
    optim: OptimConfig = field(default_factory=OptimConfig)
    ppo_mini_batch_size: int = 32
    ppo_micro_batch_size: Optional[int] = None
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    ppo_epochs: int = 1
    shuffle: bool = False
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: float = 3.0
    # token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm
    loss_agg_mode: str = "token-mean"
    policy_loss: str = "vanilla"
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    # kl | abs | mse | low_var_kl
    kl_loss_type: str = "low_var_kl"
    grad_clip: float = 1.0
    use_torch_compile: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    checkpoint: Dict[str, Any] = field(default_factory=dict)


def _ref_megatron() -> MegatronConfig:
    """The ref model follows the actor's parallel layout unless set explicitly (as in verl)."""
    actor = "${actor_rollout_ref.actor.megatron."
    return MegatronConfig(
        tensor_model_parallel_size=actor + "tensor_model_parallel_size}",  # type: ignore[arg-type]
        pipeline_model_parallel_size=actor + "pipeline_model_parallel_size}",  # type: ignore[arg-type]
        virtual_pipeline_model_parallel_size=actor + "virtual_pipeline_model_parallel_size}",  # type: ignore[arg-type]
        context_parallel_size=actor + "context_parallel_size}",  # type: ignore[arg-type]
        expert_model_parallel_size=actor + "expert_model_parallel_size}",  # type: ignore[arg-type]
        expert_tensor_parallel_size=actor + "expert_tensor_parallel_size}",  # type: ignore[arg-type]
        # Actor and ref share one process and MindSpeed's repatch is process-wide: same overrides.
        override_transformer_config=actor + "override_transformer_config}",  # type: ignore[arg-type]
    )


@dataclass
class RefConfig:
    strategy: Optional[str] = None  # None = same as the actor
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    log_prob_use_dynamic_bsz: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=_ref_megatron)


@dataclass
class RolloutConfig:
    # hf (transformers generate) | vllm (named slot, needs vllm installed)
    name: str = "hf"
    mode: str = "sync"
    n: int = 1
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    log_prob_use_dynamic_bsz: bool = False
    # Generation micro batch for the hf rollout (sequences per generate call).
    micro_batch_size: int = 256
    response_length: Optional[int] = None
    prompt_length: Optional[int] = None
    dtype: str = "bfloat16"
    enforce_eager: bool = False
    free_cache_engine: bool = True
    load_format: str = "dummy"
    # Validation sampling.
    val_kwargs: Dict[str, Any] = field(
        default_factory=lambda: {"n": 1, "do_sample": False, "temperature": 0.0, "top_k": -1, "top_p": 1.0}
    )
    # Separate rollout resources for fully-async training.
    nnodes: int = 0
    n_gpus_per_node: int = 0


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


# ---------------------------------------------------------------------------- critic


@dataclass
class CriticConfig:
    enable: Optional[bool] = None  # None = on when algorithm.adv_estimator == gae
    strategy: Optional[str] = None  # None = same as the actor
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    model: ModelConfig = field(default_factory=lambda: ModelConfig(path=""))
    ppo_mini_batch_size: Optional[int] = None
    ppo_micro_batch_size: Optional[int] = None
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    use_dynamic_bsz: bool = False
    ppo_epochs: Optional[int] = None
    cliprange_value: float = 0.5
    loss_agg_mode: str = "token-mean"
    grad_clip: float = 1.0
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)


# ---------------------------------------------------------------------------- algorithm, reward


@dataclass
class KLControlConfig:
    type: str = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1


@dataclass
class AlgorithmConfig:
    # grpo | gae
    adv_estimator: str = "grpo"
    norm_adv_by_std_in_grpo: bool = True
    gamma: float = 1.0
    lam: float = 1.0
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)


@dataclass
class RewardModelConfig:
    enable: bool = False
    # naive: one score per response from the rule/custom reward function
    reward_manager: str = "naive"


@dataclass
class CustomRewardFunctionConfig:
    # A Python file whose function `name(data_source, solution_str, ground_truth, extra_info)`
    # returns a float. The file is executed as code: only point at files you trust.
    path: Optional[str] = None
    name: str = "compute_score"


# ---------------------------------------------------------------------------- async training


@dataclass
class AsyncTrainingConfig:
    enable: bool = False
    staleness_threshold: int = 1
    trigger_parameter_sync_step: int = 1
    require_batches: int = 1
    partial_rollout: bool = True
    queue_timeout_s: float = 600.0
    # drop | reweight
    stale_policy: str = "drop"
    # New tokens a rollout generates between two looks for new weights; 0 = whole responses (a
    # sync then waits for the responses in flight). Smaller values cut rollouts at a sync sooner.
    rollout_segment_tokens: int = 0
    # stale_policy=reweight: per-token importance weights of stale samples are truncated here.
    reweight_cap: float = 2.0


# ---------------------------------------------------------------------------- trainer


@dataclass
class TrainerConfig:
    project_name: str = "verl_lite"
    experiment_name: str = "default"
    # console | jsonl | tensorboard
    logger: List[str] = field(default_factory=lambda: ["console", "jsonl"])
    log_val_generations: int = 0
    nnodes: int = 1
    n_gpus_per_node: int = 1
    # auto | cuda | npu | cpu (gpu is accepted as cuda)
    device: str = "auto"
    total_epochs: int = 1
    total_training_steps: Optional[int] = None
    save_freq: int = -1
    test_freq: int = -1
    val_before_train: bool = False
    critic_warmup: int = 0
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    # disable | auto | resume_path
    resume_mode: str = "auto"
    resume_from_path: Optional[str] = None
    max_actor_ckpt_to_keep: Optional[int] = None
    seed: int = 1
    # false runs the workers in-process (unit tests); the default path is Ray.
    ray: bool = True
    ray_timeout_s: float = 60.0
    # Write a reward-curve PNG next to the metrics at the end.
    plot_rewards: bool = True


@dataclass
class RayInitConfig:
    # CPUs of a local cluster started for the job; null = this machine's count (at least ranks + 1
    # on cpu). Not used when joining a cluster: that cluster keeps its own.
    num_cpus: Optional[int] = None
    # The Ray cluster to join (host:port); null = RAY_ADDRESS if set, else a local cluster is
    # started for the job: bound to 127.0.0.1, token auth off for it, workers at nice 0
    # (RAY_AUTH_MODE, RAY_worker_niceness and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER exported by the
    # user win). A joined cluster keeps its own settings; docs/reliability.md lists which apply when.
    address: Optional[str] = None
    # Temp dir of a local cluster; null = RAY_TMPDIR, else <tmp>/verl_lite_ray. Not used when joining.
    temp_dir: Optional[str] = None
    # Start the dashboard with a local cluster (on 127.0.0.1). Not used when joining.
    include_dashboard: bool = False


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
