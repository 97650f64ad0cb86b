# shellcheck shell=bash
# Summary: the verl_lite launcher library, sourced by every example script.
#
# Usage, at the end of a model script (after its model-specific `${VAR:-default}` block):
#   source "$REPO_ROOT/launch/lib.sh"
#   device_layout() { ...; }   # optional: parallel layout defaults per resolved device ($1)
#   vl_main "$@"
#
# Sourcing this file only defines functions: it sets no variable, prints nothing and changes no
# shell option. vl_main resolves DEVICE and BACKEND, fills the shared defaults, validates every
# knob, then prints (DRY_RUN=1), checks (CHECK=1: verl_lite.check) or runs
#   ${PYTHON:-python3} -m verl_lite.main <common> <device> <backend> <model> <user args "$@">
# User arguments come last, so they win (Hydra applies overrides in order; to change a `+key`
# that the launcher adds, pass it without the `+`); a script's own arguments (VL_SCRIPT_ARGS) go
# just before them. A script with a verl twin (VL_VERL_TWIN) also honours verl's variable names.
# Errors go to stderr as `verl_lite: <what> (<allowed values or fix>)` with exit status 1.

# The knobs and the typo warning (vl_knobs, vl_warn_typos); verl's script variable names and
# per-device environment (vl_verl_names, vl_device_env). Both files only define functions.
# shellcheck source=launch/knobs.sh
source "${BASH_SOURCE[0]%lib.sh}knobs.sh"
# shellcheck source=launch/verl_names.sh
source "${BASH_SOURCE[0]%lib.sh}verl_names.sh"

# ------------------------------------------------------------------------------ messages

vl_log() { printf '[%(%H:%M:%S)T] verl_lite: %s\n' -1 "$*" >&2; }
vl_warn() { printf 'verl_lite: warning: %s\n' "$*" >&2; }
vl_die() {
  printf 'verl_lite: %s\n' "$@" >&2
  exit 1
}

# ------------------------------------------------------------------------------ values

# vl_bool NAME: normalise the boolean variable NAME to True/False, or record an error.
vl_bool() {
  local -n ref=$1
  case ${ref:-} in
    True | true | 1) ref=True ;;
    False | false | 0 | '') ref=False ;;
    *)
      VL_ERRORS+=("$1 must be a boolean, got '$ref' (allowed: True, False, true, false, 1, 0)")
      return 1
      ;;
  esac
}

# vl_int NAME MIN: the variable NAME must be a whole number >= MIN (MIN is 1, 0 or -1).
vl_int() {
  local name=$1 min=$2 value=${!1:-}
  if [[ $min == 1 ]]; then
    [[ $value =~ ^[1-9][0-9]{0,8}$ ]] && return 0
    VL_ERRORS+=("$name must be a positive integer, got '$value' (use a whole number from 1 to 999999999)")
  else
    [[ $value =~ ^(0|[1-9][0-9]{0,8})$ || ($min == -1 && $value == -1) ]] && return 0
    VL_ERRORS+=("$name must be an integer >= $min, got '$value' (use a whole number from $min to 999999999)")
  fi
  return 1
}

# vl_fraction NAME: the variable NAME must be a number >= 0 (verl's staleness_threshold, e.g. 0.1).
vl_fraction() {
  local name=$1 value=${!1:-}
  [[ $value =~ ^(0|[1-9][0-9]{0,8})(\.[0-9]{1,9})?$ ]] && return 0
  VL_ERRORS+=("$name must be a number >= 0, got '$value' (e.g. 0.1 or 1: verl's fraction of stale samples)")
  return 1
}

vl_nonempty() {
  [[ -n ${!1:-} ]] && return 0
  VL_ERRORS+=("$1 is empty ($2)")
  return 1
}

# Shell-quote one word for the dry run: plain when it is safe, single-quoted otherwise.
vl_quote() {
  if [[ $1 =~ ^[A-Za-z0-9_./:=+,@%-]+$ ]]; then
    REPLY=$1
  else
    REPLY="'${1//\'/\'\\\'\'}'"
  fi
}

