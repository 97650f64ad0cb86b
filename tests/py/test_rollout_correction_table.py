"""verl_lite's rollout correction (verl_lite/trainer/algos/rollout_correction.py) equals verl's own
`compute_rollout_correction_and_rejection_mask` on the committed table
(tests/py/data/rollout_correction_cases.json, written by tools/gen_rollout_correction_cases.py):
the importance weights, the response mask after rejection, every metric under verl's name (the same
set of names), and a refusal wherever verl raises.

Tolerance: float32 throughout; |ours - verl| <= 1e-6 + 1e-6 * |verl| per element and per metric.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from verl_lite.decisions import rollout_correction as decided
from verl_lite.trainer.algos import rollout_correction
from verl_lite.trainer.algos.policy_losses import PolicyLossInput

TABLE = json.loads((Path(__file__).parent / "data" / "rollout_correction_cases.json").read_text())
ATOL = RTOL = 1e-6


def config(setting):
    base = {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
            "rollout_rs": None, "rollout_rs_threshold": None, "bypass_mode": False, "loss_type": "ppo_clip"}
    base.update(setting)
    return SimpleNamespace(**base)


def close(ours, theirs, what):
    ours, theirs = torch.as_tensor(ours, dtype=torch.float32), torch.as_tensor(theirs, dtype=torch.float32)
    assert ours.shape == theirs.shape, what
    worst = ((ours - theirs).abs() - RTOL * theirs.abs()).max().item()
    assert worst <= ATOL, f"{what}: differs from verl by {worst:.3g}\nours {ours}\nverl {theirs}"


def test_table_covers_every_setting_and_refusal():
    cases = TABLE["cases"]
    assert len(cases) >= 60
    assert sum("error" in c for c in cases) >= 4
    seen = {o for c in cases for o in (c["setting"].get("rollout_rs") or "").split(",") if o}
    assert set(decided.RS_OPTIONS) <= seen


@pytest.mark.parametrize("i", range(len(TABLE["cases"])))
def test_equals_verl(i):
    case = TABLE["cases"][i]
    inp = TABLE["inputs"][case["inputs"]]
    old, rollout, mask = (torch.tensor(inp[k], dtype=torch.float32)
                          for k in ("old_log_prob", "rollout_log_prob", "response_mask"))
    rc = config(case["setting"])
    if "error" in case:
        with pytest.raises((ValueError, ZeroDivisionError)):
            decided.validate(rc)
            rollout_correction.compute(rc, old, rollout, mask)
        return
    decided.validate(rc)
    weights, new_mask, metrics = rollout_correction.compute(rc, old, rollout, mask)
    tag = f"{case['inputs']} {case['setting']}"
    assert (weights is None) == (case["weights"] is None), tag
    if weights is not None:
        close(weights, case["weights"], f"weights {tag}")
    close(new_mask, case["mask"], f"mask {tag}")
    assert sorted(metrics) == sorted(case["metrics"]), f"metric names {tag}"
    for k, v in case["metrics"].items():
        if math.isinf(v) or math.isnan(v):
            assert metrics[k] == v or (math.isnan(v) and math.isnan(metrics[k])), f"{k} {tag}"
        else:
            close(metrics[k], v, f"{k} {tag}")


def test_table_has_bypass_cases_of_both_loss_types():
    assert {c["bypass"]["loss_type"] for c in TABLE["bypass"]} == {"ppo_clip", "reinforce"}


@pytest.mark.parametrize("i", range(len(TABLE["bypass"])))
def test_bypass_loss_equals_verl(i):
    case = TABLE["bypass"][i]
    inp = TABLE["inputs"][case["inputs"]]
    current, rollout, mask = (torch.tensor(inp[k], dtype=torch.float32)
                              for k in ("old_log_prob", "rollout_log_prob", "response_mask"))
    rc = config(dict(case["bypass"], bypass_mode=True))
    log_prob = current.clone().requires_grad_(True)
    pg, metrics = rollout_correction.bypass_policy_loss(
        rc, PolicyLossInput(rollout, log_prob, torch.tensor(case["advantages"]), mask, 0.2, 0.28, 3.0,
                            case["loss_agg_mode"]))
    pg["pg_loss"].backward()
    tag = f"{case['bypass']} {case['loss_agg_mode']}"
    close(pg["pg_loss"].detach(), case["pg_loss"], f"pg_loss {tag}")
    close(log_prob.grad, case["grad"], f"grad {tag}")
    ours = {f"actor/{k}": v.item() for k, v in pg.items() if k != "pg_loss"}
    ours.update(metrics)
    assert sorted(ours) == sorted(case["metrics"]), f"metric names {tag}"
    for k, v in case["metrics"].items():
        close(ours[k], v, f"{k} {tag}")
