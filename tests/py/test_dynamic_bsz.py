"""Dynamic batch size (verl's use_dynamic_bsz): micro-batches packed by a token budget, each cut to the
columns its rows use. The packing on its own; then, on the torch engine in float32, log-probs, loss
and gradients against the fixed micro-batch run (tiny Qwen3 and the tiny Qwen3.5 with Gated DeltaNet
layers); then one training step of the trainer with every dynamic switch on against one without.
The Megatron engine's variable-shape micro-batches at PP=2 are checked in test_megatron_engine.py.

Tolerance: float32 on CPU; cutting padding columns changes the shapes of the matmuls, so sums run in
another order: log-probs and losses within 1e-5 absolute, gradients within 1e-5 relative to the
largest gradient entry of the fixed run.
"""

from __future__ import annotations

import pytest
import torch

from verl_lite.trainer.algos import policy_losses
from verl_lite.trainer.dynamic_batch import MicroBatches, pack_by_tokens, row_extents

P, R = 6, 16
TOL = 1e-5


def ragged_batch(n=12, seed=0):
    """Left-padded prompts of 2..6 tokens and right-padded responses of 1..16 (a few long, most short)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (n, P + R), generator=g)
    mask = torch.zeros(n, P + R, dtype=torch.long)
    p_len = torch.randint(2, P + 1, (n,), generator=g)
    r_len = torch.tensor([R, 1, 3, R - 2, 2, 5, 1, 4, 9, 2, 3, 6][:n])
    for i in range(n):
        mask[i, P - p_len[i]:P + r_len[i]] = 1
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, P:], response_mask=mask[:, P:],
                advantages=torch.randn(n, R, generator=g), old_log_probs=-torch.rand(n, R, generator=g) * 4)


# ------------------------------------------------------------------------------ packing


def test_row_extents_read_the_prompt_and_response_lengths_from_the_masks():
    batch = ragged_batch()
    p_len, r_len = row_extents(batch)
    assert p_len == batch["attention_mask"][:, :P].sum(1).tolist()
    assert r_len == batch["response_mask"].sum(1).tolist()


def test_every_micro_batch_keeps_within_the_token_budget_and_each_row_appears_once():
    batch = ragged_batch()
    parts = MicroBatches(batch, max_token_len=40)
    assert sorted(i for g in parts.indices for i in g) == list(range(12))
    for part, group in zip(parts.parts, parts.indices):
        rows, width = part["input_ids"].shape
        assert rows == len(group) and rows * width <= 40
        # cut to the columns its rows use: the longest prompt plus the longest response of the group
        p_len, r_len = row_extents(batch)
        assert width == max(p_len[i] for i in group) + max(r_len[i] for i in group)
    fixed = MicroBatches(batch, micro_batch_size=4)
    assert parts.padded_tokens() < fixed.padded_tokens()


def test_a_sequence_longer_than_the_budget_is_refused_as_verl_does():
    batch = ragged_batch()
    with pytest.raises(ValueError, match=r"sequence 0 has 2\d tokens, more than the token budget max_token_len=12"):
        MicroBatches(batch, max_token_len=12)


def test_a_sequence_as_long_as_the_budget_gets_a_micro_batch_of_its_own():
    groups = pack_by_tokens([4, 2, 2], [16, 1, 1], max_token_len=20)
    assert groups[0] == [0] and sorted(groups[1]) == [1, 2]


def test_the_count_is_raised_to_what_another_rank_needs_and_to_a_multiple():
    lens = ([2] * 6, [2] * 6)
    assert len(pack_by_tokens(*lens, max_token_len=100)) == 1
    assert len(pack_by_tokens(*lens, max_token_len=100, min_count=3)) == 3
    assert len(pack_by_tokens(*lens, max_token_len=100, min_count=3, multiple_of=2)) == 4
    parts = MicroBatches(ragged_batch(), max_token_len=1000, count_sync=lambda n: n + 2)
    assert len(parts.parts) == 3
    with pytest.raises(ValueError, match="holds only 6 sequences"):
        pack_by_tokens(*lens, max_token_len=100, min_count=7)


def test_gather_puts_outputs_back_in_the_batch_order_at_the_full_width():
    batch = ragged_batch()
    parts = MicroBatches(batch, max_token_len=40)
    assert any(g != sorted(g) or g[0] != 0 for g in parts.indices)  # the packing did reorder rows
    outs = [{"x": p["responses"].float()} for p in parts.parts]  # an output per response token
    restored = parts.gather(outs, "x")
    assert restored.shape == (12, R)
    assert torch.equal(restored * batch["response_mask"], batch["responses"].float() * batch["response_mask"])


# ------------------------------------------------------------------------------ torch engine, float32


@pytest.fixture(scope="module", params=["tiny-qwen3", "tiny-qwen3_5"])
def engine(request):
    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch.engine import TorchLMEngine

    torch.manual_seed(0)
    eng = TorchLMEngine(ModelConfig(path=request.param), ActorConfig(), OptimConfig(), "cpu", "actor")
    eng.initialize()
    return eng


def policy_loss(mode, batch):
    mask = batch["response_mask"]
    gtok, gseq = int(mask.sum()), int(mask.shape[0])

    def loss_fn(out, mb):
        m = mb["response_mask"].float()
        pg = policy_losses.compute_policy_loss("vanilla", policy_losses.PolicyLossInput(
            mb["old_log_probs"], out["log_probs"], mb["advantages"], m, loss_agg_mode=mode, global_batch_size=gseq,
            global_token_num=gtok))
        return pg["pg_loss"], {"pg_loss": pg["pg_loss"].item()}
    return loss_fn


def run_pass(engine, parts, loss_fn):
    engine.train_mode()
    engine.optimizer_zero_grad()
    outs = engine.forward_backward(parts.parts, parts.loss(loss_fn))
    grads = {n: p.grad.clone() for n, p in engine.module.named_parameters() if p.grad is not None}
    engine.eval_mode()
    return sum(o["metrics"]["pg_loss"] for o in outs), grads


def test_log_probs_and_entropy_equal_the_fixed_micro_batch_run_in_the_original_order(engine):
    batch = ragged_batch()
    mask = batch["response_mask"].bool()
    fixed = MicroBatches(batch, micro_batch_size=4)
    dyn = MicroBatches(batch, max_token_len=40)
    assert len(dyn.parts) > len(fixed.parts)  # the budget does split differently
    outs_f = engine.forward_backward(fixed.parts, forward_only=True, calculate_entropy=True)
    outs_d = engine.forward_backward(dyn.parts, forward_only=True, calculate_entropy=True)
    for key in ("log_probs", "entropy"):
        a, b = fixed.gather(outs_f, key), dyn.gather(outs_d, key)
        assert a.shape == b.shape == (12, R)
        assert (a - b)[mask].abs().max().item() < TOL, key


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_loss_and_gradients_equal_the_fixed_micro_batch_run(engine, mode):
    batch = ragged_batch(seed=1)
    loss_f, grads_f = run_pass(engine, MicroBatches(batch, micro_batch_size=4), policy_loss(mode, batch))
    loss_d, grads_d = run_pass(engine, MicroBatches(batch, max_token_len=40), policy_loss(mode, batch))
    assert abs(loss_f - loss_d) < TOL
    scale = max(g.abs().max().item() for g in grads_f.values())
    assert scale > 0 and grads_f.keys() == grads_d.keys()
    gap = max((grads_f[n] - grads_d[n]).abs().max().item() for n in grads_f)
    assert gap <= TOL * scale, (gap, scale)


# ------------------------------------------------------------------------------ the trainer, one step


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def one_step(data_dir, out_dir, *extra):
    import json
    import os

    from verl_lite.config import load_config
    from verl_lite.trainer.run import run

    cfg = load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=8",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.total_training_steps=1", "trainer.val_before_train=false",
        f"trainer.default_local_dir={out_dir}", "trainer.ray=false", "trainer.logger=[jsonl]", "trainer.save_freq=-1",
        "trainer.test_freq=-1", "trainer.plot_rewards=false", *extra])
    assert run(cfg) == 0
    with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f][-1]


def test_a_trainer_step_with_every_dynamic_switch_on_logs_the_fixed_runs_losses_and_gradient_norms(data_dir, tmp_path,
                                                                                                   monkeypatch):
    from verl_lite.trainer import dynamic_batch

    made = []

    class Recorded(dynamic_batch.MicroBatches):
        def __init__(self, batch, micro_batch_size=None, max_token_len=None, **kw):
            super().__init__(batch, micro_batch_size=micro_batch_size, max_token_len=max_token_len, **kw)
            made.append((max_token_len, [tuple(p["input_ids"].shape) for p in self.parts]))

    monkeypatch.setattr(dynamic_batch, "MicroBatches", Recorded)
    fixed = one_step(data_dir, tmp_path / "fixed")
    assert made and all(budget is None for budget, _ in made)
    made.clear()
    dynamic = one_step(data_dir, tmp_path / "dynamic", "actor_rollout_ref.actor.use_dynamic_bsz=true",
                       "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40",
                       "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
                       "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=30",
                       "critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=50")
    # old log-probs (30), values and the critic update (50), the actor update (40): each within its budget
    assert {budget for budget, _ in made} == {30, 40, 50}, made
    assert all(rows * cols <= budget for budget, shapes in made for rows, cols in shapes)
    assert any(len(shapes) > 1 for _, shapes in made)
    keys = [k for k in ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm") if k in fixed]
    assert len(keys) == 4, sorted(fixed)
    for key in keys:
        assert abs(fixed[key] - dynamic[key]) <= TOL * max(1.0, abs(fixed[key])), (key, fixed[key], dynamic[key])


# ------------------------------------------------------------------------------ remove-padding (torch engine)


def _engines(path, cls_name="TorchLMEngine"):
    """The same model (one init seed) padded and with use_remove_padding=True."""
    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch import engine as torch_engine

    cls = getattr(torch_engine, cls_name)
    built = []
    for packed in (False, True):
        eng = cls(ModelConfig(path=path, use_remove_padding=packed), ActorConfig(), OptimConfig(), "cpu", "actor")
        eng.initialize()
        built.append(eng)
    return built


def test_remove_padding_gives_the_padded_runs_log_probs_entropy_and_gradients():
    padded, packed = _engines("tiny-qwen3")
    seen = []  # the packed engine's model sees one row of real tokens
    packed.module.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    batch = ragged_batch(seed=2)
    mask = batch["response_mask"].bool()
    for parts in (MicroBatches(batch, micro_batch_size=6), MicroBatches(batch, max_token_len=60)):
        a = padded.forward_backward(parts.parts, forward_only=True, calculate_entropy=True)
        b = packed.forward_backward(parts.parts, forward_only=True, calculate_entropy=True)
        for key in ("log_probs", "entropy"):
            assert (parts.gather(a, key) - parts.gather(b, key))[mask].abs().max().item() < TOL, key
    assert seen and all(rows == 1 for rows, _ in seen), seen
    loss_f, grads_f = run_pass(padded, MicroBatches(batch, micro_batch_size=6), policy_loss("token-mean", batch))
    loss_p, grads_p = run_pass(packed, MicroBatches(batch, micro_batch_size=6), policy_loss("token-mean", batch))
    scale = max(g.abs().max().item() for g in grads_f.values())
    assert abs(loss_f - loss_p) < TOL
    assert max((grads_f[n] - grads_p[n]).abs().max().item() for n in grads_f) <= TOL * scale


def test_remove_padding_gives_the_critic_the_padded_runs_values():
    padded, packed = _engines("tiny-qwen3", "TorchValueEngine")
    batch = ragged_batch(seed=3)
    parts = MicroBatches(batch, micro_batch_size=12)
    a = parts.gather(padded.forward_backward(parts.parts, forward_only=True), "values")
    b = parts.gather(packed.forward_backward(parts.parts, forward_only=True), "values")
    assert (a - b)[batch["response_mask"].bool()].abs().max().item() < TOL


def test_the_preflight_takes_remove_padding_for_attention_models_on_fsdp_and_megatron():
    from verl_lite.preflight.run import collect_problems
    from verl_lite.config import load_config

    def found(*lines):
        return collect_problems(load_config(["trainer.device=cpu", "actor_rollout_ref.model.path=tiny-qwen3",
                                             "actor_rollout_ref.model.use_remove_padding=True", *lines]),
                                for_training=False)

    assert found() == []
    assert found("actor_rollout_ref.actor.strategy=megatron") == []  # packed THD micro-batches (megatron_batch)


def test_a_token_budget_below_the_longest_sequence_is_a_warning_as_verl_asserts_per_sequence():
    """verl asserts each real prompt + response against the budget x SP at the step, so a budget below
    the configured maxima is a valid line (10 of verl's own runs have one): said, not refused."""
    from verl_lite.preflight.run import collect_problems, collect_warnings
    from verl_lite.config import load_config

    lines = ["trainer.device=cpu", "data.max_prompt_length=512", "data.max_response_length=1024",
             "actor_rollout_ref.actor.use_dynamic_bsz=True", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024",
             "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
             "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=1536"]
    cfg = load_config(lines)
    assert collect_problems(cfg, for_training=False) == []
    said = [w for w in collect_warnings(cfg) if "max_token_len_per_gpu" in w]
    assert said == [
        "actor: actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024 is smaller than data.max_prompt_length + "
        "data.max_response_length = 1536: with actor_rollout_ref.actor.use_dynamic_bsz=True a prompt + response longer "
        "than 1024 tokens stops the run at its step (verl asserts the same per sequence); raise "
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu to 1536 to rule that out"]
    # a budget that is not a number of tokens is refused
    zero = load_config(lines + ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0"])
    assert [p for p in collect_problems(zero, for_training=False) if "max_token_len" in p] == [
        "actor: actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0: with actor_rollout_ref.actor.use_dynamic_bsz=True "
        "the token budget per micro-batch must be a positive number of tokens (verl's scripts use at least "
        "max_prompt_length + max_response_length)"]


@pytest.mark.parametrize("pp, vpp, multiple", [(2, 2, 2), (4, 2, 4), (2, None, 1), (1, None, 1)])
def test_megatrons_interleaved_schedule_gets_a_micro_batch_count_in_groups_of_pp(pp, vpp, multiple):
    from verl_lite.config.schema import ActorConfig, ModelConfig
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    actor = ActorConfig(strategy="megatron")
    actor.megatron.pipeline_model_parallel_size, actor.megatron.virtual_pipeline_model_parallel_size = pp, vpp
    engine = MegatronLMEngine(ModelConfig(path="tiny-qwen3"), actor, None, "cpu", "actor")  # not initialised
    assert engine.micro_batch_multiple() == multiple
    parts = MicroBatches(ragged_batch(), max_token_len=200, multiple_of=engine.micro_batch_multiple())
    assert len(parts.parts) % multiple == 0
