#!/usr/bin/env bash
# Summary: fully-async GRPO on Qwen3-VL-30B-A3B on Ascend NPUs: a separate rollout pool and a
# training pool on each node, Megatron backend (MindSpeed engines), vLLM-Ascend rollout.
#
# Usage:
#   DRY_RUN=1 bash examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh
#   launch/ray_cluster.sh head; HEAD_ADDRESS=<head ip> launch/ray_cluster.sh worker   # 2 nodes
#   HF_MODEL_PATH=/models/Qwen3-VL-30B-A3B-Instruct bash examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh
#   NGPUS_PER_NODE=16 GEN_TP=4 bash examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh vllm   # verl's names
#
# verl's variable names (its geo3k_qwen3vl_30b_megatron_6_2_npu_async.sh) work here: NNODES (both
# pools), NGPUS_PER_NODE (all devices of a node; ROLLOUT_NDEVICES_PER_NODE=12 of them roll out),
# GEN_TP, TP, PP, CP, EP, ETP and the engine as first argument (vllm; sglang is refused).
# launch/verl_names.tsv lists them; docs/launcher.md.
#
# Layout on 2 nodes x 16 NPUs: 12 rollout + 4 training NPUs per node.
#   training: NNODES=2 x NDEVICES_PER_NODE=4, TP=4 PP=2 CP=1 EP=4 ETP=1
#   rollout:  ROLLOUT_NNODES=2 x ROLLOUT_NDEVICES_PER_NODE=12, ROLLOUT_TP=4, n=4, 16k responses
#
# Requirements (Ascend, examples/ascend/README.md): CANN 9, torch-npu, Megatron-LM 0.16.0,
#   MindSpeed 0.16.0, Megatron-Bridge, vllm-ascend, this package (pip install -e .).
#   Qwen3-VL has no Gated DeltaNet layers, so USE_MINDSPEED_BRIDGE=True is refused here.
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)

VL_MODEL=Qwen3-VL-30B-A3B
# verl's script this one follows; its variable names are honoured here (launch/verl_names.tsv)
VL_VERL_TWIN=verl/experimental/fully_async_policy/shell/geo3k_qwen3vl_30b_megatron_6_2_npu_async.sh
VL_MODEL_HAS_GDN=0
DEVICE=${DEVICE:-npu}
HF_MODEL_PATH=${HF_MODEL_PATH:-${MODEL_ROOT:-$HOME/models}/Qwen3-VL-30B-A3B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/geo3k}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-32}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-32}
ROLLOUT_N=${ROLLOUT_N:-4}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-2048}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-16384}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-qwen3_vl_30b_a3b_fully_async}

ASYNC_TRAINING=${ASYNC_TRAINING:-True}
NNODES=${NNODES:-2} NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-4}
# verl's script gives both pools NNODES
ROLLOUT_NNODES=${ROLLOUT_NNODES:-$NNODES} ROLLOUT_NDEVICES_PER_NODE=${ROLLOUT_NDEVICES_PER_NODE:-12}
TP=${TP:-4} PP=${PP:-2} CP=${CP:-1} EP=${EP:-4} ETP=${ETP:-1} ROLLOUT_TP=${ROLLOUT_TP:-4}
STALENESS_THRESHOLD=${STALENESS_THRESHOLD:-1}
TRIGGER_PARAMETER_SYNC_STEP=${TRIGGER_PARAMETER_SYNC_STEP:-4}
PARTIAL_ROLLOUT=${PARTIAL_ROLLOUT:-True}

# shellcheck source-path=SCRIPTDIR/../.. source=launch/lib.sh
source "$REPO_ROOT/launch/lib.sh"
# As verl's script: with ALL_OFFLOAD=True the Adam state also steps on the host (Megatron's CPU
# optimizer), which the 4 training NPUs per node need (the check's memory table: docs/memory.md).
# (script arguments go before the caller's, which can change them; the caller's first argument may be
# verl's ENGINE: vllm)
VL_SCRIPT_ARGS=()
if [[ ${ALL_OFFLOAD:-True} == True ]]; then
  VL_SCRIPT_ARGS=(
    "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction=1"
    "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True"
  )
fi
vl_main "$@"
