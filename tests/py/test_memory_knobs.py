"""verl's log-prob memory settings on the torch engine give the plain path's numbers: fused kernels
(engine/torch/fused.py: log-probs and entropy from hidden states and the LM head weight, chunk by chunk),
entropy_from_logits_with_chunking and entropy_checkpointing (engine/logits.py), activation offload and
gradient checkpointing (the critic's too). Compared in float32 within ATOL on the function level (ragged
masks, a chunk size that does not divide the tokens, temperature) and through the engine on a tiny model.
"""

from __future__ import annotations

import pytest
import torch

from verl_lite.config import compose
from verl_lite.config.compose import load_config
from verl_lite.engine.torch.fused import FusedLogProbs, LogProbHead, fused_log_probs_and_entropy
from verl_lite.engine.logits import log_probs_and_entropy
from verl_lite.preflight.run import verl_problems

ATOL = 1e-5  # float32: sums over a 53-entry vocabulary and 8 hidden units
B, R, H, V = 3, 7, 8, 53
TEMPERATURE = 0.7


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, R, H, generator=g, requires_grad=True)
    weight = (torch.randn(V, H, generator=g) * 0.8).requires_grad_(True)
    targets = torch.randint(0, V, (B, R), generator=g)
    mask = torch.ones(B, R)
    mask[0, 4:] = 0  # responses of 4, 7 and 1 tokens
    mask[2, 1:] = 0
    return hidden, weight, targets, mask


def plain(hidden, weight, targets, with_entropy, **kw):
    logits = (hidden @ weight.t()) / TEMPERATURE
    return log_probs_and_entropy(logits, targets, with_entropy, **kw)


def fused(hidden, weight, targets, with_entropy, chunk=4):
    return fused_log_probs_and_entropy(hidden, weight, targets, TEMPERATURE, with_entropy, chunk=chunk)


VARIANTS = {
    "chunking": lambda h, w, t, e: plain(h, w, t, e, chunk_size=4),
    "checkpointing": lambda h, w, t, e: plain(h, w, t, e, checkpoint=True),
    "chunking+checkpointing": lambda h, w, t, e: plain(h, w, t, e, chunk_size=5, checkpoint=True),
    "fused": fused,
    "fused, one chunk": lambda h, w, t, e: fused(h, w, t, e, chunk=1000),
}


def run(fn, with_entropy, seed=0):
    hidden, weight, targets, mask = inputs(seed)
    log_probs, entropy = fn(hidden, weight, targets, with_entropy)
    loss = -(log_probs * mask).sum() / mask.sum()
    if with_entropy:
        loss = loss - 0.3 * (entropy * mask).sum() / mask.sum()
    loss.backward()
    return log_probs.detach(), entropy, hidden.grad, weight.grad


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("with_entropy", [True, False])
def test_each_knob_gives_the_plain_log_probs_entropy_and_gradients(name, with_entropy):
    want = run(plain, with_entropy)
    got = run(VARIANTS[name], with_entropy)
    for label, a, b in zip(("log_probs", "entropy", "d hidden", "d weight"), got, want):
        if b is None:
            assert a is None, label
            continue
        assert torch.allclose(a.detach(), b.detach(), atol=ATOL, rtol=0), \
            f"{name} {label}: max diff {(a - b).abs().max().item():.2e}"
    assert want[2].abs().sum() > 0 and want[3].abs().sum() > 0  # the gradients are not trivially zero


