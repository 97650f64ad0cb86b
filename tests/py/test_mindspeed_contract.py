"""The contract run against the REAL MindSpeed source (tests/py/mindspeed_contract/run_contract.py),
where a clone of it is at hand: VERL_LITE_MINDSPEED_SRC (a checkout at the stack's pinned commit, or a
clone holding it) or VERL_LITE_ASCEND_SOURCES/Ascend+MindSpeed. CI has neither (no pip install provides
them): the double it checks runs in CI instead, and the results of the last run are in docs/ascend.md.

core_r0.16.0 runs on this project's Python: every contract item of the real source equals the double's,
and the engine's forward, backward and optimizer steps run through MindSpeed's own code. core_r0.18.0
needs megatron-core 0.18 (Python >= 3.12): run the script with such an interpreter (docs/ascend.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ascend_source, pytest.mark.megatron]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "py" / "mindspeed_contract" / "run_contract.py"


def _mindspeed_source():
    explicit = os.environ.get("VERL_LITE_MINDSPEED_SRC")
    if explicit:
        return explicit
    root = os.environ.get("VERL_LITE_ASCEND_SOURCES")
    for candidate in ([os.path.join(root, "Ascend+MindSpeed", "repo"), os.path.join(root, "Ascend+MindSpeed")] if root else []):
        if os.path.isdir(candidate):
            return candidate
    return None


def test_the_real_mindspeed_core_r0_16_0_agrees_with_the_double_and_runs_the_engine(tmp_path):
    source = _mindspeed_source()
    if not source:
        pytest.skip("no MindSpeed clone: set VERL_LITE_MINDSPEED_SRC or VERL_LITE_ASCEND_SOURCES")
    for module in ("scipy", "einops"):  # MindSpeed's own requirements
        pytest.importorskip(module, reason=f"MindSpeed's source imports {module}: pip install scipy einops")
    out = tmp_path / "contract.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--stack", "core_r0.16.0", "--mindspeed", source,
                           "--json", str(out)], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert not [row for row in result["rows"] if " DIFFERS " in row], "\n".join(result["rows"])
    for name in ("engine_dense", "engine_moe"):
        real = result["real"][name]
        assert "failed" not in real, real
        assert real["layer_classes"] == ["mindspeed.core.ssm.gated_delta_net:GatedDeltaNet"]
        assert real["log_prob_diff_vs_transformers"] < 1e-5 and real["log_prob_diff_real_vs_double"] < 1e-5
        assert real["losses"][-1] < real["losses"][0]
    default = result["real"]["engine_default"]
    assert default["megatron_binds"]["chunk_gated_delta_rule"] == (
        "mindspeed.core.ssm.ops.flash_gated_delta_rule:flash_gated_delta_rule")
    assert any("mindspeed/ops/triton/" in f for f in default["forward_stopped"]["mindspeed_frames"]), default
