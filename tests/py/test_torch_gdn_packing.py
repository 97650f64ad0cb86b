"""Remove-padding for Gated DeltaNet models on the torch engine (verl_lite/models/packed_gdn.py): the tiny
Qwen3.5 and Qwen3.5-MoE, packed (use_remove_padding=True) against padded, on ragged micro-batches of left-padded prompts and
right-padded responses as the rollout produces them.

Tolerance: float32 on CPU, TOL = 1e-5 absolute for log-probs, entropy, values and losses, gradients
within 1e-5 relative to the padded run's largest gradient entry (as test_dynamic_bsz.py; measured gaps
are ~4e-7: the GDN rows and the padded rows chunk the same tokens at other offsets). Run as one
sequence, the packed row differs by more than LEAK = 1e-3, a hundred times the tolerance.
"""

from __future__ import annotations

import pytest
import torch

from test_dynamic_bsz import policy_loss, ragged_batch, run_pass
from verl_lite.models import packed_gdn
from verl_lite.trainer.dynamic_batch import MicroBatches

TOL = 1e-5
LEAK = 1e-3
MODELS = ["tiny-qwen3_5", "tiny-qwen3_5-moe"]


def engines(path, cls_name="TorchLMEngine", **model):
    """The same model (one init seed) padded (use_remove_padding=False) and packed (True)."""
    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch import engine as torch_engine

    built = []
    for setting in (False, True):
        eng = getattr(torch_engine, cls_name)(ModelConfig(path=path, use_remove_padding=setting, **model), ActorConfig(),
                                              OptimConfig(), "cpu", "actor")
        eng.initialize()
        built.append(eng)
    assert not built[0].remove_padding and built[1].remove_padding
    return built


def gdn_rows(engine):
    """Records how many rows each GDN layer of `engine` runs its projections and rule over."""
    seen = []
    for layer in packed_gdn.gdn_layers(engine.module):
        layer.in_proj_qkv.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    return seen


def log_prob_gap(padded, packed, batch, parts):
    mask = batch["response_mask"].bool()
    a = padded.forward_backward(parts.parts, forward_only=True, calculate_entropy=True)
    b = packed.forward_backward(parts.parts, forward_only=True, calculate_entropy=True)
    return max((parts.gather(a, key) - parts.gather(b, key))[mask].abs().max().item()
               for key in ("log_probs", "entropy"))


@pytest.mark.parametrize("path", MODELS)
def test_packed_gdn_models_give_the_padded_runs_log_probs_entropy_and_gradients(path):
    padded, packed = engines(path)
    rows = gdn_rows(packed)
    batch = ragged_batch(seed=4)
    for parts in (MicroBatches(batch, micro_batch_size=6), MicroBatches(batch, max_token_len=60)):
        assert log_prob_gap(padded, packed, batch, parts) < TOL
    # the packed row's GDN layers ran one row per sequence of each micro-batch, in groups of similar length
    lengths = [p["attention_mask"].sum(1).tolist() for p in MicroBatches(batch, micro_batch_size=6).parts]
    calls = [[len(g) for g in packed_gdn.length_groups(n)] for n in lengths]
    assert rows[:sum(map(len, calls))] == [n for c in calls for n in c] and sum(calls[0]) == 6
    parts = MicroBatches(batch, micro_batch_size=6)
    loss_f, grads_f = run_pass(padded, parts, policy_loss("token-mean", batch))
    loss_p, grads_p = run_pass(packed, parts, policy_loss("token-mean", batch))
    scale = max(g.abs().max().item() for g in grads_f.values())
    assert abs(loss_f - loss_p) < TOL
    assert grads_f.keys() == grads_p.keys() and any("linear_attn" in n for n in grads_f)
    assert max((grads_f[n] - grads_p[n]).abs().max().item() for n in grads_f) <= TOL * scale


@pytest.mark.parametrize("path", MODELS)
def test_a_packed_gdn_critic_gives_the_padded_runs_values(path):
    padded, packed = engines(path, "TorchValueEngine")
    batch = ragged_batch(seed=5)
    parts = MicroBatches(batch, micro_batch_size=12)
    a = parts.gather(padded.forward_backward(parts.parts, forward_only=True), "values")
    b = parts.gather(packed.forward_backward(parts.parts, forward_only=True), "values")
    assert (a - b)[batch["response_mask"].bool()].abs().max().item() < TOL


def test_gradient_checkpointing_recomputes_packed_gdn_layers_with_the_same_boundaries():
    padded, packed = engines("tiny-qwen3_5", enable_gradient_checkpointing=True)
    batch = ragged_batch(seed=6)
    parts = MicroBatches(batch, micro_batch_size=12)
    _, grads_f = run_pass(padded, parts, policy_loss("token-mean", batch))
    _, grads_p = run_pass(packed, parts, policy_loss("token-mean", batch))
    scale = max(g.abs().max().item() for g in grads_f.values())
    assert max((grads_f[n] - grads_p[n]).abs().max().item() for n in grads_f) <= TOL * scale


