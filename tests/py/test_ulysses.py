"""Ulysses sequence parallelism on the torch engine (engine/torch/ulysses.py): on 2 gloo ranks, SP=2 (both ranks one
data-parallel rank, each running half of the packed sequence) against the plain engine on the same data, padded
(no packing) and packed; the dispatch that hands both SP ranks the same shard; the refusals."""

from __future__ import annotations

import json
import os
import traceback

import pytest

from verl_lite.config import compose_config
from verl_lite.preflight import run as preflight

TOL = 1e-5  # float32, the same weights: only the order of the sums differs between the layouts


def _batch():
    """3 rows, left-padded prompts (width 5), right-padded responses (width 4): 21 real tokens, odd, so
    the packed row is padded to a multiple of sp=2."""
    import torch

    g = torch.Generator().manual_seed(3)
    prompt_lens, resp_lens = [5, 3, 2], [4, 2, 3]
    ids = torch.randint(3, 40, (3, 9), generator=g)
    mask = torch.zeros(3, 9, dtype=torch.long)
    resp_mask = torch.zeros(3, 4, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens)):
        mask[i, 5 - p:5 + r] = 1
        resp_mask[i, :r] = 1
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, 5:],
            "response_mask": resp_mask}


def _lm_loss(out, mb):
    # the same batch on every rank: FSDP's average over the 2 ranks is the gradient of one copy, with and
    # without SP (the SP gather's backward scales by sp), so the loss is not scaled by the DP size here
    m = mb["response_mask"].float()
    return (out["log_probs"] * m).sum() + 0.1 * (out["entropy"] * m).sum(), {}


def _value_loss(out, mb):
    return ((out["values"] - 0.5) ** 2 * mb["response_mask"].float()).sum(), {}


def _grads(engine):
    return {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
            for n, p in engine.module.named_parameters() if p.grad is not None}


def _run(engine, loss_fn, entropy):
    engine.train_mode()
    engine.optimizer_zero_grad()
    out = engine.forward_backward([_batch()], loss_fn, calculate_entropy=entropy)[0]
    out.pop("metrics")
    return out, _grads(engine)


def _compare(rank, world, rec, model, role, checkpointing=False):
    """The padded, packed and SP=2 engines of one role on the same batch: outputs and gradients."""
    import torch.distributed as dist

    from verl_lite.config.schema import ActorConfig, CriticConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch.engine import TorchLMEngine, TorchValueEngine
    from verl_lite.trainer.worker_group import dp_leaders, shards_by_rank

    cls, section, loss, entropy = ((TorchLMEngine, ActorConfig, _lm_loss, True) if role == "actor" else
                                   (TorchValueEngine, CriticConfig, _value_loss, False))
    runs = {}
    for name, sp, packed in (("padded", 1, False), ("packed", 1, True), ("sp", 2, True)):
        # checkpointing: the SP engine recomputes its layers, all-to-alls included, in the backward
        engine = cls(ModelConfig(path=model, use_remove_padding=packed,
                                 enable_gradient_checkpointing=checkpointing and sp > 1),
                     section(ulysses_sequence_parallel_size=sp), OptimConfig(lr=1e-3), "cpu", role)
        engine.initialize()
        runs[name] = _run(engine, loss, entropy)
        if role == "actor":  # actor.calculate_sum_pi_squared's pass: the same weights (no step was taken)
            rec.setdefault("sum_pi_squared", {})[name] = engine.forward_backward(
                [_batch()], forward_only=True, calculate_sum_pi_squared=True)[0]["sum_pi_squared"]
        if sp > 1:
            rec["topology"] = {"dp_rank": engine.data_parallel_rank(), "dp_size": engine.data_parallel_size(),
                               "leader": engine.is_data_parallel_leader()}
            topo = [None] * world
            dist.all_gather_object(topo, rec["topology"])
            rec["dispatch"] = shards_by_rank(["shard0"], topo), dp_leaders(topo)
    rec["runs"] = runs


