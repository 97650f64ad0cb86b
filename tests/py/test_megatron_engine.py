"""Megatron engines on CPU (megatron-core over gloo): TP=2 against TP=1 and PP=2, training,
clipping and optimizer settings, weight export streamed into an hf rollout, the value engine,
checkpoints. The bridge's weight mapping on its own is in test_engine_weights.py.

All megatron work runs once, in the two spawned gloo processes the Megatron test modules share
(`_scenario`, tests/py/megatron_world.py), because a megatron import costs 7-9 s; the tests below
assert on what that run recorded. The layouts run one after
the other in the same two processes: TP=2, then TP=1 with two data-parallel ranks, then PP=2.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from megatron_world import nll_loss, padded_batch, scenario, value_loss

from verl_lite.engine.megatron.batch import attention_mask_4d
from verl_lite.engine.megatron.memory import StorageParking

REPO_ROOT = Path(__file__).resolve().parents[2]

B, T, R = 3, 10, 4


def make_batch(seed: int = 0):
    """Row 0 a left-padded prompt, row 1 a response that ended early."""
    return padded_batch(B, T, R, left_pad={0: 3}, ended_early=(1,), seed=seed)


def ragged_batch(seed: int, longest: int):
    """6 rows of left-padded prompts (1..4 tokens) and right-padded responses (1..`longest` of 8): dynamic
    batch size packs them into micro-batches of different rows and widths."""
    g = torch.Generator().manual_seed(seed)
    p, r = 4, 8
    ids = torch.randint(3, 48, (6, p + r), generator=g)
    mask = torch.zeros(6, p + r, dtype=torch.long)
    p_len, r_len = torch.randint(1, p + 1, (6,), generator=g), torch.randint(1, longest + 1, (6,), generator=g)
    r_len[0] = longest
    for i in range(6):
        mask[i, p - p_len[i]:p + r_len[i]] = 1
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -r:], response_mask=mask[:, -r:])


def dynamic_vs_fixed(engine, batch, budget):
    """Log-probs, and gradients of a loss normalised by the batch's token count, from one fixed micro-batch
    and from token-budget micro-batches (`verl_lite.trainer.dynamic_batch`): the largest gaps, and the shapes."""
    from verl_lite.trainer.dynamic_batch import MicroBatches

    total = batch["response_mask"].sum()

    def loss_fn(outputs, mb):
        loss = -(outputs["log_probs"] * mb["response_mask"].float()).sum() / total
        return loss, {"loss": loss.item()}

    def grads(micro):
        engine.train_mode()
        engine.optimizer_zero_grad()
        engine.forward_backward(micro.parts, micro.loss(loss_fn))
        engine.eval_mode()
        return torch.cat([p.main_grad.detach().flatten().clone() for c in engine.model for p in c.parameters()])

    fixed, dyn = MicroBatches(batch, micro_batch_size=6), MicroBatches(batch, max_token_len=budget)
    mask = batch["response_mask"].bool()
    lp_f = fixed.gather(engine.forward_backward(fixed.parts, forward_only=True), "log_probs")
    lp_d = dyn.gather(engine.forward_backward(dyn.parts, forward_only=True), "log_probs")
    g_f, g_d = grads(fixed), grads(dyn)
    return {"log_prob_gap": (lp_f - lp_d)[mask].abs().max().item(),
            "grad_gap": (g_f - g_d).abs().max().item() / g_f.abs().max().item(),
            "shapes": [tuple(p["input_ids"].shape) for p in dyn.parts]}


RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def sections(tp=1, pp=1, lr=1e-2, overrides=None):
    """Model, actor and ref from one config tree (the ref's layout follows the actor's by
    interpolation), the critic as a plain dataclass: both kinds of section must work."""
    from omegaconf import OmegaConf

    from verl_lite.config.schema import CriticConfig, VerlLiteConfig

    cfg = OmegaConf.structured(VerlLiteConfig)
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    model.path, model.init_seed = "tiny-qwen3", 3
    actor.strategy = "megatron"
    actor.megatron.tensor_model_parallel_size = tp
    actor.megatron.pipeline_model_parallel_size = pp
    actor.optim.lr = lr
    actor.megatron.override_transformer_config = dict(overrides or {})
    critic = CriticConfig(strategy="megatron")
    critic.megatron.tensor_model_parallel_size = tp
    critic.megatron.pipeline_model_parallel_size = pp
    critic.optim.lr = lr
    return model, actor, cfg.actor_rollout_ref.ref, critic


def full_logits(engine, batch):
    """The model's logits gathered over the vocabulary (the last pipeline stage only)."""
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    with torch.no_grad():
        out = engine.model[0](batch["input_ids"], batch["position_ids"], attention_mask_4d(batch["attention_mask"]))
    return gather_from_tensor_model_parallel_region(out)[..., : engine.layout.vocab]


