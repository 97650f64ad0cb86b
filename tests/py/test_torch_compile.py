"""`<role>.use_torch_compile`: the log-prob and entropy passes over the vocabulary
(verl_lite/engine/logits.py) run through torch.compile (inductor, dynamic shapes) when the role sets
it, with eager's results; the ref follows the actor as in verl; the flag reaches both engines.

Compiling is the cost here: inductor's first compile in a process takes ~20-25 s on a 2-core box
(forward and backward of the two vocabulary passes); one torch engine pair shares it, and the other
tests run eagerly or spy on the switch.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from verl_lite.config import compose
from verl_lite.config.compose import load_config, to_dataclass
from read_tracking import track_reads
from verl_lite.engine import logits

B, P = 3, 6


def make_batch(r: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (B, P + r), generator=g)
    mask = torch.ones(B, P + r, dtype=torch.long)
    mask[0, :2] = 0  # a left-padded prompt
    mask[1, -1] = 0  # a response that ended early
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -r:], response_mask=mask[:, -r:])


def loss_fn(outputs, batch):
    mask = batch["response_mask"].float()
    loss = -((outputs["log_probs"] + 0.1 * outputs["entropy"]) * mask).sum() / mask.sum()
    return loss, {}


def torch_actor(cfg):
    from verl_lite.engine.torch.engine import TorchLMEngine

    arr = compose.to_dataclass(cfg).actor_rollout_ref  # the sections tagged with their paths while tracking
    engine = TorchLMEngine(arr.model, arr.actor, arr.actor.optim, "cpu", "actor")
    engine.initialize()
    return engine


def grads(engine):
    return torch.cat([p.grad.flatten() for p in engine.module.parameters() if p.grad is not None])


@pytest.fixture(scope="module")
def compiled_run():
    """The same update through an eager and a compiled torch engine (same init), and the dynamo counts."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    out = {}
    for name in ("eager", "compiled"):
        cfg = load_config(["actor_rollout_ref.model.path=tiny-qwen3",
                           f"actor_rollout_ref.actor.use_torch_compile={name == 'compiled'}"])
        with track_reads() as reads:
            engine = torch_actor(cfg)
            engine.train_mode()
            engine.optimizer_zero_grad()
            res = engine.forward_backward([make_batch(4, 0)], loss_fn, calculate_entropy=True)[0]
        out[name] = dict(res=res, grads=grads(engine).clone(), frames=counters["frames"]["ok"],
                         graphs=counters["stats"]["unique_graphs"],
                         read="actor_rollout_ref.actor.use_torch_compile" in reads.paths)
        if name == "compiled":  # another response length and batch: dynamic shapes, no new graph
            engine.forward_backward([make_batch(7, 1)], loss_fn, calculate_entropy=True)
            out["graphs_after_new_length"] = counters["stats"]["unique_graphs"]
    return out


def test_the_eager_engine_compiles_nothing_and_the_compiled_one_runs_dynamo_graphs(compiled_run):
    assert compiled_run["eager"]["frames"] == 0 and compiled_run["eager"]["graphs"] == 0
    assert compiled_run["compiled"]["frames"] >= 2  # both vocabulary passes went through dynamo
    assert compiled_run["compiled"]["graphs"] >= 2


def test_a_new_response_length_and_batch_reuse_the_compiled_graphs(compiled_run):
    assert compiled_run["graphs_after_new_length"] == compiled_run["compiled"]["graphs"]


def test_compiled_log_probs_entropy_and_gradients_equal_eagers_within_1e_5(compiled_run):
    eager, comp = compiled_run["eager"], compiled_run["compiled"]
    mask = make_batch(4, 0)["response_mask"].bool()
    for key in ("log_probs", "entropy"):
        assert (eager["res"][key] - comp["res"][key])[mask].abs().max() < 1e-5, key
    assert (eager["grads"] - comp["grads"]).abs().max() <= 1e-5 * eager["grads"].abs().max()


def test_the_torch_engine_reads_use_torch_compile_in_its_forward(compiled_run):
    assert compiled_run["compiled"]["read"] and compiled_run["eager"]["read"]  # by its exact path


def test_kernels_hands_out_the_torch_compiled_passes_only_when_asked():
    eager = logits.kernels(False)
    assert eager == (logits.sum_exp_and_pick, logits.p_dot_z)
    compiled = logits.kernels(True)
    # torch.compile's wrapper keeps the function it compiles
    assert [getattr(k, "_torchdynamo_orig_callable", None) for k in compiled] == list(eager)
    assert logits.kernels(True) is compiled  # built once per process


