"""Config composition: Hydra override grammar on the structured schema, and every kind of config
error reported at once with a fix."""

import sys
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from verl_lite.config import ConfigError, VerlLiteConfig, compose_config, keys, load_config, to_dataclass

OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"


def problems_of(*overrides):
    with pytest.raises(ConfigError) as info:
        load_config(list(overrides))
    return info.value.problems


# ---------------------------------------------------------------------------- composing


def test_defaults_compose_into_a_resolved_dictconfig_with_verl_key_names():
    cfg = load_config([])
    assert isinstance(cfg, DictConfig)
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp"
    assert cfg.trainer.default_local_dir == "checkpoints/verl_lite/default"  # interpolation resolved


def test_plain_overrides_set_typed_values_and_interpolations_follow_them():
    cfg = load_config(["data.train_batch_size=64", "trainer.project_name=p", "actor_rollout_ref.actor.optim.lr=2e-6"])
    assert cfg.data.train_batch_size == 64
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(2e-6)
    assert cfg.trainer.default_local_dir == "checkpoints/p/default"


def test_a_list_override_replaces_the_list():
    assert list(load_config(["trainer.logger=[console]"]).trainer.logger) == ["console"]
    assert list(load_config(["trainer.logger=[console,jsonl,tensorboard]"]).trainer.logger) == [
        "console",
        "jsonl",
        "tensorboard",
    ]


def test_plus_adds_new_keys_inside_open_sections_with_parsed_types():
    cfg = load_config(
        [f"+{OTC}.use_ascend_gdn=True", f"+{OTC}.recompute_num_layers=1", f"+{OTC}.attention_backend=flash"]
    )
    assert dict(cfg.actor_rollout_ref.actor.megatron.override_transformer_config) == {
        "use_ascend_gdn": True,
        "recompute_num_layers": 1,
        "attention_backend": "flash",
    }


def test_double_plus_adds_or_replaces_and_tilde_deletes_inside_open_sections():
    cfg = load_config([f"+{OTC}.a=1", f"++{OTC}.a=2", f"++{OTC}.b=3", f"~{OTC}.b"])
    assert dict(cfg.actor_rollout_ref.actor.megatron.override_transformer_config) == {"a": 2}


def test_tilde_with_a_value_deletes_only_when_the_value_matches():
    assert any("its value is 1, not 2" in p for p in problems_of(f"+{OTC}.a=1", f"~{OTC}.a=2"))


def test_plus_on_a_key_whose_value_in_verls_config_is_null_sets_it_as_hydra_does():
    assert load_config(["+trainer.total_training_steps=5"]).trainer.total_training_steps == 5
    # critic.strategy is null in verl_lite's schema but fsdp in verl's config: verl's Hydra refuses the line
    (problem,) = problems_of("+critic.strategy=megatron")
    assert problem.startswith("cannot add 'critic.strategy': it already exists in verl's config (= 'fsdp')")


def test_plus_on_a_key_only_verls_other_trainer_config_has_adds_it():
    # verl's fsdp trainer (ppo_trainer) has no megatron section: + adds the key there, as verl's Hydra does
    cfg = load_config([f"+{OTC}.attention_backend=flash"])
    assert cfg.actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend == "flash"
    (problem,) = problems_of("--config-name=ppo_megatron_trainer", f"+{OTC}.attention_backend=flash")
    assert problem.startswith(f"cannot add '{OTC}.attention_backend': it already exists in verl's config (= 'flash')")
    cfg, problems = compose_config(["--config-name=ppo_megatron_trainer",
                                    "+actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16"])
    assert problems == [] and cfg.actor_rollout_ref.actor.fsdp_config.model_dtype == "bfloat16"


def test_quoted_values_stay_strings():
    assert load_config(["trainer.experiment_name='run 1'"]).trainer.experiment_name == "run 1"


