"""The classes of wrong refusal found on verl's documented command lines and scripts, one test per class:
(a) a deprecated spelling verl converts (test_verl_legacy.py holds the table), (b) a value that only
restates verl's default where that is what verl_lite does, (c) vLLM engine switches verl passes
through, (d) a line that names no model judged against verl_lite's tiny default model, (e) a message
calling a value the default that is not verl's."""

from __future__ import annotations

import pytest

from verl_lite.config import schema
from verl_lite.config.compose import compose_config
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.preflight import values
from verl_lite.preflight.run import compose_and_check

CPU = ["trainer.device=cpu"]


def _problems(*lines, training=False):
    return compose_and_check([*CPU, *lines], training)[1]


def test_a_deprecated_optimizer_spelling_is_converted_as_verls_optimizer_config_does():
    # verl/workers/config/optimizer.py:58-61: grad_clip is copied to clip_grad (verl's yaml lacks it: `+`)
    for line in ("+actor_rollout_ref.actor.optim.grad_clip=0.5", "actor_rollout_ref.actor.optim.grad_clip=0.5"):
        cfg, problems = compose_config([*CPU, line])
        assert problems == [] and cfg.actor_rollout_ref.actor.optim.clip_grad == 0.5, problems
    cfg, problems = compose_config([*CPU, "+critic.optim.grad_clip=2.0"])
    assert problems == [] and cfg.critic.optim.clip_grad == 2.0


@pytest.mark.parametrize("line", [
    "trainer.default_hdfs_dir=null",                           # docs/start/multinode.rst:189
    "actor_rollout_ref.rollout.quantization=null",
    "actor_rollout_ref.rollout.skip_tokenizer_init=True", "actor_rollout_ref.rollout.skip_tokenizer_init=False",
    "actor_rollout_ref.rollout.full_determinism=False", "actor_rollout_ref.rollout.prometheus.enable=False",
    "actor_rollout_ref.model.use_shm=False", "transfer_queue.enable=False",
    "actor_rollout_ref.actor.megatron.router_replay.mode=disabled", "actor_rollout_ref.actor.use_prefix_grouper=False",
])
def test_b_a_line_restating_verls_default_that_verl_lite_follows_passes(line):
    assert _problems(line) == _problems()


@pytest.mark.parametrize("line, says", [
    ("trainer.default_hdfs_dir=/hdfs/ckpt", "HDFS"),
    ("actor_rollout_ref.rollout.quantization=fp8", "quantized rollouts"),
    ("actor_rollout_ref.rollout.full_determinism=True", "full-determinism"),
    ("actor_rollout_ref.rollout.prometheus.enable=True", "Prometheus"),
    ("actor_rollout_ref.rollout.seed=7", "set trainer.seed instead"),
    ("actor_rollout_ref.model.use_shm=True", "not supported"),
])
def test_b_any_other_value_is_refused_by_name_with_the_reason(line, says):
    problems = _problems(line)
    assert len(problems) == 1 and problems[0].startswith(line.split("=")[0] + "=") and says in problems[0], problems


def _engine_kwargs(config):
    from verl_lite.rollout.vllm import VLLMRollout

    rollout = VLLMRollout.__new__(VLLMRollout)  # the kwargs alone, without starting vLLM
    rollout.config, rollout.model_config, rollout.device = config, ModelConfig(path="tiny-qwen3"), "cuda"
    rollout.tp, rollout.dp, rollout.ep, rollout.tp_group = 1, 1, 1, None
    rollout.launched, rollout.vision_language, rollout.sleep_mode = False, False, True
    return rollout.engine_kwargs()


