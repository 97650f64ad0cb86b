#!/usr/bin/env bash
# Summary: GRPO on Qwen3.5-122B-A10B with the Megatron backend and a vLLM rollout.
#
# Usage:
#   DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIDGE=True bash examples/grpo/run_qwen3_5_122b_a10b.sh
#   DEVICE=cuda HF_MODEL_PATH=/models/Qwen3.5-122B-A10B bash examples/grpo/run_qwen3_5_122b_a10b.sh trainer.total_epochs=2
#   launch/ray_cluster.sh head   # then HEAD_ADDRESS=<head ip> launch/ray_cluster.sh worker on the other 3 nodes
#
# Layouts (override any of them with env vars; docs/launcher.md lists every knob):
#   cuda (and cpu): 4 x 8  devices, TP=2 PP=2 CP=1 EP=8  ETP=1, rollout TP=8
#   npu:            4 x 16 devices, TP=2 PP=4 CP=1 EP=16 ETP=1, rollout TP=16
#
# verl's script (examples/grpo_trainer/run_qwen3_5_122b_a10b_megatron.sh) and its variable names work here too:
#   GEN_TP, train_files, test_files, nnodes, project_name, exp_name, adv_estimator, save_path, ACTOR_VPP,
#   rollout_gpu_memory_utilization, rollout_/ref_log_prob_micro_batch_size_per_gpu, vllm_max_model_len (with verl's
#   per-device defaults: npu 0.6 / 4 / 4 / 8192, cuda 0.66 / 1 / 1 / 15768), VERL_USE_UV, CUDA_VISIBLE_DEVICES
#   (passed through) and the names verl_lite shares (TP, PP, ..., HF_MODEL_PATH, DEVICE).
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

VL_MODEL=Qwen3.5-122B-A10B
# verl's script this one follows; its variable names are honoured here (launch/verl_names.tsv)
VL_VERL_TWIN=examples/grpo_trainer/run_qwen3_5_122b_a10b_megatron.sh
HF_MODEL_PATH=${HF_MODEL_PATH:-${MODEL_ROOT:-$HOME/models}/Qwen3.5-122B-A10B}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-128}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-64}
ROLLOUT_N=${ROLLOUT_N:-6}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-3240}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-4096}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-qwen3_5_122b_a10b_grpo}

device_layout() {
  case $1 in
    npu)
      NNODES=${NNODES:-4} NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-16}
      TP=${TP:-2} PP=${PP:-4} CP=${CP:-1} EP=${EP:-16} ETP=${ETP:-1} ROLLOUT_TP=${ROLLOUT_TP:-16}
      # verl's per-device values (its script :128-131); 0.6 is the launcher's default memory share too
      ROLLOUT_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE=${ROLLOUT_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE:-4}
      REF_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE=${REF_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE:-4}
      VLLM_MAX_MODEL_LEN=${VLLM_MAX_MODEL_LEN:-8192}
      ;;
    *)
      NNODES=${NNODES:-4} NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-8}
      TP=${TP:-2} PP=${PP:-2} CP=${CP:-1} EP=${EP:-8} ETP=${ETP:-1} ROLLOUT_TP=${ROLLOUT_TP:-8}
      # verl's gpu values (its script :118-121): log-prob micro batches of 1 are verl_lite's default
      # (the actor's micro batch); on cpu the memory share is of host RAM, so it keeps the cpu default
      VLLM_MAX_MODEL_LEN=${VLLM_MAX_MODEL_LEN:-15768}
      if [[ $1 == cuda ]]; then ROLLOUT_GPU_MEMORY_UTILIZATION=${ROLLOUT_GPU_MEMORY_UTILIZATION:-0.66}; fi
      ;;
  esac
}

# shellcheck source-path=SCRIPTDIR/../.. source=launch/lib.sh
source "$REPO_ROOT/launch/lib.sh"
vl_main "$@"
