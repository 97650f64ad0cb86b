#!/usr/bin/env bats
# DEVICE resolution: explicit values, the gpu alias and auto-detection through fake device tools.

load test_helper

setup() { common_setup; }

device_of() {
  run_script DRY_RUN=1 "$@" bash "$STINY"
  assert_success
  assert_line --regexp '^  trainer\.device=[a-z]+ \\$'
}

@test "auto picks npu when npu-smi is on PATH, without running it" {
  stub npu-smi
  device_of
  assert_line "  trainer.device=npu \\"
  assert_line --partial "device=npu (auto: npu-smi found)"
  assert_equal "$(stub_calls npu-smi)" 0
}

@test "auto picks cuda when only nvidia-smi is on PATH" {
  stub nvidia-smi
  device_of
  assert_line "  trainer.device=cuda \\"
  assert_line --partial "device=cuda (auto: nvidia-smi found)"
}

@test "auto prefers npu when both device tools are on PATH" {
  stub npu-smi
  stub nvidia-smi
  device_of DEVICE=auto
  assert_line "  trainer.device=npu \\"
}

@test "auto falls back to cpu when no device tool is on PATH" {
  device_of
  assert_line "  trainer.device=cpu \\"
  assert_line --partial "device=cpu (auto: no npu-smi or nvidia-smi)"
}

@test "an explicit DEVICE wins over the tools on PATH and runs none of them" {
  stub npu-smi
  stub nvidia-smi
  device_of DEVICE=cpu
  assert_line "  trainer.device=cpu \\"
  assert_equal "$(stub_calls npu-smi)$(stub_calls nvidia-smi)$(stub_calls python3)" "000"
}

@test "gpu is accepted as an alias of cuda" {
  device_of DEVICE=gpu
  assert_line "  trainer.device=cuda \\"
}

@test "path_without hides a device tool that is installed on the system" {
  local sysbin=$BATS_TEST_TMPDIR/sysbin
  mkdir -p "$sysbin" && printf '#!/bin/sh\n' >"$sysbin/nvidia-smi" && chmod +x "$sysbin/nvidia-smi"
  run env -i PATH="$sysbin:$HERMETIC_PATH" bash -c 'command -v nvidia-smi'
  assert_output "$sysbin/nvidia-smi"
  run env -i PATH="$HERMETIC_PATH" bash -c 'command -v nvidia-smi'
  assert_failure
}

@test "the device picks the layout: the 35B script uses 16 NPUs per node and 8 GPUs per node" {
  run_script DRY_RUN=1 DEVICE=npu bash "$S35"
  assert_line "  trainer.n_gpus_per_node=16 \\"
  assert_line "  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \\"
  run_script DRY_RUN=1 DEVICE=cuda bash "$S35"
  assert_line "  trainer.n_gpus_per_node=8 \\"
  assert_line "  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=1 \\"
}

@test "the issue's check: the 35B npu bridge dry run has TP=2 PP=2 EP=8 on 1x16 and both GDN overrides" {
  run_script DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIDGE=True bash "$S35"
  assert_success
  assert_line "  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \\"
  assert_line "  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \\"
  assert_line "  actor_rollout_ref.actor.megatron.expert_model_parallel_size=8 \\"
  assert_line "  trainer.nnodes=1 \\"
  assert_line "  trainer.n_gpus_per_node=16 \\"
  assert_line "  +actor_rollout_ref.actor.megatron.override_transformer_config.use_triton_gdn=False \\"
  assert_line "  +actor_rollout_ref.actor.megatron.override_transformer_config.use_ascend_gdn=True \\"
}

@test "the bridge off adds neither GDN override" {
  run_script DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIDGE=False bash "$S35"
  assert_success
  refute_output --partial "use_triton_gdn"
  refute_output --partial "use_ascend_gdn"
}

@test "ASCEND_STACK names the stack for the check and the engines; auto (the default) adds nothing" {
  run_script DRY_RUN=1 DEVICE=npu ASCEND_STACK=core_r0.18.0 bash "$S35"
  assert_success
  assert_line "  trainer.ascend_stack=core_r0.18.0 \\"
  run_script DRY_RUN=1 DEVICE=npu ASCEND_STACK=auto bash "$S35"
  assert_success
  refute_output --partial "ascend_stack"
}

@test "every accepted spelling of true turns the bridge on identically" {
  local spelling first=
  for spelling in True true 1; do
    run_script DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIDGE=$spelling bash "$S122"
    assert_success
    assert_line --partial "use_ascend_gdn=True"
    [[ -z $first ]] && first=$output
    assert_equal "$output" "$first"
  done
}

@test "the NPU environment appears in npu dry runs only" {
  run_script DRY_RUN=1 DEVICE=npu bash "$S35"
  assert_line "CUDA_DEVICE_MAX_CONNECTIONS=1 \\"
  assert_line "HCCL_CONNECT_TIMEOUT=5400 \\"
  run_script DRY_RUN=1 DEVICE=cuda bash "$S35"
  refute_line --partial "CUDA_DEVICE_MAX_CONNECTIONS="
  refute_output --partial "HCCL_"
}
