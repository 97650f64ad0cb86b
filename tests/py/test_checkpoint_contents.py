"""verl's checkpoint section honoured: save_contents / load_contents (subsets and hf_model), strict,
trainer.max_critic_ckpt_to_keep, and a resume with another parallel layout.

- hf_model: the checkpoint's `<role>/huggingface` is an HF model dir that transformers'
  from_pretrained loads with the engine's own log-probs (torch engine in this process; Megatron at
  TP=2 for Qwen3 and Qwen3.5, and the critic as a token-classification model, in two spawned gloo
  ranks, `_scenario`, run once for the module).
- A Megatron checkpoint's per-rank files refuse another layout, naming the sizes; its HF copy loads
  into any layout (load_contents=[hf_model]).
- Retention: actor and critic parts kept by their own limits, the manifest rewritten.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
from megatron_world import scenario

from verl_lite.checkpoint_files import CheckpointError

B, T, R = 2, 10, 4


def make_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    pos = torch.arange(T).expand(B, T).clone()
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -R:], response_mask=mask[:, -R:])


def hf_log_probs(model, batch):
    """Response log-probs and entropies of a transformers causal LM, as the engines compute them."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits.float()
    logp = torch.log_softmax(logits[:, -R - 1:-1], -1)
    return logp.gather(-1, batch["responses"][..., None])[..., 0], -(logp.exp() * logp).sum(-1)


def nll_loss(outputs, batch):
    loss = -(outputs["log_probs"] * batch["response_mask"].float()).mean()
    return loss, {"loss": loss.item()}


def train_step(engine, batch, loss_fn=nll_loss):
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward([batch], loss_fn)
    engine.optimizer_step()
    engine.lr_scheduler_step()
    engine.eval_mode()


def section(role, path, strategy, tp=1, lr=1e-2, **checkpoint):
    """(model section, role section) from the schema, the checkpoint section as given."""
    from verl_lite.config.schema import ActorConfig, CheckpointConfig, CriticConfig, ModelConfig

    sec = (CriticConfig if role == "critic" else ActorConfig)(strategy=strategy)
    sec.megatron.tensor_model_parallel_size = tp
    sec.optim.lr = lr
    sec.checkpoint = CheckpointConfig(**checkpoint)
    return ModelConfig(path=path, init_seed=3), sec


# ------------------------------------------------------------------------------ Megatron, two ranks


def _megatron_lm(path, tp, **checkpoint):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor = section("actor", path, "megatron", tp=tp, **checkpoint)
    engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    engine.initialize()
    return engine


def _outputs(engine, batch):
    out = engine.forward_backward([batch], forward_only=True, calculate_entropy=True)[0]
    return out["log_probs"], out["entropy"]


@scenario
def _scenario(rank, rec, out_dir):
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.value import MegatronValueEngine

    rec["dir"] = out_dir
    batch = make_batch()
    # Qwen3 at TP=2: every content, after a step (the weights are no longer the seeded init)
    lm = _megatron_lm("tiny-qwen3", 2, save_contents=["model", "optimizer", "extra", "hf_model"])
    train_step(lm, batch)
    rec["qwen3"] = _outputs(lm, batch)
    lm.save_checkpoint(os.path.join(out_dir, "qwen3", "actor"))
    # the critic's HF copy alone (a subset): a token-classification model with one label
    model, critic = section("critic", "tiny-qwen3", "megatron", tp=2, save_contents=["hf_model"])
    value = MegatronValueEngine(model, critic, critic.optim, "cpu", "critic")
    value.initialize()
    rec["values"] = value.forward_backward([batch], forward_only=True)[0]["values"]
    value.save_checkpoint(os.path.join(out_dir, "qwen3", "critic"))
    mpu.destroy_model_parallel()

    # TP=1 (two data-parallel ranks): the per-rank files refuse, the HF copy loads
    other = _megatron_lm("tiny-qwen3", 1)
    try:
        other.load_checkpoint(os.path.join(out_dir, "qwen3", "actor"))
    except CheckpointError as e:
        rec["layout_refusal"] = str(e)
    other = _megatron_lm("tiny-qwen3", 1, load_contents=["hf_model"])
    other.load_checkpoint(os.path.join(out_dir, "qwen3", "actor"))
    rec["qwen3_tp1_from_hf"] = _outputs(other, batch)
    mpu.destroy_model_parallel()

    # Qwen3.5 (Gated DeltaNet, tied embeddings) at TP=2
    lm = _megatron_lm("tiny-qwen3_5", 2, save_contents=["hf_model"])
    train_step(lm, batch)
    rec["qwen3_5"] = _outputs(lm, batch)
    lm.save_checkpoint(os.path.join(out_dir, "qwen3_5", "actor"))
    mpu.destroy_model_parallel()