def test_gpu_is_accepted_and_normalised_to_cuda():
    assert load_config(["trainer.device=gpu"]).trainer.device == "cuda"
    assert load_config(["trainer.device=NPU"]).trainer.device == "npu"


def test_to_dataclass_returns_the_plain_schema_object_with_overrides():
    obj = to_dataclass(load_config(["data.train_batch_size=8", f"+{OTC}.x=1"]))
    assert isinstance(obj, VerlLiteConfig)
    assert obj.data.train_batch_size == 8
    assert obj.actor_rollout_ref.actor.megatron.override_transformer_config == {"x": 1}


# ---------------------------------------------------------------------------- errors


def test_config_error_is_a_value_error_whose_message_lists_each_problem():
    with pytest.raises(ValueError) as info:
        load_config(["trainer.n_gpu_per_node=3", "data.train_batch_size=abc"])
    assert isinstance(info.value, ConfigError)
    assert len(info.value.problems) == 2
    assert str(info.value).startswith("2 config problems:")
    assert all(p in str(info.value) for p in info.value.problems)


def test_a_typo_in_a_key_gets_the_real_key_as_a_suggestion():
    (problem,) = problems_of("trainer.n_gpu_per_node=3")
    assert problem == "unknown key 'trainer.n_gpu_per_node'; did you mean trainer.n_gpus_per_node?"


def test_a_key_in_the_wrong_section_suggests_the_keys_with_that_name():
    (problem,) = problems_of("actor_rollout_ref.actor.tensor_model_parallel_size=2")
    assert "did you mean actor_rollout_ref.actor.megatron.tensor_model_parallel_size" in problem
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size" in problem


def test_a_misspelled_section_is_matched_over_the_full_dotted_name():
    (problem,) = problems_of("actor_rollout_ref.actr.ppo_mini_batch_size=4")
    assert "did you mean actor_rollout_ref.actor.ppo_mini_batch_size" in problem


def test_a_key_with_nothing_close_gets_no_suggestion():
    assert problems_of("trainer.zzz=1") == ["unknown key 'trainer.zzz'"]


def test_wrong_types_name_the_key_the_value_and_the_expected_type():
    problems = problems_of(
        "data.train_batch_size=abc", "trainer.n_gpus_per_node=2.5", "trainer.nnodes=null",
        "actor_rollout_ref.actor.optim.betas=0.9"
    )
    assert "data.train_batch_size='abc' has the wrong type: expected int" in problems
    assert "trainer.n_gpus_per_node=2.5 has the wrong type: expected int" in problems
    assert "trainer.nnodes=None has the wrong type: expected int" in problems
    assert "actor_rollout_ref.actor.optim.betas=0.9 has the wrong type: expected list of float" in problems
    # (a single name for trainer.logger is taken as a list, as verl does: tests/py/test_loggers.py)


def test_a_wrong_type_inside_a_mapping_value_names_the_inner_key():
    (problem,) = problems_of("actor_rollout_ref.actor.optim={lr:fast}")
    assert problem.startswith("actor_rollout_ref.actor.optim.lr=") and "expected float" in problem


def test_an_unknown_key_inside_a_mapping_value_is_reported_with_its_full_name():
    (problem,) = problems_of("actor_rollout_ref.actor.optim={lr:1.0,weight_decy:0.1}")
    assert "unknown key 'actor_rollout_ref.actor.optim.weight_decy'" in problem
    assert "did you mean actor_rollout_ref.actor.optim.weight_decay" in problem


def test_plus_on_an_existing_key_fails_as_in_hydra_with_both_fixes():
    (problem,) = problems_of("+trainer.nnodes=2")
    assert "cannot add 'trainer.nnodes': it already exists in verl's config (= 1)" in problem
    assert "'trainer.nnodes=2'" in problem and "'++trainer.nnodes=2'" in problem


