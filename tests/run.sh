#!/usr/bin/env bash
# Summary: run every test: pytest (tests/py) then bats (tests/bats). Exits 1 if either failed.
#
# Usage:
#   bash tests/run.sh                 # everything (what CI runs)
#   PYTEST_ARGS="-k trainer" bash tests/run.sh
#   TEST_WORKERS=0 bash tests/run.sh  # pytest in one process (default: 2 pytest-xdist workers)
#
# Ray in tests runs locally with auth off and its own temp dir, so parallel or leftover
# clusters on the machine are never joined.
set -euo pipefail

repo=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

ray_tmp=$(mktemp -d "${TMPDIR:-/tmp}/verl_lite_ray.XXXXXX")
trap 'rm -rf "$ray_tmp"' EXIT
export RAY_AUTH_MODE=disabled RAY_TMPDIR=$ray_tmp
unset RAY_ADDRESS  # a cluster named in the caller's environment is never joined by tests
# Every dependency of the suite is installed by the README's test command: a test that skips for a
# missing one fails the run (tests marked gpu, no_wheel, verl_source or ascend_source may skip; tests/py/conftest.py).
export VERL_LITE_STRICT_SKIPS=1

status=0
start=$SECONDS
# -rs: every skip prints its reason. -n: pytest-xdist workers (TEST_WORKERS, 2 by default: one a core
# of CI's machine; 0 runs in this process), each test file whole on one worker (tests/py/conftest.py).
workers=${TEST_WORKERS:-2}
[[ $workers =~ ^[0-9]+$ ]] || { printf 'verl_lite: TEST_WORKERS=%s is not a number of workers (0, 1, 2, ...)\n' "$workers" >&2; exit 1; }
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of pytest options, split on purpose
python3 -m pytest -q -rs -n "$workers" ${PYTEST_ARGS:-} tests/py || status=$?
# 5 = pytest collected no test: that is a failure of the suite, not a pass.
if ((status != 0)); then
  printf 'verl_lite: pytest exited %d\n' "$status" >&2
fi
printf 'tests: pytest took %d s\n' "$((SECONDS - start))" >&2
bats_status=0
start=$SECONDS
bash tests/bats/run.sh || bats_status=$?
printf 'tests: bats took %d s\n' "$((SECONDS - start))" >&2
if ((status != 0 || bats_status != 0)); then
  exit 1
fi