@pytest.fixture(scope="module")
def megatron_run(megatron_world):
    return megatron_world(__name__)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5"])
def test_a_megatron_tp2_hf_model_loads_in_transformers_with_the_engines_log_probs(megatron_run, name):
    from transformers import AutoModelForCausalLM

    hf_dir = os.path.join(megatron_run[0]["dir"], name, "actor", "huggingface")
    model = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    log_probs, entropy = hf_log_probs(model, make_batch())
    want_lp, want_ent = megatron_run[0][name]
    assert (log_probs - want_lp).abs().max().item() < 1e-5
    assert (entropy - want_ent).abs().max().item() < 1e-5
    assert os.path.isfile(os.path.join(hf_dir, "char_tokenizer.json"))  # the tokenizer travels with it


def test_the_megatron_critics_hf_model_is_a_token_classification_model_with_its_values(megatron_run):
    from transformers import AutoModelForTokenClassification

    part = os.path.join(megatron_run[0]["dir"], "qwen3", "critic")
    model = AutoModelForTokenClassification.from_pretrained(os.path.join(part, "huggingface")).eval()
    with torch.no_grad():
        values = model(input_ids=make_batch()["input_ids"]).logits[:, -R - 1:-1, 0]
    assert (values - megatron_run[0]["values"]).abs().max().item() < 1e-5
    # save_contents=[hf_model] alone: no per-rank files
    assert sorted(os.listdir(part)) == ["contents.json", "huggingface"]


def test_a_megatron_checkpoint_refuses_another_layout_and_its_hf_copy_loads_into_it(megatron_run):
    refusal = megatron_run[0]["layout_refusal"]
    assert "tensor_model_parallel_size=2 (this run: 1)" in refusal
    assert "load_contents=[hf_model]" in refusal
    lp, ent = megatron_run[0]["qwen3_tp1_from_hf"]
    want_lp, want_ent = megatron_run[0]["qwen3"]
    assert (lp - want_lp).abs().max().item() < 1e-5 and (ent - want_ent).abs().max().item() < 1e-5


# ------------------------------------------------------------------------------ torch engine, in process


def _torch_engine(role, path, **checkpoint):
    from verl_lite.engine.torch.engine import TorchLMEngine, TorchValueEngine

    model, sec = section(role, path, "fsdp", lr=1e-2, **checkpoint)
    engine = (TorchValueEngine if role == "critic" else TorchLMEngine)(model, sec, sec.optim, "cpu", role)
    engine.initialize()
    return engine


@pytest.mark.parametrize("path", ["tiny-qwen3", "tiny-qwen3_5"])
def test_the_torch_engines_hf_model_loads_in_transformers_with_its_log_probs(tmp_path, path):
    from transformers import AutoModelForCausalLM

    engine = _torch_engine("actor", path, save_contents=["model", "optimizer", "extra", "hf_model"])
    batch = make_batch()
    train_step(engine, batch)
    engine.save_checkpoint(str(tmp_path / "actor"))
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "actor" / "huggingface")).eval()
    out = engine.forward_backward([batch], forward_only=True, calculate_entropy=True)[0]
    log_probs, entropy = hf_log_probs(model, batch)
    assert (log_probs - out["log_probs"]).abs().max().item() < 1e-5
    assert (entropy - out["entropy"]).abs().max().item() < 1e-5


