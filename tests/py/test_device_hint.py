"""A GPU script checked on a CPU box: with trainer.device=auto resolved to cpu, a problem the GPU run
would not have (it vanishes when the same rules run for cuda or npu) adds one hint line at the end of
the problem list naming trainer.device=cuda; an explicit cpu, a device-free problem, or auto resolving
to a GPU adds none."""

from __future__ import annotations

import pytest

from verl_lite import device as devices
from verl_lite.config import compose_config
from verl_lite.preflight import run as preflight

BF16_ON_MEGATRON = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.strategy=megatron",
                    "actor_rollout_ref.actor.megatron.dtype=bfloat16"]


@pytest.fixture
def auto_is(monkeypatch):
    """Make trainer.device=auto resolve to the given device, whatever this machine has."""
    real = devices.resolve_device

    def set_to(target: str) -> None:
        monkeypatch.setattr(devices, "resolve_device",
                            lambda name="auto", probe=None: target if name == "auto" else real(name, probe))
    return set_to


def problems(*overrides: str, for_training: bool = False):
    cfg, composed = compose_config(list(overrides))
    assert composed == []
    return preflight.collect_problems(cfg, for_training=for_training)


def test_a_problem_only_cpu_has_ends_the_list_with_one_hint(auto_is):
    auto_is("cpu")
    found = problems(*BF16_ON_MEGATRON, "actor_rollout_ref.actor.optim.lr=nan")
    assert found[-1] == preflight.AUTO_CPU_HINT
    assert found.count(preflight.AUTO_CPU_HINT) == 1
    assert any("megatron.dtype='bfloat16'" in p for p in found)
    assert any("optim.lr=nan" in p for p in found)


def test_vllm_limits_on_cpu_give_the_hint(auto_is):
    auto_is("cpu")
    found = problems("algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm",
                     "actor_rollout_ref.rollout.free_cache_engine=True",
                     "actor_rollout_ref.actor.strategy=megatron",
                     "actor_rollout_ref.actor.optim.override_optimizer_config.use_precision_aware_optimizer=True")
    assert found and found[-1] == preflight.AUTO_CPU_HINT


def test_an_explicit_cpu_gets_no_hint(auto_is):
    auto_is("cpu")
    found = problems(*BF16_ON_MEGATRON, "trainer.device=cpu")
    assert found and preflight.AUTO_CPU_HINT not in found


def test_a_problem_the_gpu_run_has_too_gets_no_hint(auto_is):
    auto_is("cpu")
    found = problems("actor_rollout_ref.actor.optim.lr=nan")
    assert found == ["actor_rollout_ref.actor.optim.lr=nan: must be a finite number >= 0 (Adam's step size; 0 trains "
                     "nothing; default 1e-06)"]


def test_auto_resolving_to_a_gpu_gets_no_hint(auto_is):
    auto_is("cuda")
    found = problems(*BF16_ON_MEGATRON, "actor_rollout_ref.actor.megatron.dtype=float16")
    assert found and preflight.AUTO_CPU_HINT not in found


def test_a_run_without_problems_gets_no_hint(auto_is):
    auto_is("cpu")
    assert problems("algorithm.adv_estimator=grpo") == []