# A name with KEY, TOKEN (not TOKENIZER: TOKENIZERS_PARALLELISM is a switch), SECRET or PASSWORD, as
# verl_lite/secrets.py reads it.
vl_is_secret() {
  local name=${1^^}
  local tokens=${name//TOKENIZER/}
  [[ $name == *KEY* || $tokens == *TOKEN* || $name == *SECRET* || $name == *PASSWORD* ]]
}

# ------------------------------------------------------------------------------ device, backend

# Sets VL_DEVICE (cuda|npu|cpu) and VL_DEVICE_HOW from DEVICE; pure shell, runs no tool.
vl_resolve_device() {
  case ${DEVICE:-auto} in
    auto)
      if command -v npu-smi >/dev/null 2>&1; then
        VL_DEVICE=npu VL_DEVICE_HOW='auto: npu-smi found'
      elif command -v nvidia-smi >/dev/null 2>&1; then
        VL_DEVICE=cuda VL_DEVICE_HOW='auto: nvidia-smi found'
      else
        VL_DEVICE=cpu VL_DEVICE_HOW='auto: no npu-smi or nvidia-smi'
      fi
      ;;
    cuda | gpu) VL_DEVICE=cuda VL_DEVICE_HOW="DEVICE=$DEVICE" ;;
    npu | cpu) VL_DEVICE=$DEVICE VL_DEVICE_HOW="DEVICE=$DEVICE" ;;
    *) vl_die "unknown DEVICE '$DEVICE' (allowed: auto, cuda, gpu, npu, cpu)" ;;
  esac
}

vl_resolve_backend() {
  case ${BACKEND:=megatron} in
    megatron | fsdp) ;;
    *) vl_die "unknown BACKEND '$BACKEND' (allowed: megatron, fsdp; on npu, megatron runs on MindSpeed)" ;;
  esac
}

# ------------------------------------------------------------------------------ defaults, checks

# Values shared by the model scripts; a script's own `${VAR:-...}` block ran before and wins.
vl_defaults() {
  PYTHON=${PYTHON:-python3}
  NNODES=${NNODES:-1} NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-1}
  TP=${TP:-1} PP=${PP:-1} CP=${CP:-1} EP=${EP:-1} ETP=${ETP:-1} ROLLOUT_TP=${ROLLOUT_TP:-1}
  ROLLOUT_DP=${ROLLOUT_DP:-1} ROLLOUT_EP=${ROLLOUT_EP:-1}
  ADV_ESTIMATOR=${ADV_ESTIMATOR:-grpo} LR=${LR:-1e-6}
  USE_KL_LOSS=${USE_KL_LOSS:-True} KL_LOSS_COEF=${KL_LOSS_COEF:-0.01}
  KL_LOSS_TYPE=${KL_LOSS_TYPE:-low_var_kl} ENTROPY_COEFF=${ENTROPY_COEFF:-0}
  ALL_OFFLOAD=${ALL_OFFLOAD:-True} RECOMPUTE=${RECOMPUTE:-True}
  MICRO_BATCH_SIZE_PER_DEVICE=${MICRO_BATCH_SIZE_PER_DEVICE:-1}
  ROLLOUT_NAME=${ROLLOUT_NAME:-vllm} ROLLOUT_GPU_MEMORY_UTILIZATION=${ROLLOUT_GPU_MEMORY_UTILIZATION:-}
  LOGGER=${LOGGER:-[console,jsonl]} PROJECT_NAME=${PROJECT_NAME:-verl_lite}
  [[ -n ${TOTAL_STEPS:-} ]] || TOTAL_EPOCHS=${TOTAL_EPOCHS:-15}
  SAVE_FREQ=${SAVE_FREQ:-20} TEST_FREQ=${TEST_FREQ:-5}
  # ASYNC is the short switch for ASYNC_TRAINING (fully-async training, docs/async.md).
  if [[ -n ${ASYNC:-} ]] && vl_bool ASYNC; then ASYNC_TRAINING=${ASYNC_TRAINING:-$ASYNC}; fi
  ASYNC_TRAINING=${ASYNC_TRAINING:-False} PARTIAL_ROLLOUT=${PARTIAL_ROLLOUT:-True}
  STALENESS_THRESHOLD=${STALENESS_THRESHOLD:-1} TRIGGER_PARAMETER_SYNC_STEP=${TRIGGER_PARAMETER_SYNC_STEP:-1}
}

