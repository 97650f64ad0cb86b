"""verl's older spellings (config/verl_legacy.py): each legacy reward_model.* / custom_reward_function.* /
sandbox_fusion.* key converted to verl's reward.* key as verl's migrate_legacy_reward_impl does, the
older DAPO spelling reward_model.overlong_buffer.*, trainer.use_legacy_worker_impl, and the line the
check prints for each conversion."""

from __future__ import annotations

import pytest

from verl_lite import check
from verl_lite.config import verl_legacy, verl_names
from verl_lite.config.compose import compose_config, to_dataclass
from verl_lite.config.generated import verl_keys
from verl_lite.preflight.run import compose_and_check

CPU_LINE = ["trainer.device=cpu"]

# legacy key -> (verl's current key, verl_lite's key for it, or None where it is refused, and what the refusal says)
TABLE = {
    "reward_model.reward_manager": ("reward.reward_manager.name", "reward_model.reward_manager"),
    "reward_model.enable": ("reward.reward_model.enable", "reward_model.enable"),
    "reward_model.reward_kwargs.max_resp_len": ("reward.reward_kwargs.max_resp_len",
                                                "reward_model.reward_kwargs.max_resp_len"),
    "custom_reward_function.path": ("reward.custom_reward_function.path", "custom_reward_function.path"),
    "custom_reward_function.name": ("reward.custom_reward_function.name", "custom_reward_function.name"),
    "reward_model.overlong_buffer.enable": ("reward.reward_kwargs.overlong_buffer_cfg.enable",
                                            "reward_model.reward_kwargs.overlong_buffer_cfg.enable"),
    "reward_model.overlong_buffer.len": ("reward.reward_kwargs.overlong_buffer_cfg.len",
                                         "reward_model.reward_kwargs.overlong_buffer_cfg.len"),
    "reward_model.overlong_buffer.penalty_factor": ("reward.reward_kwargs.overlong_buffer_cfg.penalty_factor",
                                                    "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor"),
    "reward_model.overlong_buffer.log": ("reward.reward_kwargs.overlong_buffer_cfg.log",
                                         "reward_model.reward_kwargs.overlong_buffer_cfg.log"),
    "reward_model.num_workers": ("reward.num_workers", None, "reward-loop workers"),
    "reward_model.reward_loop_source": ("reward.reward_manager.source", None, "reward managers from a module"),
    "reward_model.reward_loop_module_path": ("reward.reward_manager.module.path", None, "reward managers from a module"),
    "reward_model.reward_loop_class_name": ("reward.reward_manager.module.name", None, "reward managers from a module"),
    "reward_model.enable_resource_pool": ("reward.reward_model.enable_resource_pool", None, "reward models"),
    "reward_model.n_gpus_per_node": ("reward.reward_model.n_gpus_per_node", None, "reward models"),
    "reward_model.nnodes": ("reward.reward_model.nnodes", None, "reward models"),
    "reward_model.model.path": ("reward.reward_model.model_path", None, "reward models"),
    "reward_model.rollout.name": ("reward.reward_model.rollout.name", None, "reward models"),
    "reward_model.rollout.tensor_model_parallel_size": ("reward.reward_model.rollout.tensor_model_parallel_size",
                                                        None, "reward models"),
    "sandbox_fusion.url": ("reward.sandbox_fusion.url", None, "sandbox-fusion"),
    "actor_rollout_ref.actor.optim.grad_clip": ("actor_rollout_ref.actor.optim.clip_grad",
                                                "actor_rollout_ref.actor.optim.clip_grad"),
    "critic.optim.grad_clip": ("critic.optim.clip_grad", "critic.optim.clip_grad"),
}
VALUES = {"reward_model.reward_manager": "dapo", "reward_model.enable": False, "custom_reward_function.path": "/r.py",
          "custom_reward_function.name": "score", "reward_model.overlong_buffer.enable": True,
          "reward_model.overlong_buffer.log": True, "reward_model.rollout.name": "vllm", "reward_model.model.path": "/rm",
          "reward_model.reward_loop_source": "register", "reward_model.reward_loop_module_path": "/m.py",
          "reward_model.reward_loop_class_name": "M", "sandbox_fusion.url": "http://sandbox",
          "reward_model.enable_resource_pool": True}


def _value(key):
    return VALUES.get(key, 0.5 if key.endswith("penalty_factor") else 4)


def _line(key):
    value = _value(key)
    return f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}"


@pytest.mark.parametrize("legacy", sorted(TABLE))
def test_each_legacy_spelling_is_converted_as_verl_converts_it(legacy):
    verl_key, ours, *why = TABLE[legacy]
    assert verl_legacy.current(legacy)[0] == verl_key
    # a key of verl's config, or one below reward.reward_kwargs, which verl's migration adds (open_dict:
    # reward_loop.py:71-72)
    assert verl_key in verl_keys.KEYS or verl_key.startswith("reward.reward_kwargs."), verl_key
    cfg, problems = compose_config(["trainer.device=cpu", _line(legacy)])
    if ours is None:  # what the converted key asks for, verl_lite lacks: refused by name, with the conversion
        assert len(problems) == 1 and problems[0].startswith(legacy + "="), problems
        assert why[0] in problems[0] and "not supported" in problems[0]
        assert f"legacy spelling of {verl_key}: verl's conversion, " in problems[0]
    else:
        assert problems == [], problems
        assert verl_names.alias(legacy) == ours
        node = cfg
        for part in ours.split("."):
            node = node[part]
        assert node == _value(legacy)


