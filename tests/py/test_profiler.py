"""global_profiler / <role>.profiler: torch.profiler traces of the listed steps only, as verl's
global_profiler.tool=torch writes them; the tools verl_lite cannot run are refused with the reason."""

from __future__ import annotations

import gzip
import json

import pytest

from verl_lite.config import load_config
from verl_lite.trainer.profiling import profiler_problems


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=4)


def test_a_run_profiling_step_1_writes_a_trace_of_step_1_only(data_dir, tmp_path):
    from verl_lite.trainer.run import run

    traces = tmp_path / "traces"
    cfg = load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=grpo",
        "trainer.device=cpu", "trainer.total_training_steps=2", f"trainer.default_local_dir={tmp_path / 'run'}",
        "trainer.ray=false", "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
        "global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={traces}",
        "actor_rollout_ref.actor.profiler.enable=True", "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cpu]",
    ])
    assert run(cfg) == 0
    assert sorted(p.name for p in traces.iterdir()) == ["actor_step1_rank0.json.gz"]
    events = json.loads(gzip.decompress((traces / "actor_step1_rank0.json.gz").read_bytes()))["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert any("aten::" in n for n in names)  # the step's torch ops were recorded


def _problems(*lines):
    return profiler_problems(load_config(["trainer.device=cpu", *lines]))


@pytest.mark.parametrize("tool, fragment", [
    ("npu", "torch_npu's profiler (Ascend) is not supported by verl_lite yet"),
    ("nsys", "run the training command under `nsys profile` yourself"),
    ("torch_memory", "torch.cuda.memory snapshots are not supported by verl_lite yet"),
    ("perf", "choose one of torch (or null)"),
])
def test_tools_verl_lite_cannot_run_are_refused_with_the_reason(tool, fragment):
    (problem,) = _problems(f"global_profiler.tool={tool}", "global_profiler.steps=[1]")
    assert problem.startswith(f"global_profiler.tool={tool!r}: ") and fragment in problem


def test_bad_steps_contents_and_a_missing_tool_are_refused():
    assert "[0] are not" in _problems("global_profiler.tool=torch", "global_profiler.steps=[0,2]")[0]
    assert "no global_profiler.tool" in _problems("global_profiler.steps=[1]",
                                                  "actor_rollout_ref.actor.profiler.enable=True")[0]
    assert "choose from cuda, cpu, memory, shapes, stack" in _problems(
        "critic.profiler.tool_config.torch.contents=[gpu]")[0]
    assert _problems("global_profiler.tool=torch", "global_profiler.steps=[1,3]",
                     "actor_rollout_ref.actor.profiler.enable=True") == []
