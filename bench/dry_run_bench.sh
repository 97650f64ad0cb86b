#!/usr/bin/env bash
# Summary: wall time of each model script's dry run (median of RUNS runs, in ms; target < 50 ms).
#
# Usage:
#   bash bench/dry_run_bench.sh             # 21 runs per script and device
#   RUNS=51 bash bench/dry_run_bench.sh
#
# Each run is `env -i HOME PATH DRY_RUN=1 DEVICE=... bash SCRIPT >/dev/null`, timed with bash's
# EPOCHREALTIME around the whole process (bash start-up included). Exit status 1 if a median is
# over the target.
set -euo pipefail

REPO_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-21}
TARGET_MS=${TARGET_MS:-50}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || {
  printf "verl_lite: RUNS must be a positive integer, got '%s' (e.g. RUNS=21)\n" "$RUNS" >&2
  exit 1
}

# "script|env" cases; the env words are passed to env -i.
cases=(
  "examples/grpo/run_qwen3_5_35b.sh|DEVICE=cuda"
  "examples/grpo/run_qwen3_5_35b.sh|DEVICE=npu USE_MINDSPEED_BRIDGE=True"
  "examples/grpo/run_qwen3_5_122b_a10b.sh|DEVICE=cuda"
  "examples/grpo/run_qwen3_5_122b_a10b.sh|DEVICE=npu USE_MINDSPEED_BRIDGE=True"
  "examples/grpo/run_qwen3_5_397b.sh|DEVICE=cuda"
  "examples/grpo/run_qwen3_5_397b.sh|DEVICE=npu USE_MINDSPEED_BRIDGE=True"
  "examples/grpo/run_tiny.sh|DEVICE=auto"
  "examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh|DEVICE=npu"
)

# Microseconds since the epoch, from bash's EPOCHREALTIME (no subprocess).
now_us() {
  local t=${EPOCHREALTIME/[.,]/}
  REPLY=$((10#$t))
}

over=0
printf '%-55s %-40s %9s %9s\n' script env median_ms max_ms
for case in "${cases[@]}"; do
  script=${case%%|*}
  read -r -a vars <<<"${case#*|}"
  times=()
  for ((i = 0; i < RUNS; i++)); do
    now_us && start=$REPLY
    env -i HOME="$HOME" PATH="$PATH" DRY_RUN=1 "${vars[@]}" bash "$REPO_ROOT/$script" >/dev/null
    now_us && times+=($((REPLY - start)))
  done
  mapfile -t sorted < <(printf '%s\n' "${times[@]}" | sort -n)
  median=${sorted[RUNS / 2]} max=${sorted[RUNS - 1]}
  printf '%-55s %-40s %6d.%01d %6d.%01d\n' "$script" "${vars[*]}" \
    $((median / 1000)) $((median % 1000 / 100)) $((max / 1000)) $((max % 1000 / 100))
  ((median < TARGET_MS * 1000)) || over=1
done
((over == 0)) || {
  printf 'verl_lite: a median dry run is over %s ms (see the table above)\n' "$TARGET_MS" >&2
  exit 1
}
