"""verl's rollout and validation dumps (trainer.rollout_data_dir, trainer.validation_data_dir) on a tiny
in-process run: the files verl's trainer names ({step}.jsonl), the fields in verl's order, and the values
the step computed (the prompt and response texts, ground truth, score, the reward's extra values)."""

from __future__ import annotations

import json

import pytest

import test_async_ray
from test_trainer import read_metrics, run_training, tiny_overrides
from verl_lite.config import load_config
from verl_lite.data.synthetic import compute_score

REWARD = '''
from verl_lite.data.synthetic import compute_score as copy_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    s = copy_score(data_source, solution_str, ground_truth, extra_info)
    return {"score": s, "acc": s == 1.0, "pred": solution_str.strip()[:3]}
'''


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=4)


def read_rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_each_step_and_validation_is_dumped_as_verl_writes_it(data_dir, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD, encoding="utf-8")
    out, rollouts, vals = tmp_path / "run", tmp_path / "rollouts", tmp_path / "vals"
    run_training(tiny_overrides(data_dir, out, 2, f"custom_reward_function.path={reward}", "trainer.test_freq=2",
                                "trainer.val_before_train=true", f"trainer.rollout_data_dir={rollouts}",
                                f"trainer.validation_data_dir={vals}"))
    assert sorted(p.name for p in rollouts.iterdir()) == ["1.jsonl", "2.jsonl"]
    assert sorted(p.name for p in vals.iterdir()) == ["0.jsonl", "2.jsonl"]  # before training, after step 2
    metrics = {r["step"]: r for r in read_metrics(out)}
    for step in (1, 2):
        rows = read_rows(rollouts / f"{step}.jsonl")
        assert len(rows) == 8 * 8  # train_batch_size prompts x rollout.n
        for row in rows:
            assert list(row) == ["input", "output", "gts", "score", "step", "acc", "pred"]
            assert row["step"] == step
            # the reward's own values for this output and ground truth
            s = compute_score("", row["output"], row["gts"])
            assert (row["score"], row["acc"], row["pred"]) == (pytest.approx(s), s == 1.0, row["output"].strip()[:3])
            assert row["gts"] in row["input"]  # the copy task's prompt holds the digits to copy
        # the rows are the step's batch: their mean score is the step's critic/score/mean
        assert sum(r["score"] for r in rows) / len(rows) == pytest.approx(metrics[step]["critic/score/mean"])
    for step in (0, 2):
        rows = read_rows(vals / f"{step}.jsonl")
        assert len(rows) == 4
        assert [list(r) for r in rows] == [["input", "output", "gts", "score", "step", "reward", "acc", "pred"]] * 4
        assert all(r["reward"] == r["score"] and r["step"] == step for r in rows)
        assert sum(r["score"] for r in rows) / 4 == pytest.approx(metrics[step]["val/score"])


def test_fully_async_dumps_each_step_and_each_validation_as_verls_fully_async_trainer_does(ray_cluster, data_dir,
                                                                                          tmp_path):
    # verl's FullyAsyncTrainer._fit_dump_data (separation/ray_trainer.py:658-665) and the rollouter's _validate
    from verl_lite.trainer.run import run

    reward = tmp_path / "reward.py"
    reward.write_text(REWARD, encoding="utf-8")
    out, rollouts, vals = tmp_path / "run", tmp_path / "rollouts", tmp_path / "vals"
    assert run(load_config(test_async_ray.overrides(
        data_dir, out, 2, f"custom_reward_function.path={reward}", "trainer.test_freq=2",
        f"trainer.rollout_data_dir={rollouts}", f"trainer.validation_data_dir={vals}"))) == 0
    metrics = {r["step"]: r for r in read_metrics(out)}
    assert sorted(p.name for p in rollouts.iterdir()) == ["1.jsonl", "2.jsonl"]
    assert sorted(p.name for p in vals.iterdir()) == ["2.jsonl"]
    for step in (1, 2):
        rows = read_rows(rollouts / f"{step}.jsonl")
        assert len(rows) == 16 * 8 and {tuple(r) for r in rows} == {("input", "output", "gts", "score", "step", "acc",
                                                                     "pred")}
        assert all(r["step"] == step and r["pred"] == r["output"].strip()[:3] for r in rows)
        assert sum(r["score"] for r in rows) / len(rows) == pytest.approx(metrics[step]["critic/score/mean"])
    rows = read_rows(vals / "2.jsonl")
    assert rows and all(list(r)[:6] == ["input", "output", "gts", "score", "step", "reward"] for r in rows)
    assert sum(r["score"] for r in rows) / len(rows) == pytest.approx(metrics[2]["val/score"])
    assert not any(k.startswith("_") for k in metrics[2])  # the rows are not logged as a metric


def test_without_the_settings_nothing_is_dumped_and_verls_keys_are_accepted(data_dir, tmp_path):
    cfg = load_config([f"trainer.rollout_data_dir={tmp_path}/r", f"trainer.validation_data_dir={tmp_path}/v"])
    assert (cfg.trainer.rollout_data_dir, cfg.trainer.validation_data_dir) == (f"{tmp_path}/r", f"{tmp_path}/v")
    assert load_config([]).trainer.rollout_data_dir is None


def test_a_failed_write_is_raised_at_the_next_dump_or_when_the_run_ends(tmp_path):
    from verl_lite.trainer.dumps import Dumps

    (tmp_path / "taken").write_text("a file where the directory should be")
    dumps = Dumps(str(tmp_path / "taken"), None)
    with pytest.raises(FileExistsError, match="taken"):  # at the dump when the write was that quick, else at close
        dumps._submit(dumps.rollout_dir, 1, [{"input": "x"}])
        dumps.close()