def test_without_the_per_sequence_reset_the_packed_run_leaks_between_sequences(monkeypatch):
    padded, packed = engines("tiny-qwen3_5")
    batch = ragged_batch(seed=7)
    parts = MicroBatches(batch, micro_batch_size=12)
    assert log_prob_gap(padded, packed, batch, parts) < TOL
    # the whole packed row as one sequence: conv history and recurrent state flow across sequences
    monkeypatch.setattr(packed_gdn, "sequence_lengths", lambda position_ids: (position_ids.numel(),))
    assert log_prob_gap(padded, packed, batch, parts) > LEAK


def test_sequence_lengths_follow_transformers_packed_masks_and_rows_round_trip():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 0, 1, 2, 3], [0, 1, 0, 1, 2, 3, 4, 5, 0, 1]])
    assert packed_gdn.sequence_lengths(pos) == (3, 2, 1, 4, 2, 6, 2)
    assert packed_gdn.sequence_lengths(torch.arange(5).unsqueeze(0)) is None  # one sequence: nothing to split
    x = torch.randn(2, 10, 3)
    one = packed_gdn.segments_for(pos)  # short sequences: one group, a row each, shortest first
    (rows,) = one.rows(x)
    (group,) = one.groups
    sequences = x.reshape(20, 3).split(list(one.lengths))
    assert rows.shape == (7, 6, 3) and group == (2, 1, 4, 6, 0, 3, 5)
    for row, i in zip(rows, group):
        n = one.lengths[i]
        assert torch.equal(row[:n], sequences[i]) and not row[n:].any()  # after a sequence's end: zeros
    assert torch.equal(one.packed([rows], (2, 10)), x)
    grouped = packed_gdn.segments_for(pos, group_cost=1)  # calls cheap: groups by length
    # lengths sorted 1 2 2 2 | 3 4 | 6: 4 x 2 + 2 x 4 + 1 x 6 = 22 positions and 3 calls, the cheapest at cost 1
    assert grouped.groups == ((2, 1, 4, 6), (0, 3), (5,))
    parts = grouped.rows(x)
    assert [p.shape[:2] for p in parts] == [(len(g), max(grouped.lengths[i] for i in g)) for g in grouped.groups]
    assert torch.equal(grouped.packed(parts, (2, 10)), x)
    with pytest.raises(ValueError, match="holds 10 tokens but its position ids describe 20"):
        one.rows(x[:1])


def test_length_groups_trade_padding_positions_against_calls():
    lengths = [3, 100, 4, 98, 5]
    assert packed_gdn.length_groups(lengths, group_cost=10_000) == [[0, 2, 4, 3, 1]]  # calls dear: one group
    # calls cheap: short and long apart (3 x 5 + 2 x 100 positions instead of 5 x 100)
    assert packed_gdn.length_groups(lengths, group_cost=50) == [[0, 2, 4], [3, 1]]
    assert packed_gdn.length_groups(lengths, group_cost=0) == [[0], [2], [4], [3], [1]]


def test_the_split_leaves_padded_and_cached_forwards_as_they_were():
    from verl_lite.config.schema import ModelConfig
    from verl_lite.models.hf import build_causal_lm

    model = build_causal_lm(ModelConfig(path="tiny-qwen3_5")).eval()
    batch = ragged_batch(n=4, seed=8)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    prompt = batch["input_ids"][:, :6]
    with torch.no_grad():
        before = model(**inputs, use_cache=False).logits
        generated = model.generate(prompt, attention_mask=batch["attention_mask"][:, :6], max_new_tokens=4,
                                   do_sample=False)
        assert packed_gdn.split_gdn_by_sequence(model) == 1 == packed_gdn.split_gdn_by_sequence(model)
        assert packed_gdn.split_gdn_by_sequence(torch.nn.Sequential(model)) == 1  # a wrapper: nothing split twice
        (layer,) = packed_gdn.gdn_layers(model)
        assert len(model.model._forward_pre_hooks) == 1
        assert not getattr(layer.forward.__wrapped__, packed_gdn._HOOKED, False)
        assert torch.equal(model(**inputs, use_cache=False).logits, before)
        assert torch.equal(model.generate(prompt, attention_mask=batch["attention_mask"][:, :6], max_new_tokens=4,
                                          do_sample=False), generated)


def test_other_linear_attention_models_are_refused_packed_and_run_padded_on_auto():
    from verl_lite.engine.torch.packing import decide

    config = {"model_type": "minimax", "layer_types": ["linear_attention", "full_attention"]}
    with pytest.raises(ValueError, match="model_type minimax has linear-attention layers that the torch engine does "
                                         "not split per packed sequence"):
        decide("actor", True, config)
    assert decide("actor", None, config) is False
    gdn = {"model_type": "qwen3_5_moe_text", "layer_types": ["linear_attention"]}
    # auto runs the torch engine padded (a dense mask over the packed row); True packs GDN models
    assert decide("actor", None, gdn) is False and decide("actor", True, gdn) is True