def train(engine, batch, loss_fn, steps):
    engine.train_mode()
    losses, norms = [], []
    for _ in range(steps):
        engine.optimizer_zero_grad()
        out = engine.forward_backward([batch, batch], loss_fn)
        losses.append(out[0]["metrics"]["loss"])
        norms.append(engine.optimizer_step())
        engine.lr_scheduler_step()
    engine.eval_mode()
    return losses, norms


def _phase_tp2(rank, rec, ckpt_dir):
    from verl_lite.engine.megatron.engine import MegatronLMEngine
    from verl_lite.engine.megatron.value import MegatronValueEngine
    from verl_lite.config.schema import RolloutConfig
    from verl_lite.rollout.hf import HFRollout

    model, actor, ref_section, critic = sections(tp=2, overrides=RECOMPUTE)  # full recompute, as the scripts run
    batch = make_batch()
    lm = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    lm.initialize()
    out = lm.forward_backward([batch], forward_only=True, calculate_entropy=True)[0]
    rec["tp2_log_probs"], rec["tp2_entropy"] = out["log_probs"], out["entropy"]
    rec["tp2_logits"] = full_logits(lm, batch)
    # actor.calculate_sum_pi_squared: each rank's partial sums all-reduced over TP, at the batch's temperature
    rec["tp2_sum_pi_squared"] = lm.forward_backward([dict(batch, temperature=0.7)], forward_only=True,
                                                    calculate_sum_pi_squared=True)[0]["sum_pi_squared"]
    rec["tp2_topology"] = (lm.data_parallel_rank(), lm.data_parallel_size(), lm.is_data_parallel_leader())

    stream = lm.export_hf_weights()
    rec["export_is_generator"] = inspect.isgenerator(stream)
    rollout = HFRollout(model, RolloutConfig(), None, "cpu")  # a transformers model, synced from the stream
    rec["rollout_synced"] = rollout.update_weights(stream, 1)  # refuses unknown names and unset tensors
    rec["tp2_export"] = dict(lm.export_hf_weights())
    rec["rollout_gap"] = max((rollout.model.state_dict()[n] - t).abs().max().item() for n, t in rec["tp2_export"].items())
    with torch.no_grad():
        logits = rollout.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               position_ids=batch["position_ids"]).logits.float()
    logp = torch.log_softmax(logits[:, -R - 1 : -1], -1)
    rec["hf_log_probs"] = logp.gather(-1, batch["responses"][..., None])[..., 0]
    rec["hf_entropy"] = -(logp.exp() * logp).sum(-1)

    # a vocabulary of 49 padded to 50 for TP=2: the padded logit must not count
    from verl_lite.engine.megatron.vocab import vocab_parallel_log_probs

    g = torch.Generator().manual_seed(5)
    full, targets = torch.randn(B, R, 50, generator=g) * 3, torch.randint(0, 49, (B, R), generator=g)
    full[..., 49] = 30.0
    lp, ent = vocab_parallel_log_probs(full.chunk(2, -1)[rank], targets, 49, True)
    want = torch.log_softmax(full[..., :49], -1)
    from verl_lite.engine.megatron.vocab import vocab_parallel_sum_pi_squared

    spsq = vocab_parallel_sum_pi_squared(full.chunk(2, -1)[rank], 49, chunk_size=4)
    rec["padded_vocab_spsq_gap"] = (spsq - (want.exp() ** 2).sum(-1)).abs().max().item()
    rec["padded_vocab_gap"] = max((lp - want.gather(-1, targets[..., None])[..., 0]).abs().max().item(),
                                  (ent + (want.exp() * want).sum(-1)).abs().max().item())
    # entropy_from_logits_with_chunking + entropy_checkpointing across the TP ranks: same values and gradients
    grads = {}
    for name, kw in {"whole": {}, "chunked": {"chunk_size": 3, "checkpoint": True}}.items():
        part = full.chunk(2, -1)[rank].clone().requires_grad_(True)
        lp, ent = vocab_parallel_log_probs(part, targets, 49, True, **kw)
        (lp.sum() + 0.3 * ent.sum()).backward()
        grads[name] = (lp.detach(), ent.detach(), part.grad)
    rec["chunked_tp_gap"] = max((a - b).abs().max().item() for a, b in zip(grads["whole"], grads["chunked"]))

    rec["lm_losses"], rec["lm_grad_norms"] = train(lm, batch, nll_loss, 4)
    rec["lm_lr"] = lm.current_lr()
    lm.save_checkpoint(ckpt_dir)
    saved = lm.forward_backward([batch], forward_only=True)[0]["log_probs"]
    train(lm, batch, nll_loss, 1)
    moved = lm.forward_backward([batch], forward_only=True)[0]["log_probs"]
    lm.load_checkpoint(ckpt_dir)
    restored = lm.forward_backward([batch], forward_only=True)[0]["log_probs"]
    rec["ckpt_moved"] = (moved - saved).abs().max().item()
    rec["ckpt_restored"] = (restored - saved).abs().max().item()
    rec["ckpt_files"] = sorted(os.listdir(ckpt_dir))
    lm.to("cpu")  # a CPU engine: nothing moves, and it must still work afterwards
    rec["after_to"] = (lm.forward_backward([batch], forward_only=True)[0]["log_probs"] - restored).abs().max().item()

    ref = MegatronLMEngine(model, ref_section, None, "cpu", "ref")  # shares the actor's parallel groups
    ref.initialize()
    rec["ref_matches_initial"] = (ref.forward_backward([batch], forward_only=True)[0]["log_probs"] - rec["tp2_log_probs"]).abs().max().item()
    try:
        ref.optimizer_step()
    except RuntimeError as e:
        rec["ref_step_error"] = str(e)

    value = MegatronValueEngine(model, critic, critic.optim, "cpu", "critic")
    value.initialize()
    values = value.forward_backward([batch], forward_only=True)[0]["values"]
    rec["values_shape"], rec["values_dtype"] = tuple(values.shape), str(values.dtype)
    rec["value_losses"], _ = train(value, batch, value_loss, 4)
    rec["value_export"] = sorted(n for n, _ in value.export_hf_weights() if not n.startswith("model.layers"))

    # optim.clip_grad is the one clip setting (actor.grad_clip stays at 1.0 and is not read); an optim
    # section without weight_decay, as an untyped dict arrives, takes the schema's 0.01
    clipped = MegatronLMEngine(model, actor, {"lr": 1e-3, "clip_grad": 0.5}, "cpu", "actor")
    clipped.initialize()
    clipped.train_mode()
    clipped.optimizer_zero_grad()
    clipped.forward_backward([batch], nll_loss)
    rec["clip_returned_norm"] = clipped.optimizer_step()
    rec["clip_norm_after_step"] = float(clipped.optimizer.get_grad_norm())
    optimizers = getattr(clipped.optimizer, "chained_optimizers", [clipped.optimizer])
    rec["default_weight_decay"] = max(g["weight_decay"] for opt in optimizers for g in opt.param_groups)


