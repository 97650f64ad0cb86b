"""trainer.log_val_generations: N validation samples (input, output, score) per validation, chosen as
verl's `_maybe_log_val_generations` chooses them, on the console and in each logger."""

from __future__ import annotations

import json
import logging
import re

import pytest

from verl_lite.config import load_config
from verl_lite.data.synthetic import compute_score, make_rows
from verl_lite.trainer.trackers import GENERATIONS_KEY
from verl_lite.trainer.tracking import Tracking, generations_markdown, pick_generations


def test_samples_are_sorted_by_input_shuffled_with_seed_42_and_the_first_n_kept():
    inputs = ["d", "b", "a", "c", "e", "f"]
    # sorted: a b c d e f; numpy's RandomState(42).shuffle of 6 items gives the order 0 1 5 2 4 3
    picked = pick_generations(inputs, [i.upper() for i in inputs], [4, 2, 1, 3, 5, 6], 3)
    assert picked == [("a", "A", 1.0), ("b", "B", 2.0), ("f", "F", 6.0)]
    assert pick_generations(inputs, inputs, [0] * 6, 0) == []
    assert len(pick_generations(inputs, inputs, [0] * 6, 100)) == 6  # more than there are: all of them


def test_the_jsonl_row_holds_the_samples_and_the_console_a_table(tmp_path, caplog):
    samples = [("1+1=", "2", 1.0), ("line\nbreak", "x", 0.0)]
    tracking = Tracking(["console", "jsonl"], str(tmp_path), console_keys=("val/score",))
    with caplog.at_level(logging.INFO, logger="verl_lite.trainer.tracking"):
        tracking.log({"val/score": 0.5, GENERATIONS_KEY: samples}, 3)
    tracking.close()
    (row,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert row == {"step": 3, "val/score": 0.5, GENERATIONS_KEY: [{"input": "1+1=", "output": "2", "score": 1.0},
                                                                  {"input": "line\nbreak", "output": "x", "score": 0.0}]}
    table = caplog.messages[-1].splitlines()
    cells = [[c.strip() for c in line.split(" | ")] for line in table]
    assert cells[1] == ["step", "input", "output", "score"]
    assert cells[3:] == [["3", "1+1=", "2", "1"], ["3", "line\\nbreak", "x", "0"]]
    assert "val/generations" not in caplog.messages[-2]  # the key=value line keeps the metrics only


def test_tensorboard_gets_verls_text_entry():
    text = generations_markdown([("q", "a", 0.5)], 7)
    assert text == ("**Generation Results - Step 7**\n\n### Sample 1\n**Input:** q\n\n**Output:** a\n\n"
                    "**Score:** 0.5\n\n---\n\n")


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=6)


def _run(data_dir, out_dir, n):
    from verl_lite.trainer.run import run

    cfg = load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=grpo",
        "trainer.device=cpu", "trainer.total_training_steps=1", "trainer.val_before_train=true",
        "trainer.test_freq=1", f"trainer.default_local_dir={out_dir}", "trainer.ray=false",
        "trainer.logger=[console,jsonl]", "trainer.plot_rewards=false", f"trainer.log_val_generations={n}",
    ])
    assert run(cfg) == 0
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_logs_two_validation_samples_chosen_as_verl_chooses_and_zero_logs_none(data_dir, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="verl_lite.trainer.tracking"):
        rows = _run(data_dir, tmp_path / "two", 2)
    val_rows = [r for r in rows if "val/score" in r]
    assert [r["step"] for r in val_rows] == [0, 1]
    # the copy task's validation questions (copy_task_data: seed 0, so the val split's seed is 1)
    questions = [r["extra_info"]["question"] for r in make_rows(6, "copy", 3, 1, "val")]
    expected = [q for q, _, _ in pick_generations(questions, questions, [0] * 6, 2)]
    for r in val_rows:
        samples = r[GENERATIONS_KEY]
        assert [re.search(r"\d{3}=", s["input"]).group(0) for s in samples] == expected
        for s in samples:  # each score is the reward of that output
            truth = re.search(r"(\d{3})=", s["input"]).group(1)
            assert s["score"] == pytest.approx(compute_score("verl_lite/copy", s["output"], truth))
    tables = [m for m in caplog.messages if m.startswith("validation generations at step")]
    assert len(tables) == 2 and all(len(t.splitlines()) == 5 for t in tables)  # title, header, rule, 2 rows

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verl_lite.trainer.tracking"):
        rows = _run(data_dir, tmp_path / "none", 0)
    assert not any(GENERATIONS_KEY in r for r in rows) and any("val/score" in r for r in rows)
    assert not any(m.startswith("validation generations") for m in caplog.messages)


def test_wandb_gets_verls_table_with_a_row_per_validation(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracking = Tracking("wandb", str(tmp_path), project="proj", experiment="exp")
    wandb_logger = tracking.loggers[0]
    logged = []
    monkeypatch.setattr(wandb_logger.run, "log", lambda row, step: logged.append((step, row)))
    tracking.log({"val/score": 1.0, GENERATIONS_KEY: [("q1", "a1", 1.0), ("q2", "a2", 0.0)]}, 2)
    tracking.log({"val/score": 0.5, GENERATIONS_KEY: [("q1", "b1", 0.5), ("q2", "b2", 0.5)]}, 4)
    tracking.close()
    (_, first), (step, last) = logged
    table = last[GENERATIONS_KEY]
    assert step == 4 and last["val/score"] == 0.5
    assert table.columns == ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    assert table.data == [[2, "q1", "a1", 1.0, "q2", "a2", 0.0], [4, "q1", "b1", 0.5, "q2", "b2", 0.5]]
    assert len(first[GENERATIONS_KEY].data) == 1


def test_the_fully_async_trainer_logs_the_same_samples(ray_cluster, data_dir, tmp_path):
    from verl_lite.trainer.run import run

    out = tmp_path / "async"
    cfg = load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=grpo", "trainer.device=cpu",
        "trainer.total_training_steps=1", "trainer.val_before_train=true", f"trainer.default_local_dir={out}",
        "trainer.logger=[jsonl]", "trainer.plot_rewards=false", "trainer.log_val_generations=2",
        "async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
    ])
    assert run(cfg) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (val,) = [r for r in rows if r["step"] == 0]
    questions = [r["extra_info"]["question"] for r in make_rows(6, "copy", 3, 1, "val")]
    expected = [q for q, _, _ in pick_generations(questions, questions, [0] * 6, 2)]
    assert [re.search(r"\d{3}=", s["input"]).group(0) for s in val[GENERATIONS_KEY]] == expected