# "WHAT does not divide the N [rollout ]devices of WHERE" when PRODUCT does not divide N.
vl_divides() {
  local what=$1 product=$2 total=$3 where=$4 fix=$5 noun=devices
  ((total % product == 0)) && return 0
  ((total == 1)) && noun=device
  VL_ERRORS+=("$what does not divide the $total ${where/devices/$noun} ($fix divides $total)")
}

vl_validate() {
  local name sizes=(NNODES NDEVICES_PER_NODE TP PP CP EP ETP ROLLOUT_TP ROLLOUT_DP ROLLOUT_EP ROLLOUT_N
    TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE MICRO_BATCH_SIZE_PER_DEVICE
    MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH)
  local ok=1
  [[ -n ${TOTAL_EPOCHS:-} ]] && sizes+=(TOTAL_EPOCHS)
  [[ -n ${TOTAL_STEPS:-} ]] && sizes+=(TOTAL_STEPS)
  [[ $ASYNC_TRAINING == True ]] && sizes+=(ROLLOUT_NNODES ROLLOUT_NDEVICES_PER_NODE TRIGGER_PARAMETER_SYNC_STEP)
  for name in "${sizes[@]}"; do vl_int "$name" 1 || ok=0; done
  for name in ROLLOUT_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE REF_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE VLLM_MAX_MODEL_LEN; do
    [[ -z ${!name:-} ]] || vl_int "$name" 1 || ok=0
  done
  # verl's ACTOR_VPP=null (its script's default) means no virtual pipeline
  if [[ ${ACTOR_VPP:-null} != null ]]; then
    vl_int ACTOR_VPP 1 || ok=0
    [[ $BACKEND == megatron ]] ||
      VL_ERRORS+=("ACTOR_VPP=$ACTOR_VPP is Megatron's virtual pipeline but BACKEND=$BACKEND (set BACKEND=megatron or ACTOR_VPP=null)")
  fi
  vl_int SAVE_FREQ -1 || ok=0
  vl_int TEST_FREQ -1 || ok=0
  [[ $ASYNC_TRAINING == True ]] && { vl_fraction STALENESS_THRESHOLD || ok=0; }
  vl_nonempty HF_MODEL_PATH 'set it to a local model directory' || true
  vl_nonempty TRAIN_FILES 'set it to a parquet file' || true
  vl_nonempty VAL_FILES 'set it to a parquet file' || true

  case ${ASCEND_STACK:-auto} in
    auto) ;;
    core_r0.16.0 | core_r0.18.0)
      [[ $VL_DEVICE == npu ]] ||
        VL_ERRORS+=("ASCEND_STACK=$ASCEND_STACK names an Ascend stack but the device is $VL_DEVICE (set DEVICE=npu or unset ASCEND_STACK)")
      ;;
    *) VL_ERRORS+=("unknown ASCEND_STACK '$ASCEND_STACK' (allowed: auto, core_r0.16.0, core_r0.18.0; docs/ascend.md)") ;;
  esac
  if [[ $USE_MINDSPEED_BRIDGE == True ]]; then
    if [[ $VL_DEVICE != npu ]]; then
      VL_ERRORS+=("USE_MINDSPEED_BRIDGE=True is Ascend-only but the device is $VL_DEVICE (MindSpeed-Bridge runs on npu: set DEVICE=npu or USE_MINDSPEED_BRIDGE=False)")
    elif [[ $BACKEND != megatron ]]; then
      VL_ERRORS+=("USE_MINDSPEED_BRIDGE=True needs BACKEND=megatron, got $BACKEND (the GDN overrides go to Megatron's transformer config: set BACKEND=megatron or USE_MINDSPEED_BRIDGE=False)")
    elif [[ ${VL_MODEL_HAS_GDN:-1} != 1 ]]; then
      VL_ERRORS+=("USE_MINDSPEED_BRIDGE=True selects Ascend GDN kernels but ${VL_MODEL:-this model} has no GDN layers (set USE_MINDSPEED_BRIDGE=False)")
    fi
  fi
  ((ok)) || return 0

  local devices=$((NNODES * NDEVICES_PER_NODE))
  local where="devices of NNODES=$NNODES x NDEVICES_PER_NODE=$NDEVICES_PER_NODE"
  if [[ $BACKEND == megatron ]]; then
    vl_divides "TP*PP*CP = $TP*$PP*$CP = $((TP * PP * CP))" $((TP * PP * CP)) "$devices" "$where" \
      'choose TP, PP, CP whose product'
    vl_divides "EP*ETP*PP = $EP*$ETP*$PP = $((EP * ETP * PP))" $((EP * ETP * PP)) "$devices" "$where" \
      'choose EP, ETP, PP whose product'
  fi
  if [[ $ASYNC_TRAINING == True ]]; then
    devices=$((ROLLOUT_NNODES * ROLLOUT_NDEVICES_PER_NODE))
    where="rollout devices of ROLLOUT_NNODES=$ROLLOUT_NNODES x ROLLOUT_NDEVICES_PER_NODE=$ROLLOUT_NDEVICES_PER_NODE"
  fi
  vl_divides "ROLLOUT_TP=$ROLLOUT_TP" "$ROLLOUT_TP" "$devices" "$where" 'choose a ROLLOUT_TP that'
  # vLLM data parallelism (one group over the actor's ranks) and expert parallelism (over TP x DP):
  # the values the preflight accepts, said here before anything starts.
  if ((ROLLOUT_DP > 1)) && [[ $ASYNC_TRAINING == True ]]; then
    VL_ERRORS+=("ROLLOUT_DP=$ROLLOUT_DP with fully-async training: each rollout replica is an engine of its own, with no data-parallel group (set ROLLOUT_DP=1; the replicas are the rollout devices / ROLLOUT_TP)")
  elif ((ROLLOUT_DP > 1 && ROLLOUT_TP * ROLLOUT_DP != devices)); then
    local fit=1
    ((devices / ROLLOUT_TP > 1)) && fit="$((devices / ROLLOUT_TP)) or 1"
    VL_ERRORS+=("ROLLOUT_DP=$ROLLOUT_DP: the rollout's data-parallel group spans all $devices $where, but ROLLOUT_TP x ROLLOUT_DP = $ROLLOUT_TP x $ROLLOUT_DP = $((ROLLOUT_TP * ROLLOUT_DP)) (set ROLLOUT_DP=$fit)")
  fi
  if ((ROLLOUT_EP > 1 && ROLLOUT_EP != ROLLOUT_TP * ROLLOUT_DP)); then
    VL_ERRORS+=("ROLLOUT_EP=$ROLLOUT_EP: vLLM spreads the experts over ROLLOUT_TP x ROLLOUT_DP = $ROLLOUT_TP x $ROLLOUT_DP ranks (set ROLLOUT_EP=$((ROLLOUT_TP * ROLLOUT_DP)) or 1)")
  fi
}

