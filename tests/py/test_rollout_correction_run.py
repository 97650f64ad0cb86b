"""algorithm.rollout_correction in a real tiny GRPO run on the hf rollout (in-process, trainer.ray=false):
the hf rollout's own log-probs (rollout.calculate_log_probs=True) reach the driver, the importance
weights reach the policy loss, rejected tokens leave the response mask the actor trains on, and the
rollout_corr/* metrics are logged. The math itself is compared with verl's in
test_rollout_correction_table.py.
"""

from __future__ import annotations

import pytest
import torch

from test_trainer import read_metrics, run_training, tiny_overrides

HF_LOG_PROBS = ("actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.calculate_log_probs=True")


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def _record_vanilla(monkeypatch):
    from verl_lite.trainer.algos import policy_losses

    calls = []
    original = policy_losses.POLICY_LOSSES["vanilla"]

    def recorded(x):
        calls.append({"mask": x.response_mask.detach().clone(), "weights": x.rollout_is_weights})
        return original(x)

    monkeypatch.setitem(policy_losses.POLICY_LOSSES, "vanilla", recorded)  # the registry the actor reads
    monkeypatch.setattr(policy_losses, "compute_policy_loss_vanilla", recorded)  # bypass mode's ppo_clip calls it
    return calls


def test_token_is_weights_the_loss_with_the_hf_rollouts_own_log_probs(data_dir, tmp_path, monkeypatch):
    calls = _record_vanilla(monkeypatch)
    out = tmp_path / "is"
    run_training(tiny_overrides(data_dir, out, 2, *HF_LOG_PROBS, "actor_rollout_ref.rollout.temperature=0.7",
                                "algorithm.rollout_correction.rollout_is=token",
                                "algorithm.rollout_correction.rollout_is_threshold=2.0"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["actor/grad_norm"] > 0 for r in rows)
    for r in rows:
        # rollout and actor hold the same fp32 weights and both sample/score at temperature 0.7, so the
        # rollout's processed log-probs equal the actor's: KL ~ 0, weights ~ 1 (a temperature left out
        # of either side moves these by orders of magnitude more)
        assert abs(r["rollout_corr/kl"]) < 1e-4 and abs(r["rollout_corr/k3_kl"]) < 1e-6
        assert r["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-3)
        assert {"rollout_corr/rollout_is_eff_sample_size", "rollout_corr/chi2_token", "rollout_corr/training_ppl",
                "rollout_corr/rollout_ppl", "rollout_corr/rollout_is_seq_max_deviation"} <= set(r)
    weights = [c["weights"] for c in calls]
    assert weights and all(isinstance(w, torch.Tensor) for w in weights)
    assert all(torch.all(w <= 2.0) and torch.all((w - 1).abs() * c["mask"] < 1e-2) for w, c in zip(weights, calls))


def test_rejected_tokens_leave_the_mask_the_actor_trains_on(data_dir, tmp_path, monkeypatch):
    calls = _record_vanilla(monkeypatch)
    out = tmp_path / "rs"
    # top_k=3: the rollout's log-probs are of the top-3 renormalised distribution, the actor's of the
    # whole vocabulary, so log r < 0 on every token (k1 = -log r is about 2.0-2.2 for this tiny
    # model); the band log(1.0) <= k1 <= log(7.9) = 2.07 rejects part of them.
    run_training(tiny_overrides(data_dir, out, 1, *HF_LOG_PROBS, "actor_rollout_ref.rollout.top_k=3",
                                "actor_rollout_ref.actor.ppo_epochs=1",
                                "algorithm.rollout_correction.rollout_rs=token_k1",
                                "algorithm.rollout_correction.rollout_rs_threshold=1.0_7.9"))
    (row,) = read_metrics(out)
    rejected = row["rollout_corr/rollout_rs_masked_fraction"]
    assert 0.05 < rejected < 0.95
    assert row["rollout_corr/kl"] > 0  # rollout log-probs above the actor's
    trained = sum(int(c["mask"].sum()) for c in calls)  # one epoch: every token once
    generated = row["response_length/mean"] * row["perf/num_sequences"]
    assert trained == pytest.approx(generated * (1 - rejected), abs=0.5)
    assert all(c["weights"] is None for c in calls)  # rollout_is=null: no weights


@pytest.mark.parametrize("loss_type", ["ppo_clip", "reinforce"])
def test_bypass_mode_trains_against_the_rollouts_log_probs_without_scoring_old_ones(data_dir, tmp_path, monkeypatch,
                                                                                   loss_type):
    from verl_lite.trainer import workers

    def no_scoring(self, batch):
        raise AssertionError("bypass mode scored old log-probs")

    monkeypatch.setattr(workers.ActorRolloutRefWorker, "compute_log_prob", no_scoring)  # in-process workers
    calls = _record_vanilla(monkeypatch)
    out = tmp_path / loss_type
    run_training(tiny_overrides(data_dir, out, 2, *HF_LOG_PROBS, "algorithm.rollout_correction.bypass_mode=True",
                                f"algorithm.rollout_correction.loss_type={loss_type}",
                                "algorithm.rollout_correction.rollout_is=token",
                                "algorithm.rollout_correction.rollout_rs=token_k3",
                                "algorithm.rollout_correction.rollout_rs_threshold=0.5"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["actor/grad_norm"] > 0 for r in rows)
    for r in rows:  # measured in the update, current policy vs rollout (verl's names)
        assert {"rollout_corr/kl", "rollout_corr/rollout_is_mean", "rollout_corr/rollout_rs_masked_fraction",
                "actor/ppo_kl"} <= set(r)
    # averaged over the update's micro-batches: the policy moves off the rollout's after the first one
    assert all(abs(r["rollout_corr/kl"]) < 0.1 for r in rows) and rows[0]["rollout_corr/kl"] != 0.0
    # ppo_clip trains the vanilla loss (weights None: the ratio is the correction); reinforce does not
    assert (len(calls) > 0) == (loss_type == "ppo_clip")
    assert all(c["weights"] is None for c in calls)


@pytest.mark.megatron
def test_token_is_on_the_megatron_engine(data_dir, tmp_path):
    out = tmp_path / "megatron"
    run_training(tiny_overrides(data_dir, out, 1, "model_engine=megatron", "actor_rollout_ref.model.path=tiny-qwen3",
                                *HF_LOG_PROBS, "algorithm.rollout_correction.rollout_is=token",
                                "actor_rollout_ref.rollout.temperature=0.7"))
    (row,) = read_metrics(out)  # KL ~ 0 at temperature 0.7: the Megatron engine scores at the rollout's temperature
    assert abs(row["rollout_corr/kl"]) < 1e-4 and row["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-3)
    assert row["actor/grad_norm"] > 0
