#!/usr/bin/env bats
# launch/ray_cluster.sh: what it hands to `ray`, checked through a stub that logs argv.

load test_helper

setup() { common_setup; }

@test "head starts a Ray head on the default port with usage stats off" {
  run_script bash "$SRAY" head
  assert_success
  stub_argv ray
  assert_equal "${ARGV[*]}" "start --head --port=6379 --disable-usage-stats"
}

@test "head on npu with a device count declares the NPU resource" {
  run_script DEVICE=npu NDEVICES_PER_NODE=16 NODE_IP=10.0.0.1 RAY_PORT=6766 bash "$SRAY" head
  assert_success
  stub_argv ray
  assert_equal "${#ARGV[@]}" 6
  assert_equal "${ARGV[*]}" 'start --head --port=6766 --node-ip-address=10.0.0.1 --resources={"NPU": 16} --disable-usage-stats'
}

@test "worker on cuda joins the head's address and declares its GPUs" {
  run_script DEVICE=cuda NDEVICES_PER_NODE=8 HEAD_ADDRESS=10.0.0.1 bash "$SRAY" worker
  assert_success
  stub_argv ray
  assert_equal "${ARGV[*]}" "start --address=10.0.0.1:6379 --num-gpus=8 --disable-usage-stats"
}

@test "a cpu node with a device count declares that many CPUs and no GPU" {
  run_script DEVICE=cpu NDEVICES_PER_NODE=2 HEAD_ADDRESS=127.0.0.1 RAY_PORT=40001 bash "$SRAY" worker --temp-dir=/tmp/w1 --block
  assert_success
  stub_argv ray
  assert_equal "${ARGV[*]}" "start --address=127.0.0.1:40001 --num-cpus=2 --num-gpus=0 --disable-usage-stats --temp-dir=/tmp/w1 --block"
}

@test "worker with auto device and a device count detects npu from npu-smi" {
  stub npu-smi
  run_script NDEVICES_PER_NODE=16 HEAD_ADDRESS=h bash "$SRAY" worker
  assert_success
  stub_argv ray
  assert_argv_has '--resources={"NPU": 16}'
}

@test "extra arguments are passed to ray last" {
  run_script HEAD_ADDRESS=h bash "$SRAY" worker --block
  assert_success
  stub_argv ray
  assert_equal "${ARGV[-1]}" "--block"
}

@test "status and stop wrap ray status and ray stop" {
  run_script HEAD_ADDRESS=10.0.0.1 bash "$SRAY" status
  assert_success
  stub_argv ray 1
  assert_equal "${ARGV[*]}" "status --address=10.0.0.1:6379"
  run_script bash "$SRAY" stop
  assert_success
  stub_argv ray 2
  assert_equal "${ARGV[*]}" "stop"
}

@test "worker without HEAD_ADDRESS is refused with a fix and starts nothing" {
  run_script bash "$SRAY" worker
  assert_failure 1
  assert_equal "$stderr" "verl_lite: worker needs HEAD_ADDRESS (set HEAD_ADDRESS=<ip of the head node>)"
  assert_equal "$(stub_calls ray)" 0
}

@test "an unknown command is refused with the allowed commands" {
  run_script bash "$SRAY" start
  assert_failure 1
  assert_equal "$stderr" "verl_lite: unknown command 'start' (allowed: head, worker, status, stop)"
}

@test "a bad RAY_PORT is refused with the port range" {
  run_script RAY_PORT=70000 bash "$SRAY" head
  assert_failure 1
  assert_equal "$stderr" "verl_lite: RAY_PORT must be a port number, got '70000' (use 1 to 65535)"
}

@test "a missing ray executable exits 127 with an install hint" {
  rm "$STUB_BIN/ray"
  # shellcheck disable=SC2034  # read by run_script in test_helper.bash
  HERMETIC_PATH=$STUB_BIN:$(path_without npu-smi nvidia-smi ray)
  run_script -127 bash "$SRAY" status
  assert_failure 127
  assert_equal "$stderr" "verl_lite: ray not found on PATH (pip install ray, or set RAY to its path)"
}

@test "DRY_RUN prints the ray command and runs nothing" {
  run_script DRY_RUN=1 DEVICE=npu NDEVICES_PER_NODE=16 bash "$SRAY" head
  assert_success
  assert_output "ray start --head --port=6379 '--resources={\"NPU\": 16}' --disable-usage-stats"
  assert_equal "$(stub_calls ray)" 0
}
