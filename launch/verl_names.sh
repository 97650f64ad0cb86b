# shellcheck shell=bash
# Summary: verl's script variable names and verl's per-device environment, for launch/lib.sh.
#
# Sourcing this file only defines functions. A model script that follows one of verl's scripts
# declares it (VL_VERL_TWIN=<path in verl's repository>); vl_verl_names then honours, under verl's
# name, every variable that script reads, as launch/verl_names.tsv says (generated names:
# launch/verl_twin_names.txt, from launch/gen_verl_names.py). vl_device_env builds the environment
# verl's scripts export, as defaults the caller's values override.

# True when NAME came from the caller's environment (a script's own `X=${X:-...}` is not exported).
vl_exported() {
  [[ -v $1 ]] || return 1
  local attributes=${!1@a} # bash 4.4's attribute letters, without a subshell
  [[ $attributes == *x* ]]
}

# vl_verl_knob NAME KNOB: the value of verl's NAME becomes the knob's; both set differently is an error.
vl_verl_knob() {
  local name=$1 knob=$2 value=${!1} by=${VL_VERL_SET[$2]:-}
  if [[ -n $by && ${!by} != "$value" ]]; then
    VL_ERRORS+=("$name=$value and $by=${!by} are both verl's names of $knob, set to different values (set one of them)")
  elif vl_exported "$knob" && [[ ${!knob} != "$value" ]]; then
    VL_ERRORS+=("$name=$value (verl's name) and $knob=${!knob} are both set, to different values (set one of them: verl_lite reads $name as $knob)")
  else
    printf -v "$knob" '%s' "$value"
    VL_VERL_SET[$knob]=$name
    VL_VERL_FROM+=("$knob=$value from verl's $name")
  fi
}

# The async twin's NGPUS_PER_NODE counts every device of a node: 12 roll out, the rest train
# (verl/experimental/fully_async_policy/shell/geo3k_qwen3vl_30b_megatron_6_2_npu_async.sh:50-52).
vl_verl_ngpus() {
  local total=$NGPUS_PER_NODE rollout=${ROLLOUT_NDEVICES_PER_NODE:-12}
  vl_int NGPUS_PER_NODE 1 || return 0
  [[ $rollout =~ ^[1-9][0-9]{0,8}$ ]] || return 0 # vl_validate names a bad ROLLOUT_NDEVICES_PER_NODE
  if ((total <= rollout)); then
    VL_ERRORS+=("NGPUS_PER_NODE=$total leaves no training device after the $rollout rollout devices of each node (set NGPUS_PER_NODE above $rollout, or lower ROLLOUT_NDEVICES_PER_NODE; verl's script keeps 12)")
  elif vl_exported NDEVICES_PER_NODE && ((NDEVICES_PER_NODE != total - rollout)); then
    VL_ERRORS+=("NGPUS_PER_NODE=$total (verl's name: $total - $rollout rollout devices = $((total - rollout)) training devices) and NDEVICES_PER_NODE=$NDEVICES_PER_NODE are both set, to different values (set one of them)")
  else
    NDEVICES_PER_NODE=$((total - rollout))
    VL_VERL_FROM+=("NDEVICES_PER_NODE=$NDEVICES_PER_NODE from verl's NGPUS_PER_NODE=$total - $rollout rollout devices")
  fi
}

# The async twin's first argument is the rollout engine: ENGINE=${1:-vllm} (that script :2).
vl_verl_engine() {
  local engine=${VL_USER_ARGS[0]:-}
  [[ -n $engine && $engine != *=* && $engine != -* ]] || return 0 # an override or an option: no engine
  case $engine in
    vllm)
      if vl_exported ROLLOUT_NAME && [[ $ROLLOUT_NAME != vllm ]]; then
        VL_ERRORS+=("the first argument vllm (verl's ENGINE) and ROLLOUT_NAME=$ROLLOUT_NAME are both set, to different values (set one of them)")
        return 0
      fi
      ROLLOUT_NAME=vllm
      VL_VERL_FROM+=("ROLLOUT_NAME=vllm from verl's ENGINE (the first argument)")
      VL_USER_ARGS=("${VL_USER_ARGS[@]:1}")
      ;;
    sglang) VL_ERRORS+=("the first argument sglang (verl's ENGINE) asks for an SGLang rollout, which verl_lite does not have (pass vllm or no engine: docs/rollout.md)") ;;
    *) VL_ERRORS+=("the first argument '$engine' is neither a key=value override nor verl's ENGINE (allowed: vllm, or key=value overrides)") ;;
  esac
}

