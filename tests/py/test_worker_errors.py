"""An expected refusal raised inside a Ray worker reaches the user as one line, with no traceback on
the console; the traceback stays in last_error.txt.

One real run (~20 s): the tiny Qwen3.5 on the Megatron backend with a config.json whose layer_types
the preflight accepts but the Megatron engine's Qwen3.5 bridge refuses (UnsupportedModelError in
the worker's __init__, which Ray would otherwise print as "Exception raised in creation task" with
the traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_refusal_in_a_worker_is_one_line_and_the_traceback_goes_to_last_error(tmp_path):
    pytest.importorskip("megatron.core")
    model = tmp_path / "model"
    shutil.copytree(REPO / "verl_lite" / "assets" / "tiny-qwen3_5", model)
    config = json.loads((model / "config.json").read_text())
    config["layer_types"] = ["linear_attention", "sliding_attention"]
    (model / "config.json").write_text(json.dumps(config))
    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, BACKEND="megatron", HF_MODEL_PATH=str(model), TOTAL_STEPS="1", RAY_AUTH_MODE="disabled",
               RAY_TMPDIR=tempfile.mkdtemp(prefix="rt.", dir="/tmp"), PYTHON=sys.executable)
    proc = subprocess.run(["bash", "examples/grpo/run_tiny.sh", f"trainer.default_local_dir={ckpt}"],
                          cwd=str(REPO), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    console = proc.stdout + proc.stderr
    assert "Traceback" not in console and "creation task" not in console, console[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("verl_lite.main:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    (line,) = lines
    assert "actor_rollout_ref rank 0 failed in __init__: UnsupportedModelError:" in line
    assert "sliding_attention" in line and f"(traceback: {ckpt}/last_error.txt)" in line
    saved = (ckpt / "last_error.txt").read_text()
    assert "Traceback (most recent call last)" in saved and "UnsupportedModelError" in saved
