# shellcheck shell=bash
# Hermetic helper for the launcher tests, loaded by every tests/bats/*.bats file.
#
# Each test gets a temp HOME and a bin dir of stubs first on PATH: python, python3 and ray log
# their argv (one file per call, one argument per line) and the environment they saw, then exit
# with $STUB_EXIT_<name> (default 0). Scripts run under `env -i`, so nothing from the caller's
# environment leaks in. Device tools (npu-smi, nvidia-smi) exist only when a test stubs them,
# and real ones on the system are hidden with path_without.

bats_require_minimum_version 1.5.0
bats_load_library bats-support
bats_load_library bats-assert

REPO=$(cd -- "$BATS_TEST_DIRNAME/../.." && pwd)
GOLDEN_DIR=$BATS_TEST_DIRNAME/golden

common_setup() {
  TEST_HOME=$BATS_TEST_TMPDIR/home
  STUB_BIN=$BATS_TEST_TMPDIR/bin
  STUB_LOG=$BATS_TEST_TMPDIR/log
  mkdir -p "$TEST_HOME" "$STUB_BIN" "$STUB_LOG"
  stub python
  stub python3
  stub ray
  HERMETIC_PATH=$STUB_BIN:$(path_without npu-smi nvidia-smi)
}

# stub NAME: an executable NAME in the stub dir that logs its argv and environment.
stub() {
  cat >"$STUB_BIN/$1" <<EOF
#!/usr/bin/env bash
n=1
while [[ -e "$STUB_LOG/$1.\$n" ]]; do n=\$((n + 1)); done
if ((\$#)); then printf '%s\n' "\$@" >"$STUB_LOG/$1.\$n"; else : >"$STUB_LOG/$1.\$n"; fi
env >"$STUB_LOG/$1.\$n.env"
exit "\${STUB_EXIT_$1:-0}"
EOF
  chmod +x "$STUB_BIN/$1"
}

# stub_calls NAME: how many times the stub NAME ran.
stub_calls() {
  local n=0
  while [[ -e $STUB_LOG/$1.$((n + 1)) ]]; do n=$((n + 1)); done
  echo "$n"
}

# stub_argv NAME [CALL]: fills the array ARGV with the arguments of that call (default 1).
stub_argv() {
  local file=$STUB_LOG/$1.${2:-1}
  [[ -e $file ]] || fail "stub $1 has no call ${2:-1}"
  mapfile -t ARGV <"$file"
}

# assert_stderr_has TEXT: $stderr (from run_script) contains TEXT.
assert_stderr_has() {
  [[ $stderr == *"$1"* ]] || fail "stderr lacks '$1'; stderr was:
$stderr"
}

# assert_argv_has WORD: ARGV (from stub_argv) holds WORD as one whole argument.
assert_argv_has() {
  local word
  for word in "${ARGV[@]}"; do [[ $word == "$1" ]] && return 0; done
  fail "argument '$1' not in: ${ARGV[*]}"
}

# stub_env NAME [CALL] VAR: the value of VAR in the environment that call saw.
stub_env() {
  local line
  line=$(grep -m1 "^$3=" "$STUB_LOG/$1.$2.env") || return 1
  printf '%s\n' "${line#*=}"
}

# path_without TOOL...: /usr/local/bin:/usr/bin:/bin with every TOOL hidden; a directory that
# holds one is replaced by a copy made of symlinks to everything else in it.
path_without() {
  local dir tool hit out=() shadow
  for dir in /usr/local/bin /usr/bin /bin; do
    [[ -d $dir ]] || continue
    hit=0
    for tool in "$@"; do [[ -e $dir/$tool ]] && hit=1; done
    if ((hit)); then
      shadow=$BATS_TEST_TMPDIR/shadow${dir//\//_}
      mkdir -p "$shadow"
      ln -s "$dir"/* "$shadow"/
      for tool in "$@"; do rm -f "$shadow/$tool"; done
      dir=$shadow
    fi
    out+=("$dir")
  done
  local IFS=:
  echo "${out[*]}"
}

# run_script [-N] [VAR=value...] COMMAND...: bats `run` (stderr apart) under a clean
# environment; -N states an expected exit status N the way `run -N` does.
run_script() {
  local expect=()
  [[ ${1:-} =~ ^-[0-9]+$ ]] && expect=("$1") && shift
  run "${expect[@]}" --separate-stderr env -i HOME="$TEST_HOME" PATH="$HERMETIC_PATH" LANG=C.UTF-8 \
    STUB_LOG="$STUB_LOG" "$@"
}

# Paths that change from run to run, replaced by placeholders in golden files.
normalize() {
  local text=$1
  text=${text//"$BATS_TEST_TMPDIR"/<TMP>}
  text=${text//"$REPO"/<REPO>}
  printf '%s\n' "$text"
}

# assert_golden NAME: $output (normalized) equals tests/bats/golden/NAME.txt;
# UPDATE_GOLDEN=1 rewrites the file instead (review the diff before committing it).
assert_golden() {
  local file=$GOLDEN_DIR/$1.txt
  if [[ ${UPDATE_GOLDEN:-0} == 1 ]]; then
    mkdir -p "$GOLDEN_DIR"
    # shellcheck disable=SC2154  # $output is set by bats' run
    normalize "$output" >"$file"
    return 0
  fi
  [[ -e $file ]] || fail "missing golden file $file (create it with UPDATE_GOLDEN=1)"
  local diff_out
  if ! diff_out=$(diff -u "$file" <(normalize "$output")); then
    fail "dry run differs from $file (UPDATE_GOLDEN=1 rewrites it on purpose):
$diff_out"
  fi
}

# Script paths, short; read by the .bats files.
# shellcheck disable=SC2034  # used by the test files that load this helper
{
  S35=$REPO/examples/grpo/run_qwen3_5_35b.sh
  S122=$REPO/examples/grpo/run_qwen3_5_122b_a10b.sh
  S397=$REPO/examples/grpo/run_qwen3_5_397b.sh
  STINY=$REPO/examples/grpo/run_tiny.sh
  SASYNC=$REPO/examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh
  SRAY=$REPO/launch/ray_cluster.sh
}