def test_plus_outside_an_open_section_is_an_unknown_key_naming_the_open_sections():
    (problem,) = problems_of("+trainer.foo=1")
    assert problem.startswith("unknown key 'trainer.foo'")
    assert OTC in problem


def test_a_new_key_in_an_open_section_without_plus_says_to_add_it_with_plus():
    (problem,) = problems_of(f"{OTC}.use_ascend_gdn=True")
    assert problem.endswith(f"add it with '+{OTC}.use_ascend_gdn=True'")


def test_deleting_a_schema_key_is_refused():
    (problem,) = problems_of("~trainer.nnodes")
    assert problem.startswith("cannot delete 'trainer.nnodes': it is a verl_lite setting")


def test_sweeps_packages_options_and_syntax_errors_are_each_reported():
    problems = problems_of("trainer.nnodes=1,2", "a@pkg=1", "--config-name=ppo", "trainer.logger=[console", "--foo")
    # verl's --config-name is read before the overrides (as Hydra does), so its problem comes first
    assert problems[0].startswith("--config-name=ppo: this trainer config is not supported by verl_lite: "
                                  "choose one of ppo_trainer, ppo_megatron_trainer")
    assert problems[1] == "'trainer.nnodes=1,2': sweeps are not supported (this is one run); give a single value"
    assert "config packages" in problems[2]
    assert problems[3].startswith("cannot parse override 'trainer.logger=[console'")
    assert problems[4] == "unexpected option '--foo': verl_lite takes key=value overrides only"


def test_an_unresolvable_interpolation_is_reported_and_the_rest_still_composes():
    cfg, problems = compose_config(["trainer.seed=${nope}", "data.train_batch_size=64"])
    assert problems == ["trainer.seed='${nope}' does not resolve: 'nope' is not a key of verl_lite's config; "
                        "give the value itself, or interpolate a key that exists (${section.key})"]
    assert cfg.trainer.seed == 1  # reset to the default so the checks can still run
    assert cfg.data.train_batch_size == 64


def test_every_problem_is_reported_at_once():
    problems = problems_of(
        "trainer.n_gpu_per_node=3",
        "data.train_batch_size=abc",
        "trainer.device=tpu",
        "model_engine=mindspeed",
        "algorithm.adv_estimator=ppo",
    )
    assert len(problems) == 5


# ---------------------------------------------------------------------------- removed upstream settings


@pytest.mark.parametrize(
    "override",
    [
        "actor_rollout_ref.actor.strategy=mindspeed",
        "actor_rollout_ref.actor.strategy=mindspeed_megatron",
        "critic.strategy=mindspeed_megatron",
        "actor_rollout_ref.ref.strategy=mindspeed",
    ],
)
def test_removed_mindspeed_strategies_get_the_migration_message(override):
    key = override.split("=")[0]
    (problem,) = problems_of(override)
    assert "was removed upstream" in problem
    assert f"use {key}=megatron with trainer.device=npu" in problem
    assert "MindSpeed is applied to Megatron as a repatch" in problem


def test_model_engine_mindspeed_gets_the_migration_message():
    (problem,) = problems_of("model_engine=mindspeed")
    assert problem.startswith("model_engine=mindspeed was removed upstream")
    assert "actor_rollout_ref.actor.strategy=megatron with trainer.device=npu" in problem


def test_a_mindspeed_megatron_backend_key_gets_the_migration_message():
    (problem,) = problems_of("actor_rollout_ref.actor.engine.backend=mindspeed_megatron")
    assert "was removed upstream" in problem and "strategy=megatron with trainer.device=npu" in problem


def test_the_old_mindspeed_section_points_at_the_megatron_section():
    (problem,) = problems_of("actor_rollout_ref.actor.mindspeed.param_offload=True")
    assert "actor_rollout_ref.actor.megatron.param_offload" in problem


# ---------------------------------------------------------------------------- enum-like values


