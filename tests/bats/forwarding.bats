#!/usr/bin/env bats
# What a real (non-dry) run hands to Python: the module, the arguments in order, the env.

load test_helper

setup() { common_setup; }

@test "a real run execs python3 -m verl_lite.main with the user's arguments last and in order" {
  run_script DEVICE=cuda bash "$S35" trainer.total_epochs=2 'data.train_batch_size=64'
  assert_success
  assert_equal "$(stub_calls python3)" 1
  stub_argv python3
  assert_equal "${ARGV[0]} ${ARGV[1]}" "-m verl_lite.main"
  assert_equal "${ARGV[-2]}" "trainer.total_epochs=2"
  assert_equal "${ARGV[-1]}" "data.train_batch_size=64"
}

@test "a user argument for a key the script sets comes after the script's value so it wins" {
  run_script DEVICE=npu bash "$S35" actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4
  assert_success
  stub_argv python3
  local i script_at=-1 user_at=-1
  for i in "${!ARGV[@]}"; do
    [[ ${ARGV[i]} == actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 ]] && script_at=$i
    [[ ${ARGV[i]} == actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4 ]] && user_at=$i
  done
  ((script_at >= 0 && user_at > script_at)) || fail "script value at $script_at, user value at $user_at"
}

@test "the real run passes exactly the arguments the dry run prints" {
  run_script DEVICE=npu USE_MINDSPEED_BRIDGE=True DRY_RUN=1 bash "$S35" 'trainer.experiment_name=a b'
  assert_success
  local printed=$output
  run_script DEVICE=npu USE_MINDSPEED_BRIDGE=True bash "$S35" 'trainer.experiment_name=a b'
  assert_success
  # Run the printed command itself through bash: the stub logs what it received as call 2.
  run_script bash -c "$printed"
  assert_success
  assert_equal "$(stub_calls python3)" 2
  assert_equal "$(cat "$STUB_LOG/python3.2")" "$(cat "$STUB_LOG/python3.1")"
}