def _phase_tp1_dp2(rank, rec):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor, _, _ = sections(tp=1)
    lm = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    lm.initialize()
    batch = make_batch()
    out = lm.forward_backward([batch], forward_only=True, calculate_entropy=True)[0]
    rec["tp1_log_probs"], rec["tp1_entropy"] = out["log_probs"], out["entropy"]
    rec["tp1_logits"] = full_logits(lm, batch)
    rec["dp2_topology"] = (lm.data_parallel_rank(), lm.data_parallel_size(), lm.is_data_parallel_leader())
    train(lm, make_batch(seed=10 + rank), nll_loss, 1)  # each data-parallel rank its own data
    weights = torch.cat([t.flatten() for _, t in sorted(lm.export_hf_weights())])
    gathered = [torch.empty_like(weights) for _ in range(2)]
    torch.distributed.all_gather(gathered, weights)
    rec["dp2_weight_gap"] = (gathered[0] - gathered[1]).abs().max().item()
    # dynamic batch size: rank 0's long sequences need more micro-batches than rank 1's short ones; both
    # ranks run the larger count (a DDP step needs every rank), and the gradients still match
    from verl_lite.trainer.dynamic_batch import MicroBatches, max_over_ranks

    ragged = ragged_batch(seed=rank, longest=8 if rank == 0 else 2)
    rec["dp2_dynamic_counts"] = (len(MicroBatches(ragged, max_token_len=12).parts),
                                 len(MicroBatches(ragged, max_token_len=12, count_sync=max_over_ranks).parts))


