"""Megatron sequence parallelism (SP): the preflight rule for MoE at TP > 1, and (one 2-rank spawn)
SP on CPU over gloo against TP=2 without SP and transformers."""

from __future__ import annotations

from verl_lite.preflight import run as preflight
from verl_lite.preflight.summary import summarize
from verl_lite.config import compose_config

BASE = ["data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.strategy=megatron", "trainer.n_gpus_per_node=16", "trainer.device=npu"]
SHAPE_35B = "actor_rollout_ref.model.path=/nonexistent/Qwen3.5-35B-A3B"  # the shipped public shape (256 experts)
DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_attention_heads": 8,
         "num_key_value_heads": 8, "num_hidden_layers": 4}


def layout(role: str, tp: int, ep: int = 1, sp: bool = False):
    prefix = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}[role]
    return [f"{prefix}.megatron.tensor_model_parallel_size={tp}", f"{prefix}.megatron.expert_model_parallel_size={ep}",
            f"{prefix}.megatron.sequence_parallel={sp}"]


def problems(overrides):
    cfg, compose_problems = compose_config(overrides)
    assert compose_problems == []
    return preflight.collect_problems(cfg, for_training=False)


def sp_problems(overrides):
    return [p for p in problems(overrides) if "sequence parallel" in p]


def test_training_moe_at_tp2_without_sequence_parallel_is_refused_before_ray_naming_the_fix():
    found = sp_problems(BASE + [SHAPE_35B] + layout("actor", 2, 8, sp=False) + layout("ref", 2, 8, sp=True))
    assert len(found) == 1, found
    assert "actor: training an MoE model (256 experts)" in found[0]
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2" in found[0]


def test_moe_at_tp1_and_dense_models_at_tp2_and_the_forward_only_ref_are_not_refused(write_model):
    assert sp_problems(BASE + [SHAPE_35B] + layout("actor", 1, 8) + layout("ref", 2, 8)) == []
    dense = f"actor_rollout_ref.model.path={write_model(DENSE)}"
    assert sp_problems(BASE + [dense] + layout("actor", 2) + layout("ref", 2)) == []


# ---------------------------------------------------------------------------- SP on CPU (one 2-rank spawn)
# Every check below runs in ONE spawn of two gloo ranks (`_scenario`; a megatron import costs 7-9 s
# per process) at TP=2; the tests read what the ranks recorded. fp32 throughout.

import pytest  # noqa: E402
import torch  # noqa: E402
from megatron_world import nll_loss, padded_batch, scenario, train_steps  # noqa: E402

B, T, R = 3, 11, 4  # T odd: sequence parallelism at TP=2 pads one column on the left
SEED = 3
QWEN3, QWEN3_5, MOE = "tiny-qwen3", "tiny-qwen3_5", "tiny-qwen3_5-moe"
NORM = "decoder.layers.0.input_layernorm.weight"  # hidden-state norm: grads summed over TP under SP
QNORM = "decoder.layers.0.self_attention.q_layernorm.weight"  # per head: not sequence-parallel
# One Adam step (lr 1e-3) with SP vs without, largest weight difference. Adam's first step moves each
# weight by about lr * sign(grad), so an entry whose grad is near Adam's eps turns fp32 reduction-order
# differences (SP sums in another order) into a few 1e-6 (measured 4.5e-6); without the norms' mark the
# difference is 2e-3 (2 * lr: norm updates of the wrong sign).
STEP_TOL = 2e-5


def make_batch(seed: int = 0):
    """Left-padded prompts and a response that ended early."""
    return padded_batch(B, T, R, left_pad={0: 4, 2: 2}, ended_early=(1,), seed=seed)


def _sections(path, sp, lr=1e-3, tp=2):
    from omegaconf import OmegaConf

    from verl_lite.config.schema import VerlLiteConfig

    cfg = OmegaConf.structured(VerlLiteConfig)
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    model.path, model.init_seed = path, SEED
    actor.strategy = "megatron"
    actor.megatron.tensor_model_parallel_size = tp
    actor.megatron.sequence_parallel = sp
    actor.optim.lr = lr
    return model, actor, cfg.critic


def _engine(path, sp, trains, lr=1e-3, tp=2):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor, _ = _sections(path, sp, lr, tp)
    engine = MegatronLMEngine(model, actor, actor.optim if trains else None, "cpu", "actor")
    engine.initialize()
    return engine


