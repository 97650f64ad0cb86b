"""The hf rollout's chunked decoding: rows that emitted EOS leave the batch between chunks of
`decode_chunk` tokens, the others continue from prompt + tokens so far. Greedy responses equal one
generate call's token for token, the returned log-probs are the sampled tokens' processed log-probs
(temperature) as a plain forward over the whole sequence computes them, and finished rows stop
costing model positions."""

from __future__ import annotations

import pytest
import torch

from verl_lite.batch import left_pad
from verl_lite.config.schema import ModelConfig, RolloutConfig


def _rollout(calculate_log_probs=True, eos_share=0.1):
    """The tiny Qwen3.5 with the EOS row of its (tied) head set so that EOS is the argmax at about
    `eos_share` of positions, so greedy responses end at different lengths."""
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.rollout.hf import HFRollout

    tok = load_tokenizer("tiny-qwen3_5", False)
    r = HFRollout(ModelConfig(path="tiny-qwen3_5", init_seed=0),
                  RolloutConfig(micro_batch_size=64, calculate_log_probs=calculate_log_probs), tok, "cpu")
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        h = r.model.model(input_ids=torch.randint(3, 48, (16, 24), generator=g)).last_hidden_state.reshape(-1, 64)
        w = r.model.lm_head.weight
        direction = h.mean(0) / h.mean(0).norm()
        lo, hi = 0.0, 4.0
        for _ in range(25):
            mid = (lo + hi) / 2
            w[tok.eos_token_id] = mid * direction
            share = ((h @ w.T).argmax(-1) == tok.eos_token_id).float().mean().item()
            lo, hi = (mid, hi) if share < eos_share else (lo, mid)
    return r, tok


def _prompts(n=24, seed=1):
    g = torch.Generator().manual_seed(seed)
    return left_pad([torch.randint(3, 48, (int(torch.randint(4, 9, (1,), generator=g)),), generator=g).tolist()
                     for _ in range(n)], 0)


GREEDY = {"do_sample": False, "temperature": 0}


def test_greedy_chunked_responses_equal_one_generate_call():
    r, tok = _rollout()
    prompts = _prompts()
    r.decode_chunk = 0
    whole = r.generate(prompts, 12, GREEDY)
    r.decode_chunk = 3
    chunked = r.generate(prompts, 12, GREEDY)
    lengths = whole["response_mask"].sum(-1)
    assert lengths.min() < 9 and lengths.max() == 12, lengths  # ragged: some rows leave after a chunk
    for key in ("responses", "response_mask", "input_ids", "attention_mask", "position_ids"):
        assert torch.equal(whole[key], chunked[key]), key
    assert torch.allclose(whole["rollout_log_probs"], chunked["rollout_log_probs"], atol=1e-5)


@pytest.mark.parametrize("chunk", [0, 4])
def test_sampled_log_probs_are_the_processed_log_probs_of_a_full_forward(chunk):
    r, tok = _rollout(eos_share=0.3)
    r.decode_chunk = chunk
    torch.manual_seed(0)
    temperature = 0.7
    out = r.generate(_prompts(), 12, {"do_sample": True, "temperature": temperature, "top_k": -1, "top_p": 1.0})
    mask = out["response_mask"].bool()
    assert 0 < mask.sum() < mask.numel()
    with torch.no_grad():
        logits = r.model(input_ids=out["input_ids"], attention_mask=out["attention_mask"],
                         position_ids=out["position_ids"]).logits.float()
    P = out["prompts"].shape[1]
    logp = torch.log_softmax(logits[:, P - 1:-1] / temperature, -1).gather(-1, out["responses"][..., None])[..., 0]
    assert (logp - out["rollout_log_probs"])[mask].abs().max() < 1e-4
    assert (out["rollout_log_probs"][~mask] == 0).all()
    assert (out["responses"][~mask] == tok.pad_token_id).all()


def test_finished_rows_stop_costing_model_positions():
    r, _ = _rollout(calculate_log_probs=False, eos_share=0.3)
    prompts = _prompts()
    computed, lengths = {}, {}
    for chunk in (0, 4):
        r.decode_chunk = chunk
        r.tokens_computed = 0
        lengths[chunk] = r.generate(prompts, 16, GREEDY)["response_mask"].sum(-1)
        computed[chunk] = r.tokens_computed
    assert torch.equal(lengths[0], lengths[4]) and lengths[0].max() == 16 and lengths[0].min() <= 8
    B, P = prompts["input_ids"].shape
    # one prefill of the prompts, then one position per row and step: every row to the longest response
    assert computed[0] == B * P + B * 15
    # chunked: each row runs to the end of the chunk where it ended (a chunk stops early when all its
    # rows have ended); the cache is carried, so no position is computed twice
    lo = B * (P - 1) + int(lengths[4].sum())
    hi = B * (P - 1) + int(torch.clamp((lengths[4] + 3) // 4 * 4, max=16).sum())
    assert lo <= computed[4] <= hi < computed[0]
