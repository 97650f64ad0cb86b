"""The torch engine's fsdp_config settings (engine/torch/fsdp_policy.py), as verl's FSDP engine reads them:
mixed precision (bf16 compute over fp32 master weights, run on CPU here), model_dtype, the hybrid-sharding
mesh of fsdp_size, the CPU offload policy, forward prefetch and the wrap policy; their preflight refusals
and the check's summary lines.

Tolerances: bf16 has an 8-bit mantissa (relative step 2**-8 = 0.4%). Over this 2-layer model the
bf16 log-probs stay within 0.02 of fp32 (measured: 0.002) and the gradients within 5% in norm (measured:
~1%); sharded fp32 runs (HSDP, prefetch, CPU offload) match plain FSDP to 1e-5 (reduction order only).
"""

from __future__ import annotations

import os
import traceback

import pytest
import torch

from verl_lite.config.schema import ActorConfig, CriticConfig, ModelConfig, OptimConfig, RefConfig
from verl_lite.decisions import fsdp_settings
from verl_lite.engine.torch import fsdp_policy

LP_TOL, GRAD_REL_TOL, SHARD_TOL = 0.02, 0.05, 1e-5


def make_batch(rows=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 40, (rows, 12), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(12).expand(rows, 12),
            "responses": ids[:, 8:]}


def lm_loss(out, mb):
    return -out["log_probs"].mean(), {}


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def build(section, role="actor", path="tiny-qwen3", device="cpu", **model):
    from verl_lite.engine.torch.engine import TorchLMEngine, TorchValueEngine

    cls = TorchValueEngine if role == "critic" else TorchLMEngine
    optim = None if role == "ref" else OptimConfig(lr=1e-3)
    engine = cls(ModelConfig(path=path, **model), section, optim, device, role)
    engine.initialize()
    return engine


def step(engine, batch, loss=lm_loss):
    """One training micro-batch: the outputs and every full gradient (before the optimizer step)."""
    engine.train_mode()
    out = engine.forward_backward([batch], loss_fn=loss)[0]
    grads = {n: full(p.grad).detach().clone() for n, p in engine.module.named_parameters()}
    return out, grads


@pytest.fixture(scope="module")
def one_rank_group():
    """The engine starts a one-process gloo group for a sharded single rank; torn down for the next files."""
    import torch.distributed as dist

    before = dist.is_initialized()
    yield
    if dist.is_initialized() and not before:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- dtypes (pure)


def test_verls_defaults_resolve_per_role_and_device():
    actor, ref = ActorConfig().fsdp_config, RefConfig().fsdp_config
    cuda = fsdp_settings.resolve_precision(actor, "actor", "cuda")
    assert (cuda.storage, cuda.param, cuda.reduce, cuda.buffer) == ("float32", "bfloat16", "float32", "float32")
    assert cuda.mixed
    cpu = fsdp_settings.resolve_precision(actor, "actor", "cpu")
    assert (cpu.storage, cpu.param) == ("float32", "float32") and not cpu.mixed
    # verl's yaml stores the ref in fp32 too; its null is fp32 for trained roles, bf16 for the forward-only ref
    assert fsdp_settings.resolve_precision(ref, "ref", "npu").storage == "float32"
    ref.model_dtype = None
    assert fsdp_settings.resolve_precision(ref, "ref", "npu").storage == "bfloat16"
    actor.model_dtype = None
    assert fsdp_settings.resolve_precision(actor, "actor", "npu").storage == "float32"
    # a key set applies on cpu too; the others keep verl's defaults
    actor.mixed_precision = {"reduce_dtype": "bf16"}
    given = fsdp_settings.resolve_precision(actor, "actor", "cpu")
    assert (given.param, given.reduce, given.buffer) == ("bfloat16", "bfloat16", "float32")