def _logits(engine, batch):
    """Full-vocabulary logits (gathered over TP) through the engine's batch preparation (padded to
    a multiple of TP under SP), the left pad column removed."""
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    from verl_lite.engine.megatron import batch as megatron_batch
    from verl_lite.engine.megatron import schedule as megatron_schedule

    multiple = 2 if engine.tf_config.sequence_parallel else 1

    def logits_of(output, item, with_entropy):
        return {"logits": gather_from_tensor_model_parallel_region(output)[..., : engine.layout.vocab]}

    prepared = [megatron_batch.prepare_batch(batch, torch.device("cpu"), 0, 0, multiple=multiple)]
    out = megatron_schedule.run_schedule(engine.model, prepared, logits_of, None, True, False)[0]["logits"]
    return out[:, -batch["input_ids"].shape[1]:]


def _hf_logits(path, batch):
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl_lite.engine.megatron.hf import random_hf_state
    from verl_lite.models import resolve_model_dir

    config = AutoConfig.from_pretrained(resolve_model_dir(path))
    state = random_hf_state(AutoModelForCausalLM, config, SEED).__self__
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     position_ids=batch["position_ids"]).logits


def _params(engine):
    from verl_lite.engine.megatron.model import unwrap

    return dict(unwrap(engine.model[0]).named_parameters())


