"""verl's algorithm switches in a real tiny run (in-process, trainer.ray=false): the KL penalty in
the reward (algorithm.use_kl_in_reward with kl_ctrl) and the policy loss modes reach the trainer.
"""

from __future__ import annotations

import pytest
import torch

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
    from verl_lite.trainer.algos import policy_losses

    calls = []
    original = policy_losses.POLICY_LOSSES[mode]

    def counted(*args, **kwargs):
        calls.append(mode)
        return original(*args, **kwargs)

    monkeypatch.setitem(policy_losses.POLICY_LOSSES, mode, counted)  # the registry the actor reads (in-process workers)
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


def _recording(monkeypatch, name):
    """Wrap the registered estimator `name` so each call's inputs are kept (in-process workers)."""
    from verl_lite.trainer.algos import advantages

    calls = []
    original = advantages.ADV_ESTIMATORS[name]

    def recorded(**kwargs):
        out = original(**kwargs)
        calls.append(dict(kwargs, advantages=out[0]))
        return out

    monkeypatch.setitem(advantages.ADV_ESTIMATORS, name, recorded)
    return calls


@pytest.mark.parametrize("estimator,loss,metrics", [
    ("rloo", "cispo", {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}),
    ("reinforce_plus_plus_baseline", "kl_cov", {"actor/ppo_kl"}),
    ("gpg", "gpg", set()),
])
def test_an_estimator_and_a_loss_by_verls_names_train_and_report_verls_metrics(data_dir, tmp_path, monkeypatch,
                                                                              estimator, loss, metrics):
    calls = _recording(monkeypatch, estimator)
    out = tmp_path / estimator
    run_training(tiny_overrides(data_dir, out, 2, f"algorithm.adv_estimator={estimator}",
                                f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}",
                                "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.1"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["actor/grad_norm"] > 0 for r in rows)
    assert len(calls) == 2 and all(len(c["index"]) == 64 for c in calls)  # once a step, 8 prompts x n 8
    reported = {k for k in rows[0] if k in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")}
    assert reported == metrics  # the loss's own metrics, as verl names them (gpg reports none)


def test_remax_subtracts_the_reward_of_a_greedy_response_to_each_prompt(data_dir, tmp_path, monkeypatch):
    calls = _recording(monkeypatch, "remax")
    samplings = []
    from verl_lite.trainer import workers

    generate = workers.ActorRolloutRefWorker.generate_sequences

    def recording(self, prompts, response_length, sampling, **kwargs):
        samplings.append((len(prompts["input_ids"]), bool(sampling.get("do_sample", True))))
        return generate(self, prompts, response_length, sampling, **kwargs)

    monkeypatch.setattr(workers.ActorRolloutRefWorker, "generate_sequences", recording)
    out = tmp_path / "remax"
    run_training(tiny_overrides(data_dir, out, 2, "algorithm.adv_estimator=remax", "trainer.test_freq=-1",
                                "trainer.val_before_train=False"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["timing_s/gen_baseline"] > 0 for r in rows)
    assert samplings == [(64, True), (8, False)] * 2  # each step: n samples per prompt, then one greedy per prompt
    for call in calls:
        base = call["reward_baselines"]
        assert base.shape == (64,)
        assert all(len(set(base[i:i + 8].tolist())) == 1 for i in range(0, 64, 8))  # one baseline per prompt
        # the first token's advantage: the response's whole reward minus its prompt's greedy reward
        score = (call["token_level_rewards"] * call["response_mask"]).sum(-1)
        assert torch.allclose(call["advantages"][:, 0], score - base)


GDPO_SCORE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    accuracy = float(str(ground_truth) in solution_str)
    fmt = 0.5 * float(solution_str[:1].isdigit())
    return {"score": accuracy + fmt, "accuracy_reward": accuracy, "format_reward": fmt}
'''


@pytest.mark.parametrize("estimator", ["optimal_token_baseline", "tir_optimal_token_baseline", "gdpo"])
def test_the_optimal_token_baselines_and_gdpo_train_with_their_inputs(data_dir, tmp_path, monkeypatch, estimator):
    calls = _recording(monkeypatch, estimator)
    out = tmp_path / estimator
    extra = [f"algorithm.adv_estimator={estimator}", "trainer.test_freq=-1", "trainer.val_before_train=False"]
    if estimator == "gdpo":
        score = tmp_path / "score.py"
        score.write_text(GDPO_SCORE)
        extra += ["+algorithm.gdpo_reward_keys=[accuracy_reward,format_reward]",
                  "+algorithm.gdpo_reward_weights=[1.0,2.0]", "reward.reward_manager.name=gdpo",
                  f"reward.custom_reward_function.path={score}", "reward.custom_reward_function.name=compute_score"]
    else:
        extra.append("actor_rollout_ref.actor.calculate_sum_pi_squared=True")
    run_training(tiny_overrides(data_dir, out, 2, *extra))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["actor/grad_norm"] > 0 for r in rows)
    assert len(calls) == 2
    for call in calls:
        mask = call["response_mask"].bool()
        assert mask.shape == (64, 3)
        if estimator == "gdpo":  # the components of the score function's dicts, one per response
            comps = call["reward_components"]
            assert len(comps["accuracy_reward"]) == 64 and set(comps["format_reward"]) <= {0.0, 0.5}
            assert call["config"].gdpo_reward_weights == [1.0, 2.0]
        else:  # the actor's old log-probs and sum_pi_squared, a probability's sum of squares, on every token
            spsq = call["sum_pi_squared"]
            assert spsq.shape == (64, 3) and ((spsq[mask] > 0) & (spsq[mask] <= 1)).all()
            assert (call["old_log_probs"][mask] < 0).all()
        assert torch.isfinite(call["advantages"]).all() and call["advantages"][mask].abs().sum() > 0
    if estimator == "gdpo":
        assert {"gdpo/accuracy_reward/mean", "gdpo/format_reward/max"} <= set(rows[0])
    else:
        assert rows[0]["variance_proxy/expected_w"] > 0 and "variance_proxy/proxy3_pure_noise" in rows[0]
