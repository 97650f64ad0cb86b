"""The LR schedule keys of both engines against verl's own: fsdp's LambdaLR against verl's
torch_functional schedules, megatron's OptimizerParamScheduler arguments against the ones verl's
get_megatron_optimizer_param_scheduler derives (tests/py/data/lr_schedule_cases.json, written by
tools/gen_lr_schedule_cases.py in verl's environment), the preflight's refusals of a key the
strategy's verl engine does not read, and the LR logged at every step of tiny training runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verl_lite.config.compose import compose_config
from verl_lite.config.schema import OptimConfig
from verl_lite.engine.torch.optim import build_optimizer, make_lr_lambda
from verl_lite.preflight.run import collect_problems

TABLE = json.loads((Path(__file__).parent / "data" / "lr_schedule_cases.json").read_text())
A = "actor_rollout_ref.actor.optim"


def _case(kind, name):
    return next(c for c in TABLE[kind] if c["name"] == name)


@pytest.mark.parametrize("case", TABLE["fsdp"], ids=[c["name"] for c in TABLE["fsdp"]])
def test_the_fsdp_schedule_gives_verls_lr_at_every_step(case):
    optim = OptimConfig(lr=TABLE["lr"], total_training_steps=case["total_training_steps"], **case["keys"])
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, make_lr_lambda(optim, optim.total_training_steps))
    assert scheduler.get_last_lr()[0] == pytest.approx(case["initial_lr"], abs=1e-15)
    lrs = []
    for _ in range(TABLE["steps"]):
        optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs == pytest.approx(case["lr_after_step"], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("case", TABLE["megatron"], ids=[c["name"] for c in TABLE["megatron"]])
def test_the_megatron_scheduler_gets_the_arguments_verl_derives(case):
    from verl_lite.engine.megatron.optim import scheduler_kwargs

    optim = OptimConfig(lr=TABLE["lr"], total_training_steps=case["total_training_steps"], **case["keys"])
    assert scheduler_kwargs(optim) == case["scheduler_kwargs"]


def test_the_fsdp_optimizer_names_build_torchs_classes():
    params = [torch.nn.Parameter(torch.zeros(1))]
    assert type(build_optimizer(params, OptimConfig())) is torch.optim.AdamW
    adam = build_optimizer(params, OptimConfig(optimizer="Adam", weight_decay=0.1, betas=[0.8, 0.9]))
    assert type(adam) is torch.optim.Adam
    assert adam.param_groups[0]["weight_decay"] == 0.1 and adam.param_groups[0]["betas"] == (0.8, 0.9)


@pytest.mark.parametrize("name", ["AdamW", "Adam"])
def test_the_torch_keyword_table_is_the_installed_torchs(name):
    import inspect

    from verl_lite.decisions.optimizer_overrides import TORCH_OPTIMIZER_KWARGS, TORCH_OWN

    keywords = set(inspect.signature(getattr(torch.optim, name)).parameters) - {"params"}
    assert set(TORCH_OPTIMIZER_KWARGS[name]) == keywords - set(TORCH_OWN)


def test_override_optimizer_config_on_fsdp_reaches_the_torch_optimizer_and_is_checked():
    params = [torch.nn.Parameter(torch.zeros(1))]
    optimizer = build_optimizer(params, OptimConfig(override_optimizer_config={"eps": 1e-5, "amsgrad": True}))
    assert optimizer.param_groups[0]["eps"] == 1e-5 and optimizer.param_groups[0]["amsgrad"] is True
    problems = _problems(f"+{A}.override_optimizer_config.eps=1e-5", f"+{A}.override_optimizer_config.betas=[0.5,0.6]")
    assert problems == [f"actor: {A}.override_optimizer_config.betas=[0.5, 0.6]: verl_lite sets torch.optim.AdamW's "
                        f"betas itself: set {A}.betas instead and remove this line"], problems


def _problems(*lines):
    cfg, composed = compose_config(["trainer.device=cpu", "actor_rollout_ref.model.path=tiny-qwen3", *lines])
    assert composed == []
    return [p for p in collect_problems(cfg, for_training=False) if ".optim." in p]


def test_a_megatron_schedule_key_on_fsdp_is_refused_naming_fsdps_key():
    problems = _problems(f"{A}.lr_decay_steps=10", f"{A}.min_lr=1e-7")
    assert any(f"{A}.lr_decay_steps=10 is not supported on strategy fsdp" in p
               and f"{A}.total_training_steps" in p for p in problems), problems
    assert any(f"{A}.min_lr=1e-07" in p and f"{A}.min_lr_ratio" in p for p in problems), problems


def test_an_fsdp_schedule_key_on_megatron_is_refused_naming_megatrons_key():
    problems = _problems("actor_rollout_ref.actor.strategy=megatron", f"{A}.lr_scheduler_type=cosine",
                         f"{A}.min_lr_ratio=0.1", f"{A}.num_cycles=1.0")
    for key, instead in (("lr_scheduler_type='cosine'", "lr_decay_style"), ("min_lr_ratio=0.1", "min_lr"),
                         ("num_cycles=1.0", "lr_decay_style=cosine")):
        assert any(f"{A}.{key} is not supported on strategy megatron" in p and f"{A}.{instead}" in p
                   for p in problems), (key, problems)


def test_verls_megatron_schedule_lines_pass_on_megatron():
    assert _problems("actor_rollout_ref.actor.strategy=megatron", f"{A}.lr_decay_style=constant",
                     f"{A}.lr_decay_steps=51200", f"{A}.min_lr=1e-6", f"{A}.optimizer=adam") == []


@pytest.mark.parametrize("strategy,name,valid", [("fsdp", "adam", "AdamW, Adam"), ("megatron", "AdamW", "adam"),
                                                 ("fsdp", "AdamW8bit", "AdamW, Adam")])
def test_an_optimizer_name_the_engine_does_not_build_is_refused_with_the_list(strategy, name, valid):
    problems = _problems(f"actor_rollout_ref.actor.strategy={strategy}", f"{A}.optimizer={name}")
    assert any(f"{A}.optimizer={name!r}" in p and f"choose one of {valid}" in p for p in problems), problems


def test_wsd_without_its_decay_length_is_refused():
    problems = _problems("actor_rollout_ref.actor.strategy=megatron", f"{A}.lr_decay_style=WSD")
    assert any("lr_wsd_decay_steps" in p for p in problems), problems


def test_another_optimizer_module_is_refused():
    problems = _problems(f"{A}.optimizer_impl=bitsandbytes.optim")
    assert any("optimizer_impl='bitsandbytes.optim'" in p and "torch.optim" in p for p in problems), problems


# ---------------------------------------------------------------------------- tiny runs

@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def _run_lrs(data_dir, out, *lines):
    from test_trainer import read_metrics, run_training, tiny_overrides

    run_training(tiny_overrides(data_dir, out, 3, "actor_rollout_ref.model.path=tiny-qwen3_5",
                                "algorithm.adv_estimator=gae", "critic.optim.lr=2e-3", "actor_rollout_ref.rollout.n=2",
                                *lines))
    rows = read_metrics(out)
    return [r["actor/lr"] for r in rows], [r["critic/lr"] for r in rows]


def test_a_ppo_run_on_fsdp_logs_verls_lr_at_every_step(data_dir, tmp_path):
    """Actor: warm-up (34% of 3 steps = 1), cosine to min_lr_ratio 0.1; critic: constant after a 2-step warm-up."""
    actor, critic = _run_lrs(data_dir, tmp_path / "fsdp", f"{A}.lr_scheduler_type=cosine",
                             f"{A}.lr_warmup_steps_ratio=0.34", f"{A}.min_lr_ratio=0.1", "critic.optim.lr_warmup_steps=2")
    assert actor == pytest.approx(_case("fsdp", "run_cosine")["lr_after_step"][:3], rel=1e-9)
    assert critic == pytest.approx(_case("fsdp", "run_constant")["lr_after_step"][:3], rel=1e-9)


@pytest.mark.megatron
def test_a_ppo_run_on_megatron_logs_megatrons_lr_at_every_step(data_dir, tmp_path):
    """megatron-core's schedule after step n (warm-up 1 step, cosine over 3 to min_lr 2e-4):
    n=1: lr * 1/1 = 2e-3; n=2: min + (lr - min) * (cos(pi/2) + 1)/2 = 1.1e-3; n=3: min = 2e-4.
    Critic, constant after 2 warm-up steps: 1e-3, 2e-3, 2e-3 (the fsdp run's numbers, as verl's)."""
    actor, critic = _run_lrs(data_dir, tmp_path / "megatron", "actor_rollout_ref.actor.strategy=megatron",
                             "critic.strategy=megatron", f"{A}.lr_decay_style=cosine", f"{A}.lr_warmup_steps=1",
                             f"{A}.min_lr=2e-4", "critic.optim.lr_warmup_steps=2")
    assert actor == pytest.approx([2e-3, 1.1e-3, 2e-4], rel=1e-9)
    assert critic == pytest.approx([1e-3, 2e-3, 2e-3], rel=1e-9)
