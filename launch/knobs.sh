# shellcheck shell=bash
# Summary: the launcher's knobs and the warning for a misspelled one, for launch/lib.sh.
# Sourcing this file only defines functions.

# Every environment variable the launcher reads; a near miss of one of these gets a warning.
vl_knobs() {
  VL_KNOBS=(
    DEVICE BACKEND USE_MINDSPEED_BRIDGE ASCEND_STACK DRY_RUN CHECK PYTHON
    NNODES NDEVICES_PER_NODE TP PP CP EP ETP ROLLOUT_TP ROLLOUT_DP ROLLOUT_EP
    HF_MODEL_PATH MODEL_ROOT DATA_DIR TRAIN_FILES VAL_FILES
    TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE MICRO_BATCH_SIZE_PER_DEVICE
    MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH ADV_ESTIMATOR LR
    USE_KL_LOSS KL_LOSS_COEF KL_LOSS_TYPE ENTROPY_COEFF ALL_OFFLOAD RECOMPUTE
    ROLLOUT_NAME ROLLOUT_N ROLLOUT_GPU_MEMORY_UTILIZATION ROLLOUT_DTYPE
    LOGGER PROJECT_NAME EXPERIMENT_NAME TOTAL_EPOCHS TOTAL_STEPS SAVE_FREQ TEST_FREQ
    ASYNC ASYNC_TRAINING ROLLOUT_NNODES ROLLOUT_NDEVICES_PER_NODE
    STALENESS_THRESHOLD TRIGGER_PARAMETER_SYNC_STEP PARTIAL_ROLLOUT
    SAVE_PATH ACTOR_VPP VLLM_MAX_MODEL_LEN
    ROLLOUT_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE REF_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE
    CUDA_DEVICE_MAX_CONNECTIONS HCCL_CONNECT_TIMEOUT HCCL_BUFFSIZE CPU_AFFINITY_CONF OMP_NUM_THREADS
    PYTORCH_NPU_ALLOC_CONF USE_OPTIMIZED_MODEL TASK_QUEUE_ENABLE COMBINED_ENABLE TOKENIZERS_PARALLELISM
    RAY_DEDUP_LOGS VLLM_ASCEND_ENABLE_NZ VLLM_ALLREDUCE_USE_SYMM_MEM
    RAY_PORT HEAD_ADDRESS NODE_IP RAY
  )
}

# True when $1 and $2 differ by one insertion, deletion, substitution or swap of neighbours.
vl_near() {
  local a=$1 b=$2 i=0 la=${#1} lb=${#2}
  while ((i < la && i < lb)) && [[ ${a:i:1} == "${b:i:1}" ]]; do ((++i)); done
  if ((la == lb)); then
    ((i < la)) || return 1
    [[ ${a:i+1} == "${b:i+1}" ]] && return 0
    [[ ${a:i:1} == "${b:i+1:1}" && ${a:i+1:1} == "${b:i:1}" && ${a:i+2} == "${b:i+2}" ]]
  elif ((la == lb + 1)); then
    [[ ${a:i+1} == "${b:i}" ]]
  elif ((lb == la + 1)); then
    [[ ${a:i} == "${b:i+1}" ]]
  else
    return 1
  fi
}

# Warn about exported variables that look like a misspelled knob (USE_MINDSPEED_BRIGDE).
# Knobs are bucketed by length so each variable is compared with a handful of them (~1 ms).
vl_warn_typos() {
  local name upper knob len
  local -A known=() bylen=()
  vl_knobs
  for knob in "${VL_VERL_READ[@]}"; do known[$knob]=1; done
  for knob in "${VL_KNOBS[@]}"; do
    known[$knob]=1
    ((${#knob} >= 5)) && bylen[${#knob}]+=" $knob"
  done
  while IFS= read -r name; do
    [[ -n ${known[$name]:-} ]] && continue
    upper=${name^^}
    if [[ -n ${known[$upper]:-} ]]; then
      vl_warn "$name is not read, the launcher reads $upper (did you mean $upper?)"
      continue
    fi
    ((${#upper} >= 5)) || continue
    for len in $((${#upper} - 1)) ${#upper} $((${#upper} + 1)); do
      for knob in ${bylen[$len]:-}; do
        [[ ${upper:0:1} == "${knob:0:1}" || ${upper: -1} == "${knob: -1}" ]] || continue
        if vl_near "$upper" "$knob"; then
          vl_warn "$name is not a known setting and is ignored (did you mean $knob?)"
          continue 3
        fi
      done
    done
  done < <(compgen -e)
}

