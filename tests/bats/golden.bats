#!/usr/bin/env bats
# Golden dry runs: one file per model x device x bridge combination under tests/bats/golden/.
# They freeze the exact command each script emits. To change them on purpose:
#   UPDATE_GOLDEN=1 bats tests/bats/golden.bats && git diff tests/bats/golden/

load test_helper

setup() { common_setup; }

# dry SCRIPT [VAR=value...]: a dry run that must succeed quietly and start nothing.
dry() {
  local script=$1
  shift
  run_script DRY_RUN=1 "$@" bash "$script"
  assert_success
  assert_equal "$stderr" ""
  assert_equal "$(stub_calls python3)$(stub_calls python)$(stub_calls ray)" "000"
}

@test "the 35B script's cuda dry run matches its golden file" {
  dry "$S35" DEVICE=cuda
  assert_golden qwen3_5_35b.cuda
}

@test "the 35B script's cpu dry run matches its golden file" {
  dry "$S35" DEVICE=cpu
  assert_golden qwen3_5_35b.cpu
}

@test "the 35B script's npu dry run matches its golden file" {
  dry "$S35" DEVICE=npu
  assert_golden qwen3_5_35b.npu
}

@test "the 35B script's npu dry run with MindSpeed-Bridge matches its golden file" {
  dry "$S35" DEVICE=npu USE_MINDSPEED_BRIDGE=True
  assert_golden qwen3_5_35b.npu.bridge
}

@test "the 35B script's cuda dry run with the fsdp backend matches its golden file" {
  dry "$S35" DEVICE=cuda BACKEND=fsdp
  assert_golden qwen3_5_35b.cuda.fsdp
}

@test "the 122B script's cuda dry run matches its golden file" {
  dry "$S122" DEVICE=cuda
  assert_golden qwen3_5_122b_a10b.cuda
}

@test "the 122B script's cpu dry run matches its golden file" {
  dry "$S122" DEVICE=cpu
  assert_golden qwen3_5_122b_a10b.cpu
}

@test "the 122B script's npu dry run matches its golden file" {
  dry "$S122" DEVICE=npu
  assert_golden qwen3_5_122b_a10b.npu
}

@test "the 122B script's npu dry run with MindSpeed-Bridge matches its golden file" {
  dry "$S122" DEVICE=npu USE_MINDSPEED_BRIDGE=True
  assert_golden qwen3_5_122b_a10b.npu.bridge
}

@test "the 397B script's cuda dry run matches its golden file" {
  dry "$S397" DEVICE=cuda
  assert_golden qwen3_5_397b.cuda
}

@test "the 397B script's cpu dry run matches its golden file" {
  dry "$S397" DEVICE=cpu
  assert_golden qwen3_5_397b.cpu
}

@test "the 397B script's npu dry run matches its golden file" {
  dry "$S397" DEVICE=npu
  assert_golden qwen3_5_397b.npu
}

@test "the 397B script's npu dry run with MindSpeed-Bridge matches its golden file" {
  dry "$S397" DEVICE=npu USE_MINDSPEED_BRIDGE=True
  assert_golden qwen3_5_397b.npu.bridge
}

@test "the tiny script's auto-detected cpu dry run without data matches its golden file" {
  dry "$STINY" DATA_DIR="$BATS_TEST_TMPDIR/data"
  assert_golden tiny.cpu
}

@test "the tiny script's cuda dry run matches its golden file" {
  dry "$STINY" DEVICE=cuda DATA_DIR="$BATS_TEST_TMPDIR/data"
  assert_golden tiny.cuda
}

@test "the tiny script's npu dry run matches its golden file" {
  dry "$STINY" DEVICE=npu DATA_DIR="$BATS_TEST_TMPDIR/data"
  assert_golden tiny.npu
}

@test "the fully-async Ascend example's dry run matches its golden file" {
  dry "$SASYNC"
  assert_golden qwen3_vl_30b_a3b_fully_async.npu
}
