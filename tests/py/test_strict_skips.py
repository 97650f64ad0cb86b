"""VERL_LITE_STRICT_SKIPS=1 (tests/run.sh sets it): a skip fails the run unless its test is marked
gpu, no_wheel or verl_source; in one process and under the pytest-xdist workers tests/run.sh starts
(there the controller reads the reports but never collects, so the allowance travels on the report)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SUITE = '''
import pytest

@pytest.mark.gpu
def test_allowed():
    pytest.skip("no CUDA device")

def test_plain():
    assert True
'''

MISSING = '''
import pytest

def test_needs_a_package():
    pytest.skip("somepackage is not installed")
'''


def _run(tmp_path: Path, files: dict, workers: int) -> subprocess.CompletedProcess:
    root = tmp_path / f"suite_{workers}_{len(files)}"
    root.mkdir()
    shutil.copy(HERE / "conftest.py", root / "conftest.py")
    for name, text in files.items():
        (root / name).write_text(text)
    env = dict(os.environ, VERL_LITE_STRICT_SKIPS="1")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", str(root)],
                          capture_output=True, text=True, env=env, cwd=root, timeout=120)


@pytest.mark.parametrize("workers", [0, 2], ids=["one_process", "two_xdist_workers"])
def test_a_marked_skip_passes_and_an_unmarked_one_fails_the_run(tmp_path, workers):
    ok = _run(tmp_path, {"test_a.py": SUITE}, workers)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 passed, 1 skipped" in ok.stdout and "skips that fail the run" not in ok.stdout

    bad = _run(tmp_path, {"test_a.py": SUITE, "test_b.py": MISSING}, workers)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    section = bad.stdout.split("skips that fail the run (VERL_LITE_STRICT_SKIPS=1)", 1)[1]
    assert "test_b.py::test_needs_a_package: Skipped: somepackage is not installed" in section
    assert "test_allowed" not in section
    assert "1 test(s) skipped for a missing dependency" in section
