"""The preflight's refusals of verl settings the schema accepts but verl_lite cannot act on yet
(verl_lite/preflight/run.py:verl_problems, the rules in the modules of their subjects), and its
warnings for settings with no effect in a run."""

from __future__ import annotations

import pytest

from verl_lite.preflight.run import collect_problems, collect_warnings
from verl_lite.config import load_config
from verl_lite.preflight.run import verl_problems


def problems(*overrides):
    return verl_problems(load_config(["trainer.device=cpu", *overrides]))


@pytest.mark.parametrize("lines", [
    ("actor_rollout_ref.actor.fsdp_config.param_offload=True", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
     "actor_rollout_ref.ref.fsdp_config.param_offload=True", "critic.fsdp_config.param_offload=True"),
    ("model_engine=megatron", "actor_rollout_ref.actor.megatron.param_offload=True",
     "actor_rollout_ref.actor.megatron.grad_offload=True", "actor_rollout_ref.actor.megatron.optimizer_offload=True",
     "critic.megatron.optimizer_offload=True"),
])
def test_offload_is_accepted_for_every_role_and_engine(lines):
    """Honoured by the engines between phases (verl_lite/trainer/offload.py, tests/py/test_offload.py)."""
    assert problems("actor_rollout_ref.actor.use_kl_loss=True", "algorithm.adv_estimator=gae", *lines) == []


def test_megatron_sequence_parallel_at_tp2_is_accepted():
    """The Megatron engines run it (tests/py/test_sequence_parallel.py)."""
    found = problems("model_engine=megatron", "actor_rollout_ref.actor.use_kl_loss=True",
                     "actor_rollout_ref.actor.megatron.grad_offload=True", "actor_rollout_ref.ref.megatron.param_offload=True",
                     "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                     "actor_rollout_ref.actor.megatron.sequence_parallel=True")
    assert found == []


def test_offload_where_it_moves_nothing_is_warned_about():
    on_cpu = collect_warnings(load_config(["trainer.device=cpu", "actor_rollout_ref.actor.fsdp_config.param_offload=True"]))
    assert "actor_rollout_ref.actor.fsdp_config.param_offload=True has no effect on trainer.device=cpu" in " ".join(on_cpu)
    on_cuda = collect_warnings(load_config(["trainer.device=cuda", "actor_rollout_ref.actor.use_kl_loss=True",
                                            "actor_rollout_ref.ref.fsdp_config.optimizer_offload=True"]))
    assert any(w.startswith("actor_rollout_ref.ref.fsdp_config.optimizer_offload=True has no effect: the ref model "
                            "keeps no gradients or optimizer state") for w in on_cuda), on_cuda
    assert not [w for w in on_cuda if "offload" in w and "ref" not in w]


def test_offload_of_a_role_that_does_not_run_is_not_refused():
    assert problems("critic.fsdp_config.param_offload=True") == []  # no critic (grpo): check warns instead


@pytest.mark.parametrize("line, fragment", [
    ("actor_rollout_ref.actor.shuffle=True", "shuffling between PPO epochs is not supported by verl_lite yet"),
    ("actor_rollout_ref.actor.checkpoint.async_save=True", "asynchronous saving is not supported by verl_lite yet"),
    ("actor_rollout_ref.hybrid_engine=False", "actor_rollout_ref.hybrid_engine=False: not supported by verl_lite in "
                                              "synchronous training"),
    ("reward_model.enable=True", "reward models are not supported by verl_lite yet"),
    ("trainer.log_val_generations=-1", "the number of validation samples to log must be >= 0"),
    ("algorithm.kl_penalty=full", "algorithm.kl_penalty='full' is not supported by verl_lite"),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size=3", "verl's deprecated global micro-batch is not supported"),
])
def test_each_accepted_but_unsupported_value_is_refused_with_its_fix(line, fragment):
    found = problems(line, "actor_rollout_ref.actor.use_kl_loss=True")
    assert len(found) == 1 and fragment in found[0], found


def test_the_refusals_reach_python_m_verl_lite_check():
    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.shuffle=True"])
    assert any("shuffling between PPO epochs is not supported by verl_lite yet" in p
               for p in collect_problems(cfg, for_training=False))


def test_settings_with_no_effect_in_the_run_are_warned_about():
    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.clip_ratio=0.3",
                       "actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28",
                       "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"])
    warnings = collect_warnings(cfg)
    assert any(w.startswith("actor_rollout_ref.actor.clip_ratio=0.3 has no effect") for w in warnings)
    assert any(w.startswith("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096 has no effect") for w in warnings)


