"""verl_lite's advantage estimators and policy losses equal verl's own on the committed table
(tests/py/data/core_algos_cases.json, written by tools/gen_core_algos_cases.py from verl's
core_algos.py at the pinned commit): outputs, metrics under verl's names, the gradient of each loss
with respect to log_prob, and the same refusals where verl raises.

Tolerance: float32 throughout; |ours - verl| <= 1e-6 + 1e-6 * |verl| per element.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from verl_lite.config.choices import (ADV_ESTIMATORS, POLICY_LOSS_MODES, REFUSED_ADV_ESTIMATORS,
                                      REFUSED_POLICY_LOSSES)
from verl_lite.trainer.algos import advantages, policy_losses, token_estimators

TABLE = json.loads((Path(__file__).parent / "data" / "core_algos_cases.json").read_text())
ATOL = RTOL = 1e-6


def close(ours, theirs, what: str) -> None:
    ours = torch.as_tensor(ours, dtype=torch.float32)
    theirs = torch.as_tensor(theirs, dtype=torch.float32)
    assert ours.shape == theirs.shape, f"{what}: shape {tuple(ours.shape)} != verl's {tuple(theirs.shape)}"
    worst = ((ours - theirs).abs() - RTOL * theirs.abs()).max().item() if ours.numel() else 0.0
    assert worst <= ATOL, f"{what}: differs from verl by {worst:.3g} (> {ATOL})\nours  {ours}\nverl  {theirs}"


def test_every_verl_name_is_implemented_or_refused_with_a_reason():
    for name in TABLE["verl_estimators"]:
        assert (name in ADV_ESTIMATORS) != (name in REFUSED_ADV_ESTIMATORS), name
    for name in TABLE["verl_policy_losses"]:
        assert (name in POLICY_LOSS_MODES) != (name in REFUSED_POLICY_LOSSES), name
    # and nothing is claimed that verl does not have
    assert set(ADV_ESTIMATORS) | set(REFUSED_ADV_ESTIMATORS) == set(TABLE["verl_estimators"])
    assert set(POLICY_LOSS_MODES) | set(REFUSED_POLICY_LOSSES) == set(TABLE["verl_policy_losses"])
    assert set(advantages.ADV_ESTIMATORS) == set(ADV_ESTIMATORS)
    assert tuple(policy_losses.POLICY_LOSSES) == POLICY_LOSS_MODES


def test_the_table_covers_every_implemented_name():
    assert set(TABLE["estimators"][0]["outputs"]) == set(ADV_ESTIMATORS)
    assert set(TABLE["losses"][0]["outputs"]) == set(POLICY_LOSS_MODES)


ESTIMATOR_CASES = [(case["case"], name) for case in TABLE["estimators"] for name in case["outputs"]]


@pytest.mark.parametrize("case,name", ESTIMATOR_CASES, ids=[f"{n}-{c}" for c, n in ESTIMATOR_CASES])
def test_each_advantage_estimator_equals_verls(case, name):
    entry = next(e for e in TABLE["estimators"] if e["case"] == case)
    x, want = entry["inputs"], entry["outputs"][name]
    algorithm = SimpleNamespace(adv_estimator=name, gamma=x["gamma"], lam=x["lam"],
                                norm_adv_by_std_in_grpo=x["norm_adv_by_std_in_grpo"],
                                gdpo_reward_keys=x["gdpo_reward_keys"], gdpo_reward_weights=x["gdpo_reward_weights"])
    weights = x["rollout_is_weights"]
    call = lambda: advantages.compute_advantage(  # noqa: E731
        algorithm, torch.tensor(x["rewards"]), torch.tensor(x["mask"]), x["index"], values=torch.tensor(x["values"]),
        reward_baselines=torch.tensor(x["reward_baselines"]) if name == "remax" else None,
        old_log_probs=torch.tensor(x["old_log_probs"]), sum_pi_squared=torch.tensor(x["sum_pi_squared"]),
        rollout_is_weights=None if weights is None else torch.tensor(weights),
        reward_components=x["reward_components"])
    if "error" in want:
        with pytest.raises(ValueError):
            call()
        return
    adv, ret = call()
    close(adv, want["advantages"], f"{name} advantages ({case})")
    close(ret, want["returns"], f"{name} returns ({case})")


LOSS_CASES = [(i, name) for i, entry in enumerate(TABLE["losses"]) for name in entry["outputs"]]


def _loss_id(i: int, name: str) -> str:
    e = TABLE["losses"][i]
    return f"{name}-{e['case']}-{e['settings']}-{e['loss_agg_mode']}"


@pytest.mark.parametrize("i,name", LOSS_CASES, ids=[_loss_id(i, n) for i, n in LOSS_CASES])
def test_each_policy_loss_its_metrics_and_gradient_equal_verls(i, name):
    entry = TABLE["losses"][i]
    x = TABLE["loss_inputs"][entry["case"]]
    s = TABLE["loss_settings"][entry["settings"]]
    want = entry["outputs"][name]
    log_prob = torch.tensor(x["new"], requires_grad=True)
    options = {k: s[k] for k in ("tau_pos", "tau_neg", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                                 "ppo_kl_coef", "dro_beta")}
    torch.manual_seed(want["seed"])  # clip_cov's draw, as the generator seeded verl's
    call = lambda: policy_losses.compute_policy_loss(  # noqa: E731
        name, policy_losses.PolicyLossInput(torch.tensor(x["old"]), log_prob, torch.tensor(x["adv"]),
                                            torch.tensor(x["mask"]), s["clip_ratio_low"], s["clip_ratio_high"],
                                            s["clip_ratio_c"], entry["loss_agg_mode"], options=options))
    if "error" in want:
        with pytest.raises(ValueError, match="dro_beta"):
            call()
        return
    out = call()
    out["pg_loss"].backward()
    what = _loss_id(i, name)
    close(out["pg_loss"].detach(), want["pg_loss"], f"{what} pg_loss")
    ours_metrics = {f"actor/{k}": v.item() for k, v in out.items() if k != "pg_loss"}
    assert set(ours_metrics) == set(want["metrics"]), what
    for key, value in want["metrics"].items():
        close(ours_metrics[key], value, f"{what} {key}")
    close(log_prob.grad, want["grad"], f"{what} d pg_loss / d log_prob")


def test_the_table_exercises_the_edges_it_claims():
    # a group of one, an empty response, tied scores, all-zero rewards, clip_cov drawing some tokens
    first = TABLE["estimators"][0]["inputs"]
    assert min(first["index"].count(u) for u in first["index"]) == 1
    assert any(sum(row) == 0 for row in TABLE["loss_inputs"]["seed0-seq-adv"]["mask"])
    cases = {e["case"] for e in TABLE["estimators"]}
    assert {"tied-scores", "all-zero-rewards", "pairs0"} <= cases
    assert sum("error" not in e["outputs"]["grpo_passk"] for e in TABLE["estimators"]) >= 3
    active = [e["outputs"]["clip_cov"]["metrics"]["actor/pg_clipfrac"] for e in TABLE["losses"]
              if e["settings"] == "active"]
    assert max(active) > 0 and not any(math.isnan(v) for v in active)


def test_the_new_estimators_inputs_vary_where_they_matter():
    # IS weights and gdpo weights both present and absent; tir differs from otb on the masks with holes
    cases = {e["case"]: e for e in TABLE["estimators"]}
    assert {e["inputs"]["rollout_is_weights"] is None for e in cases.values()} == {True, False}
    assert {e["inputs"]["gdpo_reward_weights"] is None for e in cases.values()} == {True, False}
    holes = cases["holes"]["outputs"]
    assert holes["tir_optimal_token_baseline"]["advantages"] != holes["optimal_token_baseline"]["advantages"]


def test_missing_inputs_say_what_is_missing():
    t = torch.zeros(2, 2)
    otb = SimpleNamespace(adv_estimator="optimal_token_baseline", gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True)
    with pytest.raises(ValueError, match="optimal_token_baseline needs sum_pi_squared.*calculate_sum_pi_squared=True"):
        advantages.compute_advantage(otb, t, t, ["a", "a"], old_log_probs=t)
    gdpo = SimpleNamespace(adv_estimator="gdpo", norm_adv_by_std_in_grpo=True, gdpo_reward_keys=["fmt", "acc"],
                           gdpo_reward_weights=None)
    with pytest.raises(ValueError, match=r"gdpo_reward_keys \['acc'\] are not among the reward's extra keys \(fmt\)"):
        advantages.compute_advantage(gdpo, t, torch.ones(2, 2), ["a", "a"], reward_components={"fmt": [1.0, 0.0]})
    gdpo.gdpo_reward_weights = [1.0]
    with pytest.raises(ValueError, match="1 weights for 2 gdpo_reward_keys"):
        advantages.compute_advantage(gdpo, t, torch.ones(2, 2), ["a", "a"],
                                     reward_components={"fmt": [1.0, 0.0], "acc": [0.0, 1.0]})


def test_refused_names_say_what_is_missing():
    t = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="bypass_mode.*not supported by verl_lite: .*rollout_correction"):
        policy_losses.compute_policy_loss("bypass_mode", policy_losses.PolicyLossInput(t, t, t, t))
    with pytest.raises(ValueError, match="'nope' is not supported: choose one of gae, grpo"):
        advantages.get_adv_estimator_fn("nope")


def test_a_users_estimator_registers_by_name_and_a_name_is_taken_once(monkeypatch):
    monkeypatch.setattr(advantages, "ADV_ESTIMATORS", dict(advantages.ADV_ESTIMATORS))

    @advantages.register_adv_est("mine")
    def mine(token_level_rewards, response_mask, **_):
        return token_level_rewards * 2, token_level_rewards

    algorithm = SimpleNamespace(adv_estimator="mine")
    adv, _ = advantages.compute_advantage(algorithm, torch.ones(1, 2), torch.ones(1, 2), ["a"])
    assert adv.tolist() == [[2.0, 2.0]]
    with pytest.raises(ValueError, match="'rloo' is registered twice"):
        advantages.register_adv_est("rloo")(mine)


VARIANCE_CASES = [e["case"] for e in TABLE["estimators"] if "variance_proxy" in e]


@pytest.mark.parametrize("case", VARIANCE_CASES)
def test_the_variance_proxy_metrics_equal_verls(case):
    entry = next(e for e in TABLE["estimators"] if e["case"] == case)
    x, want = entry["inputs"], entry["variance_proxy"]
    weights = x["rollout_is_weights"]
    ours = token_estimators.variance_proxy_metrics(
        torch.tensor(x["old_log_probs"]), torch.tensor(x["sum_pi_squared"]),
        torch.tensor(entry["outputs"]["optimal_token_baseline"]["advantages"]), torch.tensor(x["mask"]),
        None if weights is None else torch.tensor(weights), want["gradient_norm"])
    assert set(ours) == set(want["metrics"])
    for key, value in want["metrics"].items():
        close(ours[key], value, f"{key} ({case})")


def test_the_variance_proxy_cases_cover_both_branches():
    cases = [e for e in TABLE["estimators"] if "variance_proxy" in e]
    assert len(cases) == len(TABLE["estimators"])
    assert {e["inputs"]["rollout_is_weights"] is None for e in cases} == {True, False}
    assert any(e["variance_proxy"]["metrics"]["variance_proxy/proxy3_pure_noise"] > 0 for e in cases)
