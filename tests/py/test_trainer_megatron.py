"""The trainer with actor.strategy=megatron on CPU (megatron-core over gloo, the tiny Qwen3 dense model)."""

from __future__ import annotations

import pytest
from test_trainer import data_dir, read_metrics, run_training, tiny_overrides  # noqa: F401

pytestmark = pytest.mark.megatron  # conftest skips it where megatron-core is missing

MEGATRON = ("actor_rollout_ref.model.path=tiny-qwen3", "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.megatron.sequence_parallel=false",
            "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false")


def test_grpo_with_the_megatron_engine_raises_the_mean_reward(data_dir, tmp_path):  # noqa: F811
    out = tmp_path / "megatron"
    run_training(tiny_overrides(data_dir, out, 60, *MEGATRON, "data.train_batch_size=16",
                                "actor_rollout_ref.actor.ppo_mini_batch_size=8"))
    scores = [r["critic/score/mean"] for r in read_metrics(out)]
    first, last = sum(scores[:10]) / 10, sum(scores[-10:]) / 10
    assert last > first + 0.15, f"reward did not rise: first 10 steps {first:.3f}, last 10 steps {last:.3f}"


def test_ppo_with_a_megatron_critic_on_the_tiny_qwen3_5(data_dir, tmp_path):  # noqa: F811
    """transformers has no token-classification class for Qwen3.5: the critic's seeded init is the
    causal LM's backbone plus a fresh value head, and the critic trains."""
    import math

    out = tmp_path / "ppo"
    run_training(tiny_overrides(data_dir, out, 3, "actor_rollout_ref.model.path=tiny-qwen3_5",
                                "actor_rollout_ref.actor.strategy=megatron", "critic.strategy=megatron",
                                "algorithm.adv_estimator=gae"))
    rows = read_metrics(out)
    assert len(rows) == 3
    losses = [r["critic/vf_loss"] for r in rows]
    assert all(math.isfinite(x) for x in losses) and len(set(losses)) > 1, losses


def test_grpo_steps_on_the_megatron_engine_equal_the_torch_engines(data_dir, tmp_path):  # noqa: F811
    """Same tiny Qwen3.5, seed and data: three GRPO steps give the torch engine's gradient norms,
    losses and rewards. A sampled pad token once made the first step differ (megatron's embedding
    has no padding index: megatron_model.freeze_padding_row)."""
    rows = {}
    for strategy in ("fsdp", "megatron"):
        out = tmp_path / strategy
        run_training(tiny_overrides(data_dir, out, 3, "actor_rollout_ref.model.path=tiny-qwen3_5",
                                    f"actor_rollout_ref.actor.strategy={strategy}", "data.train_batch_size=16",
                                    "actor_rollout_ref.actor.ppo_mini_batch_size=8"))
        rows[strategy] = read_metrics(out)
    for key in ("actor/grad_norm", "actor/pg_loss", "actor/ppo_kl", "critic/score/mean"):
        torch_side = [r[key] for r in rows["fsdp"]]
        megatron_side = [r[key] for r in rows["megatron"]]
        assert megatron_side == pytest.approx(torch_side, rel=1e-4, abs=1e-6), (key, torch_side, megatron_side)
