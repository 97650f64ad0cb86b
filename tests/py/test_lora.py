"""LoRA on the torch engine (engine/torch/lora.py, PEFT): only the adapters train, the ref is the actor with
its adapters disabled, the rollout gets the merged weights, checkpoints hold the adapters in PEFT's
format and resume them; the preflight refuses LoRA where it cannot run."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from test_engine_config import make_batch as engine_batch, nll_loss

from verl_lite.config.schema import ActorConfig, CriticConfig, ModelConfig, OptimConfig, RefConfig

B, T, R = 4, 12, 4  # B and R as test_engine_config's batches, longer rows


def make_batch(seed=0):
    return engine_batch(seed, length=T)


def lora_engine(tmp_path=None, **model):
    from verl_lite.engine.torch.engine import TorchLMEngine

    actor = ActorConfig()
    if tmp_path is not None:
        actor.checkpoint.save_contents = ["model", "optimizer", "extra", "hf_model"]
    engine = TorchLMEngine(ModelConfig(path="tiny-qwen3_5", **{"lora_rank": 8, "lora_alpha": 16, **model}), actor,
                           OptimConfig(lr=5e-2, weight_decay=0.0), "cpu", "actor")
    engine.initialize()
    return engine


def train_step(engine, seed=0):
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward([make_batch(seed)], nll_loss)
    engine.optimizer_step()
    engine.eval_mode()


def log_probs(engine, seed=1):
    return engine.forward_backward([make_batch(seed)], None, forward_only=True)[0]["log_probs"]


@pytest.fixture(scope="module")
def trained():
    """A LoRA engine after two optimizer steps (its adapters are no longer the identity)."""
    engine = lora_engine()
    train_step(engine, 0)
    train_step(engine, 2)
    return engine


def test_only_the_adapters_are_trainable_and_in_the_optimizer():
    engine = lora_engine()
    trainable = [n for n, p in engine.module.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    in_optimizer = {id(p) for group in engine.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in engine.module.parameters() if p.requires_grad}
    # all-linear: attention, Gated DeltaNet and MLP projections, never the tied output head
    assert any("linear_attn.in_proj_qkv" in n for n in trainable) and any("mlp.down_proj" in n for n in trainable)
    assert not any("lm_head" in n or "embed_tokens" in n for n in trainable)


def test_target_and_exclude_modules_pick_the_layers_and_non_linear_targets_are_refused():
    engine = lora_engine(target_modules=["q_proj", "down_proj"], exclude_modules=["down_proj"])
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in engine.module.named_parameters() if p.requires_grad}
    assert adapted == {"q_proj"}
    with pytest.raises(ValueError, match=r"other than nn.Linear are not supported.*embed_tokens"):
        lora_engine(target_modules=["q_proj", "embed_tokens"])


def test_a_step_changes_the_adapters_and_leaves_every_base_weight_bit_identical():
    engine = lora_engine()
    before = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    train_step(engine)
    after = dict(engine.module.named_parameters())
    base = [n for n in before if not after[n].requires_grad]
    assert base and all(torch.equal(before[n], after[n]) for n in base)
    changed = [n for n in before if after[n].requires_grad and not torch.equal(before[n], after[n])]
    assert any(".lora_B." in n for n in changed)  # B starts at zero: any learning moves it


def test_ref_log_probs_with_the_adapters_disabled_equal_the_base_models(trained):
    from verl_lite.engine.torch.engine import TorchLMEngine

    ref_config = RefConfig(use_torch_compile=False, ulysses_sequence_parallel_size=1)  # a lone section: no interpolation
    base = TorchLMEngine(ModelConfig(path="tiny-qwen3_5"), ref_config, None, "cpu", "ref")
    base.initialize()  # the same init seed: the LoRA model's base weights
    with trained.disable_adapter():
        ref = log_probs(trained)
    assert torch.equal(ref, log_probs(base))
    assert not torch.allclose(log_probs(trained), ref, atol=1e-4)  # the adapters do change the policy


def test_the_exported_weights_are_the_merged_model_under_hf_names_equal_to_peft_merge_and_unload(trained):
    exported = dict(trained.export_hf_weights())
    merged = copy.deepcopy(trained.module).merge_and_unload().state_dict()
    assert set(exported) == set(merged) and all(not n.startswith("base_model.") for n in exported)
    worst = max((exported[n] - merged[n]).abs().max().item() for n in merged)
    assert worst <= 1e-6, worst
    # and the merge is not a no-op: the adapted projections differ from the base
    name = "model.layers.1.self_attn.q_proj.weight"
    base = trained.module.get_base_model().model.layers[1].self_attn.q_proj.base_layer.weight
    assert not torch.allclose(exported[name], base)


def test_the_hf_rollout_synced_from_the_export_generates_with_the_adapted_policy(trained):
    from verl_lite.config.schema import RolloutConfig
    from verl_lite.rollout.hf import HFRollout

    rollout = HFRollout(ModelConfig(path="tiny-qwen3_5"), RolloutConfig(), None, "cpu")
    rollout.update_weights(trained.export_hf_weights(), 1)
    batch = make_batch(1)
    logits = rollout.model(input_ids=batch["input_ids"], use_cache=False).logits
    with torch.no_grad():
        adapted = trained.module(input_ids=batch["input_ids"], use_cache=False).logits
    assert torch.allclose(logits, adapted, atol=1e-5)


def test_a_checkpoint_holds_the_adapter_in_peft_format_and_resumes_it(trained, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from verl_lite.models.hf import build_causal_lm

    saver = lora_engine(tmp_path)
    saver.module.load_state_dict(trained.module.state_dict())
    train_step(saver, 4)  # optimizer state to save too
    saver.save_checkpoint(str(tmp_path / "actor"))
    batch = make_batch(1)
    with torch.no_grad():
        saved_logits = saver.module(input_ids=batch["input_ids"], use_cache=False).logits
    adapter = tmp_path / "actor" / "lora_adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 16 and (adapter / "adapter_model.safetensors").is_file()
    payload = torch.load(tmp_path / "actor" / "model.pt", weights_only=True)
    assert set(payload["model"]) == {n for n, p in saver.module.named_parameters() if p.requires_grad}

    resumed = lora_engine(tmp_path)
    resumed.load_checkpoint(str(tmp_path / "actor"))
    assert torch.equal(log_probs(resumed), log_probs(saver))
    train_step(resumed, 5)
    train_step(saver, 5)  # the optimizer state resumed too: the next step is the same
    assert torch.equal(log_probs(resumed), log_probs(saver))

    # PEFT loads the adapter dir onto the base model, and the hf_model copy is the merged model
    peft_model = PeftModel.from_pretrained(build_causal_lm(ModelConfig(path="tiny-qwen3_5")), str(adapter))
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "actor" / "huggingface"))
    with torch.no_grad():
        peft_logits = peft_model(input_ids=batch["input_ids"], use_cache=False).logits
        merged_logits = hf(input_ids=batch["input_ids"], use_cache=False).logits
    assert torch.allclose(peft_logits, saved_logits, atol=1e-5)
    assert torch.allclose(merged_logits, saved_logits, atol=1e-5)


def test_lora_adapter_path_continues_from_a_saved_adapter(trained, tmp_path):
    trained.save_checkpoint(str(tmp_path / "actor"))
    engine = lora_engine(lora_rank=0, lora_adapter_path=str(tmp_path / "actor" / "lora_adapter"))
    assert torch.allclose(log_probs(engine), log_probs(trained), atol=1e-6)
    assert any(p.requires_grad for p in engine.module.parameters())  # loaded trainable
    with pytest.raises(FileNotFoundError, match="lora_adapter_path='/nonexistent'.*adapter_config.json"):
        lora_engine(lora_adapter_path="/nonexistent")


def test_a_checkpoint_of_other_adapters_is_refused_naming_the_mismatch(trained, tmp_path):
    from verl_lite.checkpoint_files import CheckpointError

    trained.save_checkpoint(str(tmp_path / "actor"))
    other = lora_engine(target_modules=["q_proj", "v_proj"])
    with pytest.raises(CheckpointError, match="does not hold this model's LoRA adapters"):
        other.load_checkpoint(str(tmp_path / "actor"))


def test_the_critic_gets_adapters_and_a_fully_trained_value_head():
    from verl_lite.engine.torch.engine import TorchValueEngine

    engine = TorchValueEngine(ModelConfig(path="tiny-qwen3_5", lora_rank=4), CriticConfig(), OptimConfig(lr=1e-2),
                              "cpu", "critic")
    engine.initialize()
    trainable = [n for n, p in engine.module.named_parameters() if p.requires_grad]
    assert any("value_head" in n for n in trainable) and any(".lora_A." in n for n in trainable)
    assert not any("value_head" in n and ".lora_" in n for n in trainable)  # the head trains whole
    names = [n for n, _ in engine.export_hf_weights()]
    assert "value_head.weight" in names and not any("lora_" in n or "original_module" in n for n in names)


# ---------------------------------------------------------------------------- the worker and the check


def worker_config(data, *extra):
    from verl_lite.config import load_config, to_dataclass

    return to_dataclass(load_config([
        f"data.train_files={data}/train.parquet", f"data.val_files={data}/val.parquet", "trainer.device=cpu",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.use_kl_loss=True", *extra]))


def test_with_lora_the_worker_builds_no_ref_model_and_scores_the_ref_with_adapters_disabled(copy_task_data):
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    data = copy_task_data(n_train=64, n_val=8)
    worker = ActorRolloutRefWorker(worker_config(data, "actor_rollout_ref.model.lora_rank=4"), 0, 1)
    assert worker.ref is None
    with torch.no_grad():
        for n, p in worker.actor.module.named_parameters():
            if ".lora_B." in n:
                p.normal_(0.0, 0.2)
    batch = dict(make_batch(3), temperature=1.0)
    ref = worker.compute_ref_log_prob(batch)["ref_log_prob"]
    plain = ActorRolloutRefWorker(worker_config(data), 0, 1)  # full fine-tuning: a ref model of its own
    assert plain.ref is not None
    assert torch.equal(ref, plain.compute_ref_log_prob(batch)["ref_log_prob"])
    assert not torch.allclose(worker.compute_log_prob(batch)["old_log_probs"], ref, atol=1e-4)


def problems(*overrides, for_training=False):
    from verl_lite.config import load_config
    from verl_lite.preflight.run import collect_problems

    return collect_problems(load_config(list(overrides)), for_training=for_training)


def test_lora_on_the_megatron_strategy_is_refused_as_not_supported():
    found = problems("model_engine=megatron", "actor_rollout_ref.model.path=tiny-qwen3",
                     "actor_rollout_ref.model.lora_rank=8")
    assert any("lora_rank=8" in p and "LoRA on the megatron strategy is not supported" in p for p in found), found
    assert not any("lora" in p for p in problems("actor_rollout_ref.model.lora_rank=8"))


def test_verls_lora_merge_true_is_taken_and_false_is_refused():
    assert not any("lora" in p for p in problems("actor_rollout_ref.model.lora_rank=8",
                                                 "actor_rollout_ref.model.lora.merge=True"))
    from verl_lite.config import load_config

    with pytest.raises(Exception, match=r"lora\.merge=False.*not supported by verl_lite yet"):
        load_config(["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora.merge=False"])


def test_a_missing_adapter_dir_on_the_training_machine_and_a_negative_rank_are_refused_before_the_run():
    found = problems("actor_rollout_ref.model.lora_adapter_path=/nonexistent", for_training=True)
    assert any("lora_adapter_path='/nonexistent' holds no adapter_config.json" in p for p in found), found
    assert not any("lora" in p for p in problems("actor_rollout_ref.model.lora_adapter_path=/nonexistent"))
    found = problems("actor_rollout_ref.model.lora_rank=-1")
    assert any("lora_rank=-1" in p and ">= 0" in p for p in found), found


LORA = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=32",
        "actor_rollout_ref.model.target_modules=all-linear", "actor_rollout_ref.model.exclude_modules=[down_proj]",
        "actor_rollout_ref.model.lora.merge=True", "actor_rollout_ref.rollout.layered_summon=True"]


def test_every_key_a_lora_grpo_run_sets_is_read_and_its_checkpoint_holds_the_adapter(copy_task_data, tmp_path):
    from read_tracking import track_reads
    from test_read_tracking import GRPO, base

    from verl_lite.config import load_config
    from verl_lite.preflight.run import collect_problems, collect_warnings
    from verl_lite.trainer.run import run

    overrides = base(copy_task_data(n_train=64, n_val=8), tmp_path / "r") + GRPO + LORA
    cfg = load_config(overrides)
    with track_reads() as reads:
        assert collect_problems(cfg, for_training=True) == []
        warnings = collect_warnings(cfg)
        assert run(cfg) == 0
    keys = [line.lstrip("+").split("=", 1)[0] for line in overrides]
    # verl's lines taken as they are (the reviewed table) set nothing to read
    unread = [k for k in keys if not reads.was_read(k) and k not in ("actor_rollout_ref.model.lora.merge",
                                                                     "actor_rollout_ref.rollout.layered_summon")]
    assert unread == [], f"set but never read (accepted and ignored): {unread}"
    # the ref's engine settings of GRPO build nothing with LoRA: the check says so
    assert any("actor_rollout_ref.ref.fsdp_config.param_offload" in w and "no effect: with LoRA" in w
               for w in warnings), warnings
    adapter = json.loads((tmp_path / "r" / "global_step_2" / "actor" / "lora_adapter" / "adapter_config.json")
                         .read_text())
    assert adapter["r"] == 8 and adapter["lora_alpha"] == 32 and "down_proj" in str(adapter["exclude_modules"])


@pytest.mark.slow
def test_lora_at_dp2_over_ray_gives_the_dp1_update_and_its_checkpoint_resumes_at_dp2(ray_cluster, copy_task_data,
                                                                                     tmp_path):
    """FSDP2 shards the PEFT model: the merged export, the adapter-only checkpoint and its load all gather
    or scatter DTensors."""
    from test_trainer_ray import fixed_batch, make_cfg

    from verl_lite.config import to_dataclass
    from verl_lite.trainer.data_parallel import dp_shards, update_meta
    from verl_lite.trainer.worker_group import WorkerGroup
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    data = copy_task_data(n_train=64, n_val=8)
    extra = ("actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=32",
             "trainer.balance_batch=False")
    cfg1, cfg2 = make_cfg(data, tmp_path / "a", 1, *extra), make_cfg(data, tmp_path / "b", 2, *extra)
    batch = fixed_batch(cfg1)
    train = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "responses",
                                                     "response_mask", "old_log_probs", "advantages", "temperature")}
    weights = {}
    for dp, cfg in ((1, cfg1), (2, cfg2)):
        wg = WorkerGroup(ActorRolloutRefWorker, f"lora_dp{dp}", to_dataclass(cfg), dp, "cpu", use_ray=True,
                         threads=1, call_timeout_s=120)
        before = wg.call_all("actor_state_dict")[0]
        wg.call_shards("update_actor", dp_shards(train, 2, dp), update_meta(train, 2, dp))
        weights[dp] = wg.call_all("actor_state_dict")[0]
        if dp == 2:
            wg.call_all("save_checkpoint", str(tmp_path / "ckpt"))
        wg.shutdown()
    assert any(not torch.equal(before[k], weights[2][k]) for k in before), "the update did not move the merged weights"
    for k in weights[1]:
        torch.testing.assert_close(weights[1][k], weights[2][k], atol=1e-5, rtol=1e-4)
    resumed = WorkerGroup(ActorRolloutRefWorker, "lora_resume", to_dataclass(cfg2), 2, "cpu", use_ray=True, threads=1,
                          call_timeout_s=120)
    resumed.call_all("load_checkpoint", str(tmp_path / "ckpt"))
    loaded = resumed.call_all("actor_state_dict")[0]
    resumed.shutdown()
    for k in weights[2]:
        assert torch.equal(loaded[k], weights[2][k]), k


@pytest.mark.slow
def test_a_lora_grpo_run_on_the_copy_task_raises_the_mean_reward(copy_task_data, tmp_path):
    """LoRA alone (rank 16, base frozen) learns the tiny copy task when the random base's embeddings are not
    too small to sharpen: with the shipped std 0.02 init no adapter can push a logit past ~1.3 through the
    frozen tied embedding and norm (docs/lora.md), so this base is drawn with initializer_range 0.2."""
    from test_trainer import read_metrics, run_training, tiny_overrides

    out = tmp_path / "lora"
    run_training(tiny_overrides(copy_task_data(n_train=512, n_val=16), out, 60, "data.train_batch_size=16",
                                "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.optim.lr=3e-3",
                                "actor_rollout_ref.model.lora_rank=16", "actor_rollout_ref.model.lora_alpha=32",
                                "+actor_rollout_ref.model.override_config.initializer_range=0.2"))
    rewards = [m["critic/score/mean"] for m in read_metrics(out) if "critic/score/mean" in m]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.1, f"reward did not rise: first 10 steps {first:.3f}, last 10 steps {last:.3f}"


def test_the_critic_reads_its_own_lora_settings_even_when_it_takes_the_actors_model(copy_task_data):
    from verl_lite.engine.torch.lora import is_peft
    from verl_lite.trainer.workers import CriticWorker

    data = copy_task_data(n_train=64, n_val=8)
    gae = ("algorithm.adv_estimator=gae", "critic.model.path=")  # "" = the actor's model section
    actor_only = CriticWorker(worker_config(data, *gae, "actor_rollout_ref.model.lora_rank=8"), 0, 1)
    assert not is_peft(actor_only.critic.module)
    own = CriticWorker(worker_config(data, *gae, "critic.model.lora_rank=4"), 0, 1)
    assert is_peft(own.critic.module) and own.critic.module.peft_config["default"].r == 4
