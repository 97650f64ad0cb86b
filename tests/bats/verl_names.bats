#!/usr/bin/env bats
# verl's script variable names (launch/verl_names.tsv) on the scripts whose verl twin reads them:
# one test per name, each checking the printed command the way verl's script would change it.
# The per-device environment's names are in device_env.bats.

load test_helper

setup() { common_setup; }

# dry SCRIPT [VAR=value...] [-- ARGS...]: a successful dry run of SCRIPT.
dry() {
  local script=$1 vars=() args=()
  shift
  while (($#)) && [[ $1 != -- ]]; do vars+=("$1") && shift; done
  (($#)) && shift && args=("$@")
  run_script DRY_RUN=1 "${vars[@]}" bash "$script" "${args[@]}"
  assert_success
}

# ---------------------------------------------------------------- names verl and verl_lite share

@test "DEVICE: verl's gpu is cuda here" {
  dry "$S122" DEVICE=gpu
  assert_line "  trainer.device=cuda \\"
  assert_line "  trainer.n_gpus_per_node=8 \\"
}

@test "TP PP CP EP ETP: the training layout of actor and ref, as verl's scripts" {
  dry "$S397" DEVICE=npu nnodes=1 NDEVICES_PER_NODE=16 GEN_DP=1 GEN_EP=1 TP=4 PP=2 CP=2 EP=2 ETP=2
  local role
  for role in actor ref; do
    assert_line "  actor_rollout_ref.$role.megatron.tensor_model_parallel_size=4 \\"
    assert_line "  actor_rollout_ref.$role.megatron.pipeline_model_parallel_size=2 \\"
    assert_line "  actor_rollout_ref.$role.megatron.context_parallel_size=2 \\"
    assert_line "  actor_rollout_ref.$role.megatron.expert_model_parallel_size=2 \\"
    assert_line "  actor_rollout_ref.$role.megatron.expert_tensor_parallel_size=2 \\"
  done
}

@test "NDEVICES_PER_NODE: trainer.n_gpus_per_node" {
  dry "$S35" DEVICE=npu NDEVICES_PER_NODE=8 PP=1
  assert_line "  trainer.n_gpus_per_node=8 \\"
}

@test "ALL_OFFLOAD: the megatron offloads of actor and ref" {
  dry "$S35" DEVICE=npu ALL_OFFLOAD=False
  assert_line "  actor_rollout_ref.actor.megatron.param_offload=False \\"
  assert_line "  actor_rollout_ref.actor.megatron.optimizer_offload=False \\"
  assert_line "  actor_rollout_ref.ref.megatron.param_offload=False \\"
}

@test "USE_MINDSPEED_BRIDGE: the Ascend GDN switches of verl's npu branch" {
  dry "$S397" DEVICE=npu USE_MINDSPEED_BRIDGE=True
  assert_line "  +actor_rollout_ref.actor.megatron.override_transformer_config.use_ascend_gdn=True \\"
  assert_line "  +actor_rollout_ref.actor.megatron.override_transformer_config.use_triton_gdn=False \\"
}

@test "HF_MODEL_PATH: actor_rollout_ref.model.path" {
  dry "$S122" HF_MODEL_PATH=/m/Qwen3.5-122B-A10B
  assert_line "  actor_rollout_ref.model.path=/m/Qwen3.5-122B-A10B \\"
}

@test "NNODES on the fully-async example: both pools, as verl's script" {
  dry "$SASYNC" NNODES=4
  assert_line "  trainer.nnodes=4 \\"
  assert_line "  actor_rollout_ref.rollout.nnodes=4 \\"
}

@test "ACTOR_VPP: virtual pipeline size of actor and ref; verl's null leaves it unset" {
  dry "$S122" ACTOR_VPP=2
  assert_line "  actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=2 \\"
  assert_line "  actor_rollout_ref.ref.megatron.virtual_pipeline_model_parallel_size=2 \\"
  dry "$S122" ACTOR_VPP=null
  refute_output --partial virtual_pipeline_model_parallel_size
  run_script -1 DRY_RUN=1 ACTOR_VPP=two bash "$S122"
  assert_stderr_has "ACTOR_VPP must be a positive integer, got 'two'"
  run_script -1 DRY_RUN=1 ACTOR_VPP=2 BACKEND=fsdp bash "$S122"
  assert_stderr_has "ACTOR_VPP=2 is Megatron's virtual pipeline but BACKEND=fsdp"
}

# ---------------------------------------------------------------- verl names of launcher knobs

@test "GEN_TP: the rollout's tensor parallel size (ROLLOUT_TP)" {
  dry "$S35" GEN_TP=4
  assert_line "  actor_rollout_ref.rollout.tensor_model_parallel_size=4 \\"
  assert_line "# ROLLOUT_TP=4 from verl's GEN_TP"
}

@test "GEN_DP: the rollout's data parallel size (ROLLOUT_DP)" {
  dry "$S397" DEVICE=npu nnodes=1 NDEVICES_PER_NODE=8 EP=1 GEN_TP=4 GEN_DP=2 GEN_EP=8
  assert_line "  actor_rollout_ref.rollout.data_parallel_size=2 \\"
  assert_line "# ROLLOUT_DP=2 from verl's GEN_DP"
  assert_line --partial "rollout TP=4 DP=2 EP=8"
}

@test "GEN_EP: the rollout's expert parallel size (ROLLOUT_EP)" {
  dry "$S397" DEVICE=npu nnodes=1 NDEVICES_PER_NODE=8 EP=1 GEN_TP=4 GEN_DP=2 GEN_EP=8
  assert_line "  actor_rollout_ref.rollout.expert_parallel_size=8"
  assert_line "# ROLLOUT_EP=8 from verl's GEN_EP"
}

@test "GEN_DP on all 256 devices of the 397B npu layout is refused by the rollout DP check" {
  run_script -1 DRY_RUN=1 DEVICE=npu GEN_TP=4 GEN_DP=2 GEN_EP=8 bash "$S397"
  assert_stderr_has "ROLLOUT_DP=2: the rollout's data-parallel group spans all 256 devices"
}

@test "nnodes: trainer.nnodes (NNODES)" {
  dry "$S122" nnodes=8
  assert_line "  trainer.nnodes=8 \\"
  assert_line "# NNODES=8 from verl's nnodes"
}

@test "train_path: data.train_files (TRAIN_FILES)" {
  dry "$S397" train_path=/x/t.parquet
  assert_line "  data.train_files=/x/t.parquet \\"
  assert_line "# TRAIN_FILES=/x/t.parquet from verl's train_path"
}

@test "test_path: data.val_files (VAL_FILES)" {
  dry "$S35" test_path=/x/v.parquet
  assert_line "  data.val_files=/x/v.parquet \\"
}

@test "train_files: data.train_files (TRAIN_FILES)" {
  dry "$S122" train_files=/x/t.parquet
  assert_line "  data.train_files=/x/t.parquet \\"
}

@test "test_files: data.val_files (VAL_FILES)" {
  dry "$S122" test_files=/x/v.parquet
  assert_line "  data.val_files=/x/v.parquet \\"
}

@test "project_name: trainer.project_name (PROJECT_NAME)" {
  dry "$S122" project_name=p1
  assert_line "  trainer.project_name=p1 \\"
}

@test "exp_name: trainer.experiment_name (EXPERIMENT_NAME)" {
  dry "$S122" exp_name=e1
  assert_line --regexp "^  trainer\.experiment_name=e1( \\\\)?$"
}

@test "adv_estimator: algorithm.adv_estimator (ADV_ESTIMATOR)" {
  dry "$S122" adv_estimator=rloo
  assert_line "  algorithm.adv_estimator=rloo \\"
}

@test "save_path: trainer.default_local_dir (SAVE_PATH)" {
  dry "$S397" save_path=/ckpt/397b
  assert_line --regexp "^  trainer\.default_local_dir=/ckpt/397b( \\\\)?$"
  dry "$S397"
  refute_output --partial default_local_dir
}

# per_device NAME VALUE KEY DEVICE DEFAULT: on the 122B script verl's NAME=VALUE gives KEY=VALUE (npu),
# and unset, DEVICE gets verl's per-device DEFAULT.
per_device() {
  dry "$S122" DEVICE=npu "$1=$2"
  assert_line --regexp "^  ${3//./\\.}=$2( \\\\)?$"
  dry "$S122" DEVICE="$4"
  assert_line --regexp "^  ${3//./\\.}=$5( \\\\)?$"
}

@test "rollout_gpu_memory_utilization: the vLLM memory share (ROLLOUT_GPU_MEMORY_UTILIZATION); verl's cuda 0.66" {
  per_device rollout_gpu_memory_utilization 0.5 actor_rollout_ref.rollout.gpu_memory_utilization cuda 0.66
}

@test "rollout_log_prob_micro_batch_size_per_gpu: its rollout key; verl's npu default 4" {
  per_device rollout_log_prob_micro_batch_size_per_gpu 2 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu npu 4
}

@test "ref_log_prob_micro_batch_size_per_gpu: its ref key; verl's npu default 4" {
  per_device ref_log_prob_micro_batch_size_per_gpu 2 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu npu 4
}

@test "vllm_max_model_len: rollout.max_model_len; verl's defaults 15768 (gpu) and 8192 (npu)" {
  dry "$S122" vllm_max_model_len=9000 DEVICE=cuda
  assert_line "  actor_rollout_ref.rollout.max_model_len=9000"
  dry "$S122" DEVICE=cuda
  assert_line "  actor_rollout_ref.rollout.max_model_len=15768"
  dry "$S122" DEVICE=npu
  assert_line "  actor_rollout_ref.rollout.max_model_len=8192 \\"
}

@test "a verl name and its knob set to different values is an error naming both" {
  run_script -1 DRY_RUN=1 GEN_TP=4 ROLLOUT_TP=8 bash "$S35"
  assert_stderr_has "GEN_TP=4 (verl's name) and ROLLOUT_TP=8 are both set, to different values"
  run_script -1 DRY_RUN=1 train_path=/a train_files=/b bash "$S35"
  assert_stderr_has "are both verl's names of TRAIN_FILES, set to different values"
  dry "$S35" GEN_TP=4 ROLLOUT_TP=4
  assert_line "  actor_rollout_ref.rollout.tensor_model_parallel_size=4 \\"
}

@test "a script without a verl twin takes a knob's verl names, and no name only a twin reads" {
  dry "$STINY" train_files=/x/t.parquet
  assert_line "  data.train_files=/x/t.parquet \\"
  assert_line "# TRAIN_FILES=/x/t.parquet from verl's train_files"
  refute_output --partial "warning"
  # NGPUS_PER_NODE is read by the fully-async twin only: the tiny script's layout is unchanged
  dry "$STINY" NGPUS_PER_NODE=20
  assert_line "  trainer.n_gpus_per_node=1 \\"
}

# ---------------------------------------------------------------- derived and refused

@test "NGPUS_PER_NODE: all devices of a node; training gets the ones the 12 rollout devices leave" {
  dry "$SASYNC" NGPUS_PER_NODE=20
  assert_line "  trainer.n_gpus_per_node=8 \\"
  assert_line "  actor_rollout_ref.rollout.n_gpus_per_node=12 \\"
  assert_line "# NDEVICES_PER_NODE=8 from verl's NGPUS_PER_NODE=20 - 12 rollout devices"
  run_script -1 DRY_RUN=1 NGPUS_PER_NODE=12 bash "$SASYNC"
  assert_stderr_has "NGPUS_PER_NODE=12 leaves no training device"
  run_script -1 DRY_RUN=1 NGPUS_PER_NODE=20 NDEVICES_PER_NODE=4 bash "$SASYNC"
  assert_stderr_has "NDEVICES_PER_NODE=4 are both set, to different values"
}

@test "ENGINE: the first argument vllm is honoured, sglang refused with the reason" {
  dry "$SASYNC" -- vllm trainer.total_epochs=2
  assert_line "  actor_rollout_ref.rollout.name=vllm \\"
  assert_line "  trainer.total_epochs=2"
  refute_line "  vllm"
  run_script -1 DRY_RUN=1 bash "$SASYNC" sglang
  assert_stderr_has "the first argument sglang (verl's ENGINE) asks for an SGLang rollout, which verl_lite does not have"
}

@test "VERL_USE_UV: 0 is what verl_lite does; 1 on cuda is refused with the fix" {
  dry "$S35" DEVICE=cuda VERL_USE_UV=0
  dry "$S122" DEVICE=npu VERL_USE_UV=1
  run_script -1 DRY_RUN=1 DEVICE=cuda VERL_USE_UV=1 bash "$S35"
  assert_stderr_has "VERL_USE_UV=1 asks to run through \`uv run\`"
  assert_stderr_has "set PYTHON to the uv environment's python"
}

@test "CUDA_VISIBLE_DEVICES: the caller's value is passed through, no default is set" {
  dry "$S397" DEVICE=cuda CUDA_VISIBLE_DEVICES=0,1
  assert_line "# env from the caller: CUDA_VISIBLE_DEVICES=0,1"
  dry "$S397" DEVICE=cuda
  refute_output --partial CUDA_VISIBLE_DEVICES
}

@test "verl's lowercase names get no did-you-mean warning where they are honoured" {
  dry "$S122" nnodes=2 train_files=/x/t.parquet
  assert_equal "$stderr" ""
}
