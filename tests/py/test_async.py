"""Fully-async parts without Ray: the preflight rules, the bounded queue, group bookkeeping, the
rollout replica's cut-and-resume at a sync, and the train worker's CPU snapshots (fsdp).

The Ray runs (learning, faults) are in test_async_ray.py; the import order on the npu key with
the MindSpeed double in test_async_lazy.py.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from verl_lite.config import load_config, to_dataclass

ASYNC = ["async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
         "actor_rollout_ref.rollout.n_gpus_per_node=1"]


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def tiny_cfg(data_dir, *extra):
    return load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "trainer.device=cpu",
        *ASYNC, *extra,
    ])


# ---------------------------------------------------------------------------- preflight rules


def test_an_async_config_with_both_pools_set_has_no_problems(data_dir):
    from verl_lite.decisions.async_pools import max_required_samples, step_prompts
    from verl_lite.preflight.fully_async import fully_async_problems

    cfg = tiny_cfg(data_dir, "async_training.trigger_parameter_sync_step=4", "async_training.staleness_threshold=0.5")
    assert fully_async_problems(cfg) == []
    # a version may start its 4 steps' groups plus half as many again
    assert max_required_samples(cfg) == int(step_prompts(cfg) * 1.5 * 4)


def test_async_rules_name_each_bad_setting_and_the_fix(data_dir):
    from verl_lite.preflight.fully_async import fully_async_problems

    cfg = tiny_cfg(data_dir, "actor_rollout_ref.rollout.n_gpus_per_node=0", "trainer.ray=false",
                   "async_training.require_batches=2", "algorithm.adv_estimator=gae",
                   "async_training.trigger_parameter_sync_step=0", "async_training.queue_timeout_s=0")
    text = "\n".join(fully_async_problems(cfg))
    assert "needs a rollout pool of its own" in text and "n_gpus_per_node=0" in text
    assert "set trainer.ray=true" in text
    assert "require_batches=2 with data.train_batch_size=" in text and "set data.train_batch_size=0" in text
    assert "a critic" in text and "adv_estimator=gae" in text
    assert "trigger_parameter_sync_step=0 must be an integer >= 1" in text
    assert "queue_timeout_s=0" in text
    tp = tiny_cfg(data_dir, "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                  "actor_rollout_ref.rollout.n_gpus_per_node=2", "trainer.n_gpus_per_node=2")
    assert any("runs one replica per device, set it to 1" in p for p in fully_async_problems(tp))
    assert fully_async_problems(tiny_cfg(data_dir, "async_training.enable=False", "trainer.ray=false")) == []


# ---------------------------------------------------------------------------- the bounded queue


def test_the_queue_counts_chunks_in_generation_against_its_budget_and_deals_each_prompt_once():
    from verl_lite.trainer.async_buffer import ChunkBuffer

    async def scenario():
        buf = ChunkBuffer(n_prompts=8, batch_size=4, seed=1, shuffle=True, capacity_groups=4, chunk_groups=2)
        a = await buf.reserve(0.1)
        b = await buf.reserve(0.1)
        assert await buf.reserve(0.05) is None  # two chunks in generation fill the 4 groups
        await buf.put({"name": "a"}, 2)
        assert await buf.reserve(0.05) is None  # held + generating still fill it
        got = await buf.get(0.1)
        assert got["chunk"] == {"name": "a"} and got["depth_groups"] == 0
        assert await buf.reserve(0.05) is None  # taking a chunk does not renew this version's budget
        assert await buf.reset_staleness(0) == 2  # a sync: chunk b, in flight, was started with old weights
        c = await buf.reserve(0.1)
        await buf.put({"name": "b"}, 2)
        d = buf.depth()
        assert (d["chunks"], d["groups"], d["reserved"]) == (1, 2, 2)
        assert await buf.get(0.05) is not None and await buf.get(0.05) is None
        first_epoch = a["indices"] + b["indices"] + c["indices"]
        assert await buf.reset_staleness(0) == 2  # chunk c is still in flight
        e = await buf.reserve(0.1)
        assert sorted(first_epoch + e["indices"]) == list(range(8))  # one epoch, no prompt twice
        waiter = asyncio.ensure_future(buf.reserve(5.0))
        await asyncio.sleep(0.01)
        await buf.close()
        assert await waiter == {"closed": True}
        return [a["serial"], b["serial"], c["serial"], e["serial"]]

    assert asyncio.run(scenario()) == [1, 2, 3, 4]


def test_groups_keep_their_oldest_version_and_merged_batches_lose_only_shared_left_padding():
    from verl_lite.trainer.async_run import merge_groups, split_groups

    def chunk(prompt_cols):
        width, R = 5, 2
        attn_prompt = torch.zeros(4, width, dtype=torch.long)
        attn_prompt[:, width - prompt_cols:] = 1
        attn = torch.cat([attn_prompt, torch.ones(4, R, dtype=torch.long)], 1)
        return {"prompts": torch.arange(4 * width).view(4, width), "input_ids": torch.arange(4 * 7).view(4, 7),
                "attention_mask": attn, "position_ids": attn.cumsum(1), "responses": torch.ones(4, R),
                "response_mask": torch.ones(4, R), "uid": list("aabb"),
                "version_min": torch.tensor([3, 2, 5, 5]), "version_max": torch.tensor([3, 3, 5, 5])}

    groups = split_groups(chunk(2), n=2) + split_groups(chunk(3), n=2)
    assert [g["v_min"] for g in groups] == [2, 5, 2, 5]
    assert [g["resumed"] for g in groups] == [1, 0, 1, 0]
    merged = merge_groups(groups)
    assert merged["input_ids"].shape == (8, 5)  # 2 of 5 prompt columns were padding in every row
    assert merged["prompts"].shape == (8, 3) and merged["uid"] == list("aabbaabb")
    assert torch.equal(merged["input_ids"][0], torch.arange(2, 7))


# ---------------------------------------------------------------------------- the rollout replica


def _forced_weights(worker):
    """Weights whose final norm outputs zeros (Qwen3.5's norm scales by 1 + weight): every logit is
    0, so greedy decoding always picks the same token."""
    weights = {k: v.clone() for k, v in worker.rollout.model.state_dict().items()}
    weights["model.norm.weight"].fill_(-1.0)
    return weights


def _replica(data_dir, *extra):
    from omegaconf import OmegaConf

    from verl_lite.data.dataset import PromptDataset
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.trainer.async_workers import RolloutWorker

    cfg = tiny_cfg(data_dir, "actor_rollout_ref.rollout.do_sample=False", *extra)
    examples = PromptDataset(cfg.data.train_files, load_tokenizer("tiny-qwen3_5"), 8).examples
    worker = RolloutWorker(OmegaConf.to_container(cfg, resolve=True), 0, "cpu", 1, examples)
    v0 = {k: v.clone() for k, v in worker.rollout.model.state_dict().items()}
    worker.update_weights(v0, 0)
    return worker, v0


def _push_after_first_segment(worker, weights, version):
    plain = worker.rollout.generate
    calls = []

    def generate(prompts, length, sampling):
        out = plain(prompts, length, sampling)
        calls.append(length)
        if len(calls) == 1:
            worker.update_weights(weights, version)  # arrives while the responses are in flight
        return out

    worker.rollout.generate = generate
    return calls


def test_a_rollout_cut_at_a_sync_resumes_from_its_partial_response_under_the_new_weights(data_dir):
    worker, _ = _replica(data_dir, "async_training.rollout_segment_tokens=1", "async_training.stale_policy=reweight")
    uncut = worker.generate_chunk([0, 1], serial=1)  # version 0 all along (greedy)
    assert worker.version == 0 and uncut["version_max"].eq(0).all()
    calls = _push_after_first_segment(worker, _forced_weights(worker), 1)
    chunk = worker.generate_chunk([0, 1], serial=2)
    assert calls == [1, 1, 1, 1]  # 4 response tokens, one segment each
    assert worker.version == 1 and worker.stats_["resumed"] == 4
    assert chunk["version_min"].eq(0).all() and chunk["version_max"].eq(1).all()
    forced = int(worker.generate_chunk([2], serial=3)["responses"][0, 0])  # what version 1 generates
    first, rest = chunk["responses"][:, 0], chunk["responses"][:, 1:]
    assert torch.equal(first, uncut["responses"][:, 0])  # generated before the cut, by version 0
    assert uncut["responses"][:, 1:].ne(forced).any()  # version 0 alone would not give the forced tokens
    assert rest.eq(forced).all() and chunk["response_mask"].eq(1).all()  # resumed under version 1
    # Behaviour log-probs: under version 1 every logit is 0, so each resumed token has log(1/48).
    assert torch.allclose(chunk["rollout_log_probs"][:, 1:], torch.full((4, 3), -torch.log(torch.tensor(48.0))))
    assert chunk["uid"] == ["0/2", "0/2", "1/2", "1/2"] and chunk["token_level_scores"].shape == (4, 4)


def test_without_partial_rollout_new_weights_wait_until_the_chunk_in_flight_is_complete(data_dir):
    worker, _ = _replica(data_dir, "async_training.rollout_segment_tokens=1", "async_training.partial_rollout=False")
    uncut = worker.generate_chunk([0, 1], serial=1)
    _push_after_first_segment(worker, _forced_weights(worker), 1)
    chunk = worker.generate_chunk([0, 1], serial=2)
    assert worker.version == 0 and worker.stats_["resumed"] == 0
    assert torch.equal(chunk["responses"], uncut["responses"]) and chunk["version_max"].eq(0).all()
    later = worker.generate_chunk([2], serial=3)  # the parked weights load before the next chunk
    assert worker.version == 1 and later["version_min"].eq(1).all()
    assert later["responses"].eq(later["responses"][0, 0]).all()  # the forced token only


# ---------------------------------------------------------------------------- train worker snapshots


def _lm_batch(B=4, T=8, R=3):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 48, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": torch.arange(T).expand(B, T),
            "responses": ids[:, -R:], "response_mask": mask[:, -R:], "temperature": 1.0}


def test_the_fsdp_train_worker_computes_old_log_probs_from_the_published_snapshot_and_keeps_its_own_weights(data_dir):
    from omegaconf import OmegaConf

    from verl_lite.trainer.async_workers import TrainWorker

    cfg = tiny_cfg(data_dir)
    worker = TrainWorker(OmegaConf.to_container(cfg, resolve=True), 0, 1)
    assert worker.actor is None and worker.cfg is None  # construction builds nothing
    assert worker.ready()
    batch = _lm_batch()
    published = worker.compute_log_prob(batch)["old_log_probs"]
    worker.save_model_to_cpu("published")
    with torch.no_grad():
        for p in worker.actor.module.parameters():
            p.add_(0.05 * torch.randn_like(p))  # the trainer's weights move on
    current = worker.compute_log_prob(batch)["old_log_probs"]
    assert not torch.allclose(current, published)
    assert torch.equal(worker.compute_log_prob_from(batch, "published")["old_log_probs"], published)
    assert torch.equal(worker.compute_log_prob(batch)["old_log_probs"], current)  # swapped back
    assert set(worker.cpu_models) == {"published"}
    with pytest.raises(KeyError, match="no CPU snapshot 'v7'"):
        worker.restore_model_from_cpu("v7")


def test_fully_async_with_a_strategy_without_cpu_snapshots_names_the_strategy_and_the_fix(data_dir):
    from verl_lite.engine.base import BaseEngine
    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.trainer.async_workers import TrainWorker

    class EngineWithoutSnapshots(TorchLMEngine):
        """An engine of another backend: BaseEngine's snapshot methods, which refuse."""

        snapshot_to_cpu = BaseEngine.snapshot_to_cpu
        restore_from_cpu = BaseEngine.restore_from_cpu

    worker = TrainWorker(to_dataclass(tiny_cfg(data_dir)), 0, 1)
    assert worker.ready()
    worker.save_model_to_cpu("published")  # the torch engine keeps snapshots
    section = worker.cfg.actor_rollout_ref
    worker.cfg.actor_rollout_ref.actor.strategy = "torchtitan"
    worker.actor = EngineWithoutSnapshots(section.model, section.actor, section.actor.optim, "cpu", "actor")
    fix = (r"strategy 'torchtitan' has no CPU snapshot support: set actor_rollout_ref\.actor\.strategy=fsdp or "
           r"megatron, or async_training\.enable=False \(EngineWithoutSnapshots keeps no CPU snapshots\)")
    with pytest.raises(ValueError, match=fix):
        worker.save_model_to_cpu("current")
    with pytest.raises(ValueError, match=fix):
        worker.restore_model_from_cpu("published")
    assert set(worker.cpu_models) == {"published"}


# ---------------------------------------------------------------------------- the Ascend example


def test_the_ascend_fully_async_example_dry_runs_and_passes_the_preflight_check_on_a_cpu_box(tmp_path):
    import os
    import shlex
    import subprocess
    import sys

    from verl_lite.decisions.layout import rollout_replicas, train_world
    from verl_lite.preflight.fully_async import fully_async_problems

    script = "examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh"
    env = dict(os.environ, HOME=str(tmp_path), PYTHON=sys.executable)
    dry = subprocess.run(["bash", script], env=dict(env, DRY_RUN="1"), capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    words = shlex.split(dry.stdout.replace("\\\n", " "), comments=True)
    overrides = words[words.index("verl_lite.main") + 1:]
    cfg = load_config(overrides)
    assert fully_async_problems(cfg) == []
    assert (train_world(cfg), rollout_replicas(cfg)) == (8, 6)  # 2x4 training NPUs, 2x12 rollout NPUs at TP 4
    check = subprocess.run(["bash", script], env=dict(env, CHECK="1"), capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    assert "verl_lite.check: OK" in check.stdout and "MindSpeedLMEngine" in check.stdout


# ---------------------------------------------------------------------------- rollout correction in a step

CORRECTION = ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=1.5",
              "algorithm.rollout_correction.rollout_rs=token_k1",
              "algorithm.rollout_correction.rollout_rs_threshold=0.8_1.25",
              "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.calculate_log_probs=True"]


class _TrainGroup:
    """The train worker group as the step calls it: old log-probs on request, the update's shards kept."""
    dp_size = 1

    def __init__(self, old):
        self.old, self.calls, self.shards = old, [], None

    def dp_call(self, method, batch, *args):
        self.calls.append(method)
        return {"old_log_probs": self.old.clone(), "entropy": torch.zeros_like(self.old)}

    def call_shards(self, method, shards, meta):
        self.shards = shards
        return [{"actor/pg_loss": [0.0]}]


class _Pool:
    def stats(self):
        return [{"elapsed_s": 1.0, "tokens": 8, "gen_s": 0.5, "resumed": 0}]


def _correction_step(data_dir, tmp_path, *extra):
    """One AsyncTrainer.step on 4 prompt groups of 2 (ragged responses of up to 4 tokens) whose rollout
    log-probs differ from the published weights' old ones; returns (metrics, train group, rollout, old, mask)."""
    from verl_lite.trainer.async_run import AsyncTrainer, split_groups

    cfg = to_dataclass(tiny_cfg(data_dir, *CORRECTION, f"trainer.default_local_dir={tmp_path}", *extra))
    g = torch.Generator().manual_seed(4)
    B, P, R = 8, 3, 4
    mask = (torch.arange(R)[None, :] < torch.tensor([4, 2, 3, 4, 1, 4, 3, 2])[:, None]).long()
    attn = torch.cat([torch.ones(B, P, dtype=torch.long), mask], 1)
    ids = torch.randint(3, 40, (B, P + R), generator=g) * attn
    rollout = (-torch.rand(B, R, generator=g) * 2) * mask
    old = (rollout + 0.2 * torch.randn(B, R, generator=g)) * mask
    scores = torch.zeros(B, R)
    scores[torch.arange(B), mask.sum(1) - 1] = torch.rand(B, generator=g)
    chunk = {"prompts": ids[:, :P], "input_ids": ids, "attention_mask": attn, "position_ids": attn.cumsum(1) - 1,
             "responses": ids[:, P:], "response_mask": mask, "rollout_log_probs": rollout,
             "token_level_scores": scores, "uid": [f"u{i // 2}" for i in range(B)],
             "version_min": torch.zeros(B, dtype=torch.long), "version_max": torch.zeros(B, dtype=torch.long)}
    wg = _TrainGroup(old)
    trainer = AsyncTrainer(cfg, wg, _Pool(), None, None, str(tmp_path), {}, total_steps=1)
    depth = {"groups": 0, "reserved": 0, "capacity": 8, "dealt": 4, "budget": 8}
    groups = [dict(group, staleness=0) for group in split_groups(chunk, 2)]  # as collect() marks them
    trainer.collect = lambda: {"groups": groups, "dropped": 0, "wait_s": 0.0, "depth": depth}
    trainer.publish = lambda: 0.0
    return trainer.step(), wg, rollout, old, mask.float()


def test_a_fully_async_step_weighs_and_rejects_by_the_published_weights_against_the_rollouts_log_probs(
        data_dir, tmp_path):
    """verl's fully-async trainer: "rollout" = the replica's log-probs, "old" = the published weights',
    corrected before the advantages; the weights and the rejected mask reach the update."""
    metrics, wg, rollout, old, mask = _correction_step(data_dir, tmp_path)
    assert wg.calls == ["compute_log_prob"]
    log_r = old - rollout
    mean = lambda x, m: float((x * m).sum() / m.sum())  # noqa: E731
    # the formulas on this batch: TIS weights min(r, 1.5); k1 = -log r kept within [log 0.8, log 1.25]
    weights = torch.exp(log_r).clamp(max=1.5) * mask
    kept = mask * ((-log_r >= torch.log(torch.tensor(0.8))) & (-log_r <= torch.log(torch.tensor(1.25)))).float()
    assert 0 < kept.sum() < mask.sum()  # some tokens are rejected, some kept
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(mean(weights, mask), abs=1e-6)
    assert metrics["rollout_corr/kl"] == pytest.approx(mean(rollout - old, mask), abs=1e-6)
    assert metrics["rollout_corr/k3_kl"] == pytest.approx(mean(torch.exp(log_r) - log_r - 1, mask), abs=1e-6)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 - float(kept.sum() / mask.sum()),
                                                                                abs=1e-6)
    (shard,) = wg.shards
    torch.testing.assert_close(shard["rollout_is_weights"], weights)
    assert torch.equal(shard["response_mask"].float(), kept)
    torch.testing.assert_close(shard["old_log_probs"], old)
    assert torch.all(shard["advantages"][kept == 0] == 0)  # the advantages were computed on the kept tokens
    # response lengths stay the generated ones
    assert metrics["response_length/mean"] == pytest.approx(float(mask.sum(1).mean()))


def test_a_fully_async_step_in_bypass_mode_trains_against_the_rollouts_log_probs_without_scoring(data_dir, tmp_path):
    metrics, wg, rollout, old, mask = _correction_step(data_dir, tmp_path, "algorithm.rollout_correction.bypass_mode=True",
                                                       "algorithm.rollout_correction.loss_type=reinforce")
    assert wg.calls == []  # no old log-prob pass
    (shard,) = wg.shards
    assert torch.equal(shard["old_log_probs"], rollout) and "rollout_is_weights" not in shard
    assert torch.equal(shard["response_mask"].float(), mask)  # the update measures and rejects, per micro-batch
    assert not any(k.startswith("rollout_corr/") for k in metrics) and "actor/entropy" not in metrics


def test_rollout_correction_with_the_async_reweighting_of_stale_groups_is_refused(data_dir):
    from verl_lite.decisions.rollout_correction import rollout_correction_problems

    cfg = to_dataclass(tiny_cfg(data_dir, *CORRECTION))
    assert rollout_correction_problems(cfg) == []
    (problem,) = rollout_correction_problems(to_dataclass(tiny_cfg(data_dir, *CORRECTION,
                                                                   "async_training.stale_policy=reweight")))
    assert "stale_policy=reweight is not supported" in problem and "set async_training.stale_policy=drop" in problem
