"""`actor.calculate_sum_pi_squared`: the sum over the vocabulary of the squared probabilities of the
tempered softmax at each response token (verl's sum_pi_squared, the optimal token baselines' input),
computed in the torch engine's forward-only log-prob pass, padded and packed, whole and chunked
(entropy_from_logits_with_chunking), equal to a direct softmax of the model's logits; the fused head
refuses it. The Megatron engine's (vocabulary split over TP=2) is checked in test_megatron_engine.py.
"""

from __future__ import annotations

import pytest
import torch

from verl_lite.config import compose
from verl_lite.config.compose import load_config
from verl_lite.engine import logits

B, P, R = 3, 6, 5
TEMPERATURE = 0.7


def make_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (B, P + R), generator=g)
    mask = torch.ones(B, P + R, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded prompt
    mask[1, -2:] = 0  # a response that ended early
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -R:],
                response_mask=mask[:, -R:], temperature=TEMPERATURE)


def engine_of(*overrides):
    from verl_lite.engine.torch.engine import TorchLMEngine

    cfg = load_config(["actor_rollout_ref.model.path=tiny-qwen3", *overrides])
    arr = compose.to_dataclass(cfg).actor_rollout_ref
    engine = TorchLMEngine(arr.model, arr.actor, arr.actor.optim, "cpu", "actor")
    engine.initialize()
    engine.eval_mode()
    return engine


def direct(engine, batch) -> torch.Tensor:
    """softmax(logits / T)^2 summed over the vocabulary, from one padded forward of the module."""
    with torch.no_grad():
        out = engine.module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            position_ids=batch["position_ids"], use_cache=False).logits.float()
    probs = torch.softmax(out[:, -R - 1:-1] / TEMPERATURE, dim=-1)
    return (probs ** 2).sum(-1)


@pytest.fixture(scope="module")
def measured():
    batch = make_batch()
    out = {}
    for name, overrides in {"padded": ["actor_rollout_ref.model.use_remove_padding=False"],
                            "packed": ["actor_rollout_ref.model.use_remove_padding=True"],
                            "chunked": ["actor_rollout_ref.model.use_remove_padding=True",
                                        "actor_rollout_ref.actor.entropy_from_logits_with_chunking=True",
                                        "actor_rollout_ref.actor.entropy_from_logits_chunk_size=4"]}.items():
        engine = engine_of(*overrides)
        res = engine.forward_backward([batch], forward_only=True, calculate_entropy=True,
                                      calculate_sum_pi_squared=True)[0]
        out[name] = (res, direct(engine, batch), engine.remove_padding)
    return batch, out


@pytest.mark.parametrize("layout", ["padded", "packed", "chunked"])
def test_the_engines_sum_pi_squared_equals_a_direct_softmax_of_its_logits(measured, layout):
    batch, out = measured
    res, want, packed = out[layout]
    assert packed == (layout != "padded")
    mask = batch["response_mask"].bool()
    assert res["sum_pi_squared"].shape == (B, R) and res["sum_pi_squared"].dtype == torch.float32
    gap = (res["sum_pi_squared"] - want)[mask].abs().max().item()
    assert gap < 1e-5, f"{layout}: sum_pi_squared differs from the direct softmax by {gap}"
    # a probability vector's squares sum to at most 1 and at least 1/V
    assert ((res["sum_pi_squared"][mask] > 0) & (res["sum_pi_squared"][mask] <= 1)).all()


def test_without_the_switch_no_sum_pi_squared_is_computed():
    engine = engine_of()
    res = engine.forward_backward([make_batch()], forward_only=True)[0]
    assert "sum_pi_squared" not in res
    with pytest.raises(ValueError, match="forward-only log-prob pass"):
        engine.forward_backward([make_batch()], lambda o, b: (o["log_probs"].sum(), {}),
                                calculate_sum_pi_squared=True)


def test_the_fused_head_refuses_it_naming_the_fix():
    engine = engine_of("actor_rollout_ref.model.use_fused_kernels=True")
    with pytest.raises(ValueError, match="calculate_sum_pi_squared=True is not supported with .*use_fused_kernels"):
        engine.forward_backward([make_batch()], forward_only=True, calculate_sum_pi_squared=True)


def test_the_shared_function_leaves_out_padded_vocabulary_entries_and_chunks_to_the_same_numbers():
    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, 5, 12, generator=g) * 2
    z[..., 10:] = 40.0  # padding of a split vocabulary: must not count
    want = (torch.softmax(z[..., :10], -1) ** 2).sum(-1)
    for chunk in (None, 3, 100):
        got = logits.sum_pi_squared(z, vocab_size=10, chunk_size=chunk)
        assert (got - want).abs().max().item() < 1e-6, chunk
    # verl's formula, exp(logsumexp(2z) - 2 logsumexp(z)), gives the same
    verl = torch.exp(torch.logsumexp(2 * z[..., :10], -1) - 2 * torch.logsumexp(z[..., :10], -1))
    assert (logits.sum_pi_squared(z, vocab_size=10) - verl).abs().max().item() < 1e-6
