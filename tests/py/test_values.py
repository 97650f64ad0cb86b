"""The numeric-value rules (verl_lite/preflight/values.py), driven by their own table: for every rule
and every key it names, values outside the range are refused naming the key, the value and the range,
and values inside pass; the default config has no value problem; the check's command line refuses
lr=nan before anything starts."""

from __future__ import annotations

import math
from typing import List, Tuple

import pytest

from verl_lite.config import compose_config
from verl_lite.config import keys
from verl_lite.preflight import run as preflight
from verl_lite.preflight import values
from verl_lite.preflight.values import RULES, Range, Rule


def _cases() -> List[Tuple[Rule, str]]:
    return [(rule, key) for rule in RULES for key in values.rule_keys(rule)]


CASES = _cases()
IDS = [key for _, key in CASES]


def _text(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return str(int(v)) if float(v).is_integer() else repr(v)


def _typed_int(key: str) -> bool:
    """Whether the schema types the key as an integer (NaN cannot be composed into it)."""
    info = keys.key_table().get(key)
    return info is not None and "int" in keys.type_name(info.type) and "float" not in keys.type_name(info.type)


def bad_values(r: Range, key: str) -> List[float]:
    out: List[float] = []
    if not _typed_int(key):
        out += [math.nan] + ([math.inf] if math.inf not in r.also else [])
    if r.low is not None:
        below = r.low if r.low_open else r.low - 1
        while below in r.also:
            below -= 1
        out.append(below)
    if r.high is not None:
        out.append(r.high if r.high_open else r.high + 1)
    if r.integer and not _typed_int(key):
        out.append((r.low if r.low is not None else 0) + 1.5)
    return out


def good_values(r: Range) -> List[float]:
    if r.low is None:
        out = [0.5] if r.high is None else [r.high - 0.5]
    elif not r.low_open:
        out = [r.low]
    else:
        out = [(r.low + r.high) / 2 if r.high is not None else r.low + 1]
    if r.high is not None and not r.high_open:
        out.append(r.high)
    return out + list(r.also)


def enabling(rule: Rule, key: str) -> List[str]:
    """Overrides under which the rule's key is read: its role runs and each `when` holds."""
    out = ["algorithm.adv_estimator=gae"]  # the critic runs
    if key.startswith("actor_rollout_ref.ref."):
        out.append("actor_rollout_ref.actor.use_kl_loss=True")
    out += [f"{k}={allowed[0]}" for k, allowed in rule.when if k != "algorithm.adv_estimator"]
    return out


def value_lines(rule: Rule, key: str, value: str) -> List[str]:
    cfg, problems = compose_config(enabling(rule, key) + [f"{key}={value}"])
    assert problems == [], problems
    return [p for p in values.value_problems(cfg) if p.startswith(f"{key}=")]


@pytest.mark.parametrize("rule,key", CASES, ids=IDS)
def test_a_value_outside_the_range_is_refused_naming_the_key_the_value_and_the_range(rule, key):
    if rule.each:
        bad = [f"[{_text(b)},0.9]" for b in bad_values(rule.range, key)] + ["[0.9]", "[0.9,0.9,0.9]"]
    else:
        bad = [_text(b) for b in bad_values(rule.range, key)]
    assert bad
    for value in bad:
        lines = value_lines(rule, key, value)
        assert len(lines) == 1, (value, lines)
        assert rule.range.text() in lines[0] and ": must be " in lines[0], lines[0]


@pytest.mark.parametrize("rule,key", CASES, ids=IDS)
def test_a_value_inside_the_range_passes(rule, key):
    for good in good_values(rule.range):
        value = f"[{_text(good)},{_text(good)}]" if rule.each else _text(good)
        assert value_lines(rule, key, value) == [], value
    if rule.range.nullable:
        assert value_lines(rule, key, "null") == []


def test_the_default_config_has_no_value_problem():
    cfg, problems = compose_config([])
    assert problems == []
    assert values.value_problems(cfg) == []
    assert not [p for p in preflight.collect_problems(cfg, for_training=False) if ": must be " in p]


def test_every_rule_names_at_least_one_key_and_its_source():
    for rule in RULES:
        assert values.rule_keys(rule), rule.pattern
        assert rule.source and rule.why


def test_the_learning_rate_of_every_role_is_checked():
    assert values.rule_keys(next(r for r in RULES if r.pattern == values.LR)) == [
        "actor_rollout_ref.actor.optim.lr", "critic.optim.lr"]


def test_the_message_reads_key_value_and_range():
    cfg, _ = compose_config(["actor_rollout_ref.actor.optim.lr=-1"])
    assert values.value_problems(cfg) == [
        "actor_rollout_ref.actor.optim.lr=-1.0: must be a finite number >= 0 (Adam's step size; 0 trains nothing; "
        "default 1e-06)"]


def test_a_learning_rate_of_zero_is_accepted_as_torch_and_verl_accept_it_but_warned():
    cfg, _ = compose_config(["actor_rollout_ref.actor.optim.lr=0"])
    assert values.value_problems(cfg) == []
    assert any(w.startswith("actor_rollout_ref.actor.optim.lr=0: the role's weights never change")
               for w in preflight.collect_warnings(cfg))


def test_numbers_written_as_strings_are_read_as_numbers():
    key = "actor_rollout_ref.rollout.val_kwargs.temperature"
    cfg, _ = compose_config([f"{key}='0.7'"])
    assert values.value_problems(cfg) == []
    cfg, _ = compose_config([f"{key}='1e-6'"])
    assert values.value_problems(cfg) == []
    cfg, _ = compose_config([f"{key}=warm"])
    assert values.value_problems(cfg) == [f"{key}='warm': must be a finite number >= 0 (the validation sampling "
                                          "temperature; 0 = greedy)"]


@pytest.mark.parametrize("overrides,line", [
    # the critic does not run with grpo: verl builds no critic config, its values are not read
    (["algorithm.adv_estimator=grpo", "critic.optim.lr=-1"], "critic.optim.lr"),
    # the ref runs only with a KL
    (["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=0"], "actor_rollout_ref.ref."),
    # gspo has no dual clip (verl asserts clip_ratio_c > 1 in the vanilla loss only)
    (["actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.clip_ratio_c=0.5"],
     "actor_rollout_ref.actor.clip_ratio_c"),
    # the adaptive controller's settings without it
    (["algorithm.kl_ctrl.horizon=0"], "algorithm.kl_ctrl.horizon"),
    (["algorithm.adv_estimator=grpo", "algorithm.gamma=2"], "algorithm.gamma"),
])
def test_values_that_are_not_read_in_this_run_are_not_refused(overrides, line):
    cfg, problems = compose_config(overrides)
    assert problems == []
    assert not [p for p in values.value_problems(cfg) if p.startswith(line)]


def test_nan_in_a_list_is_refused():
    cfg, _ = compose_config(["critic.optim.betas=[nan,0.999]"])
    assert values.value_problems(cfg) == [
        "critic.optim.betas=[nan, 0.999]: must be 2 numbers, each a finite number in [0, 1) (Adam's beta1 and "
        "beta2; default [0.9, 0.999])"]


def test_fully_async_timeouts_refuse_nan():
    from verl_lite.preflight.fully_async import fully_async_problems

    cfg, _ = compose_config(["async_training.enable=True", "async_training.queue_timeout_s=nan",
                             "async_training.reweight_cap=nan"])
    text = "\n".join(fully_async_problems(cfg))
    assert "queue_timeout_s=nan must be > 0" in text and "reweight_cap=nan must be > 0" in text


def test_the_check_cli_refuses_a_nan_learning_rate(run_module):
    result = run_module("verl_lite.check", "actor_rollout_ref.actor.optim.lr=nan")
    assert result.returncode == 1
    assert "actor_rollout_ref.actor.optim.lr=nan: must be a finite number >= 0" in result.stderr
    assert "Traceback" not in result.stderr