# ------------------------------------------------------------------------------ the command

vl_args_common() {
  VL_ARGS+=(
    "algorithm.adv_estimator=$ADV_ESTIMATOR"
    "actor_rollout_ref.actor.optim.lr=$LR"
    "actor_rollout_ref.actor.use_kl_loss=$USE_KL_LOSS"
  )
  if [[ $USE_KL_LOSS == True ]]; then
    VL_ARGS+=(
      "actor_rollout_ref.actor.kl_loss_coef=$KL_LOSS_COEF"
      "actor_rollout_ref.actor.kl_loss_type=$KL_LOSS_TYPE"
    )
  fi
  VL_ARGS+=(
    "actor_rollout_ref.actor.entropy_coeff=$ENTROPY_COEFF"
    "actor_rollout_ref.rollout.name=$ROLLOUT_NAME"
  )
  # vllm's memory share: 0.6 of the accelerator by default; on cpu it is a share of host RAM, so
  # unless set, the schema's cpu default applies (docs/rollout.md)
  if [[ $ROLLOUT_NAME == vllm && ( -n $ROLLOUT_GPU_MEMORY_UTILIZATION || $VL_DEVICE != cpu ) ]]; then
    VL_ARGS+=("actor_rollout_ref.rollout.gpu_memory_utilization=${ROLLOUT_GPU_MEMORY_UTILIZATION:-0.6}")
  fi
  # the engine's weight dtype: on cpu the actor trains in float32, so the engine matches it unless set
  if [[ $ROLLOUT_NAME == vllm && ( -n ${ROLLOUT_DTYPE:-} || $VL_DEVICE == cpu ) ]]; then
    VL_ARGS+=("actor_rollout_ref.rollout.dtype=${ROLLOUT_DTYPE:-float32}")
  fi
  VL_ARGS+=("trainer.logger=$LOGGER" "trainer.project_name=$PROJECT_NAME")
  [[ -n ${TOTAL_EPOCHS:-} ]] && VL_ARGS+=("trainer.total_epochs=$TOTAL_EPOCHS")
  [[ -n ${TOTAL_STEPS:-} ]] && VL_ARGS+=("trainer.total_training_steps=$TOTAL_STEPS")
  VL_ARGS+=("trainer.save_freq=$SAVE_FREQ" "trainer.test_freq=$TEST_FREQ")
}

