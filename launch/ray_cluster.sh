#!/usr/bin/env bash
# Summary: start a Ray head, join a worker to it, show the cluster or stop Ray on this node.
#
# Usage:
#   launch/ray_cluster.sh head                                  # on the head node
#   HEAD_ADDRESS=10.0.0.1 launch/ray_cluster.sh worker          # on every other node
#   launch/ray_cluster.sh status                                # anywhere in the cluster
#   launch/ray_cluster.sh stop                                  # on each node, when done
#   DRY_RUN=1 DEVICE=npu NDEVICES_PER_NODE=16 launch/ray_cluster.sh head   # print, start nothing
#
# Knobs:
#   RAY_PORT           GCS port of the head (6379)
#   HEAD_ADDRESS       head node address; required by worker, optional for status
#   NODE_IP            this node's address (--node-ip-address), when Ray picks the wrong NIC
#   DEVICE             auto|cuda|gpu|npu|cpu (auto); with NDEVICES_PER_NODE set, npu declares
#                      {"NPU": N}, cuda --num-gpus=N and cpu --num-cpus=N (a CPU rank takes a
#                      CPU), otherwise Ray detects the devices
#   NDEVICES_PER_NODE  accelerators on this node (unset: let Ray detect)
#   RAY                the ray executable (ray)
# Extra arguments are passed to `ray start` / `ray status` / `ray stop` last. Several nodes on one
# host (tests, trying a multi-node layout): give each its own --temp-dir and the head free ports
# (docs/multinode.md).
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR/.. source=launch/lib.sh
source "$REPO_ROOT/launch/lib.sh"

usage() { sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

main() {
  local cmd=${1:-} port=${RAY_PORT:-6379} ray=${RAY:-ray}
  local -a argv
  case $cmd in
    -h | --help) usage && return 0 ;;
    '') usage >&2 && vl_die "missing command (allowed: head, worker, status, stop)" ;;
    head | worker | status | stop) shift ;;
    *) vl_die "unknown command '$cmd' (allowed: head, worker, status, stop)" ;;
  esac
  VL_ERRORS=()
  [[ $port =~ ^[1-9][0-9]{0,4}$ ]] && ((port <= 65535)) ||
    VL_ERRORS+=("RAY_PORT must be a port number, got '$port' (use 1 to 65535)")
  [[ -n ${NDEVICES_PER_NODE:-} ]] && { vl_int NDEVICES_PER_NODE 1 || true; }
  vl_bool DRY_RUN || true
  ((${#VL_ERRORS[@]} == 0)) || vl_die "${VL_ERRORS[@]}"

  case $cmd in
    head) argv=(start --head "--port=$port") ;;
    worker)
      [[ -n ${HEAD_ADDRESS:-} ]] || vl_die "worker needs HEAD_ADDRESS (set HEAD_ADDRESS=<ip of the head node>)"
      argv=(start "--address=$HEAD_ADDRESS:$port")
      ;;
    status)
      argv=(status)
      [[ -n ${HEAD_ADDRESS:-} ]] && argv+=("--address=$HEAD_ADDRESS:$port")
      ;;
    stop) argv=(stop) ;;
  esac
  if [[ $cmd == head || $cmd == worker ]]; then
    [[ -n ${NODE_IP:-} ]] && argv+=("--node-ip-address=$NODE_IP")
    if [[ -n ${NDEVICES_PER_NODE:-} ]]; then
      vl_resolve_device
      case $VL_DEVICE in
        npu) argv+=("--resources={\"NPU\": $NDEVICES_PER_NODE}") ;;
        cuda) argv+=("--num-gpus=$NDEVICES_PER_NODE") ;;
        cpu) argv+=("--num-cpus=$NDEVICES_PER_NODE" "--num-gpus=0") ;;
      esac
    fi
    argv+=(--disable-usage-stats)
  fi
  argv+=("$@")

  if [[ $DRY_RUN == True ]]; then
    local word line
    vl_quote "$ray" && line=$REPLY
    for word in "${argv[@]}"; do vl_quote "$word" && line+=" $REPLY"; done
    printf '%s\n' "$line"
    return 0
  fi
  command -v "$ray" >/dev/null 2>&1 || {
    printf 'verl_lite: %s not found on PATH (pip install ray, or set RAY to its path)\n' "$ray" >&2
    exit 127
  }
  vl_log "$ray ${argv[*]}"
  exec "$ray" "${argv[@]}"
}

main "$@"
