#!/usr/bin/env bash
# Summary: GRPO with images on a CPU: the shipped tiny Qwen3-VL-MoE on the synthetic shapes task.
#
# Usage:
#   bash examples/vl/run_tiny_vl_cpu.sh                 # sync: actor, rollout and ref in one worker
#   ASYNC=1 bash examples/vl/run_tiny_vl_cpu.sh         # fully-async: rollout and training in two pools
#   DRY_RUN=1 bash examples/vl/run_tiny_vl_cpu.sh       # print the command, start nothing
#
# The tiny job's script with TASK=shapes (examples/grpo/run_tiny.sh; every env var of it applies):
# data/tiny_vl is written on the first run, the model is built from verl_lite/assets/tiny-qwen3_vl_moe
# (random init, nothing downloaded). docs/vl.md describes the data layout and what runs where.
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
TASK=shapes DEVICE=${DEVICE:-cpu} exec bash "$REPO_ROOT/examples/grpo/run_tiny.sh" "$@"
