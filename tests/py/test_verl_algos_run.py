"""verl's algorithm switches in a real tiny run (in-process, trainer.ray=false): the KL penalty in
the reward (algorithm.use_kl_in_reward with kl_ctrl) and the policy loss modes reach the trainer.
"""

from __future__ import annotations

import pytest

from test_trainer import read_metrics, run_training, tiny_overrides


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def test_kl_in_reward_builds_the_ref_penalises_the_reward_and_adapts_its_coefficient(data_dir, tmp_path):
    out = tmp_path / "kl"
    run_training(tiny_overrides(data_dir, out, 3, "algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive",
                                "algorithm.kl_ctrl.kl_coef=0.5", "algorithm.kl_ctrl.target_kl=0.01",
                                "algorithm.kl_ctrl.horizon=1000", "algorithm.kl_penalty=low_var_kl"))
    rows = read_metrics(out)
    coeffs = [r["actor/reward_kl_penalty_coeff"] for r in rows]
    assert coeffs[0] == 0.5
    # step 1: actor and ref are the same model, so KL 0 -> error clipped to -0.2 over 64 sequences
    assert rows[0]["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
    assert coeffs[1] == pytest.approx(0.5 * (1 - 0.2 * 64 / 1000))
    assert rows[-1]["actor/reward_kl_penalty"] > 0  # the actor moved away from the ref
    # the reward is the score minus beta * KL
    last = rows[-1]
    assert last["critic/rewards/mean"] < last["critic/score/mean"]


@pytest.mark.parametrize("mode", ["gspo", "geo_mean"])
def test_a_policy_loss_mode_is_the_loss_the_actor_trains_with(data_dir, tmp_path, monkeypatch, mode):
    from verl_lite.trainer import core_algos

    calls = []
    original = core_algos.POLICY_LOSSES[mode]

    def counted(*args, **kwargs):
        calls.append(mode)
        return original(*args, **kwargs)

    monkeypatch.setitem(core_algos.POLICY_LOSSES, mode, counted)  # the registry the actor reads (in-process workers)
    out = tmp_path / mode
    run_training(tiny_overrides(data_dir, out, 2, f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["actor/grad_norm"] > 0 for r in rows)
    assert len(calls) >= 2  # one call per micro-batch of each update


def test_the_ref_scores_with_its_own_log_prob_micro_batch(data_dir, tmp_path, monkeypatch):
    from verl_lite import batch as batch_module

    sizes = []
    split = batch_module.split_by_size

    def recording(batch, size):
        sizes.append(int(size))
        return split(batch, size)

    monkeypatch.setattr(batch_module, "split_by_size", recording)  # in-process workers
    run_training(tiny_overrides(data_dir, tmp_path / "ref", 1, "actor_rollout_ref.actor.use_kl_loss=True",
                                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
                                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=5"))
    assert 5 in sizes and 16 in sizes  # the ref pass in micro-batches of 5, the actor's in 16
