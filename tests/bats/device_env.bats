#!/usr/bin/env bats
# verl's per-device environment (launch/verl_names.sh vl_device_env): each variable is a default in the
# npu dry run, the caller's value wins and is said to be the caller's, a real run exports them and
# names them in VERL_LITE_LAUNCHER_ENV for the Ray workers (verl_lite/runtime_env.py).

load test_helper

setup() { common_setup; }

# env_default NAME DEFAULT OTHER: verl's DEFAULT in the npu dry run of the 122B script (whose verl twin
# exports NAME), then OTHER from the caller, said to be the caller's and passed on as such.
env_default() {
  run_script DRY_RUN=1 DEVICE=npu bash "$S122"
  assert_success
  assert_line "$1=$2 \\"
  assert_line --regexp "^# env, verl_lite's defaults as verl's scripts export them .*[: ]$1( |$)"
  assert_line --regexp "^VERL_LITE_LAUNCHER_ENV=.*[' ]$1:verl_lite[' ]"
  run_script DRY_RUN=1 DEVICE=npu "$1=$3" bash "$S122"
  assert_success
  assert_line "$1=$3 \\"
  refute_line "$1=$2 \\"
  assert_line --regexp "^# env, from the caller instead of the default: (.* )?$1( |$)"
  assert_line --regexp "^VERL_LITE_LAUNCHER_ENV=.*[' ]$1:caller[' ]"
}

@test "CPU_AFFINITY_CONF: verl's npu default 1, the caller's value wins" {
  env_default CPU_AFFINITY_CONF '1' '2'
}

@test "OMP_NUM_THREADS: verl's npu default 1, the caller's value wins" {
  env_default OMP_NUM_THREADS '1' '4'
}

@test "PYTORCH_NPU_ALLOC_CONF: verl's npu default garbage_collection_threshold:0.8, the caller's value wins" {
  env_default PYTORCH_NPU_ALLOC_CONF 'garbage_collection_threshold:0.8' 'expandable_segments:True'
}

@test "USE_OPTIMIZED_MODEL: verl's npu default 0, the caller's value wins" {
  env_default USE_OPTIMIZED_MODEL '0' '1'
}

@test "HCCL_CONNECT_TIMEOUT: verl's npu default 5400, the caller's value wins" {
  env_default HCCL_CONNECT_TIMEOUT '5400' '1800'
}

@test "HCCL_BUFFSIZE: verl's npu default 300, the caller's value wins" {
  env_default HCCL_BUFFSIZE '300' '200'
}

@test "TASK_QUEUE_ENABLE: verl's npu default 1, the caller's value wins" {
  env_default TASK_QUEUE_ENABLE '1' '2'
}

@test "COMBINED_ENABLE: verl's npu default 1, the caller's value wins" {
  env_default COMBINED_ENABLE '1' '0'
}

@test "TOKENIZERS_PARALLELISM: verl's npu default false, the caller's value wins" {
  env_default TOKENIZERS_PARALLELISM 'false' 'true'
}

@test "RAY_DEDUP_LOGS: verl's npu default 0, the caller's value wins" {
  env_default RAY_DEDUP_LOGS '0' '1'
}

@test "VLLM_ASCEND_ENABLE_NZ: verl's npu default 0, the caller's value wins" {
  env_default VLLM_ASCEND_ENABLE_NZ '0' '1'
}

@test "CUDA_DEVICE_MAX_CONNECTIONS: verl's npu default 1, the caller's value wins" {
  env_default CUDA_DEVICE_MAX_CONNECTIONS '1' '2'
}

@test "VLLM_ALLREDUCE_USE_SYMM_MEM: verl's npu default 0, the caller's value wins" {
  env_default VLLM_ALLREDUCE_USE_SYMM_MEM '0' '1'
}

@test "a real npu run exports the environment and names it in VERL_LITE_LAUNCHER_ENV" {
  run_script DEVICE=npu HCCL_BUFFSIZE=200 PYTHON=python3 bash "$S122"
  assert_success
  assert_equal "$(stub_calls python3)" 1
  assert_equal "$(stub_env python3 1 CPU_AFFINITY_CONF)" 1
  assert_equal "$(stub_env python3 1 PYTORCH_NPU_ALLOC_CONF)" garbage_collection_threshold:0.8
  assert_equal "$(stub_env python3 1 VLLM_ASCEND_ENABLE_NZ)" 0
  assert_equal "$(stub_env python3 1 HCCL_BUFFSIZE)" 200
  local listed
  listed=$(stub_env python3 1 VERL_LITE_LAUNCHER_ENV)
  [[ " $listed " == *" HCCL_BUFFSIZE:caller "* && " $listed " == *" CPU_AFFINITY_CONF:verl_lite "* ]] ||
    fail "VERL_LITE_LAUNCHER_ENV lacks the origins: $listed"
}

@test "a CHECK=1 npu run exports the environment to the check too" {
  run_script CHECK=1 DEVICE=npu bash "$S35"
  assert_success
  stub_argv python3
  assert_equal "${ARGV[1]}" verl_lite.check
  assert_equal "$(stub_env python3 1 TASK_QUEUE_ENABLE)" 1
}

@test "BACKEND=fsdp on npu: no CUDA_DEVICE_MAX_CONNECTIONS, and the dry run says why" {
  run_script DRY_RUN=1 DEVICE=npu BACKEND=fsdp bash "$S35"
  assert_success
  refute_line --partial "CUDA_DEVICE_MAX_CONNECTIONS="
  assert_line --partial "# env, not set: CUDA_DEVICE_MAX_CONNECTIONS (BACKEND=fsdp"
  assert_line "HCCL_BUFFSIZE=300 \\"
}

@test "cuda gets only the vLLM all-reduce switch; the dry run says what it leaves to the workers" {
  run_script DRY_RUN=1 DEVICE=cuda bash "$S397"
  assert_success
  assert_line "VLLM_ALLREDUCE_USE_SYMM_MEM=0 \\"
  refute_output --partial "HCCL_"
  refute_output --partial "CPU_AFFINITY_CONF"
  assert_line --partial "# env, not set: CUDA_DEVICE_MAX_CONNECTIONS (verl_lite gives the workers 1 with megatron"
  assert_line --partial "# env, not set: VLLM_USE_V1"
}

@test "cpu gets none of verl's device environment" {
  run_script DRY_RUN=1 DEVICE=cpu bash "$S35"
  assert_success
  refute_output --partial "VERL_LITE_LAUNCHER_ENV"
  refute_output --partial "VLLM_ALLREDUCE_USE_SYMM_MEM"
}