def _phase_pp2(rank, rec):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor, _, _ = sections(pp=2)
    lm = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    lm.initialize()
    batch = make_batch()
    rec["pp2_log_probs"] = lm.forward_backward([batch], forward_only=True)[0]["log_probs"]
    rec["pp2_leader"] = lm.is_data_parallel_leader()
    rec["pp2_export"] = {n: t for n, t in lm.export_hf_weights()}
    rec["pp2_losses"], _ = train(lm, batch, nll_loss, 3)
    rec["pp2_dynamic"] = dynamic_vs_fixed(lm, ragged_batch(seed=3, longest=8), budget=24)


@scenario
def _scenario(rank, rec, out_dir):
    from megatron.core import parallel_state as mpu

    _phase_tp2(rank, rec, os.path.join(out_dir, "ckpt"))
    mpu.destroy_model_parallel()
    _phase_tp1_dp2(rank, rec)
    mpu.destroy_model_parallel()
    _phase_pp2(rank, rec)


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


# ------------------------------------------------------------------------------ layouts


def test_tp2_logits_match_tp1_within_1e_5(run):
    rank0 = run[0]
    assert rank0["tp2_logits"].shape == (B, T, 48)
    assert (rank0["tp2_logits"] - rank0["tp1_logits"]).abs().max() < 1e-5
    assert (rank0["tp2_log_probs"] - rank0["tp1_log_probs"]).abs().max() < 1e-5
    assert (rank0["tp2_entropy"] - rank0["tp1_entropy"]).abs().max() < 1e-5


def test_chunked_and_checkpointed_tp_log_probs_give_the_whole_passs_values_and_gradients(run):
    assert run[0]["chunked_tp_gap"] < 1e-5 and run[1]["chunked_tp_gap"] < 1e-5


def test_tp2_sum_pi_squared_equals_a_direct_softmax_of_the_gathered_logits(run):
    probs = torch.softmax(run[0]["tp2_logits"][:, -R - 1:-1].float() / 0.7, dim=-1)
    for rec in run:
        assert rec["tp2_sum_pi_squared"].shape == (B, R)
        assert (rec["tp2_sum_pi_squared"] - (probs ** 2).sum(-1)).abs().max() < 1e-5
        assert rec["padded_vocab_spsq_gap"] < 1e-6  # padded vocabulary entries left out, in chunks


def test_both_tp_ranks_return_the_same_log_probs(run):
    assert torch.equal(run[0]["tp2_log_probs"], run[1]["tp2_log_probs"])


def test_padded_vocabulary_entries_are_left_out_of_the_tp_log_softmax(run):
    assert run[0]["padded_vocab_gap"] < 1e-5 and run[1]["padded_vocab_gap"] < 1e-5


def test_pp2_log_probs_match_tp1_on_every_stage(run):
    for rec in run:
        assert (rec["pp2_log_probs"] - run[0]["tp1_log_probs"]).abs().max() < 1e-5
    assert [rec["pp2_leader"] for rec in run] == [False, True]  # the last stage leads


def test_pp2_export_gathers_every_layer_from_both_stages(run):
    exported = run[0]["pp2_export"]
    assert {f"model.layers.{i}.mlp.down_proj.weight" for i in (0, 1)} <= set(exported)
    assert "model.norm.weight" in exported and "model.embed_tokens.weight" in exported
    assert torch.equal(exported["model.norm.weight"], run[1]["pp2_export"]["model.norm.weight"])


def test_topology_reports_data_parallel_rank_size_and_leader(run):
    assert [rec["tp2_topology"] for rec in run] == [(0, 1, True), (0, 1, False)]
    assert [rec["dp2_topology"] for rec in run] == [(0, 2, True), (1, 2, True)]


def test_data_parallel_ranks_stay_identical_after_a_step_on_different_data(run):
    assert run[0]["dp2_weight_gap"] == 0.0


def test_dynamic_batch_size_runs_the_largest_micro_batch_count_of_the_data_parallel_ranks(run):
    (own0, synced0), (own1, synced1) = run[0]["dp2_dynamic_counts"], run[1]["dp2_dynamic_counts"]
    assert own0 > own1 and synced0 == synced1 == own0


def test_dynamic_micro_batches_of_different_shapes_cross_the_pp2_stages_with_the_fixed_runs_results(run):
    """float32: log-probs within 1e-5, gradients within 1e-5 of the largest gradient entry."""
    for rec in run:  # both stages hold the log-probs; each its own layers' gradients
        dyn = rec["pp2_dynamic"]
        assert len({rows for rows, _ in dyn["shapes"]}) > 1 and len({cols for _, cols in dyn["shapes"]}) > 1, dyn
        assert dyn["log_prob_gap"] < 1e-5 and dyn["grad_gap"] < 1e-5, dyn