def test_ray_init_arguments_from_verls_ray_kwargs_reach_ray_init(monkeypatch):
    import ray

    from verl_lite.trainer import run as run_module

    cfg = load_config(["trainer.device=cpu", "+ray_kwargs.ray_init.num_gpus=0", "ray_kwargs.ray_init.num_cpus=3",
                       "+ray_kwargs.ray_init.object_store_memory=100000000"])
    seen = {}

    class Stop(Exception):
        pass

    def fake_init(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(Stop):
        run_module._init_ray(cfg, "cpu", 1)
    assert seen["num_gpus"] == 0 and seen["object_store_memory"] == 100000000 and seen["num_cpus"] == 3


def test_a_runtime_env_key_ray_does_not_know_is_refused_naming_it():
    from verl_lite.config.compose import compose_config

    cfg, found = compose_config(["+ray_kwargs.ray_init.runtime_env.env_vars.X=1",
                                 "+ray_kwargs.ray_init.runtime_env.py_exe=uv"])
    assert found == []  # composes: the key check is the preflight's
    (problem,) = verl_problems(cfg)  # the preflight's verl refusals (collect_problems runs them)
    assert problem.startswith("ray_init.runtime_env.py_exe: Ray's runtime_env has no key 'py_exe' (verl: "
                              "ray_kwargs.ray_init.runtime_env.py_exe); use one of conda,")
    assert "py_executable" in problem


def test_the_runtime_env_keys_are_rays_own():
    from ray.runtime_env import RuntimeEnv

    from verl_lite.config.choices import RAY_RUNTIME_ENV_KEYS

    assert set(RAY_RUNTIME_ENV_KEYS) == {k for k in RuntimeEnv.known_fields if not k.startswith("_")}


def test_settings_of_features_that_are_off_are_warned_about():
    cfg = load_config(["trainer.device=cpu", "async_training.staleness_threshold=3", "custom_reward_function.name=f",
                       "trainer.resume_from_path=/ckpt/global_step_2"])
    warnings = collect_warnings(cfg)
    assert "async_training.staleness_threshold has no effect: fully-async training is off (async_training.enable=False)" in warnings
    assert any(w.startswith("custom_reward_function.name='f' has no effect") for w in warnings)
    assert any(w.startswith("trainer.resume_from_path has no effect with trainer.resume_mode=auto") for w in warnings)
    assert not any("async_training" in w for w in collect_warnings(load_config(["trainer.device=cpu"])))


def test_rollout_log_probs_are_taken_from_both_rollouts_and_rollout_correction_asks_for_them():
    assert problems("actor_rollout_ref.rollout.calculate_log_probs=True", "actor_rollout_ref.rollout.name=hf") == []
    assert problems("actor_rollout_ref.rollout.calculate_log_probs=True", "actor_rollout_ref.rollout.name=vllm") == []
    (problem,) = problems("algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.name=hf")
    assert "set actor_rollout_ref.rollout.calculate_log_probs=True" in problem
    assert problems("algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.name=hf",
                    "actor_rollout_ref.rollout.calculate_log_probs=True") == []


def test_rollout_correction_settings_it_cannot_honour_are_refused_by_name():
    hf = ("actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.calculate_log_probs=True")
    (problem,) = problems("algorithm.rollout_correction.bypass_mode=True", "actor_rollout_ref.rollout.name=hf")
    assert "set actor_rollout_ref.rollout.calculate_log_probs=True" in problem
    assert problems("algorithm.rollout_correction.bypass_mode=True", *hf) == []
    (problem,) = problems("algorithm.rollout_correction.bypass_mode=True",
                          "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", *hf)
    assert "loss_mode='gspo' is not supported" in problem and "set loss_mode=vanilla" in problem
    # normalised over the data-parallel ranks in every micro-batch, as verl (test_rollout_correction_dp.py)
    assert problems("algorithm.rollout_correction.bypass_mode=True", "algorithm.rollout_correction.rollout_is=token",
                    "algorithm.rollout_correction.rollout_is_batch_normalize=True", *hf) == []
    (problem,) = problems("algorithm.rollout_correction.loss_type=pg", *hf)
    assert "choose one of ppo_clip, reinforce" in problem
    # the fully-async trainer corrects as verl's (test_async.py, test_async_ray.py); not on top of its reweighting
    async_rs = ("algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=2.0",
                "async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
                "actor_rollout_ref.rollout.n_gpus_per_node=1", *hf)
    assert problems(*async_rs) == []
    (problem,) = problems(*async_rs, "async_training.stale_policy=reweight")
    assert "stale_policy=reweight is not supported" in problem
    (problem,) = problems("algorithm.rollout_correction.rollout_is=token",
                          "actor_rollout_ref.actor.policy_loss.loss_mode=cispo", *hf)
    assert "loss_mode='cispo' is not supported" in problem and "vanilla" in problem
    assert problems("algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=2.0",
                    "actor_rollout_ref.actor.policy_loss.loss_mode=cispo", *hf) == []
    (problem,) = problems("algorithm.rollout_correction.rollout_rs=token_k2", *hf)
    assert "rollout_rs_threshold is null" in problem
    (problem,) = problems("algorithm.rollout_correction.rollout_is=tokens", *hf)
    assert "choose null, token or sequence" in problem


def test_a_megatron_dtype_is_taken_when_it_is_what_the_engine_trains_in_and_refused_otherwise():
    assert problems("model_engine=megatron", "actor_rollout_ref.actor.megatron.dtype=float32") == []  # cpu
    (problem,) = problems("model_engine=megatron", "actor_rollout_ref.actor.megatron.dtype=bfloat16")
    assert problem == ("actor: actor_rollout_ref.actor.megatron.dtype='bfloat16': another training dtype is not supported "
                       "by verl_lite yet: the Megatron engine trains in float32 on cpu; leave it null")
    cfg = load_config(["trainer.device=npu", "model_engine=megatron", "actor_rollout_ref.actor.megatron.dtype=bfloat16"])
    assert verl_problems(cfg) == []


def test_token_budgets_without_dynamic_batch_size_are_taken_with_a_warning_as_verl_ignores_them():
    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.use_kl_loss=True",
                       "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096",
                       "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4096"])
    assert verl_problems(cfg) == []
    warnings = collect_warnings(cfg)
    for key in ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"):
        assert f"{key}=4096 has no effect: it is the token budget of dynamic batch size" in " ".join(warnings)