def _phase_logits(rec, batch, valid):
    """Logits with SP against transformers' (all three models) and against TP=2 without SP (Qwen3
    dense; the other two are compared without SP against transformers in test_qwen3_5_megatron);
    the engine's log-probs (its own padding to a multiple of TP) against transformers'."""
    resp = batch["response_mask"].bool()
    for path in (QWEN3, QWEN3_5, MOE):
        hf = _hf_logits(path, batch)
        with_sp = _engine(path, True, trains=False)
        rec[f"{path}:sp_config"] = bool(with_sp.tf_config.sequence_parallel)
        sp_logits = _logits(with_sp, batch)
        sp_log_probs = with_sp.forward_backward([batch], forward_only=True)[0]["log_probs"]
        rec[f"{path}:vs_hf"] = (sp_logits[valid] - hf[valid]).abs().max().item()
        hf_log_probs = torch.log_softmax(hf[:, -R - 1:-1], -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
        rec[f"{path}:log_probs_vs_hf"] = (sp_log_probs - hf_log_probs)[resp].abs().max().item()
        if path == QWEN3:
            rec[f"{path}:vs_no_sp"] = (sp_logits[valid] - _logits(_engine(path, False, trains=False), batch)[valid]
                                       ).abs().max().item()


def _one_step(engine, batch, strip_attribute=False):
    if strip_attribute:  # negative control: norms no longer marked for megatron's TP all-reduce
        for p in _params(engine).values():
            if getattr(p, "sequence_parallel", False):
                p.sequence_parallel = False
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward([batch], nll_loss)
    grads = {n: p.main_grad.detach().clone() for n, p in _params(engine).items() if n in (NORM, QNORM)}
    grads["norm"] = engine.optimizer_step()  # the grad norm the step clipped with (optim.clip_grad 1.0)
    weights = {n: t.detach().clone() for n, t in engine.export_hf_weights()}
    return grads, weights


def _phase_step(rec, batch):
    runs = {"sp": (True, False), "no_sp": (False, False), "sp_unmarked": (True, True), "tp1": (True, False)}
    results = {}
    from megatron.core import parallel_state as mpu

    for name, (sp, strip) in runs.items():
        if name == "tp1":  # last: TP=1 makes the two ranks two DP ranks (same batch); then back to TP=2
            mpu.destroy_model_parallel()
        engine = _engine(QWEN3, sp, trains=True, tp=1 if name == "tp1" else 2)
        if name == "sp":
            params = _params(engine)
            rec["attr_norm"] = getattr(params[NORM], "sequence_parallel", None)
            rec["attr_qnorm"] = getattr(params[QNORM], "sequence_parallel", None)
            rec["attr_final"] = getattr(params["decoder.final_layernorm.weight"], "sequence_parallel", None)
        results[name] = _one_step(engine, batch, strip_attribute=strip)
    mpu.destroy_model_parallel()
    (g_sp, w_sp), (g_no, w_no), (g_bad, w_bad) = results["sp"], results["no_sp"], results["sp_unmarked"]
    rec["step_weight_diff"] = max((w_sp[k] - w_no[k]).abs().max().item() for k in w_no)
    g_tp1, w_tp1 = results["tp1"]
    rec["grad_norms"] = (g_tp1["norm"], g_sp["norm"], g_no["norm"])
    rec["step_weight_diff_tp1"] = max((w_sp[k] - w_tp1[k]).abs().max().item() for k in w_tp1)
    rec["step_weight_diff_unmarked"] = max((w_bad[k] - w_no[k]).abs().max().item() for k in w_no)
    rec["norm_grad_diff"] = (g_sp[NORM] - g_no[NORM]).abs().max().item()
    rec["norm_grad_diff_unmarked"] = (g_bad[NORM] - g_no[NORM]).abs().max().item()
    rec["qnorm_grad_diff"] = (g_sp[QNORM] - g_no[QNORM]).abs().max().item()
    rec["norm_grad"] = g_sp[NORM]  # compared across the two ranks by the test


def _phase_gdn_step(rec, batch):
    """Qwen3.5 dense: the GDN output norm acts per head (heads split over TP), so its grads are partial
    on each rank with or without SP; one step must leave it equal on both ranks, and SP must give the
    weights of TP=2 without SP."""
    weights, norms = {}, {}
    for sp in (True, False):
        engine = _engine(QWEN3_5, sp, trains=True)
        _, weights[sp] = _one_step(engine, batch)
        norms[sp] = {n: p.detach().clone() for n, p in _params(engine).items() if "out_norm" in n}
    rec["gdn_step_weight_diff"] = max((weights[True][k] - weights[False][k]).abs().max().item() for k in weights[False])
    rec["gdn_out_norms"] = norms  # compared across the two ranks by the test


def _phase_critic(rec, batch):
    """The value engine (Qwen3 trunk, scalar head replicated over TP): values and one step with SP
    against TP=2 without SP."""
    from verl_lite.config.schema import CriticConfig
    from verl_lite.engine.megatron.value import MegatronValueEngine

    def value_loss(outputs, mb):
        mask = mb["response_mask"].float()
        loss = ((outputs["values"] - 1.0) ** 2 * mask).sum() / mask.sum()
        return loss, {"loss": loss.item()}

    model, _, _ = _sections(QWEN3, True)
    values, weights = {}, {}
    for sp in (True, False):
        critic = CriticConfig(strategy="megatron")
        critic.megatron.tensor_model_parallel_size = 2
        critic.megatron.sequence_parallel = sp
        critic.optim.lr = 1e-3
        engine = MegatronValueEngine(model, critic, critic.optim, "cpu", "critic")
        engine.initialize()
        values[sp] = engine.forward_backward([batch], forward_only=True)[0]["values"]
        engine.train_mode()
        engine.optimizer_zero_grad()
        engine.forward_backward([batch], value_loss)
        engine.optimizer_step()
        weights[sp] = {n: t.detach().clone() for n, t in engine.export_hf_weights()}
    resp = batch["response_mask"].bool()
    rec["critic_values_diff"] = (values[True] - values[False])[resp].abs().max().item()
    rec["critic_step_weight_diff"] = max((weights[True][k] - weights[False][k]).abs().max().item() for k in weights[False])


def _phase_moe_training(rec, batch):
    engine = _engine(MOE, True, trains=True, lr=1e-2)
    rec["moe_losses"] = train_steps(engine, batch, steps=4)


def _phase_worker_sampling(rec, rank):
    """The trainer's worker at TP=2 (one data-parallel rank over both processes): both TP ranks must
    sample the same responses for the same prompts, or they would score and train on different
    sequences together (GRPO at TP=2 then does not learn)."""
    from verl_lite.config import load_config, to_dataclass
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    cfg = to_dataclass(load_config([
        "trainer.device=cpu", "trainer.n_gpus_per_node=2", f"actor_rollout_ref.model.path={QWEN3}",
        "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]))
    worker = ActorRolloutRefWorker(cfg, rank, 2)
    batch = make_batch()
    prompts = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    out = worker.generate_sequences(prompts, 6, {"temperature": 1.0, "do_sample": True})
    rec["worker_responses"] = out["responses"]


@scenario
def _scenario(rank, rec, out_dir):
    batch = make_batch()
    valid = batch["attention_mask"].bool()
    _phase_logits(rec, batch, valid)
    _phase_step(rec, batch)
    _phase_gdn_step(rec, batch)
    _phase_critic(rec, batch)
    _phase_moe_training(rec, batch)
    _phase_worker_sampling(rec, rank)


@pytest.fixture(scope="module")
def ranks(megatron_world):
    return megatron_world(__name__)


@pytest.mark.parametrize("path", [QWEN3, QWEN3_5, MOE])
def test_logits_with_sequence_parallel_equal_transformers_and_tp2_without_it(ranks, path):
    for rec in ranks:
        assert rec[f"{path}:sp_config"] is True
        assert rec[f"{path}:vs_hf"] < 1e-5
        assert rec[f"{path}:log_probs_vs_hf"] < 1e-5
        if path == QWEN3:
            assert rec[f"{path}:vs_no_sp"] < 1e-5


def test_tp2_with_and_without_sequence_parallel_clips_with_the_grad_norm_of_tp1_and_steps_alike(ranks):
    """megatron counts a TP-split weight once per shard only when the weight is marked tensor-parallel
    (megatron_model.mark_tensor_parallel_weights); unmarked, TP=2's norm counted rank 0's shards only."""
    for rec in ranks:
        tp1, sp, no_sp = rec["grad_norms"]
        assert tp1 > 1.0  # above optim.clip_grad: the step clips by this norm
        assert abs(sp - tp1) < 1e-4 * tp1 and abs(no_sp - tp1) < 1e-4 * tp1, rec["grad_norms"]
        assert rec["step_weight_diff_tp1"] < STEP_TOL


def test_hidden_state_norms_are_marked_sequence_parallel_and_qk_norms_are_not(ranks):
    assert ranks[0]["attr_norm"] is True and ranks[0]["attr_final"] is True
    assert ranks[0]["attr_qnorm"] is False


def test_one_step_with_sequence_parallel_gives_the_weights_of_tp2_without_it(ranks):
    for rec in ranks:
        assert rec["step_weight_diff"] < STEP_TOL
        assert rec["norm_grad_diff"] < 1e-6 and rec["qnorm_grad_diff"] < 1e-6
    assert torch.equal(ranks[0]["norm_grad"], ranks[1]["norm_grad"])


def test_gdn_output_norm_stays_replicated_over_tp_after_a_step_with_and_without_sequence_parallel(ranks):
    for rec in ranks:
        assert rec["gdn_step_weight_diff"] < STEP_TOL
    for sp in (True, False):
        first, second = ranks[0]["gdn_out_norms"][sp], ranks[1]["gdn_out_norms"][sp]
        assert first and first.keys() == second.keys()
        for name in first:  # a step moves them (lr 1e-3) and both TP ranks hold the same values
            assert torch.equal(first[name], second[name]), (sp, name)
            assert (first[name] - 1.0).abs().max() > 1e-4, (sp, name)


def test_the_critic_with_sequence_parallel_gives_the_values_and_step_of_tp2_without_it(ranks):
    for rec in ranks:
        assert rec["critic_values_diff"] < 1e-5
        assert rec["critic_step_weight_diff"] < STEP_TOL


def test_without_the_sequence_parallel_mark_the_norm_grads_are_partial_and_the_step_differs(ranks):
    """The negative control of the test above: the mark is what makes megatron sum the norm grads."""
    for rec in ranks:
        assert rec["norm_grad_diff_unmarked"] > 1e-4
        assert rec["step_weight_diff_unmarked"] > 1e-4


def test_moe_trains_at_tp2_with_sequence_parallel_and_the_loss_falls(ranks):
    losses = ranks[0]["moe_losses"]
    assert ranks[1]["moe_losses"] == losses
    assert losses[-1] < losses[0] - 0.05, losses


def test_the_check_summary_says_whether_sequence_parallel_is_on_per_megatron_role_at_tp_above_1():
    cfg, compose_problems = compose_config(BASE + [SHAPE_35B, "actor_rollout_ref.actor.use_kl_loss=True"]
                                           + layout("actor", 2, 8, sp=True) + layout("ref", 2, 8, sp=False))
    assert compose_problems == []
    lines = summarize(cfg).splitlines()
    assert [line.strip() for line in lines if "seq parallel" in line] == [
        "seq parallel: on (sequence split over TP, padded to a multiple of 2)",
        "seq parallel: off (megatron.sequence_parallel=False)"]


def test_the_tensor_parallel_ranks_of_one_worker_group_sample_the_same_responses(ranks):
    first, second = ranks[0]["worker_responses"], ranks[1]["worker_responses"]
    assert first.shape == (B, 6)
    assert torch.equal(first, second)
