"""bench/device/mindspeed_gdn_check.py, the Ascend node's check of Qwen3.5's GDN layers, run on CPU through
the doubles (`--cpu-double`), so that the script a lent NPU will run has run its own code paths here."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.megatron
SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "device" / "mindspeed_gdn_check.py"


def _run(*args):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)
    plans = {m.group(1): m.group(2) for m in re.finditer(r"^\[(\w+)\] (.*)$", done.stdout, re.M)}
    return done, plans


def test_core_r0_16_0_builds_each_plan_with_the_stacks_layer_and_kernel():
    done, plans = _run("--cpu-double", "core_r0.16.0")
    assert done.returncode == 0 and "SUMMARY OK" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "GatedDeltaLayer'], kernel fla, packs True" in plans["default"]
    assert "['mindspeed.core.ssm.gated_delta_net:GatedDeltaNet'], kernel mindspeed, packs False" in plans["naive_l2norm"]
    assert "GatedDeltaLayer'], kernel ascend, packs True" in plans["ascend_gdn"]
    diffs = [float(x) for x in re.findall(r"(?:padded|packed) ([0-9.e+-]+)", done.stdout)]
    assert diffs and max(diffs) < 1e-3  # bf16 kernel inputs on the own layer; fp32 through MindSpeed's class


def test_core_r0_18_0_refuses_the_own_layers_and_builds_through_megatron_bridge():
    done, plans = _run("--cpu-double", "core_r0.18.0", "--plans", "default")
    assert done.returncode == 2 and "refused on stack core_r0.18.0" in plans["default"], done.stdout
    assert "built by Megatron-Bridge + MindSpeed-Bridge" in plans["default"]
    done, plans = _run("--cpu-double", "core_r0.18.0", "--bridge-double", "--plans", "naive_l2norm,ascend_gdn")
    assert done.returncode == 0 and "SUMMARY OK" in done.stdout, done.stdout + done.stderr[-3000:]
    for plan in ("naive_l2norm", "ascend_gdn"):
        assert "bridge MegatronBridgeBuild, GDN layers ['mindspeed.core.ssm.gated_delta_net:GatedDeltaNet']" in plans[plan]


def test_an_unknown_plan_is_refused_naming_the_plans():
    done, _ = _run("--plans", "fast")
    assert done.returncode == 1
    assert "unknown plan 'fast' (allowed: default, naive_l2norm, ascend_gdn)" in done.stderr