def test_verls_checkpoint_settings_are_taken_hf_model_and_subsets_included():
    assert problems("actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model,extra]",
                    "actor_rollout_ref.actor.checkpoint.load_contents=[hf_model]",
                    "actor_rollout_ref.actor.checkpoint.async_save=False",
                    "actor_rollout_ref.actor.checkpoint.strict=False") == []


def test_strict_without_hf_model_and_load_contents_without_a_resume_are_warned_about():
    cfg = load_config(["trainer.device=cpu", "algorithm.adv_estimator=grpo",
                       "actor_rollout_ref.actor.checkpoint.strict=False",
                       "actor_rollout_ref.actor.checkpoint.load_contents=[model]", "trainer.resume_mode=disable",
                       "trainer.max_critic_ckpt_to_keep=2"])
    assert verl_problems(cfg) == []
    warnings = " ".join(collect_warnings(cfg))
    assert "actor_rollout_ref.actor.checkpoint.strict=False has no effect" in warnings
    assert "actor_rollout_ref.actor.checkpoint.load_contents has no effect: trainer.resume_mode=disable" in warnings
    assert "trainer.max_critic_ckpt_to_keep=2 has no effect: this run has no critic" in warnings


def test_raw_chat_is_refused_with_untemplated_prompts_as_verls_servers_would_template_them():
    (problem,) = problems("data.return_raw_chat=True", "data.apply_chat_template=False")
    assert problem.startswith("data.return_raw_chat=True with data.apply_chat_template=False")
    assert problems("data.return_raw_chat=False", "data.apply_chat_template=False") == []


@pytest.mark.parametrize("line", ["data.return_raw_chat=True", "data.return_raw_chat=False",
                                  "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.mode=sync"])
def test_verls_rollout_mode_and_raw_chat_are_taken_both_values_generate_the_same(line):
    assert problems(line) == []


