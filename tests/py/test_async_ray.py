"""Fully-async training end to end on Ray (CPU): one rollout replica and one train worker.

Every run shares one Ray cluster (run() leaves a caller's cluster running). The fault runs
happen in a thread with a time limit, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from verl_lite.config import load_config

ASYNC = ["async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
         "actor_rollout_ref.rollout.n_gpus_per_node=1"]


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=512, n_val=16)


def overrides(data_dir, out_dir, steps, *extra):
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=16", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.optim.lr=2e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8",
        "trainer.device=cpu", f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={out_dir}",
        "trainer.logger=[jsonl]", "trainer.plot_rewards=false", "trainer.test_freq=-1", *ASYNC, *extra,
    ]


def read_metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_async_grpo_learns_the_copy_task_and_logs_staleness_and_queue_depth_every_step(ray_cluster, data_dir, tmp_path):
    from verl_lite.trainer.run import run
    from verl_lite.trainer.checkpoint import verify

    out = tmp_path / "learn"
    assert run(load_config(overrides(data_dir, out, 30, "trainer.save_freq=30"))) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 31))
    for r in rows:
        # k=1, threshold 1 (verl's fraction): a version starts its own batch and one more, so a batch
        # is at most one version old when it is trained on.
        assert r["async/param_version"] == r["step"]
        assert 0 <= r["async/staleness/max"] <= 1 and r["async/queue_capacity"] == 32
        assert r["async/queue_depth"] + r["async/queue_in_generation"] <= 32
        assert r["async/dropped_groups"] == 0 and r["perf/num_sequences"] == 128
        assert 0.0 <= r["perf/trainer_idle_frac"] <= 1.0 and r["perf/rollout_tokens_per_s"] > 0
    assert any(r["async/staleness/mean"] == 1 for r in rows)  # the rollout really ran ahead
    scores = [r["critic/score/mean"] for r in rows]
    first, last = sum(scores[:5]) / 5, sum(scores[-5:]) / 5
    assert last > first + 0.04, f"reward did not rise: first 5 steps {first:.3f}, last 5 {last:.3f}"
    assert verify(str(out / "global_step_30")) is None


FAULTY_REWARD = """
import time
from verl_lite.reward.manager import default_compute_score
calls = [0]

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    calls[0] += 1  # one call per sample, in the rollout replica's process
    if calls[0] == {at}:
        {fault}
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)
"""


def run_faulty(data_dir, tmp_path, at, fault, *extra, limit_s=180):
    """run() whose reward function runs `fault` at its `at`-th call; a hang fails the test."""
    from verl_lite.trainer.run import run

    reward = tmp_path / "reward.py"
    reward.write_text(FAULTY_REWARD.format(at=at, fault=fault), encoding="utf-8")
    cfg = load_config(overrides(data_dir, tmp_path / "out", 20, f"custom_reward_function.path={reward}", *extra))
    outcome = {}

    def target():
        try:
            outcome["rc"] = run(cfg)
        except BaseException as e:  # noqa: BLE001 - the test inspects whatever ended the run
            outcome["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"the run neither failed nor finished within {limit_s} s: it hangs"
    return outcome.get("error"), read_metrics(tmp_path / "out")


def test_syncing_every_second_step_with_threshold_zero_trains_on_policy_and_a_dying_replica_stops_the_run(
        ray_cluster, data_dir, tmp_path):
    from verl_lite.trainer.rollout_pool import RolloutError

    # One chunk = one batch = 128 reward calls; validation at version 2 (step 4) scores 16 more. The
    # replica dies scoring its 7th chunk, which it generates while the trainer is on step 5 or 6.
    error, rows = run_faulty(data_dir, tmp_path, 6 * 128 + 16 + 1, "import os; os._exit(3)",
                             "async_training.trigger_parameter_sync_step=2", "async_training.staleness_threshold=0",
                             "async_training.stale_policy=reweight", "async_training.rollout_segment_tokens=1",
                             "trainer.test_freq=2")
    assert isinstance(error, RolloutError), repr(error)
    text = str(error)
    assert text.startswith("rollout replica 0 ") and ("died" in text or "dead" in text), text
    assert 5 <= len(rows) <= 7
    assert [r["async/param_version"] for r in rows[:5]] == [0, 1, 1, 2, 2]
    assert "timing_s/publish" in rows[1] and "timing_s/publish" not in rows[2]
    # verl's staleness_threshold=0: a version generates exactly the two batches its steps train on
    # and nothing ahead, so no batch is older than the weights it is trained at (nothing to reweight).
    assert all(r["async/staleness/max"] == 0 and r["async/reweighted_groups"] == 0 for r in rows)
    assert all(r["fully_async/count/stale_trajectory_processed"] == 0 for r in rows)
    assert [r["fully_async/count/staleness_samples"] for r in (rows[1], rows[3])] == [0, 0]
    # test_freq counts weight versions, as verl's: version 2 is published at step 4
    assert [("val/score" in r) for r in rows[:5]] == [False, False, False, True, False]
    assert rows[3]["val/weight_version"] == 2 and 0.0 <= rows[3]["val/score"] <= 1.0


def test_a_queue_that_stays_empty_past_the_timeout_says_why(ray_cluster, data_dir, tmp_path):
    from verl_lite.trainer.async_run import QueueTimeout

    # 4 prompts x 2 samples: the replica stalls scoring its second chunk. The timeout leaves room for
    # the first chunk on a loaded 2-core box (at 4 s, step 1 timed out there before its chunk came).
    error, _ = run_faulty(data_dir, tmp_path, 9, "time.sleep(600)", "async_training.queue_timeout_s=10",
                          "data.train_batch_size=4", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                          "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8")
    assert isinstance(error, QueueTimeout), repr(error)
    text = str(error)
    assert text.startswith("the rollout queue stayed empty for 10 s (async_training.queue_timeout_s) at step 2")
    assert "replica 0: 1 chunks" in text and "raise async_training.queue_timeout_s" in text


# ---------------------------------------------------------------------------- one run path


SMALL = ("data.train_batch_size=4", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8")


def test_a_sigint_in_an_async_run_saves_the_step_and_a_half_written_resave_is_recovered_on_resume(
        ray_cluster, data_dir, tmp_path, monkeypatch, caplog):
    import logging
    import shutil

    from verl_lite.trainer.run import run

    caplog.set_level(logging.INFO)
    out = tmp_path / "out"
    monkeypatch.setenv("VERL_LITE_FAULT", "sigint:step:3")  # SIGINT to the driver in the middle of step 3
    assert run(load_config(overrides(data_dir, out, 6, "trainer.save_freq=2", *SMALL))) == 130
    assert "stopped by signal 2 after step 3 of 6" in caplog.text
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3]
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "3"
    # A re-save of step 3 killed between its two renames leaves step 3 moved aside, and a later
    # save killed while writing leaves a temporary dir: resuming puts step 3 back and goes on from it.
    aside = out / ".global_step_3.old-1234"
    aside.mkdir()
    shutil.move(str(out / "global_step_3"), str(aside / "ckpt"))
    (out / ".global_step_4.tmp-5678").mkdir()
    monkeypatch.delenv("VERL_LITE_FAULT")
    caplog.clear()
    assert run(load_config(overrides(data_dir, out, 5, "trainer.save_freq=2", *SMALL))) == 0
    assert f"resumed from {out}/global_step_3 at step 3" in caplog.text
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


def test_an_async_run_hits_the_fault_points_notes_the_step_and_masks_secrets_in_its_logs(
        ray_cluster, data_dir, tmp_path, monkeypatch, caplog):
    import logging

    from verl_lite.trainer.run import run

    secret = "hf_async_s3cr3t_value"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("VERL_LITE_FAULT", "raise:step:2")
    caplog.set_level(logging.INFO)
    out = tmp_path / secret  # the secret shows in every log line naming the output dir
    with pytest.raises(RuntimeError, match="fault injected by VERL_LITE_FAULT at step") as err:
        run(load_config(overrides(data_dir, out, 3, "trainer.save_freq=1", *SMALL)))
    assert err.value.__notes__ == ["at step 2 of 3"]
    assert "saved checkpoint" in caplog.text and "<masked>" in caplog.text
    assert secret not in caplog.text


def test_async_grpo_scores_with_the_dapo_manager_and_logs_its_overlong_penalty(ray_cluster, data_dir, tmp_path):
    """The rollout replicas score with reward_model.reward_manager (here dapo), and the penalty's
    logged values reach the trainer's metrics (response length 3 = max_resp_len: all in the buffer)."""
    from verl_lite.trainer.run import run

    out = tmp_path / "dapo"
    assert run(load_config(overrides(data_dir, out, 2, "reward.reward_manager.name=dapo",
                                     "+reward.reward_kwargs.max_resp_len=3",
                                     "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
                                     "+reward.reward_kwargs.overlong_buffer_cfg.len=2",
                                     "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
                                     "+reward.reward_kwargs.overlong_buffer_cfg.log=True"))) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # length 1 -> 0, 2 -> -0.5, 3 -> -1.0: the mean lies in [-1, 0] and matches the share
        assert -1.0 <= r["reward_extra/overlong_reward/mean"] <= 0.0
        assert 0.0 < r["reward_extra/overlong/mean"] <= 1.0
        assert r["critic/score/min"] < 0.0  # a copy score is >= 0: only the penalty makes it negative