@pytest.mark.parametrize(
    "override, allowed",
    [
        ("actor_rollout_ref.actor.strategy=fsdp_turbo", "fsdp, megatron"),
        ("critic.strategy=deepspeed", "fsdp, megatron, null"),
        ("trainer.device=tpu", "auto, cuda, npu, cpu"),
        ("algorithm.adv_estimator=reinforce", "gae, grpo, grpo_vectorized, grpo_passk, rloo"),
        ("actor_rollout_ref.actor.loss_agg_mode=mean", "token-mean, token-sum"),
        ("critic.loss_agg_mode=mean", "token-mean, token-sum"),
        ("actor_rollout_ref.actor.kl_loss_type=k9", "kl, k1, abs, mse, k2, low_var_kl, k3, kl+, k1+"),
        ("actor_rollout_ref.rollout.name=sglang", "hf, vllm"),
        ("trainer.resume_mode=always", "disable, auto, resume_path"),
    ],
)
def test_enum_like_settings_reject_other_values_and_list_the_allowed_ones(override, allowed):
    key, value = override.split("=")
    (problem,) = problems_of(override)
    assert problem.startswith(f"{key}={value!r} is not supported: choose one of {allowed}")


@pytest.mark.parametrize("override, why", [
    ("actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode", "verl sets it itself with algorithm.rollout_correction"),
])
def test_verls_values_that_need_what_verl_lite_lacks_are_refused_with_what_is_missing(override, why):
    (problem,) = problems_of(override)
    assert problem.startswith(f"{override} is not supported by verl_lite: {why}")


SPSQ = "actor_rollout_ref.actor.calculate_sum_pi_squared=True"


def test_the_optimal_token_baselines_and_gdpo_load_with_their_inputs():
    cfg = load_config(["algorithm.adv_estimator=optimal_token_baseline", SPSQ])
    assert cfg.actor_rollout_ref.actor.calculate_sum_pi_squared is True
    cfg = load_config(["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[accuracy_reward,format_reward]",
                       "reward.reward_manager.name=gdpo"])
    assert list(cfg.algorithm.gdpo_reward_keys) == ["accuracy_reward", "format_reward"]
    assert cfg.reward_model.reward_manager == "gdpo"


def test_every_kl_name_the_loss_accepts_is_accepted_by_the_config_too():
    from verl_lite.trainer import core_algos

    lp, ref = torch.tensor([[0.1, -0.2]]), torch.tensor([[0.0, 0.3]])
    for name in ("k1", "k2", "k3", "low_var_kl", "k3+", "abs"):
        assert load_config([f"actor_rollout_ref.actor.kl_loss_type={name}"]).actor_rollout_ref.actor.kl_loss_type == name
        assert torch.isfinite(core_algos.kl_penalty(lp, ref, name)).all()


def test_an_enum_typo_gets_the_closest_allowed_value():
    (problem,) = problems_of("actor_rollout_ref.actor.strategy=megatorn")
    assert problem.endswith("(did you mean 'megatron'?)")


def test_each_logger_entry_is_checked():
    (problem,) = problems_of("trainer.logger=[console,mlfow]")
    assert "trainer.logger contains 'mlfow'" in problem and "console, jsonl, tensorboard, wandb, mlflow" in problem


# ---------------------------------------------------------------------------- key table


def test_the_key_table_knows_types_defaults_and_open_sections():
    table = keys.key_table()
    assert keys.type_name(table["critic.enable"].type) == "bool or null"
    assert table["critic.optim.lr"].default == pytest.approx(1e-5)  # the section's own default
    assert table["actor_rollout_ref.actor.optim.lr"].default == pytest.approx(1e-6)
    assert OTC in keys.open_sections()
    assert keys.open_section_of(f"{OTC}.use_ascend_gdn") == OTC
    assert keys.open_section_of("trainer.nnodes") == ""


# ---------------------------------------------------------------------------- docs/config.md


def _docs_generator():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import gen_config_docs

    return gen_config_docs


