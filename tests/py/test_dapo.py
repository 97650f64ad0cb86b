"""DAPO as verl runs it: the dapo reward manager (overlong penalty, acc), the reward-manager
registry, dynamic sampling (algorithm.filter_groups with data.gen_batch_size) and their refusals.

The end-to-end runs are tiny in-process runs on the copy task (see test_trainer.py)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from verl_lite.config import load_config
from verl_lite.config.compose import compose_config
from verl_lite.reward.dapo import DAPORewardManager, overlong_penalty
from verl_lite.reward.settings import reward_manager_problems
from verl_lite.reward.registry import build_reward_manager
from verl_lite.decisions.dynamic_sampling import filter_groups_problems
from verl_lite.trainer.dynamic_sampling import DynamicSampler, DynamicSamplingError, merge_batches, varied_groups

# (length, max_resp_len, overlong_buffer_cfg.len, penalty_factor) -> verl's overlong_reward, from the formula
# min(-(L - (max_resp_len - len)) / len * penalty_factor, 0); each row was also checked once against
# verl's own DAPORewardManager.__call__ (verl/workers/reward_manager/dapo.py at 1dda039b, imported with
# stubs), which computes in float32: the last rows (not binary fractions) agree to float32 precision.
PENALTY_TABLE = [
    (1, 20, 8, 1.0, 0.0), (11, 20, 8, 1.0, 0.0), (12, 20, 8, 1.0, 0.0), (13, 20, 8, 1.0, -0.125),
    (16, 20, 8, 1.0, -0.5), (19, 20, 8, 1.0, -0.875), (20, 20, 8, 1.0, -1.0),
    (13, 20, 8, 0.5, -0.0625), (16, 20, 8, 0.5, -0.25), (20, 20, 8, 0.5, -0.5),
    (3072, 4096, 1024, 1.0, 0.0), (3073, 4096, 1024, 1.0, -0.0009765625), (3584, 4096, 1024, 1.0, -0.5),
    (4095, 4096, 1024, 1.0, -0.9990234375), (4096, 4096, 1024, 1.0, -1.0),
    (1, 10, 10, 2.0, -0.2), (9, 10, 10, 2.0, -1.8), (10, 10, 10, 2.0, -2.0),
]


@pytest.mark.parametrize("length,max_resp_len,buffer_len,factor,expected", PENALTY_TABLE)
def test_the_overlong_penalty_is_verls_dapo_formula(length, max_resp_len, buffer_len, factor, expected):
    got = overlong_penalty(length, max_resp_len, buffer_len, factor)
    assert got == pytest.approx(expected, rel=1e-7, abs=0)
    assert float(torch.tensor(got, dtype=torch.float32)) == float(torch.tensor(expected, dtype=torch.float32))


def dapo_cfg(*extra):
    return load_config(["reward_model.reward_manager=dapo", *extra])


OVERLONG = ["reward_model.reward_kwargs.max_resp_len=20", "reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
            "reward_model.reward_kwargs.overlong_buffer_cfg.len=8",
            "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0"]


def test_the_dapo_manager_adds_the_penalty_records_acc_and_logs_the_penalty_when_asked():
    def score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0 if solution_str == ground_truth else 0.0

    cfg = dapo_cfg(*OVERLONG, "reward_model.reward_kwargs.overlong_buffer_cfg.log=True")
    manager = DAPORewardManager(score, cfg.reward_model.reward_kwargs)
    scores, extra = manager.score(["d"] * 3, ["a", "b", "a"], ["a", "a", "a"], None, response_lengths=[12, 16, 20])
    assert scores == [1.0, -0.5, 0.0]  # 1 + 0, 0 - 0.5, 1 - 1
    assert extra["acc"] == [1.0, 0.0, 1.0]  # the score before the penalty, as verl records it
    assert extra["overlong_reward"] == [0.0, -0.5, -1.0]
    assert extra["overlong"] == [False, True, True]
    unlogged = DAPORewardManager(score, dapo_cfg(*OVERLONG).reward_model.reward_kwargs)
    assert "overlong_reward" not in unlogged.score(["d"], ["a"], ["a"], None, [20])[1]


def test_a_dict_result_brings_its_own_keys_and_the_naive_manager_records_no_acc():
    def score(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 2.0, "acc": True, "pred": solution_str}

    cfg = load_config([])
    naive = build_reward_manager(cfg)
    naive.score_fn = score
    assert naive.score(["d"], ["x"], ["y"]) == ([2.0], {"score": [2.0], "acc": [True], "pred": ["x"]})
    plain = build_reward_manager(cfg)
    plain.score_fn = lambda **kw: 0.5
    assert plain.score(["d"], ["x"], ["y"]) == ([0.5], {})  # verl's naive manager records no acc for a number


@pytest.mark.parametrize("name", ["prime", "batch", "remote", "rate_limited"])
def test_verls_other_reward_managers_are_refused_by_name(name):
    problems = reward_manager_problems(load_config([f"reward_model.reward_manager={name}"]))
    assert len(problems) == 1 and f"verl's {name} reward manager is not supported" in problems[0]
    assert "supported: naive, dapo, gdpo" in problems[0]


def test_the_gdpo_manager_keeps_every_key_of_a_dict_and_acc_for_a_number():
    gdpo = build_reward_manager(load_config(["reward_model.reward_manager=gdpo", "trainer.experiment_name=qwen3_8b"]))
    seen = []

    def score(**kw):
        seen.append(kw["extra_info"])
        return {"score": 1.5, "accuracy_reward": 1.0, "format_reward": 0.5} if kw["solution_str"] == "x" else 0.25

    gdpo.score_fn = score
    assert gdpo.score(["d", "d"], ["x", "z"], ["y", "y"], [{"index": 3}, None]) == (
        [1.5, 0.25], {"score": [1.5, None], "accuracy_reward": [1.0, None], "format_reward": [0.5, None],
                      "acc": [None, 0.25]})
    # as verl's manager: the experiment name in each extra_info (verl's rlla score reads it)
    assert seen == [{"index": 3, "experiment_name": "qwen3_8b"}, {"experiment_name": "qwen3_8b"}]


def test_reward_kwargs_without_the_dapo_manager_and_an_incomplete_overlong_buffer_are_refused():
    naive = load_config(["reward_model.reward_kwargs.max_resp_len=20"])
    assert "read by the dapo manager only" in reward_manager_problems(naive)[0]
    problems = reward_manager_problems(dapo_cfg("reward_model.reward_kwargs.overlong_buffer_cfg.enable=True"))
    assert any("max_resp_len=null" in p for p in problems)
    assert any("overlong_buffer_cfg.len=None: must be positive" in p for p in problems)
    assert any("penalty_factor=null" in p for p in problems)
    short = dapo_cfg(*OVERLONG[1:], "reward_model.reward_kwargs.max_resp_len=4")
    assert any("max_resp_len=4 is shorter than" in p for p in reward_manager_problems(short))


def test_both_of_verls_spellings_of_the_reward_kwargs_compose_to_the_same_settings():
    legacy = ["reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
              "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096",
              "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
              "+reward_model.reward_kwargs.overlong_buffer_cfg.log=False", "+reward_model.reward_kwargs.max_resp_len=8192"]
    current = [line.replace("reward_model.reward_kwargs", "reward.reward_kwargs")
               .replace("reward_model.reward_manager", "reward.reward_manager.name") for line in legacy]
    (a, pa), (b, pb) = compose_config(legacy), compose_config(current)
    assert pa == pb == []
    assert a.reward_model == b.reward_model
    assert a.reward_model.reward_kwargs.overlong_buffer_cfg.len == 4096 and b.reward_model.reward_manager == "dapo"


# -- dynamic sampling: the sampler on made-up generation batches ----------------------------------------------


def fake_round(acc_per_group, n=2, width=3):
    """A scored generation batch: one group per entry, its n responses with the given acc values."""
    rows = [(g, a) for g, accs in enumerate(acc_per_group) for a in accs]
    assert all(len(accs) == n for accs in acc_per_group)
    b = len(rows)
    return {
        "uid": [f"p{g}" for g, _ in rows], "data_source": ["d"] * b, "ground_truth": ["x"] * b, "extra_info": [None] * b,
        "_reward_extra/acc": [a for _, a in rows], "prompts": torch.ones(b, width, dtype=torch.long),
        "input_ids": torch.ones(b, width + 2, dtype=torch.long), "attention_mask": torch.ones(b, width + 2, dtype=torch.long),
        "position_ids": torch.arange(width + 2).repeat(b, 1), "responses": torch.full((b, 2), 7),
        "response_mask": torch.ones(b, 2, dtype=torch.long), "token_level_scores": torch.zeros(b, 2),
        "temperature": 1.0,
    }


def sampler(train_batch_size, max_num_gen_batches=0, n=2, metric="acc"):
    cfg = load_config([f"data.train_batch_size={train_batch_size}", "algorithm.adv_estimator=grpo",
                       "algorithm.filter_groups.enable=True", f"algorithm.filter_groups.metric={metric}",
                       f"algorithm.filter_groups.max_num_gen_batches={max_num_gen_batches}",
                       f"actor_rollout_ref.rollout.n={n}"])
    return DynamicSampler(cfg, pad_token_id=0)


def test_groups_with_one_value_are_dropped_and_a_group_of_one_response_is_kept():
    rows, kept, dropped = varied_groups(["a", "a", "b", "b", "c"], [1.0, 1.0, 0.0, 1.0, 0.0])
    assert (rows, kept, dropped) == ([2, 3, 4], 2, 1)


def test_the_sampler_generates_until_enough_varied_groups_and_cuts_the_surplus():
    rounds = [fake_round([[0, 0], [0, 1], [1, 1]]), fake_round([[1, 0], [1, 1], [0, 0]]),
              fake_round([[0, 1], [1, 0], [0, 1]])]
    batch, metrics = sampler(3).collect(lambda r: rounds[r - 1])
    assert metrics == {"train/num_gen_batches": 3, "train/filter_groups/kept_groups": 3,
                       "train/filter_groups/dropped_groups": 4, "train/filter_groups/surplus_groups": 2}
    # round 1 keeps p1, round 2 keeps p0, round 3 keeps p0 (p1, p2 are the surplus): uids stay unique per round
    assert batch["uid"] == ["p1@1", "p1@1", "p0@2", "p0@2", "p0@3", "p0@3"]
    assert batch["_reward_extra/acc"] == [0, 1, 1, 0, 0, 1]
    assert batch["input_ids"].shape == (6, 5)


def test_the_sampler_stops_after_max_num_gen_batches_with_the_counts():
    with pytest.raises(DynamicSamplingError, match=r"kept 1 of the 4 prompt groups a step needs after 2 generation "
                                                   r"batches \(algorithm.filter_groups.max_num_gen_batches=2\): 5 "
                                                   r"groups had the same acc for all 2 responses"):
        sampler(4, max_num_gen_batches=2).collect(lambda r: fake_round([[0, 0], [1, 1], [0, 1]]
                                                                       if r == 1 else [[1, 1], [0, 0], [0, 0]]))


def test_a_metric_the_reward_does_not_give_is_an_error_naming_the_keys_it_gives():
    with pytest.raises(DynamicSamplingError, match=r"metric='score'.*extra keys: acc"):
        sampler(1, metric="score").collect(lambda r: fake_round([[0, 1]]))


def test_generation_batches_with_prompts_of_different_widths_merge_left_padded():
    wide, narrow = fake_round([[0, 1]], width=4), fake_round([[0, 1]], width=2)
    merged = merge_batches([narrow, wide], pad_token_id=9)
    assert merged["prompts"].shape == (4, 4) and merged["input_ids"].shape == (4, 6)
    assert merged["prompts"][0].tolist() == [9, 9, 1, 1] and merged["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1]
    assert merged["position_ids"][0].tolist() == [0, 0, 0, 1, 2, 3]


def problems_of(*lines):
    cfg = load_config(["algorithm.adv_estimator=grpo", *lines])
    return filter_groups_problems(cfg)


def test_the_dynamic_sampling_settings_are_checked():
    assert problems_of("algorithm.filter_groups.enable=True")[0].startswith(
        "algorithm.filter_groups.enable=True needs algorithm.filter_groups.metric")
    assert "does not divide data.train_batch_size=32" in problems_of("data.gen_batch_size=5")[0]
    assert problems_of("data.gen_batch_size=8") == []
    assert problems_of("data.gen_batch_size=48", "algorithm.filter_groups.enable=True",
                       "algorithm.filter_groups.metric=acc") == []
    assert "seq_final_reward with algorithm.use_kl_in_reward=True" in problems_of(
        "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=seq_final_reward",
        "algorithm.use_kl_in_reward=True")[0]
    refused = problems_of("async_training.enable=True", "data.gen_batch_size=4", "algorithm.filter_groups.enable=True",
                          "algorithm.filter_groups.metric=acc")
    assert "data.gen_batch_size=4 with async_training.enable=True" in refused[0] and "requires 1" in refused[0]
    assert "supported by the synchronous trainer only" in refused[1]
    # verl's fully-async trainer requires gen_batch_size=1 (prompts stream one at a time), as here
    assert not any("gen_batch_size" in p for p in problems_of("async_training.enable=True", "data.gen_batch_size=1"))


def test_verls_streaming_refill_setting_is_refused_by_name():
    _, problems = compose_config(["algorithm.filter_groups.max_inflight_gen_batches=2"])
    assert "streaming refill" in problems[0]


# -- tiny runs ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=512, n_val=16)


def tiny(data_dir, out, steps, *extra):
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=8", "data.max_prompt_length=8", "data.max_response_length=5",
        "actor_rollout_ref.actor.optim.lr=2e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=8", "trainer.device=cpu", f"trainer.total_training_steps={steps}",
        f"trainer.default_local_dir={out}", "trainer.ray=false", "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
        "reward_model.reward_manager=dapo", "algorithm.filter_groups.enable=True",
        "algorithm.filter_groups.metric=acc", *extra,
    ]


def train(overrides):
    from verl_lite.trainer.run import run

    assert run(load_config(overrides)) == 0
    with open(os.path.join(overrides[[o.split("=")[0] for o in overrides].index("trainer.default_local_dir")]
                           .split("=", 1)[1], "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# acc = the copy score for prompts whose first digit is odd, a constant 0 for the others: those groups never vary
ODD_ONLY = '''
from verl_lite.data.synthetic import compute_score as copy_score

def score(data_source, solution_str, ground_truth, extra_info=None):
    s = copy_score(data_source, solution_str, ground_truth, extra_info)
    return {"score": s, "acc": s if int(ground_truth[0]) % 2 else 0.0}
'''


def test_a_dapo_run_drops_groups_without_signal_and_refills_the_batch(data_dir, tmp_path):
    fn = tmp_path / "odd_only.py"
    fn.write_text(ODD_ONLY)
    rows = train(tiny(data_dir, tmp_path / "run", 3, f"custom_reward_function.path={fn}",
                      "custom_reward_function.name=score", "data.gen_batch_size=4"))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # about half the prompts have an even first digit: 4 prompts a round cannot fill 8 groups
        assert r["train/num_gen_batches"] >= 3
        assert r["train/filter_groups/kept_groups"] == 8
        generated = 4 * r["train/num_gen_batches"]
        assert r["train/filter_groups/dropped_groups"] + 8 + r["train/filter_groups/surplus_groups"] == generated
        assert r["train/filter_groups/dropped_groups"] >= 4
        assert r["perf/num_sequences"] == 64  # trained on exactly train_batch_size * n


def test_a_dapo_run_with_too_few_varied_groups_stops_with_the_counts(data_dir, tmp_path):
    fn = tmp_path / "flat.py"
    fn.write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n")
    with pytest.raises(DynamicSamplingError, match=r"kept 0 of the 8 prompt groups a step needs after 2 generation "
                                                   r"batches \(algorithm.filter_groups.max_num_gen_batches=2\): 16 groups"):
        train(tiny(data_dir, tmp_path / "run", 2, f"custom_reward_function.path={fn}",
                   "custom_reward_function.name=score", "algorithm.filter_groups.max_num_gen_batches=2"))


def test_a_short_dapo_run_with_the_overlong_penalty_raises_the_reward(data_dir, tmp_path):
    """16 steps of 8 prompts x 8 (about 50 s here). Most of the rise is the overlong penalty's lesson:
    responses learn to end (EOS) before token 5, where the buffer starts (-0.5 each); logged by
    overlong_buffer_cfg.log as reward_extra/overlong/mean."""
    rows = train(tiny(data_dir, tmp_path / "learn", 16, "actor_rollout_ref.actor.clip_ratio_high=0.28",
                      "reward_model.reward_kwargs.max_resp_len=5",
                      "reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
                      "reward_model.reward_kwargs.overlong_buffer_cfg.len=1",
                      "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
                      "reward_model.reward_kwargs.overlong_buffer_cfg.log=True"))
    scores = [r["critic/score/mean"] for r in rows]
    first, last = sum(scores[:5]) / 5, sum(scores[-5:]) / 5
    assert last > first + 0.15, f"reward did not rise: first 5 steps {first:.3f}, last 5 steps {last:.3f}"
    overlong = [r["reward_extra/overlong/mean"] for r in rows]
    assert sum(overlong[-5:]) < sum(overlong[:5]) / 2


def test_a_generation_batch_that_does_not_split_over_the_data_parallel_ranks_is_refused():
    from verl_lite.preflight.run import compose_and_check

    _, problems = compose_and_check(["trainer.device=cpu", "trainer.n_gpus_per_node=2", "data.gen_batch_size=1",
                                     "actor_rollout_ref.rollout.n=1", "data.train_batch_size=4",
                                     "actor_rollout_ref.actor.ppo_mini_batch_size=2", "algorithm.adv_estimator=grpo",
                                     "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc"],
                                    for_training=False)
    assert problems == ["actor: data.gen_batch_size * rollout.n = 1*1 = 1 is not divisible by the data-parallel size 2 "
                        "(2 devices, fsdp): each generation batch is split over the ranks"]


def test_a_dapo_run_ends_when_its_epochs_run_out_as_verls_dapo_trainer_does(copy_task_data, tmp_path):
    """16 prompts, 2 epochs, 4 prompts a step: 8 steps by the count, but each step that drops a group
    draws 4 more prompts, so the 8 batches of 4 run out first and the run ends without an error."""
    fn = tmp_path / "odd_only.py"
    fn.write_text(ODD_ONLY)
    small = copy_task_data(n_train=16, n_val=4)
    rows = train(tiny(small, tmp_path / "run", 10, f"custom_reward_function.path={fn}",
                      "custom_reward_function.name=score", "trainer.total_epochs=2", "data.train_batch_size=4",
                      "actor_rollout_ref.actor.ppo_mini_batch_size=2"))
    steps = [r["step"] for r in rows]
    assert 1 <= len(steps) < 8 and steps == list(range(1, len(steps) + 1))
    assert sum(r["train/num_gen_batches"] for r in rows) <= 8