def test_async_grpo_with_rollout_correction_logs_verls_metrics_equal_to_the_formulas_on_each_batch(
        ray_cluster, data_dir, tmp_path, monkeypatch):
    """verl's fully_async_policy/shell/dapo_7b_math_fsdp2_64_64_mis.sh settings (token IS at 2.0, seq_mean_k1
    rejection within [0.99, 1.001]) in a 3-step run, one version of staleness allowed: "rollout" is the
    replica's log-probs, "old" the published weights'. Fresh groups were sampled by the published
    weights (KL ~ 0: nothing rejected), stale ones by the version before (KL > 0)."""
    import torch

    from verl_lite.trainer.algos import rollout_correction
    from verl_lite.trainer.run import run

    seen = []
    original = rollout_correction.apply_to_batch

    def recorded(rc, batch):
        inputs = {k: batch[k].clone() for k in ("old_log_probs", "rollout_log_probs", "response_mask")}
        metrics = original(rc, batch)
        seen.append((inputs, dict(batch), metrics))
        return metrics

    monkeypatch.setattr(rollout_correction, "apply_to_batch", recorded)  # the driver runs in this process
    out = tmp_path / "mis"
    assert run(load_config(overrides(data_dir, out, 3, "actor_rollout_ref.rollout.name=hf",
                                     "actor_rollout_ref.rollout.calculate_log_probs=True",
                                     "algorithm.rollout_correction.rollout_is=token",
                                     "algorithm.rollout_correction.rollout_is_threshold=2.0",
                                     "algorithm.rollout_correction.rollout_rs=seq_mean_k1",
                                     "algorithm.rollout_correction.rollout_rs_threshold=0.99_1.001"))) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3] and len(seen) == 3
    for r, (inputs, batch, _) in zip(rows, seen):
        old, rollout, mask = inputs["old_log_probs"], inputs["rollout_log_probs"], inputs["response_mask"].float()
        mean = lambda x, m: float((x * m).sum() / m.sum())  # noqa: E731
        log_r = old - rollout
        assert r["rollout_corr/kl"] == pytest.approx(mean(rollout - old, mask), abs=1e-6)
        assert r["rollout_corr/rollout_is_mean"] == pytest.approx(mean(torch.exp(log_r).clamp(max=2.0), mask), abs=1e-6)
        seq_k1 = (-log_r * mask).sum(1) / mask.sum(1)
        keep = (seq_k1 >= torch.log(torch.tensor(0.99))) & (seq_k1 <= torch.log(torch.tensor(1.001)))
        assert torch.equal(batch["response_mask"].float(), mask * keep[:, None].float())
        assert r["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 - float(keep.float().mean()), abs=1e-6)
        assert {"rollout_corr/chi2_token", "rollout_corr/rollout_is_eff_sample_size", "rollout_corr/training_ppl",
                "rollout_corr/rollout_rs_seq_mean_k1_mean", "rollout_corr/rollout_rs_masked_fraction"} <= set(r)
        if r["async/staleness/max"] == 0:  # sampled by the published weights: the same policy, no rejection
            assert abs(r["rollout_corr/kl"]) < 1e-4 and r["rollout_corr/rollout_rs_masked_fraction"] == 0.0
    stale = [r for r in rows if r["async/staleness/mean"] == 1]
    assert stale and all(abs(r["rollout_corr/kl"]) > 1e-5 for r in stale)  # the version before sampled them