def test_the_torch_critics_hf_model_is_a_token_classification_model_and_loads_back_as_its_weights(tmp_path):
    from transformers import AutoModelForTokenClassification

    critic = _torch_engine("critic", "tiny-qwen3", save_contents=["model", "optimizer", "extra", "hf_model"])
    batch = make_batch()
    train_step(critic, batch, lambda out, mb: ((out["values"] - 1.0).pow(2).mean(), {}))
    critic.save_checkpoint(str(tmp_path / "critic"))
    model = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "critic" / "huggingface")).eval()
    values = critic.forward_backward([batch], forward_only=True)[0]["values"]
    with torch.no_grad():
        hf_values = model(input_ids=batch["input_ids"]).logits[:, -R - 1:-1, 0]
    assert (hf_values - values).abs().max().item() < 1e-5
    # load_contents=[hf_model]: the weights from the HF copy (score -> value_head), the optimizer left fresh
    fresh = _torch_engine("critic", "tiny-qwen3", load_contents=["hf_model"])
    fresh.load_checkpoint(str(tmp_path / "critic"))
    assert (fresh.forward_backward([batch], forward_only=True)[0]["values"] - values).abs().max().item() < 1e-6
    assert len(fresh.optimizer.state) == 0


def test_strict_refuses_an_export_that_misses_a_tensor_and_non_strict_writes_it_with_a_warning(tmp_path, caplog):
    engine = _torch_engine("actor", "tiny-qwen3", save_contents=["hf_model"])
    export = engine.export_hf_weights
    engine.export_hf_weights = lambda: ((n, t) for n, t in export() if n != "model.norm.weight")
    with pytest.raises(CheckpointError, match=r"missing model\.norm\.weight .*strict=True"):
        engine.save_checkpoint(str(tmp_path / "strict"))
    engine.engine_config.checkpoint.strict = False
    with caplog.at_level(logging.WARNING):
        engine.save_checkpoint(str(tmp_path / "lax"))
    assert "missing model.norm.weight" in caplog.text and "strict=False: written as exported" in caplog.text
    from safetensors import safe_open

    with safe_open(str(tmp_path / "lax" / "huggingface" / "model.safetensors"), "pt") as f:
        assert "model.norm.weight" not in set(f.keys()) and "model.embed_tokens.weight" in set(f.keys())


def test_a_critic_hf_model_without_a_token_classification_class_is_refused_at_start():
    with pytest.raises(ValueError, match="no token-classification model class for model_type 'qwen3_5_text'"):
        _torch_engine("critic", "tiny-qwen3_5", save_contents=["model", "hf_model"])


def test_a_subset_saves_only_its_parts_and_a_load_of_a_missing_part_names_it(tmp_path):
    engine = _torch_engine("actor", "tiny-qwen3", save_contents=["model"])
    engine.save_checkpoint(str(tmp_path / "actor"))
    assert sorted(os.listdir(tmp_path / "actor")) == ["contents.json", "model.pt"]  # no RNG files: no extra
    payload = torch.load(tmp_path / "actor" / "model.pt", weights_only=True)
    assert payload["optimizer"] is None and payload["lr_scheduler"] is None
    wants_more = _torch_engine("actor", "tiny-qwen3", save_contents=["model"],
                               load_contents=["model", "optimizer", "extra"])
    with pytest.raises(CheckpointError, match=r"holds no extra, optimizer \(it was saved with save_contents=\[model\]\)"):
        wants_more.load_checkpoint(str(tmp_path / "actor"))


def test_load_contents_model_only_restores_the_weights_and_leaves_the_optimizer_fresh(tmp_path):
    saved = _torch_engine("actor", "tiny-qwen3")
    batch = make_batch()
    train_step(saved, batch)
    saved.save_checkpoint(str(tmp_path / "actor"))
    fresh = _torch_engine("actor", "tiny-qwen3", load_contents=["model"])
    fresh.load_checkpoint(str(tmp_path / "actor"))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(saved.export_hf_weights(), fresh.export_hf_weights()))
    assert len(fresh.optimizer.state) == 0 and len(saved.optimizer.state) > 0


# ------------------------------------------------------------------------------ retention and resume


def _fake_checkpoint(manager, step, parts):
    def write(tmp):
        for part in parts:
            os.makedirs(os.path.join(tmp, part))
            with open(os.path.join(tmp, part, "model.pt"), "w") as f:
                f.write(part * step)
        with open(os.path.join(tmp, "driver_state.json"), "w") as f:
            json.dump({"global_step": step, "sampler": {}}, f)

    return manager.save(step, write)