def test_the_fused_backward_matches_autograd_of_the_same_function():
    """torch.autograd.gradcheck in float64 on the hand-written backward, entropy and log-probs both weighted."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(5, 4, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(11, 4, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 11, (5,), generator=g)

    def fn(h, w):
        lp, ent = FusedLogProbs.apply(h, w, targets, 1.3, True, 2)
        return lp * 0.7 + ent * 1.9  # the float32 chunk math limits precision: compare loosely

    assert torch.autograd.gradcheck(fn, (hidden, weight), eps=1e-3, atol=1e-3, rtol=1e-3)


def test_the_fused_peak_is_one_chunk_of_logits_not_the_whole_batch():
    """What the chunks are for: with 1 x 2048 tokens over a 4096-entry vocabulary the plain path allocates
    far more than the fused one (the bench measures the real sizes; here only the order is checked)."""
    from torch.profiler import ProfilerActivity, profile

    def peak(fn):
        hidden = torch.randn(1, 2048, 16, requires_grad=True)
        weight = torch.randn(4096, 16, requires_grad=True)
        targets = torch.randint(0, 4096, (1, 2048))
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            lp, ent = fn(hidden, weight, targets, True)
            (lp.sum() + ent.sum()).backward()
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        now = top = 0
        for e in sorted(events, key=lambda e: e.start_ns()):  # allocations (+) and frees (-) in time order
            now += e.nbytes()
            top = max(top, now)
        return top

    logits_bytes = 2048 * 4096 * 4
    assert peak(plain) > 3 * logits_bytes
    assert peak(lambda h, w, t, e: fused(h, w, t, e, chunk=256)) < logits_bytes


# ---------------------------------------------------------------------------- through the engine


def make_batch(r=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = 6
    ids = torch.randint(3, 48, (B, p + r), generator=g)
    mask = torch.ones(B, p + r, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded prompt
    mask[1, -2:] = 0  # a response that ended early
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -r:],
                response_mask=mask[:, -r:], temperature=TEMPERATURE)


def loss_fn(outputs, batch):
    mask = batch["response_mask"].float()
    loss = -((outputs["log_probs"] + 0.1 * outputs["entropy"]) * mask).sum() / mask.sum()
    return loss, {}


def actor_update(overrides, path="tiny-qwen3"):
    from verl_lite.engine.torch.engine import TorchLMEngine

    cfg = load_config([f"actor_rollout_ref.model.path={path}", *overrides])
    arr = compose.to_dataclass(cfg).actor_rollout_ref
    engine = TorchLMEngine(arr.model, arr.actor, arr.actor.optim, "cpu", "actor")
    engine.initialize()
    engine.train_mode()
    engine.optimizer_zero_grad()
    res = engine.forward_backward([make_batch()], loss_fn, calculate_entropy=True)[0]
    grads = {n: p.grad.clone() for n, p in engine.module.named_parameters() if p.grad is not None}
    return res, grads


ENGINE_KNOBS = {
    "fused": ["actor_rollout_ref.model.use_fused_kernels=True"],
    "fused, packed": ["actor_rollout_ref.model.use_fused_kernels=True", "actor_rollout_ref.model.use_remove_padding=True"],
    "chunking+checkpointing": ["actor_rollout_ref.actor.entropy_from_logits_with_chunking=True",
                               "actor_rollout_ref.actor.entropy_from_logits_chunk_size=4",
                               "actor_rollout_ref.actor.fsdp_config.entropy_checkpointing=True"],  # verl's spelling
    "gradient checkpointing": ["actor_rollout_ref.model.enable_gradient_checkpointing=True"],
}


@pytest.fixture(scope="module")
def plain_update():
    return {packed: actor_update([f"actor_rollout_ref.model.use_remove_padding={packed}"]) for packed in (False, True)}


@pytest.mark.parametrize("name", list(ENGINE_KNOBS))
def test_the_engine_gives_the_plain_outputs_and_gradients_with_each_knob(plain_update, name):
    packed = "actor_rollout_ref.model.use_remove_padding=True" in ENGINE_KNOBS[name]
    want_res, want_grads = plain_update[packed]
    res, grads = actor_update(ENGINE_KNOBS[name] + ([] if packed else ["actor_rollout_ref.model.use_remove_padding=False"]))
    for key in ("log_probs", "entropy"):
        assert torch.allclose(res[key], want_res[key], atol=ATOL, rtol=0), key
    assert set(grads) == set(want_grads)
    worst = max((grads[n] - want_grads[n]).abs().max().item() for n in grads)
    assert worst < ATOL, f"{name}: largest gradient difference {worst:.2e}"
    assert "lm_head.weight" in grads or "model.embed_tokens.weight" in grads  # the head's weight gets its gradient


def test_the_fused_engine_never_asks_the_model_for_logits():
    cfg = compose.to_dataclass(load_config(["actor_rollout_ref.model.use_fused_kernels=True"])).actor_rollout_ref
    head = LogProbHead(cfg.model, cfg.actor)
    kwargs = head.model_kwargs()
    assert kwargs["output_hidden_states"] is True and kwargs["logits_to_keep"].numel() == 0


def test_the_critic_checkpoints_its_decoder_stack_when_asked():
    from verl_lite.engine.torch.engine import TorchValueEngine

    cfg = compose.to_dataclass(load_config(["critic.enable=True", "critic.model.path=tiny-qwen3",
                                            "critic.model.enable_gradient_checkpointing=True"]))
    engine = TorchValueEngine(cfg.critic.model, cfg.critic, cfg.critic.optim, "cpu", "critic")
    engine.initialize()
    assert engine.module.model.is_gradient_checkpointing


@pytest.mark.gpu  # a device test: it may skip on a CPU machine (tests/py/conftest.py)
def test_activation_offload_moves_saved_activations_but_not_parameters():
    from verl_lite.engine.torch.activations import ActivationOffload

    if not torch.cuda.is_available():
        pytest.skip("needs a cuda device: on cpu the activations are in host memory already (nothing installed)")
    layer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).cuda()
    x = torch.randn(32, 64, device="cuda")
    want = torch.autograd.grad(layer(x).sum(), list(layer.parameters()))
    offload = ActivationOffload(layer)
    got = torch.autograd.grad(layer(x).sum(), list(layer.parameters()))
    assert offload.moved_bytes > 0
    assert offload.moved_bytes < sum(p.numel() * 4 for p in layer.parameters()) + 3 * x.numel() * 4
    assert all(torch.allclose(a, b) for a, b in zip(got, want))


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("overrides, text", [
    (["critic.enable=True", "critic.model.use_fused_kernels=True"], "critic.model.use_fused_kernels=True is not supported"),
    (["model_engine=megatron", "actor_rollout_ref.model.use_fused_kernels=True"],
     "actor_rollout_ref.model.use_fused_kernels=True is not supported by verl_lite on the megatron strategy"),
    (["actor_rollout_ref.model.fused_kernel_options.impl_backend=triton"], "impl_backend='triton' is not supported"),
    (["model_engine=megatron", "actor_rollout_ref.model.enable_activation_offload=True"],
     "enable_activation_offload=True is not supported by verl_lite on the megatron strategy"),
    (["actor_rollout_ref.actor.entropy_from_logits_with_chunking=True",
      "actor_rollout_ref.actor.entropy_from_logits_chunk_size=0"], "entropy_from_logits_chunk_size=0"),
])
def test_what_an_engine_cannot_act_on_is_refused_with_the_reason(overrides, text):
    problems = verl_problems(load_config(overrides))
    assert any(text in p for p in problems), problems


def test_the_knobs_on_the_torch_engine_are_not_refused():
    cfg = load_config(["actor_rollout_ref.model.use_fused_kernels=True", "actor_rollout_ref.model.enable_activation_offload=True",
                       "actor_rollout_ref.actor.entropy_from_logits_with_chunking=True",
                       "actor_rollout_ref.ref.entropy_checkpointing=True"])
    assert [p for p in verl_problems(cfg) if "fused" in p or "entropy" in p or "offload" in p] == []


def test_entropy_settings_the_fused_pass_makes_moot_are_said_to_have_no_effect():
    from verl_lite.preflight.run import verl_warnings

    warnings = verl_warnings(load_config(["actor_rollout_ref.model.use_fused_kernels=True",
                                          "actor_rollout_ref.actor.entropy_checkpointing=True",
                                          "actor_rollout_ref.ref.entropy_from_logits_chunk_size=64"]))
    assert any("actor_rollout_ref.actor.entropy_checkpointing has no effect with" in w for w in warnings), warnings
    assert not any("actor_rollout_ref.ref.entropy_from_logits_chunk_size" in w for w in warnings)  # fused: said once


def test_chunking_keeps_a_padded_vocabulary_out_of_the_softmax():
    """The Megatron engine's path: entries past vocab_size (padding of a TP-split vocabulary) are excluded
    in every chunk, and checkpointed chunks give the same gradients."""
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 9, 40, generator=g, requires_grad=True)
    targets = torch.randint(0, 33, (2, 9), generator=g)
    out = {}
    for name, kw in {"whole": {}, "chunked": {"chunk_size": 4, "checkpoint": True}}.items():
        lp, ent = log_probs_and_entropy(logits, targets, True, vocab_size=33, **kw)
        (lp.sum() + ent.sum()).backward()
        out[name] = (lp.detach(), ent.detach(), logits.grad.clone())
        logits.grad = None
    for a, b in zip(out["whole"], out["chunked"]):
        assert torch.allclose(a, b, atol=ATOL, rtol=0)
    assert out["whole"][2][..., 33:].abs().max() == 0  # no gradient into the padding
    want = torch.log_softmax(logits.detach()[..., :33], -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out["chunked"][0], want, atol=ATOL, rtol=0)


def _fsdp2_scenario(rank, world, port, out_dir):
    """Each rank: the plain and the fused engine sharded with FSDP2 over a gloo group of two, one update's
    log-probs and gradient norm (the LM head's weight is the root module's, gathered for the fused pass)."""
    import os
    import traceback

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    rec = {}
    try:
        for fused_on in (False, True):
            res, _ = None, None
            from verl_lite.engine.torch.engine import TorchLMEngine

            cfg = load_config(["actor_rollout_ref.model.path=tiny-qwen3", "actor_rollout_ref.model.use_remove_padding=False",
                               f"actor_rollout_ref.model.use_fused_kernels={fused_on}"])
            arr = compose.to_dataclass(cfg).actor_rollout_ref
            engine = TorchLMEngine(arr.model, arr.actor, arr.actor.optim, "cpu", "actor")
            engine.initialize()
            engine.train_mode()
            engine.optimizer_zero_grad()
            res = engine.forward_backward([make_batch(seed=rank)], loss_fn, calculate_entropy=True)[0]
            rec[fused_on] = (res["log_probs"], res["entropy"], engine.optimizer_step(), engine.sharded)
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


def test_the_fused_pass_under_fsdp2_gives_the_plain_log_probs_and_gradient_norm(spawn_ranks):
    for rec in spawn_ranks(_fsdp2_scenario, "fused_fsdp2"):
        plain_lp, plain_ent, plain_norm, sharded = rec[False]
        lp, ent, norm, _ = rec[True]
        assert sharded
        assert torch.allclose(lp, plain_lp, atol=ATOL, rtol=0) and torch.allclose(ent, plain_ent, atol=ATOL, rtol=0)
        assert abs(norm - plain_norm) < 1e-4 * max(1.0, plain_norm), (norm, plain_norm)