def test_the_older_dapo_spelling_measures_the_penalty_to_data_max_response_length_as_main_dapo_did():
    lines = ["trainer.device=cpu", "reward_model.reward_manager=dapo", "data.max_response_length=300",
             "reward_model.overlong_buffer.enable=True", "reward_model.overlong_buffer.len=64",
             "reward_model.overlong_buffer.penalty_factor=1.0"]
    cfg, problems = compose_and_check(lines, for_training=False)
    assert problems == []
    kwargs = to_dataclass(cfg).reward_model.reward_kwargs
    assert (kwargs.max_resp_len, kwargs.overlong_buffer_cfg.enable, kwargs.overlong_buffer_cfg.len,
            kwargs.overlong_buffer_cfg.penalty_factor) == (300, True, 64, 1.0)
    # a line that sets max_resp_len keeps it, in either spelling
    for spelling in verl_legacy.LENGTH_KEYS:
        cfg, problems = compose_config(lines + [f"{spelling}=200"])
        assert problems == [] and to_dataclass(cfg).reward_model.reward_kwargs.max_resp_len == 200


def test_reward_model_enable_false_restates_the_default_and_true_stays_refused_by_name():
    assert compose_and_check(["trainer.device=cpu", "reward_model.enable=False"], False)[1] == []
    problems = compose_and_check(["trainer.device=cpu", "reward_model.enable=True"], False)[1]
    assert len(problems) == 1 and "reward models are not supported" in problems[0]


def test_keys_verls_conversion_drops_are_refused_saying_so():
    for key in verl_legacy.DROPPED:
        problems = compose_config(["trainer.device=cpu", f"{key}=True"])[1]
        assert len(problems) == 1 and "verl's conversion drops this key" in problems[0], problems


@pytest.mark.parametrize("line", ["+trainer.use_legacy_worker_impl=disable", "trainer.use_legacy_worker_impl=disable"])
def test_use_legacy_worker_impl_disable_is_verls_engine_workers_which_verl_lite_runs(line):
    assert compose_and_check(["trainer.device=cpu", line], False)[1] == []


@pytest.mark.parametrize("value", ["auto", "enable", "bogus"])
def test_use_legacy_worker_impl_asking_for_verls_legacy_workers_is_refused_by_name(value):
    problems = compose_config(["trainer.device=cpu", f"+trainer.use_legacy_worker_impl={value}"])[1]
    assert len(problems) == 1 and problems[0].startswith(f"trainer.use_legacy_worker_impl='{value}'")
    assert "legacy workers" in problems[0] and "set it to 'disable'" in problems[0]


def test_the_check_prints_each_conversion_with_verls_source(capsys):
    lines = ["trainer.device=cpu", "reward_model.overlong_buffer.enable=True", "reward_model.overlong_buffer.len=8",
             "reward_model.overlong_buffer.penalty_factor=1.0", "reward_model.reward_manager=dapo",
             "+trainer.use_legacy_worker_impl=disable"]
    assert check.main(lines) == 0
    out = capsys.readouterr().out
    assert ("verl spelling : reward_model.overlong_buffer.len converted to reward.reward_kwargs.overlong_buffer_cfg.len "
            "(verl_lite's reward_model.reward_kwargs.overlong_buffer_cfg.len) (verl's conversion: verl-recipe "
            "recipe/dapo/main_dapo.py:155-157") in out
    assert "reward_model.reward_kwargs.max_resp_len follows data.max_response_length" in out
    assert "trainer.use_legacy_worker_impl=disable: verl's engine workers" in out
    # reward_model.reward_manager is verl_lite's own key: nothing converted, nothing said
    assert "reward_model.reward_manager converted" not in out


def test_the_older_dapo_section_converts_whole_and_its_length_follows_only_with_the_penalty_on():
    cfg, problems = compose_config([*CPU_LINE, "reward_model.reward_manager=dapo", "data.max_response_length=77",
                                    "reward_model.overlong_buffer={enable:true,len:4,penalty_factor:1.0}"])
    kwargs = to_dataclass(cfg).reward_model.reward_kwargs
    assert problems == [] and (kwargs.overlong_buffer_cfg.len, kwargs.max_resp_len) == (4, 77)
    # the recipe's own default (enable False) asks for no penalty, so no length either
    assert verl_legacy.implied_lines(["reward_model.overlong_buffer.enable=False"]) == []
    assert verl_legacy.implied_lines(["reward_model.overlong_buffer.enable=True"]) == [verl_legacy.OVERLONG_LENGTH]
    assert compose_and_check([*CPU_LINE, "reward_model.overlong_buffer.enable=False"], False)[1] == []