def _parts_held(manager):
    """step -> the role parts its global_step dir still holds."""
    return {s: sorted(p for p in ("actor", "critic") if os.path.isdir(os.path.join(path, p)))
            for s, path in manager.list_steps()}


def test_actor_and_critic_parts_are_kept_by_their_own_limits_and_the_dirs_stay_intact(tmp_path):
    from verl_lite.trainer.checkpoint import CheckpointManager, manifest_removed, verify

    manager = CheckpointManager(str(tmp_path), max_to_keep=3, max_critic_to_keep=1)
    for step in range(1, 5):
        _fake_checkpoint(manager, step, ("actor", "critic"))
    held = _parts_held(manager)
    assert held == {2: ["actor"], 3: ["actor"], 4: ["actor", "critic"]}  # step 1 went whole
    assert all(verify(path) is None for _, path in manager.list_steps())
    assert manifest_removed(manager.step_dir(3)) == {"critic": "trainer.max_critic_ckpt_to_keep=1"}
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no leftovers


def test_more_critic_than_actor_checkpoints_keep_critic_only_dirs_as_verl_keeps_its_critic_dirs(tmp_path):
    from verl_lite.trainer.checkpoint import CheckpointManager

    manager = CheckpointManager(str(tmp_path), max_to_keep=1, max_critic_to_keep=2)
    for step in range(1, 4):
        _fake_checkpoint(manager, step, ("actor", "critic"))
    held = _parts_held(manager)
    assert held == {2: ["critic"], 3: ["actor", "critic"]}


def test_a_resume_skips_or_refuses_a_checkpoint_whose_critic_part_was_removed(tmp_path):
    from verl_lite.config import load_config
    from verl_lite.trainer.checkpoint import select_checkpoint

    overrides = [f"trainer.default_local_dir={tmp_path}", "algorithm.adv_estimator=gae",
                 "trainer.max_critic_ckpt_to_keep=1"]
    cfg = load_config(overrides)
    from verl_lite.trainer.checkpoint import manager_for

    manager = manager_for(cfg)
    assert manager.max_critic_to_keep == 1 and manager.max_to_keep is None
    for step in (1, 2):
        _fake_checkpoint(manager, step, ("actor", "critic"))
    os.rename(manager.step_dir(2), tmp_path / "aside")  # the newest is gone: global_step_1 has no critic
    assert select_checkpoint(cfg) is None  # auto: nothing that holds both parts
    cfg = load_config(overrides + ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path}/global_step_1"])
    with pytest.raises(CheckpointError, match=r"its critic part was removed by trainer.max_critic_ckpt_to_keep=1"):
        select_checkpoint(cfg)


def test_max_critic_ckpt_to_keep_follows_the_actors_limit_unless_set():
    from verl_lite.config import load_config

    assert load_config(["trainer.max_actor_ckpt_to_keep=2"]).trainer.max_critic_ckpt_to_keep == 2
    assert load_config(["trainer.max_actor_ckpt_to_keep=2",
                        "trainer.max_critic_ckpt_to_keep=null"]).trainer.max_critic_ckpt_to_keep is None


# ------------------------------------------------------------------------------ a PPO run, end to end