def test_a_torch_compile_patched_to_a_no_op_is_bypassed_through_mindspeeds_original_or_refused(monkeypatch):
    calls = []

    def original(fn, **kwargs):  # stands for the real torch.compile MindSpeed's patch keeps
        calls.append(kwargs)
        return torch._dynamo.optimize("eager", dynamic=kwargs.get("dynamic"))(fn)

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)  # MindSpeed's pre patch: a no-op
    with pytest.raises(RuntimeError, match="torch.compile returned p_dot_z uncompiled here .*set use_torch_compile"
                                           "=False"):
        logits.compile_pass(logits.p_dot_z)
    patch = SimpleNamespace(orig_func=original, is_applied=True)
    manager = SimpleNamespace(MindSpeedPatchesManager=SimpleNamespace(patches_info={"torch.compile": patch}))
    monkeypatch.setitem(sys.modules, "mindspeed.patch_utils", manager)
    compiled = logits.compile_pass(logits.p_dot_z)
    assert compiled._torchdynamo_orig_callable is logits.p_dot_z and calls == [{"dynamic": True}]


def test_padded_vocabulary_entries_are_left_out_like_a_log_softmax_over_the_real_ones():
    g = torch.Generator().manual_seed(0)
    z, targets = torch.randn(2, 3, 10, generator=g), torch.randint(0, 7, (2, 3), generator=g)
    lp, ent = logits.log_probs_and_entropy(z, targets, True, vocab_size=7)
    ref = torch.log_softmax(z[..., :7], -1)
    assert torch.allclose(lp, ref.gather(-1, targets.unsqueeze(-1)).squeeze(-1), atol=1e-6)
    assert torch.allclose(ent, -(ref.exp() * ref).sum(-1), atol=1e-6)


def test_the_ref_follows_the_actors_use_torch_compile_unless_set():
    follows = to_dataclass(load_config(["actor_rollout_ref.actor.use_torch_compile=True"]))
    assert follows.actor_rollout_ref.ref.use_torch_compile is True
    own = to_dataclass(load_config(["actor_rollout_ref.actor.use_torch_compile=True",
                                    "actor_rollout_ref.ref.use_torch_compile=False"]))
    assert own.actor_rollout_ref.ref.use_torch_compile is False
    assert to_dataclass(load_config([])).actor_rollout_ref.ref.use_torch_compile is False


@pytest.mark.parametrize("role,flag", [("actor", True), ("ref", True), ("ref", False)])
def test_the_megatron_engine_passes_its_roles_flag_to_the_vocab_parallel_log_probs(monkeypatch, role, flag):
    from verl_lite.engine.megatron import vocab as megatron_vocab
    from verl_lite.engine.megatron.engine import MegatronLMEngine
    from verl_lite.config.schema import ActorConfig, ModelConfig, RefConfig

    seen = []

    def spy(logits_, responses, vocab, with_entropy, compiled=False, chunk_size=None, checkpoint=False):
        seen.append((compiled, chunk_size, checkpoint))
        return torch.zeros(responses.shape), None

    monkeypatch.setattr(megatron_vocab, "vocab_parallel_log_probs", spy)
    # the entropy memory settings travel with it (tests/py/test_memory_knobs.py checks their numbers)
    memory = dict(entropy_from_logits_with_chunking=flag, entropy_from_logits_chunk_size=7, entropy_checkpointing=flag)
    section = ActorConfig(strategy="megatron", use_torch_compile=flag, **memory) if role == "actor" else \
        RefConfig(strategy="megatron", use_torch_compile=flag, **memory)
    engine = MegatronLMEngine(ModelConfig(path="tiny-qwen3"), section, None, "cpu", role)  # not initialised
    engine.layout = SimpleNamespace(vocab=48)
    engine.postprocess(torch.zeros(B, 5, 48), {"responses": torch.zeros(B, 4, dtype=torch.long)}, False)
    assert seen == [(flag, 7 if flag else None, flag)]


def test_use_torch_compile_on_cpu_without_a_cpp_compiler_is_refused_naming_the_fix(monkeypatch):
    from verl_lite.preflight.run import collect_problems

    monkeypatch.setenv("CXX", "no-such-cxx")
    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.use_torch_compile=True"])
    problems = [p for p in collect_problems(cfg, for_training=False) if "use_torch_compile" in p]
    assert problems == ["actor: actor_rollout_ref.actor.use_torch_compile=True on trainer.device=cpu: torch.compile's "
                        "inductor builds C++ kernels with 'no-such-cxx' ($CXX, else g++), which is not on PATH; "
                        "install a C++ compiler (e.g. apt-get install g++) or point CXX at one, or set it to False"]
    monkeypatch.setenv("CXX", sys.executable)  # any executable found passes the check
    assert not [p for p in collect_problems(load_config(["trainer.device=cpu",
                                                         "actor_rollout_ref.actor.use_torch_compile=True"]),
                                            for_training=False) if "use_torch_compile" in p]
