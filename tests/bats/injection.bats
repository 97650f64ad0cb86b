#!/usr/bin/env bats
# Values with spaces, quotes, $(...), backticks or ; are data: passed literally, never executed.

load test_helper

setup() {
  common_setup
  PWNED=$BATS_TEST_TMPDIR/pwned
  NASTY="/m/a b; touch $PWNED \$(touch $PWNED) \`touch $PWNED\` 'q' \"d\" \\ & | > $PWNED.2"
}

@test "a model path full of shell syntax reaches Python unchanged and runs nothing" {
  run_script DEVICE=cuda HF_MODEL_PATH="$NASTY" bash "$S35"
  assert_success
  stub_argv python3
  assert_argv_has "actor_rollout_ref.model.path=$NASTY"
  [[ ! -e $PWNED && ! -e $PWNED.2 ]] || fail "a value was executed"
}

@test "a user argument full of shell syntax reaches Python unchanged as one argument" {
  run_script DEVICE=cuda bash "$S35" "trainer.experiment_name=$NASTY" "data.val_files=x;y"
  assert_success
  stub_argv python3
  assert_equal "${ARGV[-2]}" "trainer.experiment_name=$NASTY"
  assert_equal "${ARGV[-1]}" "data.val_files=x;y"
  [[ ! -e $PWNED && ! -e $PWNED.2 ]] || fail "a value was executed"
}

@test "the dry run quotes a value full of shell syntax so that a shell reads it back unchanged" {
  run_script DRY_RUN=1 DEVICE=cuda EXPERIMENT_NAME="$NASTY" bash "$S35" "+x.y=$NASTY"
  assert_success
  [[ ! -e $PWNED && ! -e $PWNED.2 ]] || fail "the dry run executed a value"
  run_script bash -c "$output"
  assert_success
  stub_argv python3
  assert_argv_has "trainer.experiment_name=$NASTY"
  assert_equal "${ARGV[-1]}" "+x.y=$NASTY"
  [[ ! -e $PWNED && ! -e $PWNED.2 ]] || fail "the printed command executed a value"
}

@test "a DEVICE value with a command in it is refused and not executed" {
  run_script DEVICE="npu; touch $PWNED" bash "$S35"
  assert_failure 1
  assert_equal "$stderr" "verl_lite: unknown DEVICE 'npu; touch $PWNED' (allowed: auto, cuda, gpu, npu, cpu)"
  [[ ! -e $PWNED ]] || fail "DEVICE was executed"
}

@test "a size holding a command substitution is refused literally and not executed" {
  run_script DEVICE=npu TP="\$(touch $PWNED)" bash "$S35"
  assert_failure 1
  assert_equal "$stderr" "verl_lite: TP must be a positive integer, got '\$(touch $PWNED)' (use a whole number from 1 to 999999999)"
  [[ ! -e $PWNED ]] || fail "TP was executed"
}

@test "a size holding an arithmetic expression is refused, not evaluated" {
  run_script DEVICE=npu "PP=a[\$(touch $PWNED)]" bash "$S35"
  assert_failure 1
  [[ ! -e $PWNED ]] || fail "PP was evaluated as arithmetic"
}