def test_kl_settings_without_their_switch_are_warned_about():
    warnings = collect_warnings(load_config(["trainer.device=cpu", "algorithm.kl_ctrl.kl_coef=0.05",
                                             "algorithm.kl_penalty=mse", "actor_rollout_ref.actor.kl_loss_coef=0.1"]))
    assert ("algorithm.kl_ctrl.kl_coef, algorithm.kl_penalty have no effect: the KL penalty in the reward is off "
            "(algorithm.use_kl_in_reward=False)") in warnings
    assert ("actor_rollout_ref.actor.kl_loss_coef has no effect: the KL loss is off "
            "(actor_rollout_ref.actor.use_kl_loss=False)") in warnings


@pytest.mark.parametrize("line, fragment", [
    ("actor_rollout_ref.rollout.mode=server", "actor_rollout_ref.rollout.mode='server' is not supported by verl_lite: "
     "choose async"),
    ("actor_rollout_ref.rollout.response_length=999", "actor_rollout_ref.rollout.response_length=999 differs from "
     "data.max_response_length=512"),
    ("actor_rollout_ref.rollout.prompt_length=999", "actor_rollout_ref.rollout.prompt_length=999 differs from "
     "data.max_prompt_length=512"),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size=8", "set actor_rollout_ref.rollout.log_prob_micro_batch_size"
     "_per_gpu"),
])
def test_rollout_keys_verl_lite_does_not_act_on_are_refused(line, fragment):
    (problem,) = problems(line)
    assert fragment in problem and "not supported by verl_lite" in problem, problem


def test_rollout_lengths_equal_to_the_data_lengths_are_taken():
    assert problems("actor_rollout_ref.rollout.response_length=512", "actor_rollout_ref.rollout.prompt_length=512") == []


@pytest.mark.parametrize("line", ["actor_rollout_ref.rollout.dtype=float16", "actor_rollout_ref.rollout.load_format=auto",
                                  "actor_rollout_ref.rollout.free_cache_engine=False"])
def test_vllm_engine_settings_are_refused_with_the_hf_rollout(line):
    found = collect_problems(load_config(["trainer.device=cpu", line]), for_training=False)
    key = line.split("=")[0]
    assert [p for p in found if p.startswith(key)] == [
        f"{key} is read by the vllm rollout only, and actor_rollout_ref.rollout.name=hf (verl_lite's default; verl "
        "has none and requires the name): remove it, or set actor_rollout_ref.rollout.name=vllm"], found


@pytest.mark.parametrize("mode", ["gspo", "geo_mean"])
def test_loss_agg_mode_and_dual_clip_have_no_effect_with_gspo_and_geo_mean_and_say_so(mode):
    cfg = load_config(["trainer.device=cpu", f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}",
                       "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum", "actor_rollout_ref.actor.clip_ratio_c=5"])
    said = [w for w in collect_warnings(cfg) if "no effect with policy_loss.loss_mode" in w]
    assert said and "actor_rollout_ref.actor.loss_agg_mode, actor_rollout_ref.actor.clip_ratio_c" in said[0], said
    vanilla = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"])
    assert not [w for w in collect_warnings(vanilla) if "no effect with policy_loss.loss_mode" in w]


def test_a_loss_setting_the_chosen_loss_does_not_read_is_warned_about():
    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
                       "actor_rollout_ref.actor.tau_pos=2.0", "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.01",
                       "actor_rollout_ref.actor.clip_ratio_high=0.28"])
    said = [w for w in collect_warnings(cfg) if "no effect with policy_loss.loss_mode=sapo" in w]
    assert len(said) == 1 and said[0].startswith("actor_rollout_ref.actor.clip_ratio_high, "
                                                 "actor_rollout_ref.actor.policy_loss.kl_cov_ratio have no effect"), said
    assert "tau_pos" not in said[0]  # sapo reads it
    clip_cov = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
                            "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.01"])
    assert not [w for w in collect_warnings(clip_cov) if "no effect with policy_loss.loss_mode" in w]


def test_an_algorithm_setting_the_chosen_estimator_does_not_read_is_warned_about():
    cfg = load_config(["trainer.device=cpu", "algorithm.adv_estimator=rloo", "algorithm.norm_adv_by_std_in_grpo=False",
                       "algorithm.gamma=0.9"])
    said = [w for w in collect_warnings(cfg) if "no effect with algorithm.adv_estimator=rloo" in w]
    assert said == ["algorithm.norm_adv_by_std_in_grpo, algorithm.gamma have no effect with algorithm.adv_estimator="
                    "rloo (as in verl: the estimator does not read it)"]
    rpp = load_config(["trainer.device=cpu", "algorithm.adv_estimator=reinforce_plus_plus", "algorithm.gamma=0.9"])
    assert not [w for w in collect_warnings(rpp) if "no effect with algorithm.adv_estimator" in w]


