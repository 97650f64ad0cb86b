#!/usr/bin/env bats
# The ASYNC=1 switch: fully-async training from the same scripts (docs/async.md).

load test_helper

setup() { common_setup; }

@test "ASYNC=1 turns the tiny script's cpu dry run fully-async, matching its golden file" {
  run_script DRY_RUN=1 ASYNC=1 DATA_DIR="$BATS_TEST_TMPDIR/data" bash "$STINY"
  assert_success
  assert_equal "$stderr" ""
  assert_golden tiny.cpu.async
  assert_line "# layout: 1x1 devices (fsdp) rollout TP=1 on 1x1 rollout devices"
  assert_line "  async_training.enable=True \\"
  assert_line "  actor_rollout_ref.rollout.nnodes=1 \\"
  assert_line "  actor_rollout_ref.rollout.n_gpus_per_node=1 \\"
  assert_line "  trainer.experiment_name=tiny_grpo_async"
  assert_equal "$(stub_calls python3)" 0
}

@test "ASYNC=1 hands the fully-async keys to the training entry point" {
  run_script ASYNC=true DEVICE=cpu TRAIN_FILES=/srv/t.parquet VAL_FILES=/srv/v.parquet bash "$STINY"
  assert_success
  stub_argv python3 1
  assert_equal "${ARGV[*]:0:2}" "-m verl_lite.main"
  assert_argv_has "async_training.enable=True"
  assert_argv_has "async_training.trigger_parameter_sync_step=1"
  assert_argv_has "actor_rollout_ref.rollout.n_gpus_per_node=1"
  assert_argv_has "trainer.n_gpus_per_node=1"
}

@test "ASYNC=0 and an unset ASYNC give the same synchronous command" {
  run_script DRY_RUN=1 DATA_DIR="$BATS_TEST_TMPDIR/data" bash "$STINY"
  local plain=$output
  run_script DRY_RUN=1 ASYNC=0 DATA_DIR="$BATS_TEST_TMPDIR/data" bash "$STINY"
  assert_success
  assert_equal "$output" "$plain"
  refute_line --partial "async_training"
}

@test "ASYNC_TRAINING=False wins over ASYNC=1" {
  run_script DRY_RUN=1 ASYNC=1 ASYNC_TRAINING=False DATA_DIR="$BATS_TEST_TMPDIR/data" bash "$STINY"
  assert_success
  refute_line --partial "async_training"
  assert_line "  trainer.experiment_name=tiny_grpo"
}

@test "a non-boolean ASYNC is refused naming ASYNC and the allowed spellings" {
  run_script ASYNC=maybe bash "$STINY"
  assert_failure 1
  assert_output ""
  assert_equal "$stderr" "verl_lite: ASYNC must be a boolean, got 'maybe' (allowed: True, False, true, false, 1, 0)"
  assert_equal "$(stub_calls python3)" 0
}

@test "ASYNC=1 on a script without a rollout pool is refused naming the missing knob" {
  run_script ASYNC=1 DEVICE=cuda bash "$S35"
  assert_failure 1
  assert_stderr_has "ROLLOUT_NNODES must be a positive integer, got ''"
  assert_stderr_has "ROLLOUT_NDEVICES_PER_NODE must be a positive integer, got ''"
  assert_equal "$(stub_calls python3)" 0
}

@test "STALENESS_THRESHOLD takes verl's fraction and refuses what is not a number >= 0" {
  run_script ASYNC=1 STALENESS_THRESHOLD=0.1 DEVICE=cpu TRAIN_FILES=/srv/t.parquet VAL_FILES=/srv/v.parquet bash "$STINY"
  assert_success
  stub_argv python3 1
  assert_argv_has "async_training.staleness_threshold=0.1"
  run_script ASYNC=1 STALENESS_THRESHOLD=-0.5 DEVICE=cpu bash "$STINY"
  assert_failure 1
  assert_equal "$stderr" "verl_lite: STALENESS_THRESHOLD must be a number >= 0, got '-0.5' (e.g. 0.1 or 1: verl's fraction of stale samples)"
  assert_equal "$(stub_calls python3)" 1  # only the first run started python
}
