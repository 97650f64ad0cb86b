"""The tiny vision-language job as a user runs it: fully-async GRPO of the shipped tiny Qwen3-VL-MoE on
the synthetic shapes task, Megatron engine in the training pool and the hf rollout in its own pool
(examples/vl/run_tiny_vl_cpu.sh with BACKEND=megatron ASYNC=1).

The Megatron engine refuses a micro-batch whose prompts hold image tokens without their pixel inputs
(tests/py/test_qwen3_vl_megatron.py), so a run that trains its steps carried the images from the
parquet rows through the rollout pool to the training pool's loss.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.megatron
REPO_ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def test_fully_async_vl_grpo_on_the_megatron_engine_trains_its_steps_from_the_images(tmp_path):
    env = dict(os.environ, BACKEND="megatron", ASYNC="1", TOTAL_STEPS=str(STEPS), DATA_DIR=str(tmp_path / "data"))
    env.pop("DRY_RUN", None)
    env.pop("CHECK", None)
    out = tmp_path / "ckpt"
    proc = subprocess.run(["bash", str(REPO_ROOT / "examples/vl/run_tiny_vl_cpu.sh"),
                           f"trainer.default_local_dir={out}", "trainer.save_freq=-1", "trainer.test_freq=-1"],
                          env=env, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "training pool 1 x 1 (megatron)" in text, text[-4000:]
    assert (tmp_path / "data" / "train.parquet").exists()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows if "critic/score/mean" in r]
    assert steps == list(range(1, STEPS + 1)), steps
    # verl's fully-async metrics come with every step
    assert all("fully_async/count/current_param_version" in r for r in rows if "critic/score/mean" in r)