vl_args_device() {
  VL_ARGS+=(
    "trainer.device=$VL_DEVICE"
    "trainer.nnodes=$NNODES"
    "trainer.n_gpus_per_node=$NDEVICES_PER_NODE"
  )
  # the Ascend stack the nodes run (auto: the installed MindSpeed's; decisions/ascend_stack.py)
  [[ ${ASCEND_STACK:-auto} != auto ]] && VL_ARGS+=("trainer.ascend_stack=$ASCEND_STACK")
  if [[ $ASYNC_TRAINING == True ]]; then
    VL_ARGS+=(
      "async_training.enable=True"
      "async_training.staleness_threshold=$STALENESS_THRESHOLD"
      "async_training.trigger_parameter_sync_step=$TRIGGER_PARAMETER_SYNC_STEP"
      "async_training.partial_rollout=$PARTIAL_ROLLOUT"
      "actor_rollout_ref.rollout.nnodes=$ROLLOUT_NNODES"
      "actor_rollout_ref.rollout.n_gpus_per_node=$ROLLOUT_NDEVICES_PER_NODE"
    )
  fi
}

vl_args_backend() {
  local role otc=+actor_rollout_ref.actor.megatron.override_transformer_config
  VL_ARGS+=("actor_rollout_ref.actor.strategy=$BACKEND")
  if [[ $BACKEND == fsdp ]]; then
    [[ $ALL_OFFLOAD == True ]] && VL_ARGS+=(
      "actor_rollout_ref.actor.fsdp_config.param_offload=True"
      "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"
      "actor_rollout_ref.ref.fsdp_config.param_offload=True"
    )
    return 0
  fi
  for role in actor ref; do
    VL_ARGS+=(
      "actor_rollout_ref.$role.megatron.tensor_model_parallel_size=$TP"
      "actor_rollout_ref.$role.megatron.pipeline_model_parallel_size=$PP"
      "actor_rollout_ref.$role.megatron.context_parallel_size=$CP"
      "actor_rollout_ref.$role.megatron.expert_model_parallel_size=$EP"
      "actor_rollout_ref.$role.megatron.expert_tensor_parallel_size=$ETP"
      "actor_rollout_ref.$role.megatron.param_offload=$ALL_OFFLOAD"
    )
    [[ ${ACTOR_VPP:-null} == null ]] ||
      VL_ARGS+=("actor_rollout_ref.$role.megatron.virtual_pipeline_model_parallel_size=$ACTOR_VPP")
    [[ $role == actor ]] && VL_ARGS+=(
      "actor_rollout_ref.actor.megatron.grad_offload=$ALL_OFFLOAD"
      "actor_rollout_ref.actor.megatron.optimizer_offload=$ALL_OFFLOAD"
    )
  done
  [[ $RECOMPUTE == True ]] && VL_ARGS+=(
    "$otc.recompute_method=uniform"
    "$otc.recompute_granularity=full"
    "$otc.recompute_num_layers=1"
  )
  # model.use_remove_padding is left at null (auto): the engine packs where it can, e.g. Gated DeltaNet
  # layers on the Ascend kernel (USE_MINDSPEED_BRIDGE=True) or Triton fla, and runs padded otherwise
  # (decisions/packing_mode.py); the preflight summary says which per role.
  # MindSpeed-Bridge: use_ascend_gdn=True on npu is the signal verl_lite reads (decisions/bridge_choice.py):
  # the Ascend GDN kernel, and with Megatron-Bridge installed `import mindspeed_bridge.models` after
  # the repatch, before the model build (docs/ascend.md).
  [[ $USE_MINDSPEED_BRIDGE == True ]] && VL_ARGS+=(
    "$otc.use_triton_gdn=False"
    "$otc.use_ascend_gdn=True"
  )
  return 0
}