# Every name the script's verl twin reads, and on every script the verl names of a knob, as
# launch/verl_names.tsv says. Sets VL_USER_ARGS (the arguments less a consumed positional),
# VL_VERL_READ (names honoured here, for the typo warning) and VL_VERL_FROM (what each verl name
# set, for the dry run); errors go to VL_ERRORS.
vl_verl_names() {
  local name twins how knob id=${BASH_SOURCE[-1]##*/}
  id=${id%.sh}
  VL_USER_ARGS=("$@") VL_VERL_READ=() VL_VERL_FROM=()
  declare -gA VL_VERL_SET=()
  while IFS=$'\t' read -r name twins how knob _; do
    [[ $name == '#'* ]] && continue
    # a knob's verl name (train_files, GEN_TP, ...) is honoured on every script; the others only where
    # the script's verl twin reads them
    if [[ $how == knob ]]; then
      VL_VERL_READ+=("$name")
      vl_exported "$name" && vl_verl_knob "$name" "$knob"
      continue
    fi
    [[ -n ${VL_VERL_TWIN:-} && ,$twins, == *",$id,"* ]] || continue
    VL_VERL_READ+=("$name")
    case $name in
      NGPUS_PER_NODE) vl_exported NGPUS_PER_NODE && vl_verl_ngpus ;;
      ENGINE) vl_verl_engine ;;
      VERL_USE_UV)
        # verl runs `uv run` only with DEVICE=gpu (verl's 35B script :252); elsewhere its python, as here
        if vl_exported VERL_USE_UV && [[ $VERL_USE_UV != 0 && $VL_DEVICE == cuda ]]; then
          VL_ERRORS+=("VERL_USE_UV=$VERL_USE_UV asks to run through \`uv run\`, which verl_lite does not do: it runs \$PYTHON (set PYTHON to the uv environment's python, e.g. PYTHON=.venv/bin/python, and VERL_USE_UV=0)")
        fi
        ;;
    esac
  done <"${BASH_SOURCE[0]%.sh}.tsv"
}

# verl's per-device environment as defaults; a value the caller exported wins. Fills VL_ENV
# (NAME=VALUE, exported for the run), VL_ENV_FROM (NAME:verl_lite or NAME:caller; the run gets it as
# VERL_LITE_LAUNCHER_ENV, so verl_lite/runtime_env.py forwards these names to every Ray worker) and
# VL_ENV_NOT (what verl's scripts set that verl_lite does not, and why). docs/ascend.md: each one.
vl_device_env() {
  VL_ENV=() VL_ENV_FROM=() VL_ENV_NOT=()
  local pair name defaults=()
  if [[ $VL_DEVICE == npu ]]; then
    # verl's Qwen3.5 scripts export it on every device; torch FSDP must not have it (runtime_env.py)
    if [[ $BACKEND == megatron ]]; then
      defaults+=(CUDA_DEVICE_MAX_CONNECTIONS=1)
    else
      VL_ENV_NOT+=("CUDA_DEVICE_MAX_CONNECTIONS (BACKEND=fsdp: one connection queue serialises FSDP's overlapped collectives)")
    fi
    # verl's run_qwen3_5_122b_a10b_megatron.sh:69-79 and run_qwen3_5_397b_megatron.sh:69-79
    defaults+=(CPU_AFFINITY_CONF=1 OMP_NUM_THREADS=1 PYTORCH_NPU_ALLOC_CONF=garbage_collection_threshold:0.8
      USE_OPTIMIZED_MODEL=0 HCCL_CONNECT_TIMEOUT=5400 HCCL_BUFFSIZE=300 TASK_QUEUE_ENABLE=1 COMBINED_ENABLE=1
      TOKENIZERS_PARALLELISM=false RAY_DEDUP_LOGS=0 VLLM_ASCEND_ENABLE_NZ=0)
  elif [[ $VL_DEVICE == cuda ]]; then
    VL_ENV_NOT+=("CUDA_DEVICE_MAX_CONNECTIONS (verl_lite gives the workers 1 with megatron on compute capability 8.x/9.x, none with fsdp)")
  fi
  # verl's scripts export it on every device (run_qwen3_5_35b_megatron.sh:59); it switches vLLM's
  # symmetric-memory all-reduce on CUDA, which a cpu rollout never runs
  if [[ $VL_DEVICE != cpu && $ROLLOUT_NAME == vllm ]]; then defaults+=(VLLM_ALLREDUCE_USE_SYMM_MEM=0); fi
  [[ $ROLLOUT_NAME == vllm ]] &&
    VL_ENV_NOT+=("VLLM_USE_V1 (V1 is vLLM's only engine; vllm 0.32 warns 'Unknown vLLM environment variable')")
  for pair in "${defaults[@]}"; do
    name=${pair%%=*}
    if [[ -n ${!name+x} ]]; then
      VL_ENV+=("$name=${!name}") VL_ENV_FROM+=("$name:caller")
    else
      VL_ENV+=("$pair") VL_ENV_FROM+=("$name:verl_lite")
    fi
  done
  ((${#VL_ENV_FROM[@]} == 0)) || VL_ENV+=("VERL_LITE_LAUNCHER_ENV=${VL_ENV_FROM[*]}")
}

# The dry run's comment lines: what verl's names set, where each variable of the environment came
# from, and what verl's scripts set that verl_lite does not.
vl_print_verl_notes() {
  local line ours=() caller=()
  for line in "${VL_VERL_FROM[@]}"; do printf '# %s\n' "$line"; done
  for line in "${VL_ENV_FROM[@]}"; do
    if [[ ${line#*:} == caller ]]; then caller+=("${line%%:*}"); else ours+=("${line%%:*}"); fi
  done
  ((${#ours[@]} == 0)) || printf "# env, verl_lite's defaults as verl's scripts export them (docs/ascend.md): %s\n" "${ours[*]}"
  ((${#caller[@]} == 0)) || printf '# env, from the caller instead of the default: %s\n' "${caller[*]}"
  for line in "${VL_ENV_NOT[@]}"; do printf '# env, not set: %s\n' "$line"; done
}