def test_a_ppo_run_saves_hf_model_keeps_parts_by_their_limits_and_resumes_from_the_newest(copy_task_data, tmp_path,
                                                                                          caplog):
    """trainer.ray=false, tiny Qwen3 actor and critic: three saves, actor parts kept 2, critic parts 1;
    the actor's HF copy loads in transformers; a longer run resumes from global_step_3."""
    from transformers import AutoModelForCausalLM

    from verl_lite.preflight.run import collect_problems
    from verl_lite.config import load_config
    from verl_lite.trainer.run import run

    data, out = copy_task_data(n_train=32, n_val=4), tmp_path / "out"
    lines = [f"data.train_files={data}/train.parquet", f"data.val_files={data}/val.parquet",
             "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
             "actor_rollout_ref.model.path=tiny-qwen3", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
             "actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=gae",
             "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
             "trainer.max_actor_ckpt_to_keep=2", "trainer.max_critic_ckpt_to_keep=1", "trainer.save_freq=1",
             "trainer.device=cpu", "trainer.ray=false", "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
             f"trainer.default_local_dir={out}"]
    cfg = load_config(lines + ["trainer.total_training_steps=3"])
    assert collect_problems(cfg, for_training=True) == []
    assert run(cfg) == 0
    held = {name: sorted(p for p in ("actor", "critic") if (out / name / p).is_dir())
            for name in sorted(os.listdir(out)) if name.startswith("global_step_")}
    assert held == {"global_step_2": ["actor"], "global_step_3": ["actor", "critic"]}
    assert not (out / "global_step_3" / "critic" / "huggingface").exists()  # the critic's save_contents has none
    AutoModelForCausalLM.from_pretrained(str(out / "global_step_3" / "actor" / "huggingface"))
    with caplog.at_level(logging.INFO, logger="verl_lite.trainer.ppo_trainer"):
        assert run(load_config(lines + ["trainer.total_training_steps=4"])) == 0
    assert f"resumed from {out / 'global_step_3'} at step 3" in caplog.text
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # step 4 only was trained again: resumed from global_step_3


def test_checkpoint_settings_that_cannot_act_in_the_run_are_warned_about():
    from verl_lite.preflight.run import collect_warnings
    from verl_lite.config import load_config

    warnings = " ".join(collect_warnings(load_config([
        "trainer.device=cpu", "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.checkpoint.strict=False",
        "trainer.resume_mode=disable",
        "actor_rollout_ref.actor.checkpoint.load_contents=[model]", "critic.checkpoint.save_contents=[model]"])))
    assert "actor_rollout_ref.actor.checkpoint.strict=False has no effect: it checks the names of the hf_model" in warnings
    assert "actor_rollout_ref.actor.checkpoint.load_contents has no effect: trainer.resume_mode=disable" in warnings
    assert "critic.checkpoint.save_contents is set, but no critic runs" in warnings
    acting = collect_warnings(load_config(["trainer.device=cpu", "actor_rollout_ref.actor.checkpoint.strict=False",
                                           "actor_rollout_ref.actor.checkpoint.save_contents=[model,hf_model]"]))
    assert not [w for w in acting if "checkpoint" in w]
    assert collect_warnings(load_config(["trainer.device=cpu", "algorithm.adv_estimator=grpo",
                                         "actor_rollout_ref.rollout.n=4"])) == []


def test_another_engine_or_layout_is_refused_before_the_run_starts_unless_the_hf_copy_is_loaded(tmp_path):
    from verl_lite.config import load_config
    from verl_lite.trainer.checkpoint import manager_for, select_checkpoint

    def checkpoint(layout):
        def write(tmp):
            os.makedirs(os.path.join(tmp, "actor"))
            with open(os.path.join(tmp, "actor", "contents.json"), "w") as f:
                json.dump({"save_contents": ["model", "optimizer", "extra", "hf_model"], "layout": layout}, f)
            with open(os.path.join(tmp, "driver_state.json"), "w") as f:
                json.dump({"global_step": 1, "sampler": {}}, f)

        return write

    grpo = ["algorithm.adv_estimator=grpo", f"trainer.default_local_dir={tmp_path}"]  # no critic part needed
    megatron = grpo + ["actor_rollout_ref.actor.strategy=megatron"]
    manager_for(load_config(megatron)).save(1, checkpoint(
        {"engine": "megatron", "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1,
         "virtual_pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1, "expert_tensor_parallel_size": 2}))
    with pytest.raises(CheckpointError, match=r"tensor_model_parallel_size=2 \(this run: 1\).*\(actor_rollout_ref\.actor"
                                              r"\.megatron\.tensor_model_parallel_size=2\)"):
        select_checkpoint(load_config(megatron))
    with pytest.raises(CheckpointError, match="written by the megatron engine and this run's actor runs on the fsdp"):
        select_checkpoint(load_config(grpo))
    hf_copy = "actor_rollout_ref.actor.checkpoint.load_contents=[hf_model]"
    assert select_checkpoint(load_config(megatron + [hf_copy]))[0] == str(tmp_path / "global_step_1")
    assert select_checkpoint(load_config(grpo + [hf_copy])) is not None
    two = ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2"]
    assert select_checkpoint(load_config(megatron + two)) is not None