vl_args_model() {
  # shellcheck disable=SC2153  # ROLLOUT_N and the other model values are set by the model script
  VL_ARGS+=(
    "actor_rollout_ref.model.path=$HF_MODEL_PATH"
    "data.train_files=$TRAIN_FILES"
    "data.val_files=$VAL_FILES"
    "data.train_batch_size=$TRAIN_BATCH_SIZE"
    "data.max_prompt_length=$MAX_PROMPT_LENGTH"
    "data.max_response_length=$MAX_RESPONSE_LENGTH"
    "actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE"
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH_SIZE_PER_DEVICE"
    "actor_rollout_ref.rollout.n=$ROLLOUT_N"
    "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
    "trainer.experiment_name=$EXPERIMENT_NAME"
  )
  # verl's defaults (1 = off) are left out of the command
  ((ROLLOUT_DP == 1)) || VL_ARGS+=("actor_rollout_ref.rollout.data_parallel_size=$ROLLOUT_DP")
  ((ROLLOUT_EP == 1)) || VL_ARGS+=("actor_rollout_ref.rollout.expert_parallel_size=$ROLLOUT_EP")
  # set by the caller (or verl's name) or the model script; unset, verl_lite's defaults apply
  local knob key
  for knob in SAVE_PATH:trainer.default_local_dir VLLM_MAX_MODEL_LEN:actor_rollout_ref.rollout.max_model_len \
    ROLLOUT_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE:actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu \
    REF_LOG_PROB_MICRO_BATCH_SIZE_PER_DEVICE:actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu; do
    key=${knob#*:} knob=${knob%%:*}
    [[ -z ${!knob:-} ]] || VL_ARGS+=("$key=${!knob}")
  done
  return 0
}

# Print the command without starting anything: comments, the data step if any, the env, the
# launcher, then one argument per line. Caller variables that look like secrets are masked.
vl_print_dry_run() {
  local word name value layout
  local -A ours=()
  if [[ $BACKEND == megatron ]]; then
    layout="TP=$TP PP=$PP CP=$CP EP=$EP ETP=$ETP"
  else
    layout="(fsdp)"
  fi
  printf '# verl_lite dry run: nothing was started\n'
  printf '# model=%s device=%s (%s) backend=%s bridge=%s\n' \
    "${VL_MODEL:-?}" "$VL_DEVICE" "$VL_DEVICE_HOW" "$BACKEND" "$USE_MINDSPEED_BRIDGE"
  layout+=" rollout TP=$ROLLOUT_TP"
  ((ROLLOUT_DP == 1)) || layout+=" DP=$ROLLOUT_DP"
  ((ROLLOUT_EP == 1)) || layout+=" EP=$ROLLOUT_EP"
  [[ $ASYNC_TRAINING == True ]] && layout+=" on ${ROLLOUT_NNODES}x$ROLLOUT_NDEVICES_PER_NODE rollout devices"
  printf '# layout: %sx%s devices %s\n' "$NNODES" "$NDEVICES_PER_NODE" "$layout"
  vl_print_verl_notes
  for word in "${VL_ENV[@]}"; do ours[${word%%=*}]=1; done
  while IFS= read -r name; do
    [[ -n ${ours[$name]:-} ]] && continue
    if vl_is_secret "$name"; then
      printf '# env from the caller: %s=<masked>\n' "$name"
    elif [[ $name =~ ^(ASCEND|HCCL|NCCL|CUDA|HF|HUGGING_FACE|TRANSFORMERS|WANDB|RAY|VLLM|TORCH|PYTORCH|VERL|TOKENIZERS|OMP|MASTER|GLOO)_ ]]; then
      vl_quote "${!name}"
      printf '# env from the caller: %s=%s\n' "$name" "$REPLY"
    fi
  done < <(compgen -e)
  if ((${#VL_PREPARE[@]})); then
    value=
    for word in "${VL_PREPARE[@]}"; do vl_quote "$word" && value+=" $REPLY"; done
    printf '%s\n' "${value# }"
  fi
  for word in "${VL_ENV[@]}"; do
    name=${word%%=*}
    if vl_is_secret "$name"; then value='<masked>'; else vl_quote "${word#*=}" && value=$REPLY; fi
    printf '%s=%s \\\n' "$name" "$value"
  done
  vl_quote "$PYTHON"
  printf '%s -m %s \\\n' "$REPLY" "$VL_MODULE"
  local n=${#VL_ARGS[@]} i
  for ((i = 0; i < n; i++)); do
    vl_quote "${VL_ARGS[i]}"
    if ((i < n - 1)); then printf '  %s \\\n' "$REPLY"; else printf '  %s\n' "$REPLY"; fi
  done
}

# ------------------------------------------------------------------------------ entry point

vl_main() {
  # Namerefs, ${x^^} and empty arrays under `set -u` need bash 4.4 (macOS ships 3.2).
  ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) ||
    vl_die "bash $BASH_VERSION is too old (bash >= 4.4 is needed; on macOS: brew install bash)"
  VL_ERRORS=()
  vl_resolve_device
  vl_resolve_backend
  vl_bool USE_MINDSPEED_BRIDGE || true
  vl_bool DRY_RUN || true
  vl_bool CHECK || true
  vl_verl_names "$@"
  ((${#VL_ERRORS[@]} == 0)) || vl_die "${VL_ERRORS[@]}"
  vl_warn_typos

  if declare -F device_layout >/dev/null; then device_layout "$VL_DEVICE"; fi
  vl_defaults
  vl_bool ALL_OFFLOAD || true
  vl_bool USE_KL_LOSS || true
  vl_bool RECOMPUTE || true
  vl_bool ASYNC_TRAINING || true
  vl_bool PARTIAL_ROLLOUT || true
  vl_validate
  ((${#VL_ERRORS[@]} == 0)) || vl_die "${VL_ERRORS[@]}"

  VL_MODULE=verl_lite.main
  [[ $CHECK == True ]] && VL_MODULE=verl_lite.check
  [[ -v VL_PREPARE ]] || VL_PREPARE=()
  VL_ARGS=()
  vl_args_common
  vl_args_device
  vl_args_backend
  vl_args_model
  [[ -v VL_SCRIPT_ARGS ]] || VL_SCRIPT_ARGS=()
  VL_ARGS+=("${VL_SCRIPT_ARGS[@]}" "${VL_USER_ARGS[@]}")
  vl_device_env

  if [[ $DRY_RUN == True ]]; then
    vl_print_dry_run
    return 0
  fi
  command -v "$PYTHON" >/dev/null 2>&1 ||
    vl_die "PYTHON=$PYTHON is not an executable on PATH (set PYTHON to a python3 that has verl_lite installed)"
  local word
  for word in "${VL_ENV[@]}"; do export "${word?}"; done
  if ((${#VL_PREPARE[@]})); then
    if [[ $CHECK == True ]]; then
      vl_log "CHECK=1: not preparing data (${VL_PREPARE[*]})"
    else
      vl_log "preparing data: ${VL_PREPARE[*]}"
      "${VL_PREPARE[@]}" || vl_die "preparing data failed (see the error above; command: ${VL_PREPARE[*]})"
    fi
  fi
  vl_log "$VL_MODULE on $VL_DEVICE ($VL_DEVICE_HOW), backend $BACKEND, ${NNODES}x$NDEVICES_PER_NODE devices"
  exec "$PYTHON" -m "$VL_MODULE" "${VL_ARGS[@]}"
}
