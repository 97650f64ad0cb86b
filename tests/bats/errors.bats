#!/usr/bin/env bats
# Bad input: exact error text on stderr, exit status 1, empty stdout, nothing started.

load test_helper

setup() { common_setup; }

# refuses SCRIPT [VAR=value...]: the script must fail with exit 1 and start nothing.
refuses() {
  local script=$1
  shift
  run_script "$@" bash "$script"
  assert_failure 1
  assert_output ""
  assert_equal "$(stub_calls python3)$(stub_calls python)$(stub_calls ray)" "000"
}

@test "an unknown DEVICE is refused with the allowed devices" {
  refuses "$S35" DEVICE=tpu
  assert_equal "$stderr" "verl_lite: unknown DEVICE 'tpu' (allowed: auto, cuda, gpu, npu, cpu)"
}

@test "a DEVICE that differs only in case is refused rather than guessed" {
  refuses "$S35" DEVICE=NPU
  assert_equal "$stderr" "verl_lite: unknown DEVICE 'NPU' (allowed: auto, cuda, gpu, npu, cpu)"
}

@test "a non-boolean USE_MINDSPEED_BRIDGE is refused with the allowed spellings" {
  refuses "$S35" DEVICE=npu USE_MINDSPEED_BRIDGE=yes
  assert_equal "$stderr" "verl_lite: USE_MINDSPEED_BRIDGE must be a boolean, got 'yes' (allowed: True, False, true, false, 1, 0)"
}

@test "a non-boolean DRY_RUN is refused instead of starting a run" {
  refuses "$S35" DEVICE=npu DRY_RUN=maybe
  assert_equal "$stderr" "verl_lite: DRY_RUN must be a boolean, got 'maybe' (allowed: True, False, true, false, 1, 0)"
}

@test "an unknown ASCEND_STACK is refused with the documented stacks" {
  refuses "$S35" DEVICE=npu ASCEND_STACK=0.16
  assert_equal "$stderr" "verl_lite: unknown ASCEND_STACK '0.16' (allowed: auto, core_r0.16.0, core_r0.18.0; docs/ascend.md)"
}

@test "an Ascend stack named off npu is refused" {
  refuses "$S35" DEVICE=cuda ASCEND_STACK=core_r0.18.0
  assert_equal "$stderr" "verl_lite: ASCEND_STACK=core_r0.18.0 names an Ascend stack but the device is cuda (set DEVICE=npu or unset ASCEND_STACK)"
}

@test "the bridge on cuda is refused as Ascend-only" {
  refuses "$S35" DEVICE=cuda USE_MINDSPEED_BRIDGE=True
  assert_equal "$stderr" "verl_lite: USE_MINDSPEED_BRIDGE=True is Ascend-only but the device is cuda (MindSpeed-Bridge runs on npu: set DEVICE=npu or USE_MINDSPEED_BRIDGE=False)"
}

@test "the bridge on an auto-detected cpu is refused as Ascend-only" {
  refuses "$S122" USE_MINDSPEED_BRIDGE=true
  assert_equal "$stderr" "verl_lite: USE_MINDSPEED_BRIDGE=True is Ascend-only but the device is cpu (MindSpeed-Bridge runs on npu: set DEVICE=npu or USE_MINDSPEED_BRIDGE=False)"
}

@test "the bridge with the fsdp backend is refused because its overrides are Megatron's" {
  refuses "$S35" DEVICE=npu BACKEND=fsdp USE_MINDSPEED_BRIDGE=1
  assert_equal "$stderr" "verl_lite: USE_MINDSPEED_BRIDGE=True needs BACKEND=megatron, got fsdp (the GDN overrides go to Megatron's transformer config: set BACKEND=megatron or USE_MINDSPEED_BRIDGE=False)"
}

@test "the bridge on the Qwen3-VL example is refused because that model has no GDN layers" {
  refuses "$SASYNC" USE_MINDSPEED_BRIDGE=True
  assert_equal "$stderr" "verl_lite: USE_MINDSPEED_BRIDGE=True selects Ascend GDN kernels but Qwen3-VL-30B-A3B has no GDN layers (set USE_MINDSPEED_BRIDGE=False)"
}

@test "an unknown BACKEND such as the removed mindspeed strategy is refused with the allowed ones" {
  refuses "$S35" DEVICE=npu BACKEND=mindspeed
  assert_equal "$stderr" "verl_lite: unknown BACKEND 'mindspeed' (allowed: megatron, fsdp; on npu, megatron runs on MindSpeed)"
}

@test "a zero size is refused as not positive" {
  refuses "$S35" DEVICE=npu TP=0
  assert_equal "$stderr" "verl_lite: TP must be a positive integer, got '0' (use a whole number from 1 to 999999999)"
}

@test "a negative size is refused as not positive" {
  refuses "$S397" DEVICE=cuda NNODES=-2
  assert_equal "$stderr" "verl_lite: NNODES must be a positive integer, got '-2' (use a whole number from 1 to 999999999)"
}

@test "a fractional size is refused as not an integer" {
  refuses "$S35" DEVICE=cuda NDEVICES_PER_NODE=1.5
  assert_equal "$stderr" "verl_lite: NDEVICES_PER_NODE must be a positive integer, got '1.5' (use a whole number from 1 to 999999999)"
}

@test "a size with a leading zero is refused instead of being read as octal" {
  refuses "$STINY" DEVICE=cpu ROLLOUT_N=08
  assert_equal "$stderr" "verl_lite: ROLLOUT_N must be a positive integer, got '08' (use a whole number from 1 to 999999999)"
}