def test_bad_dtypes_name_the_key_and_the_choices():
    f = ActorConfig().fsdp_config
    f.model_dtype, f.mixed_precision = "fp8", {"param_dtype": "fp16", "output_dtype": "bf16"}
    problems = fsdp_settings.precision_problems(f, "actor_rollout_ref.actor.fsdp_config")
    assert any("model_dtype='fp8' is not a dtype: choose fp32" in p for p in problems)
    assert any("mixed_precision.param_dtype='fp16': float16 is not supported" in p for p in problems)
    assert any("mixed_precision.output_dtype is not supported" in p and "param_dtype, reduce_dtype" in p
               for p in problems)
    with pytest.raises(ValueError, match="fp8"):
        fsdp_settings.resolve_precision(f, "actor", "cpu")


def test_the_ref_gets_the_cpu_offload_policy_on_devices_and_it_turns_the_phase_offload_off():
    ref, actor = RefConfig().fsdp_config, ActorConfig().fsdp_config
    ref.param_offload = actor.param_offload = actor.optimizer_offload = True
    assert fsdp_settings.cpu_offload(ref, "ref", "cuda") and not fsdp_settings.cpu_offload(ref, "ref", "cpu")
    assert fsdp_settings.phase_offload(ref, "ref", "cuda") == (False, False)
    assert fsdp_settings.phase_offload(actor, "actor", "cuda") == (True, True)
    actor.offload_policy = True
    assert fsdp_settings.phase_offload(actor, "actor", "cuda") == (False, False)

    from verl_lite.trainer.offload import OffloadPolicy

    section = ActorConfig()
    section.fsdp_config.param_offload = True
    assert OffloadPolicy.of(section, "fsdp", "actor", "cuda") == OffloadPolicy(True, True, False)
    section.fsdp_config.offload_policy = True
    assert OffloadPolicy.of(section, "fsdp", "actor", "cuda") == OffloadPolicy()


def test_fsdp_size_builds_verls_mesh_shape_and_refuses_a_non_divisor():
    assert fsdp_settings.mesh_shape(-1, 8) == (1, 8)
    assert fsdp_settings.mesh_shape(8, 8) == (1, 8) and fsdp_settings.mesh_shape(16, 8) == (1, 8)  # verl: >= world
    assert fsdp_settings.mesh_shape(2, 8) == (4, 2)
    assert fsdp_settings.describe_mesh(2, 4) == "FSDP2 mesh (replicate 2, shard 2)"
    with pytest.raises(ValueError, match=r"fsdp_size=3 does not divide the 8 data-parallel ranks: choose -1 or one "
                                         r"of \[1, 2, 4, 8\]"):
        fsdp_settings.mesh_shape(3, 8)
    with pytest.raises(ValueError, match="fsdp_size=0"):
        fsdp_settings.mesh_shape(0, 8)


# ---------------------------------------------------------------------------- wrap policy


def _model(tied=True):
    from verl_lite.models.hf import build_causal_lm

    return build_causal_lm(ModelConfig(path="tiny-qwen3", override_config={"tie_word_embeddings": tied}))


