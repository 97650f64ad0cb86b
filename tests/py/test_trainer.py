"""End-to-end tests of the GRPO/PPO trainer on the tiny Qwen3.5, in-process (trainer.ray=false).

The Ray path (worker groups as actors, DP over two ranks) is in test_trainer_ray.py.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from verl_lite.config import load_config


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=512, n_val=16)


def tiny_overrides(data_dir, out_dir, steps, *extra):
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=8", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.optim.lr=2e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={out_dir}", "trainer.ray=false", "trainer.logger=[jsonl]",
        "trainer.plot_rewards=false", *extra,
    ]


def run_training(overrides):
    from verl_lite.trainer.run import run

    cfg = load_config(overrides)
    assert run(cfg) == 0


def read_metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def final_weights(out_dir, step):
    payload = torch.load(os.path.join(out_dir, f"global_step_{step}", "actor", "model.pt"), weights_only=True)
    return payload["model"]


def test_grpo_steps_log_metrics_save_a_verified_checkpoint_and_plot(data_dir, tmp_path):
    from verl_lite.trainer.checkpoint import verify

    out = tmp_path / "run"
    run_training(tiny_overrides(data_dir, out, 3, "trainer.save_freq=3", "trainer.plot_rewards=true",
                                "trainer.test_freq=3"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "timing_s/gen",
                "response_length/mean"):
        assert all(r[key] is not None for r in rows), key
    assert 0.0 <= rows[0]["critic/score/mean"] <= 1.0
    for r in rows:  # 8 prompts x 8 samples, each prompt + response tokens, per second of step on 1 device
        assert r["perf/total_num_tokens"] > 64 * (1 + r["response_length/mean"]) - 1
        assert r["perf/throughput"] == pytest.approx(r["perf/total_num_tokens"] / r["timing_s/step"])
        # the worker thread's CPU seconds in generation and in the update (with the weight sync)
        assert r["perf/cpu_s/gen"] > 0 and r["perf/cpu_s/update_actor"] > 0
    assert "val/score" in rows[-1]
    assert verify(str(out / "global_step_3")) is None
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert (out / "reward_curve.png").stat().st_size > 1000


def test_an_interrupted_run_resumes_to_the_same_weights_and_metrics_as_an_uninterrupted_one(data_dir, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    run_training(tiny_overrides(data_dir, full, 4, "trainer.save_freq=2"))
    run_training(tiny_overrides(data_dir, part, 2, "trainer.save_freq=2"))
    run_training(tiny_overrides(data_dir, part, 4, "trainer.save_freq=2"))  # resume_mode=auto
    a, b = final_weights(full, 4), final_weights(part, 4)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"weights differ after resume: {k}"
    full_rows = {r["step"]: r for r in read_metrics(full)}
    part_rows = {r["step"]: r for r in read_metrics(part)}
    assert sorted(part_rows) == [1, 2, 3, 4]
    for step in (3, 4):
        assert part_rows[step]["critic/score/mean"] == full_rows[step]["critic/score/mean"]
        assert part_rows[step]["actor/pg_loss"] == full_rows[step]["actor/pg_loss"]


def test_a_damaged_newest_checkpoint_is_skipped_and_the_previous_one_resumes(data_dir, tmp_path, caplog):
    out = tmp_path / "run"
    run_training(tiny_overrides(data_dir, out, 4, "trainer.save_freq=2"))
    model = out / "global_step_4" / "actor" / "model.pt"
    model.write_bytes(model.read_bytes()[:100])  # truncated, as by a crash mid-write on a bad disk
    from verl_lite.trainer.checkpoint import CheckpointManager

    with caplog.at_level("WARNING"):
        step, _ = CheckpointManager(str(out)).latest_complete()
    assert step == 2
    assert "global_step_4" in caplog.text and "truncated" in caplog.text


def test_ppo_with_a_critic_and_kl_loss_runs_and_logs_value_and_kl_metrics(data_dir, tmp_path):
    out = tmp_path / "ppo"
    run_training(tiny_overrides(data_dir, out, 2, "algorithm.adv_estimator=gae",
                                "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.01",
                                "critic.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.entropy_coeff=0.001",
                                "actor_rollout_ref.actor.ppo_mini_batch_size=8"))
    rows = read_metrics(out)
    assert len(rows) == 2
    for key in ("critic/vf_loss", "critic/grad_norm", "actor/kl_loss", "actor/entropy_loss"):
        assert rows[-1][key] is not None, key
    # The ref model starts equal to the actor and step 1 makes one update (one mini-batch): KL is 0.
    assert abs(rows[0]["actor/kl_loss"]) < 1e-6


def test_grpo_on_the_copy_task_raises_the_mean_reward(data_dir, tmp_path):
    out = tmp_path / "learn"
    run_training(tiny_overrides(data_dir, out, 60, "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=8"))
    scores = [r["critic/score/mean"] for r in read_metrics(out)]
    first, last = sum(scores[:10]) / 10, sum(scores[-10:]) / 10
    assert last > first + 0.15, f"reward did not rise: first 10 steps {first:.3f}, last 10 steps {last:.3f}"


def test_a_reward_function_that_raises_names_the_function_and_sample(data_dir, tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n"
                   "    raise ValueError('boom')\n")
    from verl_lite.reward.manager import RewardFunctionError

    with pytest.raises(RewardFunctionError, match=r"bad_reward\.py:score.*sample 0"):
        run_training(tiny_overrides(data_dir, tmp_path / "r", 1, f"custom_reward_function.path={bad}",
                                    "custom_reward_function.name=score"))


def test_the_run_ends_after_total_epochs_even_when_total_training_steps_asks_for_more(copy_task_data, tmp_path):
    """verl's fit loop runs total_epochs passes and stops at total_training_steps, whichever comes first."""
    small = copy_task_data(n_train=16, n_val=8)  # 2 steps per epoch at 8 prompts a step
    out = tmp_path / "epochs"
    run_training(tiny_overrides(small, out, 10, "trainer.total_epochs=2", "actor_rollout_ref.rollout.n=2"))
    assert [r["step"] for r in read_metrics(out) if "actor/lr" in r] == [1, 2, 3, 4]


def test_the_lr_schedule_spans_the_run_when_optim_total_training_steps_is_unset(data_dir, tmp_path):
    """As verl's trainer, the run's length fills optim.total_training_steps (-1): a warm-up ratio and
    cosine decay act instead of staying constant."""
    out = tmp_path / "cosine"
    run_training(tiny_overrides(data_dir, out, 4, "actor_rollout_ref.rollout.n=2",
                                "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
                                "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.5",
                                "actor_rollout_ref.actor.optim.min_lr_ratio=0.0"))
    lrs = [r["actor/lr"] for r in read_metrics(out) if "actor/lr" in r]
    # the LR after each step's scheduler step, as verl's schedule gives it: warm-up over 2 of the 4
    # steps (lr/2 after step 1), then cosine from lr to 0 over the other 2 (lr, lr/2, 0); unfilled (-1),
    # there would be no warm-up and all four would be lr
    assert lrs == pytest.approx([1e-3, 2e-3, 1e-3, 0.0], abs=1e-12), lrs