def test_the_key_reference_in_docs_config_md_is_in_sync_with_the_schema():
    docs = _docs_generator()
    text = docs.DOC_PATH.read_text(encoding="utf-8")
    assert docs.updated(text) == text, "run: python tools/gen_config_docs.py"


def test_the_key_reference_has_every_leaf_key_with_its_comment_and_allowed_values():
    docs = _docs_generator()
    rendered = docs.render_keys()
    leaves = [p for p, info in keys.key_table().items() if not info.section]
    assert all(f"| `{p}` |" in rendered for p in leaves)
    row = next(line for line in rendered.splitlines() if line.startswith("| `data.train_batch_size` |"))
    assert row == "| `data.train_batch_size` | int | `32` | Prompts per step (before repetition by rollout.n). |"
    strategy = next(line for line in rendered.splitlines() if line.startswith("| `critic.strategy` |"))
    assert "Allowed: fsdp, megatron, null." in strategy


# ---------------------------------------------------------------------------- the override parser

PLAIN_VALUES = [
    "01",
    "1_000",
    "+1",
    "-1",
    "0",
    "00",
    "-0",
    "1.",
    ".5",
    "-.5",
    "0.",
    "-1.",
    "1e5",
    "1E5",
    "1e-6",
    "1.5e+3",
    "+.5e-3",
    "5e",
    "1e",
    "e5",
    "-e5",
    "inf",
    "-inf",
    "TRUE",
    "true",
    "False",
    "True1",
    "Null",
    "null",
    "",
    "-",
    "+",
    "%",
    "50%",
    "3:4",
    "x@y",
    "a-b",
    "a+b",
    "a_b",
    "_x",
    "x_",
    "1.0.0",
    "..",
    "1..2",
    "1-2",
    "12abc",
    "abc12",
    "fsdp",
    "Qwen3.5-35B",
    "/root/models/Qwen3.5-35B-A3B",
    "/data/gsm8k/train.parquet",
    "low_var_kl",
    "token-mean",
]
PLAIN_LINES = (
    [f"actor_rollout_ref.rollout.name={v}" for v in PLAIN_VALUES]
    + [f"+{OTC}.recompute_method=uniform", f"++{OTC}.attention_backend=flash", f"~{OTC}.x", f"~{OTC}.x=3"]
    + ["trainer.logger.0=console", "a-b.c_d=1", "_private=2"]
    + ["trainer.logger=[console,jsonl]", "a=[]", "a=[1,2.5,true,null,x,01,1e-6]", "+a.betas=[0.9,0.999]"]
)


@pytest.mark.parametrize("line", PLAIN_LINES)
def test_plain_lines_parse_exactly_as_hydra_parses_them(line):
    from verl_lite.config import overrides

    fast, hydra = overrides.parse(line), overrides._parse_with_hydra(line)
    assert fast == hydra
    assert type(fast.value) is type(hydra.value)


def test_lines_beyond_plain_scalars_go_to_hydra():
    from verl_lite.config import overrides

    assert overrides.parse("trainer.logger=[console, jsonl]").value == ["console", "jsonl"]
    assert overrides.parse("a='x y'").value == "x y"
    assert overrides.parse("a=${b.c}").value == "${b.c}"
    assert overrides.parse(r"a=x\,y").value == "x,y"
    with pytest.raises(overrides.OverrideSyntaxError, match="sweeps are not supported"):
        overrides.parse("a=1,2")
    with pytest.raises(overrides.OverrideSyntaxError, match="cannot parse override 'trainer.nnodes'"):
        overrides.parse("trainer.nnodes")


def test_plain_overrides_compose_without_importing_hydra():
    import subprocess
    import sys
    from pathlib import Path

    lines = ["trainer.device=npu", f"+{OTC}.use_ascend_gdn=True", "trainer.logger=[console,jsonl]"]
    code = (
        f"import sys; from verl_lite.config import load_config; load_config({lines!r}); print('hydra' in sys.modules)"
    )
    root = Path(keys.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(root), check=True)
    assert out.stdout.strip() == "False"