# ------------------------------------------------------------------------------ training


def test_a_few_optimizer_steps_reduce_the_loss_at_tp2_and_pp2(run):
    losses = run[0]["lm_losses"]
    assert losses[-1] < losses[0] - 0.5, losses
    pp = run[1]["pp2_losses"]  # the loss function runs on the last stage
    assert pp[-1] < pp[0], pp


def test_optimizer_step_returns_the_gradient_norm_before_clipping(run):
    norms = run[0]["lm_grad_norms"]
    assert all(n > 1.0 for n in norms), norms  # above optim.clip_grad=1.0, so clipping was active
    assert run[0]["lm_lr"] == pytest.approx(1e-2)


def test_the_gradient_is_clipped_at_optim_clip_grad_and_the_returned_norm_is_the_one_before(run):
    for rec in run:  # both TP ranks: the norm is over the whole model
        assert rec["clip_returned_norm"] > 0.5, rec["clip_returned_norm"]  # above the clip: it was active
        assert rec["clip_norm_after_step"] <= 0.5 + 1e-4, rec["clip_norm_after_step"]  # not actor.grad_clip=1.0


def test_an_optim_dict_without_weight_decay_gets_the_schemas_default(run):
    assert run[0]["default_weight_decay"] == pytest.approx(0.01)


def test_ref_engine_shares_the_mesh_starts_from_the_same_weights_and_cannot_step(run):
    assert run[0]["ref_matches_initial"] < 1e-6
    assert "no optimizer" in run[0]["ref_step_error"]


def test_checkpoint_round_trip_restores_the_saved_weights(run):
    assert run[0]["ckpt_moved"] > 1e-3
    assert run[0]["ckpt_restored"] == 0.0
    assert run[0]["ckpt_files"] == ["actor_tp00_pp00.pt", "actor_tp01_pp00.pt", "contents.json"]


def test_to_cpu_on_a_cpu_engine_keeps_it_working(run):
    assert run[0]["after_to"] == 0.0


# ------------------------------------------------------------------------------ weights


def test_a_rollout_synced_from_the_export_stream_holds_the_engines_weights_and_log_probs(run):
    rank0 = run[0]
    assert rank0["export_is_generator"]  # streamed, not a dict of every weight
    assert rank0["rollout_synced"] == len(rank0["tp2_export"]) == 2 + 2 * 11 + 1  # embed, norm, 11 per layer, head
    assert rank0["rollout_gap"] == 0.0
    assert (rank0["hf_log_probs"] - rank0["tp2_log_probs"]).abs().max() < 1e-5
    assert (rank0["hf_entropy"] - rank0["tp2_entropy"]).abs().max() < 1e-5


def test_the_pp2_export_yields_the_tp2_exports_names_and_tensors(run):
    for rec in run:
        assert rec["pp2_export"].keys() == run[0]["tp2_export"].keys()
        for name, tensor in run[0]["tp2_export"].items():
            assert torch.equal(rec["pp2_export"][name], tensor), name


def test_value_engine_outputs_float_values_per_response_token_and_learns(run):
    rank0 = run[0]
    assert rank0["values_shape"] == (B, R) and rank0["values_dtype"] == "torch.float32"
    assert rank0["value_losses"][-1] < rank0["value_losses"][0] * 0.5, rank0["value_losses"]
    assert rank0["value_export"] == ["model.embed_tokens.weight", "model.norm.weight", "score.bias", "score.weight"]


# ------------------------------------------------------------------------------ in-process


def test_parked_storage_frees_memory_and_restores_through_existing_views():
    flat = torch.arange(12, dtype=torch.float32)
    view = flat[4:8].view(2, 2)
    parking = StorageParking()
    parking.park(flat)
    assert flat.untyped_storage().size() == 0 and flat in parking
    parking.restore(flat)
    assert torch.equal(view, torch.tensor([[4.0, 5.0], [6.0, 7.0]]))
    view.add_(1)
    assert flat[4].item() == 5.0


def test_importing_the_engine_modules_does_not_import_megatron():
    code = (
        "import sys, verl_lite.engine.megatron.engine, verl_lite.engine.megatron.cpu, verl_lite.engine.megatron.bridges.qwen3, "
        "verl_lite.engine.megatron.batch, verl_lite.engine.megatron.hf, verl_lite.engine.megatron.memory, "
        "verl_lite.engine.megatron.model, verl_lite.engine.megatron.optim, "
        "verl_lite.engine.megatron.mindspeed; bad = sorted(m for m in sys.modules if m.split('.')[0] in ('megatron', 'mindspeed'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
