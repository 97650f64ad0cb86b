#!/usr/bin/env bats
# launch/lib.sh as a library: sourcing is inert, helpers behave, a new script gets clear errors.

load test_helper

setup() { common_setup; }

@test "sourcing the library defines functions only: no variables, no output, no shell options" {
  # shellcheck disable=SC2016  # the inner script expands its own variables
  run_script bash -c '
    before_vars=$(compgen -v); before_opts=$(set +o; shopt -p)
    source "$1"
    after_vars=$(compgen -v); after_opts=$(set +o; shopt -p)
    diff <(printf "%s\n" "$before_vars" | grep -vx before_vars) \
         <(printf "%s\n" "$after_vars" | grep -vxE "before_(vars|opts)|PIPESTATUS")
    [[ $before_opts == "$after_opts" ]] || echo "shell options changed"
    declare -F | grep -c " vl_main$"' _ "$REPO/launch/lib.sh"
  assert_success
  assert_equal "$stderr" ""
  assert_output "1"
}

@test "vl_quote leaves plain words alone and quotes everything a shell would change" {
  # shellcheck disable=SC2016  # the inner script expands its own variables
  run_script bash -c 'source "$1"; for w in "a.b=c" "k=[x,y]" "" "it'"'"'s" "a b" "\$(x)" "~" "*"; do
    vl_quote "$w"; printf "%s\n" "$REPLY"; done' _ "$REPO/launch/lib.sh"
  assert_success
  assert_equal "$output" "a.b=c
'k=[x,y]'
''
'it'\\''s'
'a b'
'\$(x)'
'~'
'*'"
}

@test "vl_near accepts one edit or one swap and rejects two edits" {
  # shellcheck disable=SC2016  # the inner script expands its own variables
  run_script bash -c 'source "$1"
    for p in "DEVICE DEVICES" "DEVCIE DEVICE" "DEVICX DEVICE" "DEVICE EVICE" "DEVICE DEVICE" "DEVCIES DEVICE" "ABCDE VWXYZ"; do
      set -- $p; if vl_near "$1" "$2"; then echo "$1~$2 yes"; else echo "$1~$2 no"; fi; done' _ "$REPO/launch/lib.sh"
  assert_success
  assert_equal "$output" "DEVICE~DEVICES yes
DEVCIE~DEVICE yes
DEVICX~DEVICE yes
DEVICE~EVICE yes
DEVICE~DEVICE no
DEVCIES~DEVICE no
ABCDE~VWXYZ no"
}

@test "a model script that forgets its model values gets one error per missing value" {
  cat >"$BATS_TEST_TMPDIR/bare.sh" <<SCRIPT
set -euo pipefail
source "$REPO/launch/lib.sh"
vl_main
SCRIPT
  run_script DEVICE=cpu bash "$BATS_TEST_TMPDIR/bare.sh"
  assert_failure 1
  assert_equal "$stderr" "verl_lite: ROLLOUT_N must be a positive integer, got '' (use a whole number from 1 to 999999999)
verl_lite: TRAIN_BATCH_SIZE must be a positive integer, got '' (use a whole number from 1 to 999999999)
verl_lite: PPO_MINI_BATCH_SIZE must be a positive integer, got '' (use a whole number from 1 to 999999999)
verl_lite: MAX_PROMPT_LENGTH must be a positive integer, got '' (use a whole number from 1 to 999999999)
verl_lite: MAX_RESPONSE_LENGTH must be a positive integer, got '' (use a whole number from 1 to 999999999)
verl_lite: HF_MODEL_PATH is empty (set it to a local model directory)
verl_lite: TRAIN_FILES is empty (set it to a parquet file)
verl_lite: VAL_FILES is empty (set it to a parquet file)"
  assert_equal "$(stub_calls python3)" 0
}

@test "the scripts can be run from any directory" {
  cd "$REPO/examples/grpo"
  run_script DRY_RUN=1 DEVICE=cpu bash run_tiny.sh
  assert_success
  assert_line "python3 -m verl_lite.main \\"
}

@test "the model scripts are executable and start with a bash shebang and strict mode" {
  local script
  for script in "$S35" "$S122" "$S397" "$STINY" "$SASYNC" "$SRAY" "$REPO/tests/bats/run.sh" "$REPO/bench/dry_run_bench.sh"; do
    [[ -x $script ]] || fail "$script is not executable"
    [[ $(head -n1 "$script") == '#!/usr/bin/env bash' ]] || fail "$script lacks the bash shebang"
    grep -qx 'set -euo pipefail' "$script" || fail "$script lacks set -euo pipefail"
  done
}

@test "the tiny VL example is the tiny script with TASK=shapes: the VL model, the image data and its generator" {
  run_script DRY_RUN=1 bash "$REPO/examples/vl/run_tiny_vl_cpu.sh"
  assert_success
  assert_line "  actor_rollout_ref.model.path=tiny-qwen3_vl_moe \\"
  assert_line "  data.train_files=$REPO/data/tiny_vl/train.parquet \\"
  assert_line "  data.max_prompt_length=40 \\"
  assert_line "  trainer.experiment_name=tiny_vl_grpo"
  [[ $output == *"verl_lite.data.synthetic_images --out-dir $REPO/data/tiny_vl"* || -f $REPO/data/tiny_vl/train.parquet ]] ||
    fail "the dry run does not name the image data generator"
}

@test "TASK names a known task" {
  run_script DRY_RUN=1 TASK=pictures bash "$STINY"
  assert_failure 1
  assert_equal "$stderr" "verl_lite: TASK=pictures (choose digits or shapes)"
}