def test_the_wrap_targets_are_verls_fsdp2_ones_layers_and_untied_embeddings():
    tied = _model(True)
    assert [type(m).__name__ for m in fsdp_policy.wrap_targets(tied, {"min_num_params": 0})] == \
        ["Qwen3DecoderLayer", "Qwen3DecoderLayer"]
    untied = _model(False)
    names = [type(m).__name__ for m in fsdp_policy.wrap_targets(untied, {"min_num_params": 0})]
    assert names == ["Embedding", "Qwen3DecoderLayer", "Qwen3DecoderLayer", "Linear"]  # embed, layers, lm_head
    only_mlp = fsdp_policy.wrap_targets(tied, {"transformer_layer_cls_to_wrap": ["Qwen3MLP"]})
    assert [type(m).__name__ for m in only_mlp] == ["Qwen3MLP", "Qwen3MLP"]
    with pytest.raises(ValueError, match="none of these classes is in the model"):
        fsdp_policy.wrap_targets(tied, {"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})


def test_min_num_params_wraps_by_size_as_fsdp1s_policy():
    model = _model(True)
    layer = sum(p.numel() for p in model.model.layers[0].parameters())
    targets = fsdp_policy.wrap_targets(model, {"min_num_params": layer})
    # each decoder layer's MLP is below the count, the whole layer reaches it; nothing inside is wrapped first
    assert model.model.layers[0] in targets and model.model.layers[1] in targets
    assert all(sum(p.numel() for p in t.parameters()) >= layer for t in targets)
    small = fsdp_policy.wrap_targets(model, {"min_num_params": 1000})
    assert model.model.layers[0].mlp.gate_proj in small and model.model.layers[0] not in small


# ---------------------------------------------------------------------------- bf16 on cpu, one process


def test_bf16_compute_on_cpu_matches_fp32_within_bf16_tolerance_and_keeps_fp32_master_weights(one_rank_group):
    batch = make_batch()
    plain = build(ActorConfig())
    assert not plain.sharded  # fp32 on one cpu process: nothing needs fully_shard
    out32, grads32 = step(plain, batch)

    section = ActorConfig()
    section.fsdp_config.mixed_precision = {"param_dtype": "bf16"}
    mixed = build(section)
    assert mixed.sharded and mixed.sharding.mesh_shape == (1, 1)
    seen = []
    hook = mixed.module.model.layers[0].mlp.gate_proj.register_forward_pre_hook(
        lambda m, args: seen.append((m.weight.dtype, args[0].dtype)))
    out16, grads16 = step(mixed, batch)
    hook.remove()
    assert seen == [(torch.bfloat16, torch.bfloat16)]  # the layer computes in bf16
    assert out16["log_probs"].dtype == torch.float32  # log-probs from the logits in fp32
    diff = (out16["log_probs"] - out32["log_probs"]).abs().max().item()
    assert 0 < diff < LP_TOL
    for name, g in grads32.items():
        rel = ((grads16[name] - g).norm() / g.norm().clamp_min(1e-12)).item()
        assert rel < GRAD_REL_TOL, (name, rel)
    assert any(not torch.equal(grads16[n], g) for n, g in grads32.items())
    assert {full(p).dtype for p in mixed.module.parameters()} == {torch.float32}  # master weights
    assert {g.dtype for g in grads16.values()} == {torch.float32}  # reduced to fp32
    mixed.optimizer_step()
    states = [v for s in mixed.optimizer.state.values() for k, v in s.items() if k != "step"]
    assert states and {full(v).dtype for v in states} == {torch.float32}


def test_the_critic_takes_the_same_mixed_precision(one_rank_group):
    batch = make_batch()

    def value_loss(out, mb):
        return out["values"].pow(2).mean(), {}

    plain = build(CriticConfig(), "critic")
    section = CriticConfig()
    section.fsdp_config.mixed_precision = {"param_dtype": "bf16"}
    mixed = build(section, "critic")
    v32, _ = step(plain, batch, value_loss)
    v16, _ = step(mixed, batch, value_loss)
    assert mixed.sharded and 0 < (v16["values"] - v32["values"]).abs().max().item() < LP_TOL
    assert mixed.sharding.wrapped == 2  # the backbone's decoder layers (tied embeddings: not on their own)


def test_model_dtype_bf16_stores_the_parameters_and_optimizer_state_in_bf16(one_rank_group):
    section = ActorConfig()
    section.fsdp_config.model_dtype = "bf16"
    engine = build(section)
    assert not engine.sharded  # compute = storage: no policy needed on one rank
    assert {p.dtype for p in engine.module.parameters()} == {torch.bfloat16}
    assert engine.module.model.rotary_emb.inv_freq.dtype == torch.float32  # buffer_dtype fp32
    out, _ = step(engine, make_batch())
    engine.optimizer_step()
    assert torch.isfinite(out["log_probs"]).all()
    assert {v.dtype for s in engine.optimizer.state.values() for k, v in s.items() if k != "step"} == {torch.bfloat16}


# ---------------------------------------------------------------------------- ranks over gloo


def _ranks_scenario(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    rec = {}
    try:
        batch = make_batch(rows=2, seed=rank)  # each rank its own rows, as data parallelism gives them

        def loss(out, mb):  # the worker's scaling: the mean over ranks
            return -out["log_probs"].mean() / world, {}

        variants = {"plain": {}, "prefetch": {"forward_prefetch": True}, "offload": {"offload_policy": True},
                    "no_reshard": {"reshard_after_forward": False}}
        if world == 4:
            variants = {"plain": {}, "hsdp": {"fsdp_size": 2}}
        for name, settings in variants.items():
            section = ActorConfig()
            for key, value in settings.items():
                setattr(section.fsdp_config, key, value)
            engine = build(section, path="tiny-qwen3", override_config={"tie_word_embeddings": False})
            out, grads = step(engine, batch, loss)
            engine.optimizer_step()
            weight = engine.module.model.layers[0].mlp.gate_proj.weight
            states = [m._get_fsdp_state() for m in engine.module.modules() if hasattr(m, "_get_fsdp_state")]
            rec[name] = {"log_probs": out["log_probs"], "grads": grads, "mesh": engine.sharding.mesh_shape,
                         "placements": [type(p).__name__ for p in weight.placements], "wrapped": engine.sharding.wrapped,
                         "local_rows": weight.to_local().shape[0],
                         "prefetching": sum(bool(st._states_to_forward_prefetch) for st in states),
                         # units that keep their parameters gathered after forward
                         "kept": sum(st._fsdp_param_group.post_forward_mesh_info is None
                                     for st in states if st._fsdp_param_group is not None),
                         "offloading": sum(type(st._fsdp_param_group.offload_policy).__name__ == "CPUOffloadPolicy"
                                           for st in states if st._fsdp_param_group is not None),
                         "after_step": full(weight).detach().clone()}
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


def _same(a, b):
    assert torch.allclose(a["log_probs"], b["log_probs"], atol=SHARD_TOL)
    for name, g in a["grads"].items():
        assert torch.allclose(b["grads"][name], g, atol=SHARD_TOL), name
    assert torch.allclose(a["after_step"], b["after_step"], atol=SHARD_TOL)


def test_prefetch_offload_policy_and_reshard_give_plain_fsdps_loss_and_gradients_on_two_ranks(spawn_ranks):
    recs = spawn_ranks(_ranks_scenario, "fsdp_knobs")
    for rec in recs:
        plain = rec["plain"]
        assert plain["mesh"] == (1, 2) and plain["placements"] == ["Shard"]
        assert plain["wrapped"] == 4  # embeddings, 2 layers, LM head (untied): verl's fsdp2 targets
        for name in ("prefetch", "offload", "no_reshard"):
            _same(plain, rec[name])
        # FSDP2's own state: each of the 4 units prefetches the next (3 links), all 5 units offload
        assert rec["prefetch"]["prefetching"] == 3 and plain["prefetching"] == 0
        assert rec["offload"]["offloading"] == 5 and plain["offloading"] == 0
        # reshard_after_forward=False keeps every unit gathered after forward; True (verl's) frees them all
        assert rec["no_reshard"]["kept"] == 5 and plain["kept"] == 0


def test_fsdp_size_2_on_four_ranks_is_hybrid_sharding_with_plain_fsdps_loss_and_gradients(spawn_ranks):
    recs = spawn_ranks(_ranks_scenario, "fsdp_hsdp", nprocs=4)
    for rec in recs:
        _same(rec["plain"], rec["hsdp"])
        assert rec["hsdp"]["mesh"] == (2, 2) and rec["hsdp"]["placements"] == ["Replicate", "Shard"]
        assert rec["hsdp"]["local_rows"] == 2 * rec["plain"]["local_rows"]  # half the shards: twice the rows


# ---------------------------------------------------------------------------- preflight and summary


def test_the_check_refuses_bad_fsdp_settings_and_prints_the_mesh_and_dtypes(run_module):
    bad = run_module("verl_lite.check", "trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.fsdp_config.fsdp_size=3",
                     "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16")
    assert bad.returncode != 0
    assert "actor_rollout_ref.actor.fsdp_config.fsdp_size=3 does not divide the 4 data-parallel ranks" in bad.stderr
    assert "mixed_precision.param_dtype='fp16': float16 is not supported" in bad.stderr
    good = run_module("verl_lite.check", "trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.fsdp_config.fsdp_size=2",
                      "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                      "critic.fsdp.forward_prefetch=True")
    assert good.returncode == 0, good.stderr
    assert "FSDP2 mesh (replicate 2, shard 2)" in good.stdout
    assert "params stored fp32, compute bf16, reduce fp32, buffers fp32" in good.stdout
    assert "forward prefetch on" in good.stdout  # the critic's, through verl's critic.fsdp spelling


def test_megatron_refuses_the_fsdp_dtype_and_sharding_keys(run_module):
    res = run_module("verl_lite.check", "actor_rollout_ref.actor.strategy=megatron",
                     "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
                     "actor_rollout_ref.actor.fsdp_config.fsdp_size=2")
    assert res.returncode != 0
    assert "actor_rollout_ref.actor.fsdp_config.model_dtype='bf16' is not supported on strategy=megatron" in res.stderr
    assert "fsdp_config.fsdp_size=2 is not supported on strategy=megatron" in res.stderr


def test_a_mixed_precision_checkpoint_loads_back_into_a_mixed_precision_engine(one_rank_group, tmp_path):
    section = ActorConfig()
    section.fsdp_config.mixed_precision = {"param_dtype": "bf16"}
    section.checkpoint.save_contents = section.checkpoint.load_contents = ["model", "optimizer", "extra"]
    engine = build(section)
    step(engine, make_batch())
    engine.optimizer_step()
    engine.save_checkpoint(str(tmp_path / "actor"))
    again = build(section)
    again.load_checkpoint(str(tmp_path / "actor"))
    for (name, p), q in zip(engine.module.named_parameters(), again.module.parameters()):
        assert torch.equal(full(p), full(q)) and full(q).dtype == torch.float32, name
    out_a, _ = step(engine, make_batch(seed=1))
    out_b, _ = step(again, make_batch(seed=1))
    assert torch.equal(out_a["log_probs"], out_b["log_probs"])


def test_verls_null_mixed_precision_is_the_empty_mapping_and_keys_add_with_plus():
    from verl_lite.config import load_config

    cfg = load_config(["actor_rollout_ref.actor.fsdp_config.mixed_precision=null",
                       "+critic.fsdp.mixed_precision.reduce_dtype=bf16",
                       "+actor_rollout_ref.ref.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap=[Qwen3DecoderLayer]"])
    assert dict(cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision) == {}
    assert dict(cfg.critic.fsdp_config.mixed_precision) == {"reduce_dtype": "bf16"}
    assert list(cfg.actor_rollout_ref.ref.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap) == ["Qwen3DecoderLayer"]


def test_phase_offload_flags_under_the_cpu_offload_policy_are_warned_about():
    from verl_lite.config import load_config
    from verl_lite.preflight.run import collect_warnings

    warnings = collect_warnings(load_config([
        "trainer.device=cuda", "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.ref.fsdp_config.param_offload=True", "actor_rollout_ref.actor.fsdp_config.offload_policy=True",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"]))
    text = " ".join(warnings)
    assert ("actor_rollout_ref.ref.fsdp_config.param_offload=True has no effect: the ref's FSDP2 CPU offload policy"
            in text)
    assert ("actor_rollout_ref.actor.fsdp_config.optimizer_offload=True has no effect: "
            "actor_rollout_ref.actor.fsdp_config.offload_policy=True keeps the tensors on the host") in text
