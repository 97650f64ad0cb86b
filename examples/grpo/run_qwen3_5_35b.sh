#!/usr/bin/env bash
# Summary: GRPO on Qwen3.5-35B-A3B with the Megatron backend and a vLLM rollout.
#
# Usage:
#   DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIDGE=True bash examples/grpo/run_qwen3_5_35b.sh
#   DEVICE=cuda HF_MODEL_PATH=/models/Qwen3.5-35B-A3B bash examples/grpo/run_qwen3_5_35b.sh trainer.total_epochs=2
#   CHECK=1 DEVICE=npu NDEVICES_PER_NODE=8 PP=1 bash examples/grpo/run_qwen3_5_35b.sh
#
# Layouts (override any of them with env vars; docs/launcher.md lists every knob):
#   cuda (and cpu): 1 x 8  devices, TP=2 PP=1 CP=1 EP=8 ETP=1, rollout TP=8
#   npu:            1 x 16 devices, TP=2 PP=2 CP=1 EP=8 ETP=1, rollout TP=8
#
# verl's script (examples/grpo_trainer/run_qwen3_5_35b_megatron.sh) and its variable names work here too:
#   GEN_TP, train_path, test_path, VERL_USE_UV (0; 1 on cuda is refused), TP, PP, CP, EP, ETP, NDEVICES_PER_NODE, ALL_OFFLOAD, USE_MINDSPEED_BRIDGE, HF_MODEL_PATH, DEVICE (gpu = cuda).
#   Both a verl name and its verl_lite knob set to different values is an error; the dry run says
#   which name each value came from (launch/verl_names.tsv, docs/launcher.md). On DEVICE=npu the
#   environment verl's scripts export is set too, each variable overridable (docs/ascend.md).
#
# Data: verl trains this model on Geometry3K (Qwen3.5 is a vision-language model); verl_lite defaults
#   to GSM8K because Qwen3.5 with images on the vLLM rollout is not supported yet (prompts with
#   images are refused: docs/rollout.md, docs/vl.md), and the preflight refuses TRAIN_FILES of
#   Geometry3K rows for that reason rather than train on them without their images.
#
# Requirements:
#   GPU:    CUDA 12, torch, megatron-core, vllm, this package (pip install -e .).
#   Ascend: CANN 9, torch-npu, Megatron-LM 0.16.0, MindSpeed 0.16.0, Megatron-Bridge, vllm-ascend.
#   Ascend with USE_MINDSPEED_BRIDGE=True: Megatron-LM core_v0.18.0, Megatron-Bridge v0.5.0,
#     MindSpeed core_r0.18.0, MegatronAdaptor core_r0.18.0, TransformerEngineNPU main,
#     MindSpeed-Ops master, MindSpeed-Bridge master, flash-linear-attention-npu v26.1.0,
#     decorator, pybind11, diffusers (examples/ascend/README.md).
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)

VL_MODEL=Qwen3.5-35B-A3B
# verl's script this one follows; its variable names are honoured here (launch/verl_names.tsv)
VL_VERL_TWIN=examples/grpo_trainer/run_qwen3_5_35b_megatron.sh
HF_MODEL_PATH=${HF_MODEL_PATH:-${MODEL_ROOT:-$HOME/models}/Qwen3.5-35B-A3B}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-32}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-32}
ROLLOUT_N=${ROLLOUT_N:-5}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-1024}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-2048}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-qwen3_5_35b_a3b_grpo}

device_layout() {
  case $1 in
    npu)
      NNODES=${NNODES:-1} NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-16}
      TP=${TP:-2} PP=${PP:-2} CP=${CP:-1} EP=${EP:-8} ETP=${ETP:-1} ROLLOUT_TP=${ROLLOUT_TP:-8}
      ;;
    *)
      NNODES=${NNODES:-1} NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-8}
      TP=${TP:-2} PP=${PP:-1} CP=${CP:-1} EP=${EP:-8} ETP=${ETP:-1} ROLLOUT_TP=${ROLLOUT_TP:-8}
      ;;
  esac
}

# shellcheck source-path=SCRIPTDIR/../.. source=launch/lib.sh
source "$REPO_ROOT/launch/lib.sh"
vl_main "$@"