def test_the_loss_and_estimator_settings_are_range_checked_where_their_loss_reads_them():
    dro = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.policy_loss.loss_mode=dro"])
    assert any(p.startswith("actor_rollout_ref.actor.policy_loss.dro_beta=None: must be a finite number > 0")
               for p in collect_problems(dro, for_training=False))
    ok = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.policy_loss.loss_mode=dro",
                      "actor_rollout_ref.actor.policy_loss.dro_beta=0.1"])
    assert not [p for p in collect_problems(ok, for_training=False) if "dro_beta" in p]
    sapo = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
                        "actor_rollout_ref.actor.tau_neg=0"])
    assert any(p.startswith("actor_rollout_ref.actor.tau_neg=0") for p in collect_problems(sapo, for_training=False))
    passk = load_config(["trainer.device=cpu", "algorithm.adv_estimator=grpo_passk", "actor_rollout_ref.rollout.n=1"])
    assert any(p.startswith("algorithm.adv_estimator=grpo_passk with actor_rollout_ref.rollout.n=1")
               for p in collect_problems(passk, for_training=False))
    rpp = load_config(["trainer.device=cpu", "algorithm.adv_estimator=reinforce_plus_plus", "algorithm.gamma=1.5"])
    assert any(p.startswith("algorithm.gamma=1.5") for p in collect_problems(rpp, for_training=False))


def test_run_without_the_preflight_still_refuses_a_verl_setting_it_would_ignore(tmp_path):
    """run(cfg) called from Python skips `python -m verl_lite.check`: the refusals of verl settings the
    code does not act on must stop it too, before Ray starts or a model is built."""
    from verl_lite.config.compose import ConfigError
    from verl_lite.trainer.run import run

    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.rollout.mode=server",
                       f"trainer.default_local_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.mode='server'"):
        run(cfg)
    assert not (tmp_path / "metrics.jsonl").exists()


SPSQ = "actor_rollout_ref.actor.calculate_sum_pi_squared=True"


@pytest.mark.parametrize("overrides, why", [
    (["algorithm.adv_estimator=optimal_token_baseline"], "needs sum_pi_squared from the actor's log-prob pass"),
    (["algorithm.adv_estimator=tir_optimal_token_baseline"],
     "set actor_rollout_ref.actor.calculate_sum_pi_squared=True"),
    ([SPSQ, "actor_rollout_ref.model.use_fused_kernels=True"], "the fused kernels never form the logits"),
    ([SPSQ, "algorithm.rollout_correction.bypass_mode=True"], "runs no actor log-prob pass"),
    (["algorithm.adv_estimator=gdpo"], "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys"),
    (["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[a,b]", "+algorithm.gdpo_reward_weights=[1.0]"],
     "1 weights for 2 gdpo_reward_keys"),
    (["algorithm.adv_estimator=grpo", "+algorithm.gdpo_reward_keys=[a]"], "only gdpo reads them"),
    ([SPSQ, "async_training.enable=True"], "the fully-async trainer's advantages read no sum_pi_squared"),
    (["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[a]", "async_training.enable=True"],
     "the fully-async trainer's advantages read no reward components"),
])
def test_the_optimal_token_baselines_and_gdpo_refuse_what_they_cannot_run(overrides, why):
    found = collect_problems(load_config(["trainer.device=cpu", *overrides]), for_training=False)
    assert any(why in p for p in found), found


def test_the_optimal_token_baselines_and_gdpo_with_their_inputs_pass_the_checks():
    for overrides in (["algorithm.adv_estimator=optimal_token_baseline", SPSQ],
                      ["algorithm.adv_estimator=tir_optimal_token_baseline", SPSQ],
                      ["algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[a,b]",
                       "+algorithm.gdpo_reward_weights=[1.0,0.5]", "reward.reward_manager.name=gdpo"]):
        found = collect_problems(load_config(["trainer.device=cpu", *overrides]), for_training=False)
        assert not [p for p in found if "sum_pi_squared" in p or "gdpo" in p], found