def test_c_disable_log_stats_is_passed_to_vllm_as_verl_passes_it():
    """verl's vllm_async_server.py:318 hands rollout.disable_log_stats to vLLM's engine arguments."""
    assert _problems("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.disable_log_stats=False") == []
    assert _engine_kwargs(RolloutConfig(name="vllm"))["disable_log_stats"] is True
    assert _engine_kwargs(RolloutConfig(name="vllm", disable_log_stats=False))["disable_log_stats"] is False
    # through engine_kwargs.vllm: the same value is taken, a different one names the setting
    same = RolloutConfig(name="vllm", disable_log_stats=False, engine_kwargs={"vllm": {"disable_log_stats": False}})
    assert _engine_kwargs(same)["disable_log_stats"] is False
    clash = _problems("actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm."
                      "disable_log_stats=False")
    assert len(clash) == 1 and "actor_rollout_ref.rollout.disable_log_stats" in clash[0], clash
    # under the hf rollout, which has no engine to log, the switch is refused by name
    hf = _problems("actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.disable_log_stats=False")
    assert len(hf) == 1 and "read by the vllm rollout only" in hf[0]


def test_c_every_engine_switch_verl_lite_passes_is_an_argument_of_the_installed_vllm():
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    from verl_lite.preflight.rollout import OWN_SETTINGS, SAME_VALUE

    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    assert not [k for k in {*OWN_SETTINGS, *SAME_VALUE} if k not in fields]
    assert EngineArgs(model="x", disable_log_stats=False).disable_log_stats is False


LONG = ["actor_rollout_ref.rollout.name=vllm", "data.max_prompt_length=512", "data.max_response_length=512"]


def test_d_a_line_that_names_no_model_is_not_judged_against_the_tiny_default_model():
    """docs/advance/grafana_prometheus.md:134 sets the vllm rollout and no model: its 512 + 512 tokens were
    refused against the 128 positions of verl_lite's own tiny default."""
    assert not [p for p in _problems(*LONG) if "max_position_embeddings" in p]
    # a run that trains does load the tiny model: judged against it
    assert [p for p in _problems(*LONG, training=True) if "max_position_embeddings" in p]
    # a line that names a model is judged against it
    named = _problems(*LONG, "actor_rollout_ref.model.path=tiny-qwen3")
    assert [p for p in named if "max_position_embeddings" in p], named


TP8 = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8",
       "trainer.n_gpus_per_node=8", "data.train_batch_size=256", "actor_rollout_ref.actor.ppo_mini_batch_size=256"]


def test_d_a_line_that_names_no_model_is_not_judged_by_the_tiny_default_models_heads():
    """TP=8 on a line without a model was refused for the 4 heads of verl_lite's tiny default."""
    assert not [p for p in _problems(*TP8) if "heads" in p]
    # the same line naming the tiny model (as run_tiny.sh's CHECK=1 does) is judged against it, even when
    # the path it names equals verl_lite's default
    named = _problems(*TP8, "actor_rollout_ref.model.path=tiny-qwen3_5")
    assert [p for p in named if "does not divide the 4 attention heads of tiny-qwen3_5" in p], named
    assert [p for p in _problems(*TP8, training=True) if "heads" in p]


def test_e_no_message_calls_verl_lites_own_default_verls():
    # the rollout: hf is verl_lite's default, verl has none (`???`) and its lines use vllm
    problem = _problems("actor_rollout_ref.rollout.gpu_memory_utilization=0.4")
    assert len(problem) == 1 and "rollout.name=hf (verl_lite's default; verl has none and requires the name)" \
        in problem[0], problem
    assert "the default" not in problem[0]
    chosen = _problems("actor_rollout_ref.rollout.name=vllm", "trainer.device=cuda",
                       "actor_rollout_ref.rollout.calculate_log_probs=False", "actor_rollout_ref.rollout.name=hf")
    assert all("the default" not in p for p in chosen)
    # a number's default: verl_lite's, with verl's beside it where they differ
    assert values._default("data.train_batch_size") == f"; verl_lite's default {schema.DataConfig().train_batch_size} " \
                                                       "(verl's 1024)"
    assert values._default("actor_rollout_ref.actor.clip_ratio") == "; default 0.2"
