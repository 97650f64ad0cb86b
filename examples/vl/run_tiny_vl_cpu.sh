#!/usr/bin/env bash
# Summary: GRPO with images on a CPU: the shipped tiny Qwen3-VL-MoE on the synthetic shapes task.
#
# Usage:
#   bash examples/vl/run_tiny_vl_cpu.sh                 # sync: actor, rollout and ref in one worker
#   ASYNC=1 bash examples/vl/run_tiny_vl_cpu.sh         # fully-async: rollout and training in two pools
#   DRY_RUN=1 bash examples/vl/run_tiny_vl_cpu.sh       # print the command, start nothing
#   # a run that reads the image (two colours, large shapes; docs/vl.md), then its ablation:
#   python3 -m verl_lite.data.synthetic_images --out-dir data/tiny_vl_2c56 --n-colours 2 --min-size 56 --val 200
#   DATA_DIR=data/tiny_vl_2c56 ROLLOUT_N=16 TOTAL_STEPS=250 SAVE_FREQ=250 TEST_FREQ=-1 \
#     bash examples/vl/run_tiny_vl_cpu.sh
#   python3 examples/vl/ablate_images.py --data data/tiny_vl_2c56/val.parquet \
#     --checkpoint checkpoints/verl_lite/tiny_vl_grpo/global_step_250
#
# The tiny job's script with TASK=shapes (examples/grpo/run_tiny.sh; every env var of it applies):
# data/tiny_vl is written on the first run, the model is built from verl_lite/assets/tiny-qwen3_vl_moe
# (random init, nothing downloaded). docs/vl.md describes the data layout and what runs where.
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
TASK=shapes DEVICE=${DEVICE:-cpu} exec bash "$REPO_ROOT/examples/grpo/run_tiny.sh" "$@"
