#!/usr/bin/env bats
# .ci/run: the README's test command, read from the README, run in a fresh virtual environment.

load test_helper

setup() { common_setup; }

# ci_copy README_TEXT: a copy of .ci/run under $CI_DIR/.ci beside a README.md holding README_TEXT.
ci_copy() {
  CI_DIR=$BATS_TEST_TMPDIR/project
  mkdir -p "$CI_DIR/.ci"
  cp "$REPO/.ci/run" "$CI_DIR/.ci/run"
  printf '%s\n' "$1" >"$CI_DIR/README.md"
}

# readme_with COMMAND-LINE...: a README whose test-command block holds those lines.
readme_with() {
  printf '# p\n<!-- test-command -->\n```bash\n'
  printf '%s\n' "$@"
  printf '```\n<!-- /test-command -->\nmore text\n'
}

@test "the command .ci/run runs is the one in the README's first lines, between the test-command markers" {
  run_script bash "$REPO/.ci/run" --print-command
  assert_success
  local head
  head=$(head -n 12 "$REPO/README.md")
  [[ $head == *"<!-- test-command"*'```bash'$'\n'"$output "*'<!-- /test-command -->'* ]] ||
    fail "'$output' is not the line between the markers in README.md's first 12 lines"
  assert_output --partial "-e '.[test]'"
  assert_output --partial "bash tests/run.sh"
}

@test ".ci/run holds no copy of the command: it follows whatever the README says" {
  run grep -F "tests/run.sh" "$REPO/.ci/run"
  assert_failure
  ci_copy "$(readme_with "make check && echo done   # a comment")"
  run_script bash "$CI_DIR/.ci/run" --print-command
  assert_success
  assert_output "make check && echo done"
}

@test "a README without the markers, or with two command lines, is refused with what to fix" {
  ci_copy "# p"
  run_script -1 bash "$CI_DIR/.ci/run" --print-command
  assert_equal "$stderr" "verl_lite: README.md has no test command between <!-- test-command --> and <!-- /test-command --> (put the command in a code block there)"
  ci_copy "$(readme_with "a" "b")"
  run_script -1 bash "$CI_DIR/.ci/run"
  assert_equal "$stderr" "verl_lite: README.md has more than one line between the test-command markers (keep one command line)"
  ci_copy "$(readme_with "a")"
  run_script -1 bash "$CI_DIR/.ci/run" --dry
  assert_equal "$stderr" "verl_lite: unknown argument '--dry' (use --print-command, or no argument)"
}

@test ".ci/run runs each step in a fresh venv where nothing installed outside it helps, and times each phase" {
  # The real python3 (the stubs would not make a venv); the step fails if verl_lite, installed
  # where this suite runs, were importable in the fresh venv.
  ci_copy "$(readme_with "python -c 'import importlib.util as u, sys; print(\"venv\", sys.prefix != sys.base_prefix, u.find_spec(\"verl_lite\") is None, u.find_spec(\"ray\") is None)' && echo second step")"
  run --separate-stderr env -i HOME="$TEST_HOME" PATH="$PATH" TMPDIR="$BATS_TEST_TMPDIR" bash "$CI_DIR/.ci/run"
  assert_success
  assert_output "venv True True True
second step"
  assert_stderr_has "ci: fresh venv ("
  assert_stderr_has "ci: echo second step took "
  assert_stderr_has "ci: whole CI run took "
  [[ -z $(find "$BATS_TEST_TMPDIR" -maxdepth 1 -name 'verl_lite_ci.*') ]] || fail "the temporary venv was left behind"
}

@test "a failing step stops .ci/run with its status before the next step runs" {
  ci_copy "$(readme_with "bash -c 'exit 3' && echo never")"
  run --separate-stderr env -i HOME="$TEST_HOME" PATH="$PATH" TMPDIR="$BATS_TEST_TMPDIR" bash "$CI_DIR/.ci/run"
  assert_failure 3
  refute_output --partial "never"
  assert_stderr_has "verl_lite: 'bash -c 'exit 3'' exited 3"
}

@test "tests/run.sh refuses a TEST_WORKERS that is not a number before any test runs" {
  run_script -1 TEST_WORKERS=two TMPDIR="$BATS_TEST_TMPDIR" bash "$REPO/tests/run.sh"
  assert_equal "$stderr" "verl_lite: TEST_WORKERS=two is not a number of workers (0, 1, 2, ...)"
  assert_equal "$output" ""
  [[ -z $(find "$BATS_TEST_TMPDIR" -maxdepth 1 -name 'verl_lite_ray.*') ]] || fail "the Ray temp dir was left behind"
}