@test "a word where a size belongs is refused" {
  refuses "$STINY" DEVICE=cpu TRAIN_BATCH_SIZE=sixteen
  assert_equal "$stderr" "verl_lite: TRAIN_BATCH_SIZE must be a positive integer, got 'sixteen' (use a whole number from 1 to 999999999)"
}

@test "a save frequency below -1 is refused" {
  refuses "$STINY" DEVICE=cpu SAVE_FREQ=-5
  assert_equal "$stderr" "verl_lite: SAVE_FREQ must be an integer >= -1, got '-5' (use a whole number from -1 to 999999999)"
}

@test "a TP*PP*CP that does not divide the device count is refused with the numbers" {
  refuses "$S35" DEVICE=npu TP=3
  assert_equal "$stderr" "verl_lite: TP*PP*CP = 3*2*1 = 6 does not divide the 16 devices of NNODES=1 x NDEVICES_PER_NODE=16 (choose TP, PP, CP whose product divides 16)"
}

@test "a layout larger than the cluster is refused" {
  refuses "$S122" DEVICE=cuda NNODES=1 NDEVICES_PER_NODE=2 EP=1 ROLLOUT_TP=2
  assert_equal "$stderr" "verl_lite: TP*PP*CP = 2*2*1 = 4 does not divide the 2 devices of NNODES=1 x NDEVICES_PER_NODE=2 (choose TP, PP, CP whose product divides 2)"
}

@test "an expert layout EP*ETP*PP that does not divide the device count is refused" {
  refuses "$S35" DEVICE=npu EP=16
  assert_equal "$stderr" "verl_lite: EP*ETP*PP = 16*1*2 = 32 does not divide the 16 devices of NNODES=1 x NDEVICES_PER_NODE=16 (choose EP, ETP, PP whose product divides 16)"
}

@test "a rollout TP that does not divide the device count is refused" {
  refuses "$S35" DEVICE=cuda ROLLOUT_TP=3
  assert_equal "$stderr" "verl_lite: ROLLOUT_TP=3 does not divide the 8 devices of NNODES=1 x NDEVICES_PER_NODE=8 (choose a ROLLOUT_TP that divides 8)"
}

@test "a rollout DP whose group is not all the devices is refused with the DP that fits" {
  refuses "$S35" DEVICE=cuda ROLLOUT_DP=4
  assert_equal "$stderr" "verl_lite: ROLLOUT_DP=4: the rollout's data-parallel group spans all 8 devices of NNODES=1 x NDEVICES_PER_NODE=8, but ROLLOUT_TP x ROLLOUT_DP = 8 x 4 = 32 (set ROLLOUT_DP=1)"
  refuses "$S35" DEVICE=cuda ROLLOUT_TP=2 ROLLOUT_DP=2
  assert_equal "$stderr" "verl_lite: ROLLOUT_DP=2: the rollout's data-parallel group spans all 8 devices of NNODES=1 x NDEVICES_PER_NODE=8, but ROLLOUT_TP x ROLLOUT_DP = 2 x 2 = 4 (set ROLLOUT_DP=4 or 1)"
}

@test "a rollout EP other than 1 or TP x DP is refused, and fully-async takes no rollout DP" {
  refuses "$S35" DEVICE=cuda ROLLOUT_TP=2 ROLLOUT_DP=4 ROLLOUT_EP=4
  assert_equal "$stderr" "verl_lite: ROLLOUT_EP=4: vLLM spreads the experts over ROLLOUT_TP x ROLLOUT_DP = 2 x 4 ranks (set ROLLOUT_EP=8 or 1)"
  refuses "$SASYNC" ROLLOUT_DP=2
  assert_equal "$stderr" "verl_lite: ROLLOUT_DP=2 with fully-async training: each rollout replica is an engine of its own, with no data-parallel group (set ROLLOUT_DP=1; the replicas are the rollout devices / ROLLOUT_TP)"
}

@test "rollout DP and EP reach the command and the layout line only when set" {
  run env DRY_RUN=1 DEVICE=cuda ROLLOUT_TP=2 ROLLOUT_DP=4 ROLLOUT_EP=8 bash "$S35"
  assert_success
  assert_line --partial "rollout TP=2 DP=4 EP=8"
  assert_line "  actor_rollout_ref.rollout.data_parallel_size=4 \\"
  assert_line "  actor_rollout_ref.rollout.expert_parallel_size=8"
  run env DRY_RUN=1 DEVICE=cuda bash "$S35"
  refute_output --partial "rollout.data_parallel_size"
  refute_output --partial "rollout.expert_parallel_size"
}

@test "the fully-async rollout TP is checked against the rollout pool, not the training pool" {
  refuses "$SASYNC" ROLLOUT_TP=16
  assert_equal "$stderr" "verl_lite: ROLLOUT_TP=16 does not divide the 24 rollout devices of ROLLOUT_NNODES=2 x ROLLOUT_NDEVICES_PER_NODE=12 (choose a ROLLOUT_TP that divides 24)"
}

@test "a layout that does not divide the device count on cpu is refused too" {
  refuses "$STINY" DEVICE=cpu BACKEND=megatron TP=2
  assert_equal "$stderr" "verl_lite: TP*PP*CP = 2*1*1 = 2 does not divide the 1 device of NNODES=1 x NDEVICES_PER_NODE=1 (choose TP, PP, CP whose product divides 1)"
}

@test "several bad values are all reported in one go" {
  refuses "$S35" DEVICE=npu TP=0 PP=x ALL_OFFLOAD=sometimes
  assert_equal "$stderr" "verl_lite: ALL_OFFLOAD must be a boolean, got 'sometimes' (allowed: True, False, true, false, 1, 0)
verl_lite: TP must be a positive integer, got '0' (use a whole number from 1 to 999999999)
verl_lite: PP must be a positive integer, got 'x' (use a whole number from 1 to 999999999)"
}