def test_an_added_override_transformer_config_key_survives_the_typed_config_and_reaches_the_repatch_plan():
    import pickle

    from verl_lite.decisions.repatch import build_repatch_dict

    cfg = load_config(["actor_rollout_ref.actor.strategy=megatron",
                       f"+{OTC}.use_ascend_gdn=True", f"+{OTC}.use_triton_gdn=False"])
    typed = pickle.loads(pickle.dumps(to_dataclass(cfg)))  # what crosses Ray to the workers
    megatron = typed.actor_rollout_ref.actor.megatron
    assert megatron.override_transformer_config["use_ascend_gdn"] is True
    plan = build_repatch_dict(megatron)  # what the MindSpeed engine repatches and gives its TransformerConfig
    assert plan["use_ascend_gdn"] is True and plan["use_triton_gdn"] is False
    # a key added inside a typed section would be dropped by the conversion: it is refused instead
    (problem,) = problems_of("+actor_rollout_ref.actor.use_ascend_gdn=True")
    assert problem.startswith("unknown key 'actor_rollout_ref.actor.use_ascend_gdn': adding keys is not supported "
                              "by verl_lite outside the open sections (")


# ---------------------------------------------------------------------------- verl's names (verl_names)


def test_verls_fsdp2_names_the_fsdp2_engine_verl_lite_runs_and_fsdp_config_strategy_is_taken():
    cfg = load_config(["actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
                       "critic.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
                       "actor_rollout_ref.ref.fsdp_config.strategy=fsdp"])
    assert (cfg.actor_rollout_ref.actor.strategy, cfg.actor_rollout_ref.ref.strategy, cfg.critic.strategy) == (
        "fsdp", "fsdp", "fsdp")
    (problem,) = problems_of("actor_rollout_ref.actor.fsdp_config.strategy=fsdp_turbo")
    assert problem.startswith("actor_rollout_ref.actor.fsdp_config.strategy='fsdp_turbo': not supported by verl_lite")


def test_verls_reward_section_spellings_are_read_as_the_keys_verl_lite_reads():
    cfg = load_config(["reward.reward_manager.name=naive", "reward.custom_reward_function.path=/x.py",
                       "reward.custom_reward_function.name=null", "actor_rollout_ref.actor.optim.lr_warmup_steps=null"])
    assert cfg.reward_model.reward_manager == "naive" and cfg.custom_reward_function.path == "/x.py"
    assert cfg.custom_reward_function.name == "compute_score"  # verl's fallback for null
    assert cfg.actor_rollout_ref.actor.optim.lr_warmup_steps == -1  # verl: null delegates to the ratio


def test_keys_of_verls_other_engines_and_added_verl_keys_are_refused_as_verl_settings_not_typos():
    for line, fragment in (("actor_rollout_ref.actor.veomni.param_offload=True", "the VeOmni engine is not supported"),
                           ("+actor_rollout_ref.rollout.multi_turn.max_user_turns=2", "multi-turn rollouts"),
                           ("data.video_key=videos", "videos in the prompts are not supported by verl_lite yet"),
                           ("actor_rollout_ref.actor.model_engine=megatron", "top-level config group, model_engine=")):
        (problem,) = problems_of(line)
        assert fragment in problem, problem
        assert "remove it" not in problem  # it names what is missing, not "no such setting"


def test_verls_old_tracking_logger_is_wandb_as_verl_converts_it():
    # verl/utils/tracking.py: `tracking` is deprecated and runs wandb (`file` is verl's own file logger)
    assert list(load_config(['trainer.logger=["console","tracking","file"]']).trainer.logger) == [
        "console", "wandb", "file"]
    assert list(load_config(["trainer.logger=tracking"]).trainer.logger) == ["wandb"]