def _one_kv_head_model(out_dir, rank):
    """tiny-qwen3 with one KV head (fewer than the SP ranks), written for this rank."""
    config = json.loads(open(os.path.join(os.path.dirname(__file__), "../../verl_lite/assets/tiny-qwen3/config.json"),
                             encoding="utf-8").read())
    config["num_key_value_heads"] = 1
    path = os.path.join(out_dir, f"one_kv_head_rank{rank}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


CASES = {  # name -> (model, role, gradient checkpointing); one spawn runs them all, one after the other
    "actor": ("tiny-qwen3", "actor", False),
    "one_kv_head": (None, "actor", True),
    "critic": ("tiny-qwen3", "critic", False),
}


def _compare_all(rank, world, port, out_dir):
    """Every case of CASES in one gloo group of two ranks; each case's record (with an "error"
    traceback if it failed) under its name."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    recs = {}
    for name, (model, role, checkpointing) in CASES.items():
        rec = recs[name] = {}
        try:
            _compare(rank, world, rec, model or _one_kv_head_model(out_dir, rank), role, checkpointing)
        except Exception:
            rec["error"] = traceback.format_exc()
        dist.barrier()
    torch.save(recs, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def compared(spawn_ranks):
    """name -> [record of rank 0, record of rank 1] of each case of CASES."""
    recs = spawn_ranks(_compare_all, "ulysses")
    for name in CASES:
        for r, rec in enumerate(recs):
            assert "error" not in rec[name], f"{name}, rank {r} failed:\n{rec[name]['error']}"
    return {name: [rec[name] for rec in recs] for name in CASES}


def _assert_same(recs, keys):
    import torch

    for rec in recs:
        runs = rec["runs"]
        for ref in ("padded", "packed"):
            for key in keys:
                got, want = runs["sp"][0][key], runs[ref][0][key]
                mask = _batch()["response_mask"].bool()
                assert torch.allclose(got[mask], want[mask], atol=TOL, rtol=TOL), (ref, key, got, want)
            g_sp, g_ref = runs["sp"][1], runs[ref][1]
            assert set(g_sp) == set(g_ref) and g_sp
            for name in g_ref:
                assert torch.allclose(g_sp[name], g_ref[name], atol=TOL, rtol=1e-4), (ref, name)


def test_actor_log_probs_entropy_and_gradients_with_sp2_equal_the_plain_engine(compared):
    recs = compared["actor"]
    _assert_same(recs, ("log_probs", "entropy"))
    # both ranks are data-parallel rank 0 of 1; rank 0 alone is collected
    assert [r["topology"] for r in recs] == [{"dp_rank": 0, "dp_size": 1, "leader": True},
                                             {"dp_rank": 0, "dp_size": 1, "leader": False}]
    assert recs[0]["dispatch"] == (["shard0", "shard0"], [(0, 0)])


def test_sum_pi_squared_with_sp2_equals_the_plain_engines(compared):
    import torch

    mask = _batch()["response_mask"].bool()
    for rec in compared["actor"]:
        got = rec["sum_pi_squared"]
        for ref in ("padded", "packed"):
            assert torch.allclose(got["sp"][mask], got[ref][mask], atol=TOL, rtol=TOL), (ref, got)


def test_fewer_kv_heads_than_sp_ranks_and_gradient_checkpointing_give_the_same_outputs_and_gradients(compared):
    _assert_same(compared["one_kv_head"], ("log_probs", "entropy"))


def test_critic_values_and_gradients_with_sp2_equal_the_plain_engine(compared):
    _assert_same(compared["critic"], ("values",))


def test_the_dispatch_hands_every_rank_of_an_sp_group_its_dp_shard_and_collects_one_result_per_group():
    from verl_lite.trainer.worker_group import dp_leaders, shards_by_rank

    # 4 ranks, sp=2: ranks 0,1 are DP rank 0, ranks 2,3 DP rank 1 (verl's (dp, sp) mesh)
    topo = [{"dp_rank": r // 2, "dp_size": 2, "leader": r % 2 == 0} for r in range(4)]
    assert shards_by_rank(["a", "b"], topo) == ["a", "a", "b", "b"]
    assert dp_leaders(topo) == [(0, 0), (1, 2)]


# ---------------------------------------------------------------------------- refusals


def test_qwen3_5_is_refused_naming_its_gated_deltanet_layers():
    from verl_lite.config.schema import ActorConfig, ModelConfig
    from verl_lite.engine.torch import ulysses
    from verl_lite.models.hf import load_hf_config

    cfg = load_hf_config(ModelConfig(path="tiny-qwen3_5"))
    found = ulysses.problems("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 2, 2, cfg, None)
    assert len(found) == 1 and "Gated DeltaNet (linear_attention) layers" in found[0] and "not supported" in found[0]
    assert ActorConfig().ulysses_sequence_parallel_size == 1


def test_the_padded_path_an_uneven_split_and_indivisible_heads_are_refused():
    from verl_lite.engine.torch import ulysses

    cfg = {"model_type": "qwen3", "num_attention_heads": 4}
    key = "critic.ulysses_sequence_parallel_size"
    assert ulysses.problems(key, 1, 3, cfg, False) == []
    found = ulysses.problems(key, 3, 4, cfg, False)
    assert any("does not divide the 4 training ranks" in p for p in found)
    assert any("not supported with model.use_remove_padding=False" in p for p in found)
    assert any("does not divide num_attention_heads=4" in p for p in found)
    assert ulysses.problems(key, 0, 4, cfg, None)[0].startswith("critic.ulysses_sequence_parallel_size=0")


def _problems(overrides):
    cfg, compose_problems = compose_config(overrides)
    assert compose_problems == []
    return [p for p in preflight.collect_problems(cfg, for_training=False) if "ulysses" in p]


def test_the_preflight_names_the_role_of_a_bad_sp_size():
    found = _problems(["trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3"])
    # the ref follows the actor (verl's oc.select default) but is built only with a KL term; the actor is named
    assert any(p.startswith("actor: actor_rollout_ref.actor.ulysses_sequence_parallel_size=3 does not divide")
               for p in found)
    found = _problems(["trainer.n_gpus_per_node=4", "critic.ulysses_sequence_parallel_size=2",
                       "algorithm.adv_estimator=gae", "actor_rollout_ref.model.path=tiny-qwen3_5"])
    assert any(p.startswith("critic: critic.ulysses_sequence_parallel_size=2 is not supported for 'qwen3_5_text'")
               for p in found)
    assert _problems(["trainer.n_gpus_per_node=4", "actor_rollout_ref.model.path=tiny-qwen3",
                      "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]) == []


def test_verls_fsdp_config_copy_of_the_key_is_read_when_the_roles_own_is_1():
    from verl_lite.config.schema import ActorConfig, FSDPConfig
    from verl_lite.decisions.layout import ulysses_setting as setting

    prefix = "actor_rollout_ref.actor"
    assert setting(ActorConfig(fsdp_config=FSDPConfig(ulysses_sequence_parallel_size=2)), prefix) == \
        (f"{prefix}.fsdp_config.ulysses_sequence_parallel_size", 2)
    both = ActorConfig(ulysses_sequence_parallel_size=4, fsdp_config=FSDPConfig(ulysses_sequence_parallel_size=2))
    assert setting(both, prefix) == (f"{prefix}.ulysses_sequence_parallel_size", 4)  # verl copies the role's over it
    found = _problems(["trainer.n_gpus_per_node=3", "actor_rollout_ref.model.path=tiny-qwen3",
                       "critic.fsdp.ulysses_sequence_parallel_size=2", "algorithm.adv_estimator=gae"])
    assert any(p.startswith("critic: critic.fsdp_config.ulysses_sequence_parallel_size=2 does not divide the 3 "
                            "training") for p in found)


def test_the_megatron_strategy_refuses_ulysses_and_names_context_parallelism():
    found = _problems(["actor_rollout_ref.actor.strategy=megatron", "trainer.n_gpus_per_node=2",
                       "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"])
    assert any("not supported on the megatron strategy" in p and "megatron.context_parallel_size=2" in p
               for p in found)


def test_the_dynamic_token_budget_of_an_sp_group_is_the_roles_times_the_sp_size():
    from verl_lite.trainer.dynamic_batch import engine_micro_batches

    class Engine:  # what engine_micro_batches asks of an engine
        def __init__(self, sp):
            self.sp = sp

        def sequence_parallel_size(self):
            return self.sp

        def micro_batch_multiple(self):
            return 1

    batch = _batch()  # 3 rows of 9 columns (5 prompt + 4 response): 27 padded tokens
    # a budget of 18 tokens per rank: two rows per micro-batch at most without SP; the SP=2 group's 36 holds all 3
    assert len(engine_micro_batches(Engine(1), batch, 8, 18).parts) == 2
    assert len(engine_micro_batches(Engine(2), batch, 8, 18).parts) == 1


def test_the_torch_engine_refuses_sp_for_qwen3_5_when_it_builds():
    from verl_lite.config.schema import ActorConfig, ModelConfig
    from verl_lite.engine.torch.engine import TorchLMEngine

    engine = TorchLMEngine(ModelConfig(path="tiny-qwen3_5"), ActorConfig(ulysses_sequence_parallel_size=2), None,
                           "cpu", "actor")
    with pytest.raises(ValueError, match=r"actor_rollout_ref.actor.ulysses_sequence_parallel_size=2 is not supported "
                                         r"for 'qwen3_5_text': its Gated DeltaNet \(linear_attention\) layers"):
        engine.initialize()


# ---------------------------------------------------------------------------- through the worker group


def _train_batch():
    """8 rows (two mini-batches of 4) with made-up old log-probs and advantages."""
    import torch

    g = torch.Generator().manual_seed(11)
    rows = [_batch() for _ in range(3)]
    batch = {k: torch.cat([r[k] for r in rows])[:8] for k in rows[0]}
    mask = batch["response_mask"]
    batch["old_log_probs"] = (-3.9 + 0.1 * torch.randn(mask.shape, generator=g)) * mask
    batch["advantages"] = torch.randn(mask.shape, generator=g) * mask
    batch["temperature"] = 1.0
    return batch


def test_sp2_over_two_ray_workers_trains_as_one_worker_does_on_the_same_batch(ray_cluster, tmp_path):
    """Both ranks form one data-parallel rank: the driver hands each the whole batch, collects rank 0's result,
    and the loss is scaled by DP size 1; the dynamic token budget (18 per rank) holds twice the rows under SP."""
    import torch

    from verl_lite.config import load_config, to_dataclass
    from verl_lite.trainer.data_parallel import update_meta
    from verl_lite.trainer.worker_group import WorkerGroup
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    train = _train_batch()
    results = {}
    for ranks in (1, 2):
        cfg = load_config(["trainer.device=cpu", f"trainer.n_gpus_per_node={ranks}",
                           "actor_rollout_ref.model.path=tiny-qwen3",
                           "actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                           "actor_rollout_ref.actor.use_dynamic_bsz=True",
                           "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=18",
                           f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={ranks}",
                           f"trainer.default_local_dir={tmp_path / str(ranks)}"])
        wg = WorkerGroup(ActorRolloutRefWorker, f"actor_sp{ranks}", to_dataclass(cfg), ranks, "cpu", use_ray=True,
                         threads=1, call_timeout_s=300)
        assert wg.dp_size == 1 and wg.leaders == [(0, 0)]
        metrics = wg.call_shards("update_actor", [train], update_meta(train, 2, 1))
        assert len(metrics) == 1  # one result per data-parallel rank
        results[ranks] = metrics[0], wg.call_all("actor_state_dict")
        wg.shutdown()
    (m1, [w1]), (m2, (w2, w2_peer)) = results[1], results[2]
    assert m1["actor/pg_loss"] == pytest.approx(m2["actor/pg_loss"], abs=1e-6)
    assert any(abs(x) > 1e-4 for x in m1["actor/pg_loss"]), "a zero loss would not tell the layouts apart"
    # Adam's step hardly changes with the gradient's scale: the norm before clipping checks the loss scaling
    assert m1["actor/grad_norm"] == pytest.approx(m2["actor/grad_norm"], rel=1e-4)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], atol=1e-4, rtol=1e-4, msg=lambda m, k=k: f"{k}: {m}")
        assert torch.equal(w2[k], w2_peer[k])  # both SP ranks hold the same (FSDP-gathered) weights


def test_the_megatron_engine_refuses_the_key_when_it_builds():
    from verl_lite.config.schema import ActorConfig, ModelConfig
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    engine = MegatronLMEngine(ModelConfig(path="tiny-qwen3"),
                              ActorConfig(strategy="megatron", ulysses_sequence_parallel_size=2), None, "cpu", "actor")
    with pytest.raises(ValueError, match=r"actor_rollout_ref.actor.ulysses_sequence_parallel_size=2 is not supported on "
                                         r"the megatron strategy.*use megatron.context_parallel_size=2 instead"):
        engine.initialize()
