"""The Ray path: worker groups as Ray actors, data parallelism over two CPU ranks (FSDP2 on gloo)."""

from __future__ import annotations


import pytest
import torch

from verl_lite.config import load_config
from verl_lite.data.synthetic import generate


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_data_ray")
    generate(str(d), task="copy", digits=3, n_train=64, n_val=8, seed=0)
    return d


def make_cfg(data_dir, out_dir, devices: int, *extra):
    return load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "actor_rollout_ref.rollout.n=4",
        "trainer.device=cpu", f"trainer.n_gpus_per_node={devices}", "trainer.total_training_steps=2",
        f"trainer.default_local_dir={out_dir}", "trainer.logger=[jsonl]", "trainer.plot_rewards=false", *extra,
    ])


def fixed_batch(cfg):
    """A generated batch with made-up advantages: the same input for both layouts."""
    from omegaconf import OmegaConf

    from verl_lite.data.dataset import PromptDataset
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.trainer.ppo_trainer import left_pad
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(OmegaConf.to_container(cfg, resolve=True), 0, 1)
    tok = load_tokenizer("tiny-qwen3_5")
    ds = PromptDataset(cfg.data.train_files, tok, 8)
    prompts = left_pad([e.prompt_ids for e in ds.examples[:4] for _ in range(4)], tok.pad_token_id)
    torch.manual_seed(0)
    gen = worker.generate_sequences(prompts, 3, {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "do_sample": True})
    gen["old_log_probs"] = worker.compute_log_prob(gen)["old_log_probs"]
    gen["advantages"] = torch.randn(gen["responses"].shape) * gen["response_mask"]
    gen["temperature"] = 1.0
    return gen


def test_dp2_over_two_ray_workers_gives_the_dp1_loss_and_weights_on_the_same_global_batch(ray_cluster, data_dir, tmp_path):
    from omegaconf import OmegaConf

    from verl_lite.trainer.ppo_trainer import dp_shards, update_meta
    from verl_lite.trainer.worker_group import WorkerGroup
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    cfg1, cfg2 = make_cfg(data_dir, tmp_path / "a", 1), make_cfg(data_dir, tmp_path / "b", 2)
    batch = fixed_batch(cfg1)
    train = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "responses",
                                                     "response_mask", "old_log_probs", "advantages", "temperature")}
    num_mini = 2  # train_batch_size 4 prompts / ppo_mini_batch_size 2
    results = {}
    for dp, cfg in ((1, cfg1), (2, cfg2)):
        wg = WorkerGroup(ActorRolloutRefWorker, f"actor_dp{dp}", OmegaConf.to_container(cfg, resolve=True), dp, "cpu",
                         use_ray=True, threads=1, call_timeout_s=120)
        assert wg.dp_size == dp
        metrics = wg.call_shards("update_actor", dp_shards(train, num_mini, dp), update_meta(train, num_mini, dp))
        weights = wg.call_all("actor_state_dict")[0]
        results[dp] = (metrics, weights)
        wg.shutdown()
    (m1, w1), (m2, w2) = results[1], results[2]
    loss1 = m1[0]["actor/pg_loss"]
    loss2 = [a + b for a, b in zip(m2[0]["actor/pg_loss"], m2[1]["actor/pg_loss"])]  # parts add over ranks
    assert loss1 == pytest.approx(loss2, abs=1e-6)
    assert any(abs(x) > 1e-4 for x in loss1), "the loss is trivially zero: the test would not catch a mismatch"
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=2e-5, rtol=1e-4, msg=f"weights differ after the update: {k}")


def test_the_default_ray_path_trains_and_checkpoints(ray_cluster, data_dir, tmp_path):
    from verl_lite.trainer.run import run

    out = tmp_path / "run"
    cfg = make_cfg(data_dir, out, 1, "trainer.save_freq=2")
    assert cfg.trainer.ray is True
    assert run(cfg) == 0
    assert (out / "global_step_2" / "manifest.json").is_file()
