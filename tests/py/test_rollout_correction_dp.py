"""Bypass mode's rollout_is_batch_normalize over two data-parallel ranks (gloo, the shared two-rank
world of tests/py/megatron_world.py):

- the table's two-rank cases (`bypass_dp` in tests/py/data/rollout_correction_cases.json, verl's
  `compute_policy_loss_bypass_mode` run on two gloo ranks by tools/gen_rollout_correction_cases.py):
  verl_lite's `bypass_policy_loss` with the world group on each rank's rows equals verl's loss,
  gradient and metrics on that rank;
- the Megatron engine's data-parallel group (TP=1: both ranks; TP=2: none) gives verl's per-rank result;
- a real update (`TrainWorker.update_actor` on tiny-qwen3, FSDP over the two ranks, two micro-batches
  a rank, reinforce with sequence weights normalised as in verl's run_qwen2_5_7b_fsdp.sh) against one
  rank that trains the whole batch: the same normalisation factor on both ranks and the one rank,
  the same loss, grad norm and weights after the step. Normalising each rank's micro-batch by
  itself gives other factors (checked too, so the comparison can tell the two apart).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from megatron_world import padded_batch, scenario

TABLE = json.loads((Path(__file__).parent / "data" / "rollout_correction_cases.json").read_text())
ATOL = RTOL = 1e-6
# rows of the 8-row batch on each rank: with 2 rows a micro-batch, micro-batch k of the two ranks
# together is micro-batch k (4 rows) of the one rank that trains the whole batch
RANK_ROWS = ((0, 1, 4, 5), (2, 3, 6, 7))
SETTINGS = ["algorithm.rollout_correction.bypass_mode=True", "algorithm.rollout_correction.loss_type=reinforce",
            "algorithm.rollout_correction.rollout_is=sequence", "algorithm.rollout_correction.rollout_is_threshold=2.0",
            "algorithm.rollout_correction.rollout_is_batch_normalize=True"]


def _config(ranks: int, micro: int, out: str):
    from verl_lite.config import load_config, to_dataclass

    return to_dataclass(load_config([
        "trainer.device=cpu", f"trainer.n_gpus_per_node={ranks}", "actor_rollout_ref.model.path=tiny-qwen3",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}", f"trainer.default_local_dir={out}",
        *SETTINGS]))


def _train(rank: int, world: int, out: str):
    """One bypass-mode update of the 8-row batch over `world` ranks; this rank's metrics and the weights."""
    from verl_lite.trainer.async_workers import TrainWorker
    from verl_lite.trainer.data_parallel import update_meta

    worker = TrainWorker(_config(world, 2 if world == 2 else 4, out), rank, world)
    worker.init_model()
    batch = padded_batch(rows=8, width=9, response=4, left_pad={0: 2, 3: 4, 5: 1, 6: 3}, ended_early=(1, 6), seed=5)
    batch["temperature"] = 1.0
    current = worker.compute_log_prob(batch)["old_log_probs"]  # every rank the whole batch (a collective)
    g = torch.Generator().manual_seed(13)
    mask = batch["response_mask"].float()
    # the rollout's log-probs: the current policy's, moved per token, so the sequence weights spread
    batch["old_log_probs"] = (current + 0.3 * torch.randn(mask.shape, generator=g)) * mask
    batch["advantages"] = torch.randn(8, 1, generator=g).expand(8, 4) * mask
    meta = update_meta(batch, 1, world)
    rows = list(RANK_ROWS[rank]) if world == 2 else list(range(8))
    shard = {k: (v[rows] if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    metrics = worker.update_actor(shard, meta)
    local = []  # each of this rank's micro-batches normalised by itself, as a rank that ignored the others would
    if world == 2:
        from verl_lite.trainer.algos import rollout_correction

        for k in range(2):
            part = slice(2 * k, 2 * k + 2)
            _, m = rollout_correction.is_weights(current[rows][part] - shard["old_log_probs"][part],
                                                 shard["response_mask"][part].float(), "sequence", 2.0, True)
            local.append(m["rollout_is_batch_norm_factor"])
    return metrics, worker.actor_state_dict(), worker.actor.data_parallel_group() is not None, local


def _megatron_groups(rank: int):
    """The Megatron engine's group at TP=1 (data parallel over both ranks: the table's first two-rank case
    through it) and at TP=2 (one data-parallel rank: no group, the local mean is the batch's)."""
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    engine = object.__new__(MegatronLMEngine)  # the group needs megatron's parallel state only
    mpu.initialize_model_parallel(tensor_model_parallel_size=1)
    group = engine.data_parallel_group()
    out = {"tp1_grouped": group is not None, "dp_size": torch.distributed.get_world_size(group),
           "case0": _table_cases(rank, group, first=1)[0]}
    mpu.destroy_model_parallel()
    mpu.initialize_model_parallel(tensor_model_parallel_size=2)
    out["tp2_group"] = engine.data_parallel_group()
    mpu.destroy_model_parallel()
    return out


def _table_cases(rank: int, group, first=None):
    from types import SimpleNamespace

    from verl_lite.trainer.algos import rollout_correction
    from verl_lite.trainer.algos.policy_losses import PolicyLossInput

    out = []
    for case in TABLE["bypass_dp"][:first]:
        inp = TABLE["inputs"][case["inputs"]]
        rows = case["rows"][rank]
        current, rollout, mask = (torch.tensor(inp[k], dtype=torch.float32)[rows]
                                  for k in ("old_log_prob", "rollout_log_prob", "response_mask"))
        adv = torch.tensor(case["advantages"], dtype=torch.float32)[rows]
        rc = SimpleNamespace(**{"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_rs": None,
                                "rollout_rs_threshold": None, "rollout_is_batch_normalize": False,
                                "loss_type": "ppo_clip", **case["bypass"], "bypass_mode": True})
        log_prob = current.clone().requires_grad_(True)
        pg, metrics = rollout_correction.bypass_policy_loss(
            rc, PolicyLossInput(rollout, log_prob, adv.contiguous(), mask, 0.2, 0.28, 3.0, case["loss_agg_mode"],
                                global_batch_size=case["global_batch_size"],
                                global_token_num=case["global_token_num"]),
            group=group)
        (pg["pg_loss"] * case["dp_size"]).backward()  # the worker's scaling: FSDP averages over the ranks
        ours = {f"actor/{k}": v.item() for k, v in pg.items() if k != "pg_loss"}
        ours.update(metrics)
        out.append({"pg_loss": pg["pg_loss"].item() * case["dp_size"], "grad": log_prob.grad, "metrics": ours})
    return out


@scenario
def _scenario(rank, rec, out_dir):
    rec["table"] = _table_cases(rank, torch.distributed.group.WORLD)
    rec["train"] = _train(rank, 2, str(Path(out_dir) / "ckpt"))
    rec["megatron"] = _megatron_groups(rank)


@pytest.fixture(scope="module")
def ranks(megatron_world):
    return megatron_world(__name__)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    return _train(0, 1, str(tmp_path_factory.mktemp("rc_one_rank")))


def close(ours, theirs, what):
    ours, theirs = torch.as_tensor(ours, dtype=torch.float32), torch.as_tensor(theirs, dtype=torch.float32)
    assert ours.shape == theirs.shape, what
    worst = ((ours - theirs).abs() - RTOL * theirs.abs()).max().item()
    assert worst <= ATOL, f"{what}: differs from verl by {worst:.3g}\nours {ours}\nverl {theirs}"


def test_table_has_two_rank_cases_of_token_and_sequence_weights_and_both_losses():
    cases = TABLE["bypass_dp"]
    assert {c["bypass"]["rollout_is"] for c in cases} == {"token", "sequence"}
    assert {c["bypass"]["loss_type"] for c in cases} == {"ppo_clip", "reinforce"}
    # verl's factor is one mean over both ranks' weights: the same on each rank
    for c in cases:
        factors = [r["metrics"]["rollout_corr/rollout_is_batch_norm_factor"] for r in c["ranks"]]
        assert factors[0] == factors[1]


@pytest.mark.parametrize("i", range(len(TABLE["bypass_dp"])))
def test_two_rank_bypass_loss_equals_verls_on_each_rank(ranks, i):
    case = TABLE["bypass_dp"][i]
    for rank, rec in enumerate(ranks):
        ours, theirs = rec["table"][i], case["ranks"][rank]
        tag = f"rank {rank} {case['bypass']} {case['loss_agg_mode']}"
        close(ours["pg_loss"], theirs["pg_loss"], f"pg_loss {tag}")
        close(ours["grad"], theirs["grad"], f"grad {tag}")
        assert sorted(ours["metrics"]) == sorted(theirs["metrics"]), f"metric names {tag}"
        for k, v in theirs["metrics"].items():
            if math.isnan(v):
                assert math.isnan(ours["metrics"][k]), f"{k} {tag}"
            else:
                close(ours["metrics"][k], v, f"{k} {tag}")


def test_an_update_on_two_ranks_normalises_as_one_rank_over_the_whole_batch(ranks, one_rank):
    (m0, w0, grouped0, local0), (m1, w1, grouped1, local1) = (rec["train"] for rec in ranks)
    single, w_single, grouped_single, _ = one_rank
    assert grouped0 and grouped1 and not grouped_single
    key = "rollout_corr/rollout_is_batch_norm_factor"
    factor = single[key][0]  # the mean over the update's two micro-batches, each one 4-row micro-batch
    assert m0[key][0] == pytest.approx(factor, abs=1e-5) and m1[key][0] == pytest.approx(factor, abs=1e-5)
    # a rank normalising its own micro-batches alone gets other factors
    assert abs(sum(local0) / 2 - factor) > 1e-3 and abs(sum(local1) / 2 - factor) > 1e-3
    assert m0["actor/pg_loss"][0] + m1["actor/pg_loss"][0] == pytest.approx(single["actor/pg_loss"][0], abs=1e-5)
    assert abs(single["actor/pg_loss"][0]) > 1e-3
    assert m0["actor/grad_norm"][0] == pytest.approx(single["actor/grad_norm"][0], rel=1e-4)
    for k in w_single:
        torch.testing.assert_close(w0[k], w_single[k], atol=1e-5, rtol=1e-4, msg=lambda m, k=k: f"{k}: {m}")
        assert torch.equal(w0[k], w1[k])


def test_the_megatron_engine_normalises_over_its_data_parallel_group(ranks):
    case = TABLE["bypass_dp"][0]
    for rank, rec in enumerate(ranks):
        got = rec["megatron"]
        assert got["tp1_grouped"] and got["dp_size"] == 2 and got["tp2_group"] is None  # TP peers hold the same rows: no reduction
        close(got["case0"]["pg_loss"], case["ranks"][rank]["pg_loss"], f"rank {rank} pg_loss")
        close(got["case0"]["metrics"]["rollout_corr/rollout_is_batch_norm_factor"],
              case["ranks"][rank]["metrics"]["rollout_corr/rollout_is_batch_norm_factor"], f"rank {rank} factor")