def test_a_key_set_twice_is_judged_by_its_last_value_as_in_hydra():
    assert not load_config(["actor_rollout_ref.rollout.ignore_eos=True", "actor_rollout_ref.rollout.ignore_eos=False"]
                           ).actor_rollout_ref.rollout.get("ignore_eos")
    (problem,) = problems_of("actor_rollout_ref.rollout.ignore_eos=False", "actor_rollout_ref.rollout.ignore_eos=True")
    assert problem.startswith("actor_rollout_ref.rollout.ignore_eos=True: not supported")


@pytest.mark.parametrize("engine, strategy", [("megatron", "megatron"), ("dp", "fsdp")])
def test_model_engine_picks_the_strategy_of_actor_ref_and_critic_as_in_verl(engine, strategy):
    from verl_lite.config import roles

    cfg = load_config([f"model_engine={engine}", "actor_rollout_ref.actor.use_kl_loss=True", "critic.enable=True"])
    assert [roles.strategy(cfg, r) for r in ("actor", "ref", "critic")] == [strategy] * 3


def test_model_engine_applies_before_the_overrides_so_an_explicit_strategy_wins_wherever_it_stands():
    assert load_config(["actor_rollout_ref.actor.strategy=fsdp", "model_engine=megatron"]).actor_rollout_ref.actor.strategy == "fsdp"
    assert load_config(["model_engine=megatron", "actor_rollout_ref.actor.strategy=fsdp"]).actor_rollout_ref.actor.strategy == "fsdp"


def test_an_unknown_model_engine_names_the_choices_not_a_migration():
    (problem,) = problems_of("model_engine=veomni")
    assert problem == ("model_engine=veomni: verl's veomni engine is not supported by verl_lite: choose model_engine=megatron or "
                       "model_engine=dp (FSDP2), or set actor_rollout_ref.actor.strategy")


@pytest.mark.parametrize("line", [["--config-name=ppo_megatron_trainer.yaml"], ["--config-name", "ppo_megatron_trainer"],
                                  ["--config-path=config", "--config-name='ppo_megatron_trainer.yaml'"]])
def test_verls_megatron_trainer_config_name_means_megatron_defaults(line):
    cfg = load_config(line)
    assert cfg.actor_rollout_ref.actor.strategy == "megatron" and not cfg.async_training.enable


def test_the_fully_async_trainer_config_name_turns_on_fully_async_training_on_megatron():
    cfg, _ = compose_config(["--config-name=fully_async_ppo_megatron_trainer.yaml"])
    assert cfg.actor_rollout_ref.actor.strategy == "megatron" and cfg.async_training.enable


def test_a_config_path_other_than_verls_own_is_refused():
    (problem,) = problems_of("--config-path=/my/configs")
    assert problem.startswith("--config-path=/my/configs is not supported by verl_lite")


@pytest.mark.parametrize("line, key, value", [
    ("critic.fsdp.param_offload=False", "critic.fsdp_config.param_offload", False),
    ("actor_rollout_ref.actor.megatron.use_remove_padding=False", "actor_rollout_ref.model.use_remove_padding", False),
    ("rollout.nnodes=2", "actor_rollout_ref.rollout.nnodes", 2),
    ("rollout.n_gpus_per_node=4", "actor_rollout_ref.rollout.n_gpus_per_node", 4),
    ("rollout.total_rollout_steps=512", "actor_rollout_ref.rollout.total_rollout_steps", 512),
    ("ray_kwargs.ray_init.num_cpus=7", "ray_init.num_cpus", 7),
    ("+ray_kwargs.ray_init.num_gpus=4", "ray_init.extra.num_gpus", 4),
    ("actor_rollout_ref.actor.policy_loss=gspo", "actor_rollout_ref.actor.policy_loss.loss_mode", "gspo"),
])
def test_verls_current_spellings_set_the_verl_lite_key(line, key, value):
    from omegaconf import OmegaConf

    assert OmegaConf.select(load_config([line]), key) == value


