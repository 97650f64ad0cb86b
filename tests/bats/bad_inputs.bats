#!/usr/bin/env bats
# The launcher's part of the bad-input corpus: tests/py/bad_inputs/env_cases.tsv, one env var case
# a line (script, assignments, the exact stderr). Each must exit 1 with that one line on stderr,
# nothing on stdout, no traceback, and start nothing. The Python-side corpus is
# tests/py/test_bad_inputs.py.

load test_helper

setup() { common_setup; }

TABLE=$BATS_TEST_DIRNAME/../py/bad_inputs/env_cases.tsv

script_path() {
  case $1 in
    tiny) echo "$STINY" ;;
    35b) echo "$S35" ;;
    122b) echo "$S122" ;;
    397b) echo "$S397" ;;
    async) echo "$SASYNC" ;;
    *) fail "env_cases.tsv: unknown script '$1' (use tiny, 35b, 122b, 397b or async)" ;;
  esac
}

@test "every env var case in the table is refused with its one-line error and starts nothing" {
  local script assignments expected failures=() n=0 calls
  local -a vars
  while IFS=$'\t' read -r script assignments expected; do
    [[ -z $script || $script == '#'* ]] && continue
    n=$((n + 1))
    read -r -a vars <<<"$assignments"
    rm -f "$STUB_LOG"/*
    run_script "${vars[@]}" bash "$(script_path "$script")"
    calls="$(stub_calls python3)$(stub_calls python)$(stub_calls ray)"
    # shellcheck disable=SC2154  # $status, $output and $stderr are set by bats' run
    if [[ $status != 1 || -n $output || $stderr != "$expected" || $calls != 000 ]]; then
      failures+=("$script $assignments: exit $status, stdout '$output', calls $calls, stderr:
  $stderr
expected:
  $expected")
    fi
  done <"$TABLE"
  ((n >= 20)) || fail "env_cases.tsv has $n cases, expected at least 20"
  ((${#failures[@]} == 0)) || fail "$(printf '%s\n\n' "${failures[@]}")"
}

@test "a missing PYTHON is refused before the data step even when the data is missing" {
  run_script DEVICE=cpu PYTHON=/nonexistent/python3 DATA_DIR="$BATS_TEST_TMPDIR/no_data" bash "$STINY"
  assert_failure 1
  assert_equal "$stderr" "verl_lite: PYTHON=/nonexistent/python3 is not an executable on PATH (set PYTHON to a python3 that has verl_lite installed)"
  [[ ! -e $BATS_TEST_TMPDIR/no_data ]] || fail "the data step ran"
}

@test "the dry run still prints the command when PYTHON is not installed here" {
  run_script DRY_RUN=1 DEVICE=cpu PYTHON=/opt/cluster/bin/python3 bash "$STINY"
  assert_success
  assert_line "/opt/cluster/bin/python3 -m verl_lite.main \\"
}