@test "CHECK=1 hands the same arguments to verl_lite.check instead of training" {
  run_script DEVICE=npu USE_MINDSPEED_BRIDGE=True bash "$S35" trainer.total_epochs=1
  stub_argv python3 1
  local main=("${ARGV[@]:2}")
  run_script CHECK=1 DEVICE=npu USE_MINDSPEED_BRIDGE=True bash "$S35" trainer.total_epochs=1
  assert_success
  stub_argv python3 2
  assert_equal "${ARGV[0]} ${ARGV[1]}" "-m verl_lite.check"
  assert_equal "${ARGV[*]:2}" "${main[*]}"
  assert_equal "${#ARGV[@]}" $((${#main[@]} + 2))
}

@test "DRY_RUN=1 with CHECK=1 prints the check command and starts nothing" {
  run_script CHECK=1 DRY_RUN=1 DEVICE=cuda bash "$S35"
  assert_success
  assert_line "python3 -m verl_lite.check \\"
  refute_line --partial "verl_lite.main"
  assert_equal "$(stub_calls python3)" 0
}

@test "the exit status of the training process is the script's exit status" {
  run_script DEVICE=cuda STUB_EXIT_python3=3 bash "$S35"
  assert_failure 3
}

@test "PYTHON selects the interpreter" {
  stub mypython
  run_script DEVICE=cpu PYTHON=mypython DATA_DIR="$BATS_TEST_TMPDIR/data" bash "$STINY"
  assert_success
  assert_equal "$(stub_calls python3)" 0
  # mypython ran twice: synthetic data first (none exists in the temp dir), then training.
  assert_equal "$(stub_calls mypython)" 2
}

@test "an npu run exports the NPU environment to the training process" {
  run_script DEVICE=npu bash "$S35"
  assert_success
  assert_equal "$(stub_env python3 1 CUDA_DEVICE_MAX_CONNECTIONS)" 1
  assert_equal "$(stub_env python3 1 HCCL_CONNECT_TIMEOUT)" 5400
  assert_equal "$(stub_env python3 1 HCCL_BUFFSIZE)" 300
}

@test "an HCCL value the user exported wins over the launcher default" {
  run_script DEVICE=npu HCCL_CONNECT_TIMEOUT=7200 bash "$S35"
  assert_success
  assert_equal "$(stub_env python3 1 HCCL_CONNECT_TIMEOUT)" 7200
}

@test "a cuda run sets no NPU variables" {
  run_script DEVICE=cuda bash "$S35"
  assert_success
  run stub_env python3 1 HCCL_CONNECT_TIMEOUT
  assert_failure
  run stub_env python3 1 CUDA_DEVICE_MAX_CONNECTIONS
  assert_failure
}

@test "the tiny script makes synthetic data first when the data files are missing" {
  local data=$BATS_TEST_TMPDIR/data
  run_script DEVICE=cpu DATA_DIR="$data" bash "$STINY"
  assert_success
  assert_equal "$(stub_calls python3)" 2
  stub_argv python3 1
  assert_equal "${ARGV[*]}" "-m verl_lite.data.synthetic --out-dir $data"
  stub_argv python3 2
  assert_equal "${ARGV[0]} ${ARGV[1]}" "-m verl_lite.main"
  assert_argv_has "data.train_files=$data/train.parquet"
}

@test "the tiny script trains directly when both data files exist" {
  local data=$BATS_TEST_TMPDIR/data
  mkdir -p "$data" && touch "$data/train.parquet" "$data/val.parquet"
  run_script DEVICE=cpu DATA_DIR="$data" bash "$STINY"
  assert_success
  assert_equal "$(stub_calls python3)" 1
  stub_argv python3 1
  assert_equal "${ARGV[1]}" "verl_lite.main"
}

@test "the tiny script makes data when only the validation file is missing" {
  local data=$BATS_TEST_TMPDIR/data
  mkdir -p "$data" && touch "$data/train.parquet"
  run_script DEVICE=cpu DATA_DIR="$data" bash "$STINY"
  assert_success
  stub_argv python3 1
  assert_equal "${ARGV[1]}" "verl_lite.data.synthetic"
}

@test "the tiny script does not make data under CHECK=1" {
  run_script CHECK=1 DEVICE=cpu DATA_DIR="$BATS_TEST_TMPDIR/data" bash "$STINY"
  assert_success
  assert_equal "$(stub_calls python3)" 1
  stub_argv python3 1
  assert_equal "${ARGV[1]}" "verl_lite.check"
}

@test "the tiny script does not make data for user-supplied data files" {
  run_script DEVICE=cpu TRAIN_FILES=/srv/mine.parquet VAL_FILES=/srv/mine_val.parquet bash "$STINY"
  assert_success
  assert_equal "$(stub_calls python3)" 1
  stub_argv python3 1
  assert_equal "${ARGV[1]}" "verl_lite.main"
}

@test "a failing data step stops the tiny script before training" {
  run_script DEVICE=cpu DATA_DIR="$BATS_TEST_TMPDIR/data" STUB_EXIT_python3=2 bash "$STINY"
  assert_failure 1
  assert_equal "$(stub_calls python3)" 1
  assert_stderr_has "verl_lite: preparing data failed (see the error above; command: python3 -m verl_lite.data.synthetic"
}

@test "the tiny script's data dir defaults to data/tiny in the repository" {
  run_script DRY_RUN=1 DEVICE=cpu bash "$STINY"
  assert_success
  assert_line "  data.train_files=$REPO/data/tiny/train.parquet \\"
  assert_line "  data.val_files=$REPO/data/tiny/val.parquet \\"
}

@test "the tiny script's training values can be changed from the environment" {
  run_script DRY_RUN=1 DEVICE=cpu TRAIN_BATCH_SIZE=4 LR=5e-4 ROLLOUT_N=2 TOTAL_STEPS=7 bash "$STINY"
  assert_success
  assert_line "  data.train_batch_size=4 \\"
  assert_line "  actor_rollout_ref.actor.optim.lr=5e-4 \\"
  assert_line "  actor_rollout_ref.rollout.n=2 \\"
  assert_line "  trainer.total_training_steps=7 \\"
}