def test_verl_lines_whose_value_is_what_verl_lite_does_are_taken():
    load_config(["ray_kwargs.ray_init.runtime_env.py_executable=null", "trainer.balance_batch=False",
                 "actor_rollout_ref.rollout.calculate_log_probs=False"])


@pytest.mark.parametrize("line, fragment", [
    ("actor_rollout_ref.actor.checkpoint.mbridge_config.memory_efficient=True", "mbridge's save_weights arguments"),
    ("actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=my.backend", "custom checkpoint-engine backends"),
    ("critic.forward_max_token_len_per_gpu=4096", "the value pass uses critic.ppo_max_token_len_per_gpu"),
    ("algorithm.filter_groups.max_inflight_gen_batches=2", "verl's streaming refill of single prompts"),
    ("actor_rollout_ref.rollout.multi_turn.enable=True", "multi-turn rollouts and tools"),
    ("actor_rollout_ref.actor.fsdp_config.dtype=float16", "the compute dtype is <role>.fsdp_config.mixed_precision"),
])
def test_verl_keys_verl_lite_lacks_are_refused_by_name_with_what_to_use_instead(line, fragment):
    (problem,) = problems_of(line)
    assert fragment in problem and "did you mean" not in problem


def test_a_float_staleness_threshold_is_taken_as_verls_fraction():
    from verl_lite.decisions.async_pools import max_required_samples

    cfg = load_config(["async_training.staleness_threshold=0.5", "async_training.trigger_parameter_sync_step=2",
                       "data.train_batch_size=8"])
    assert cfg.async_training.staleness_threshold == 0.5 and max_required_samples(cfg) == int(8 * 1.5 * 2)


def test_hints_point_only_at_keys_that_mean_the_same_thing():
    (budget,) = problems_of("actor_rollout_ref.ref.log_prob_max_token_lenn=1")  # not verl's either
    assert "did you mean" not in budget  # a token budget is not a sample count
    (enable,) = problems_of("+algorithm.filter_group.enable=True")
    assert "critic.enable" not in enable
    (typo,) = problems_of("actor_rollout_ref.actor.clip_ratio_hgih=0.3")
    assert typo.endswith("did you mean actor_rollout_ref.actor.clip_ratio_high?")


def test_a_line_given_twice_is_one_problem():
    assert problems_of("trainer.zzz=1", "trainer.zzz=1") == ["unknown key 'trainer.zzz'"]


def test_nccl_timeout_reaches_the_workers_process_group(monkeypatch):
    """verl's actor_rollout_ref.nccl_timeout / critic.nccl_timeout: the timeout of the workers'
    init_process_group; a non-positive value is refused by the preflight."""
    import datetime

    import torch.distributed as dist

    from verl_lite.preflight.run import collect_problems
    from verl_lite.trainer import workers

    seen = {}
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: seen.update(kw))
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):  # restored after the test
        monkeypatch.setenv(name, "")
    threads = torch.get_num_threads()
    cfg = load_config(["actor_rollout_ref.nccl_timeout=1200", "critic.nccl_timeout=300"])
    try:
        with torch.random.fork_rng(devices=[]):
            for worker, expected in ((workers.ActorRolloutRefWorker, 1200), (workers.CriticWorker, 300)):
                seen.clear()
                workers._setup_process(cfg, 0, 2, "127.0.0.1", 29999, "cpu", threads, worker._nccl_timeout(None, cfg))
                assert seen["timeout"] == datetime.timedelta(seconds=expected) and seen["backend"] == "gloo"
    finally:
        torch.set_num_threads(threads)
    assert "actor_rollout_ref.nccl_timeout=0 must be a positive integer" in collect_problems(
        load_config(["actor_rollout_ref.nccl_timeout=0"]), for_training=False)
