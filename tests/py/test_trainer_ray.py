"""The worker calls a step makes (in-process), and the Ray path: worker groups as Ray actors, data
parallelism over two CPU ranks (FSDP2 on gloo)."""

from __future__ import annotations


import pytest
import torch

from verl_lite.config import load_config


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def make_cfg(data_dir, out_dir, devices: int, *extra):
    return load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.optim.lr=1e-2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
        "trainer.device=cpu", f"trainer.n_gpus_per_node={devices}", "trainer.total_training_steps=2",
        f"trainer.default_local_dir={out_dir}", "trainer.logger=[jsonl]", "trainer.plot_rewards=false", *extra,
    ])


def fixed_batch(cfg):
    """A generated batch with made-up advantages: the same input for both layouts."""
    from omegaconf import OmegaConf

    from verl_lite.data.dataset import PromptDataset
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.batch import left_pad
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


TRAIN_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "advantages", "temperature")


def new_worker(cfg):
    """A worker given the typed config, as the driver passes it (fixed_batch's worker gets a plain dict)."""
    from verl_lite.config import to_dataclass
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    return ActorRolloutRefWorker(to_dataclass(cfg), 0, 1)


def test_the_on_policy_update_equals_the_update_with_recomputed_old_log_probs(data_dir, tmp_path):
    """One mini-batch, one epoch: the old log-probs the trainer no longer computes are the update's own."""
    from verl_lite.trainer.data_parallel import update_meta

    cfg = make_cfg(data_dir, tmp_path, 1, "actor_rollout_ref.actor.ppo_mini_batch_size=4")
    batch = fixed_batch(cfg)
    train = {k: batch[k] for k in TRAIN_KEYS}
    meta = update_meta(train, 1, 1)
    recomputed, on_policy = new_worker(cfg), new_worker(cfg)
    before = {k: v.clone() for k, v in recomputed.actor_state_dict().items()}
    m1 = recomputed.update_actor(dict(train, old_log_probs=batch["old_log_probs"]), meta)
    m2 = on_policy.update_actor(train, dict(meta, on_policy=True))
    assert m1["actor/pg_loss"] == pytest.approx(m2["actor/pg_loss"], abs=1e-6)
    assert abs(m1["actor/pg_loss"][0]) > 1e-4, "a zero loss would not tell the two updates apart"
    assert m2["actor/entropy"][0] > 0  # measured by the update when no scoring pass ran
    w1, w2 = recomputed.actor_state_dict(), on_policy.actor_state_dict()
    assert any(not torch.equal(before[k], w1[k]) for k in w1), "the update did not move the weights"
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-6, rtol=1e-5, msg=lambda m, k=k: f"weights differ after the update: {k}: {m}")


def test_an_on_policy_update_over_several_mini_batches_is_refused(data_dir, tmp_path):
    from verl_lite.trainer.data_parallel import update_meta

    cfg = make_cfg(data_dir, tmp_path, 1)  # 4 prompts, mini-batch 2: two updates from one generation
    batch = fixed_batch(cfg)
    train = {k: batch[k] for k in TRAIN_KEYS}
    with pytest.raises(ValueError, match="on_policy needs one mini-batch and ppo_epochs=1, got 2 mini-batches"):
        new_worker(cfg).update_actor(train, dict(update_meta(train, 2, 1), on_policy=True))


def test_generate_with_log_probs_scores_the_responses_as_compute_log_prob_does(data_dir, tmp_path):
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.batch import left_pad

    cfg = make_cfg(data_dir, tmp_path, 1, "actor_rollout_ref.actor.use_kl_loss=True")
    worker = new_worker(cfg)
    tok = load_tokenizer("tiny-qwen3_5")
    prompts = left_pad([[1, 5, 6, 7], [1, 8, 9]] * 4, tok.pad_token_id)
    sampling = {"temperature": 0.7, "top_k": -1, "top_p": 1.0, "do_sample": True}
    gen = worker.generate_sequences(prompts, 3, sampling, log_probs=True, ref_log_probs=True)
    assert set(gen["timing_s"]) == {"gen", "old_log_prob", "gen_cpu"} and gen["timing_s"]["old_log_prob"] > 0
    assert 0 < gen["timing_s"]["gen_cpu"]  # the generating thread's CPU seconds
    scored = dict(gen, temperature=0.7)
    torch.testing.assert_close(gen["old_log_probs"], worker.compute_log_prob(scored)["old_log_probs"])
    torch.testing.assert_close(gen["entropy"], worker.compute_log_prob(scored)["entropy"])
    torch.testing.assert_close(gen["ref_log_prob"], worker.compute_ref_log_prob(scored)["ref_log_prob"])
    plain = worker.generate_sequences(prompts, 3, sampling)
    assert "old_log_probs" not in plain and plain["timing_s"]["old_log_prob"] == 0.0


def test_update_actor_pushes_the_new_weights_to_the_rollout_when_asked(data_dir, tmp_path):
    from verl_lite.trainer.data_parallel import update_meta

    cfg = make_cfg(data_dir, tmp_path, 1)
    batch = fixed_batch(cfg)
    train = {k: batch[k] for k in TRAIN_KEYS + ("old_log_probs",)}
    worker = new_worker(cfg)
    rollout_before = {k: v.clone() for k, v in worker.rollout.model.state_dict().items()}
    worker.update_actor(train, update_meta(train, 2, 1))  # no version: the rollout keeps its weights
    assert all(torch.equal(rollout_before[k], v) for k, v in worker.rollout.model.state_dict().items())
    worker.update_actor(train, dict(update_meta(train, 2, 1), sync_weights_version=7))
    actor = worker.actor_state_dict()
    rollout = worker.rollout.model.state_dict()
    assert worker.rollout.weight_version == worker.weight_version == 7
    for k, v in actor.items():
        assert torch.equal(rollout[k], v), f"rollout tensor {k} is not the actor's after the sync"


def test_dp2_over_two_ray_workers_gives_the_dp1_loss_and_weights_on_the_same_global_batch(ray_cluster, data_dir, tmp_path):
    from verl_lite.config import to_dataclass
    from verl_lite.trainer.data_parallel import balanced_order, dp_shards, update_meta
    from verl_lite.trainer.worker_group import WorkerGroup
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    cfg1, cfg2 = make_cfg(data_dir, tmp_path / "a", 1), make_cfg(data_dir, tmp_path / "b", 2)
    batch = fixed_batch(cfg1)
    train = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "responses",
                                                     "response_mask", "old_log_probs", "advantages", "temperature")}
    num_mini = 2  # train_batch_size 4 prompts / ppo_mini_batch_size 2
    results = {}
    for dp, cfg in ((1, cfg1), (2, cfg2)):
        wg = WorkerGroup(ActorRolloutRefWorker, f"actor_dp{dp}", to_dataclass(cfg), dp, "cpu",  # typed across Ray
                         use_ray=True, threads=1, call_timeout_s=120)
        assert wg.dp_size == dp
        # DP=2 with trainer.balance_batch (the default): rows regrouped within each mini-batch
        balance = {}
        metrics = wg.call_shards("update_actor", dp_shards(train, num_mini, dp, balance=True, metrics=balance),
                                 update_meta(train, num_mini, dp))
        if dp == 2:
            assert balanced_order(train["attention_mask"], num_mini, dp) != list(range(16)), \
                "balancing left the rows in place: the test would not catch a changed update"
            assert balance["global_seqlen/balanced_max"] - balance["global_seqlen/balanced_min"] <= \
                balance["global_seqlen/minmax_diff"]
        weights = wg.call_all("actor_state_dict")[0]
        results[dp] = (metrics, weights)
        wg.shutdown()
    (m1, w1), (m2, w2) = results[1], results[2]
    loss1 = m1[0]["actor/pg_loss"]
    loss2 = [a + b for a, b in zip(m2[0]["actor/pg_loss"], m2[1]["actor/pg_loss"])]  # parts add over ranks
    assert loss1 == pytest.approx(loss2, abs=1e-6)
    assert any(abs(x) > 1e-4 for x in loss1), "the loss is trivially zero: the test would not catch a mismatch"
    # Balancing changes the order in which rows add into the gradient: Adam turns that rounding into
    # up to ~2e-5 on a weight whose gradient is near zero; a wrong row set moves weights by ~lr (1e-2).
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], atol=1e-4, rtol=1e-4, msg=lambda m, k=k: f"weights differ after the update: {k}: {m}")


def test_the_default_ray_path_trains_and_checkpoints(ray_cluster, data_dir, tmp_path):
    from verl_lite.trainer.run import run

    out = tmp_path / "run"
    cfg = make_cfg(data_dir, out, 1, "trainer.save_freq=2")
    assert cfg.trainer.ray is True
    assert run(cfg) == 0
    assert (out / "global_step_2" / "manifest.json").is_file()


LOCAL_PROBE = """
import json, os, sys, ray
from verl_lite.config import load_config
from verl_lite.trainer.run import _end_ray, _init_ray
assert _init_ray(load_config(["trainer.device=cpu", "ray_init.temp_dir=" + sys.argv[1]]), "cpu", 1)
print(json.dumps({
    "nice": ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote()),
    "nodes": [n["NodeManagerAddress"] for n in ray.nodes()],
    "auth_during": os.environ.get("RAY_AUTH_MODE"),
    "inline_in_worker": ray.get(ray.remote(num_cpus=0)(lambda: os.environ.get("RAY_max_direct_call_object_size")).remote()),
}))
_end_ray(True)
print(json.dumps({"env_after": {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_worker_niceness",
                                                                 "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                                                                 "RAY_max_direct_call_object_size")}}))
"""


def _probe(script: str, *args: str, env: dict, timeout: float = 120):
    import os
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items()
            if k not in ("RAY_AUTH_MODE", "RAY_worker_niceness", "RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                         "RAY_max_direct_call_object_size")}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env={**base, **env}, timeout=timeout)


@pytest.fixture
def short_tmp():
    import shutil
    import tempfile

    temp = tempfile.mkdtemp(prefix="vl_ray_")  # short: Ray's socket paths must stay under 108 bytes
    yield temp
    shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize("preset, expected", [(None, 0), ("7", 7)])
def test_a_local_cluster_runs_its_workers_at_normal_priority_unless_told_otherwise(preset, expected, short_tmp):
    import json

    out = _probe(LOCAL_PROBE, short_tmp, env={"RAY_AUTH_MODE": "disabled",
                                              **({"RAY_worker_niceness": preset} if preset else {})})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[0])["nice"] == expected


def test_a_local_cluster_started_for_the_job_is_quiet_loopback_only_and_leaves_the_environment_as_it_was(
        short_tmp):
    import json

    out = _probe(LOCAL_PROBE, short_tmp, env={})  # RAY_AUTH_MODE unset, as for a user
    assert out.returncode == 0, out.stderr[-2000:]
    during, after = (json.loads(line) for line in out.stdout.splitlines()[:2])
    assert "Token authentication" not in out.stderr, out.stderr[-2000:]
    assert during["auth_during"] == "disabled"
    assert during["nodes"] == ["127.0.0.1"]  # Ray's loopback mode: its servers listen on 127.0.0.1
    assert during["inline_in_worker"] == "1048576"  # the main job's batches travel inside the calls
    assert after["env_after"] == {"RAY_AUTH_MODE": None, "RAY_worker_niceness": None,
                                  "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": None, "RAY_max_direct_call_object_size": None}


JOIN_PROBE = """
import json, os, ray
from verl_lite.config import load_config
from verl_lite.trainer.run import _end_ray, _init_ray
assert _init_ray(load_config(["trainer.device=cpu", "ray_init.num_cpus=5"]), "cpu", 1)
print(json.dumps({"cpus": ray.cluster_resources().get("CPU"), "answer": ray.get(ray.remote(lambda: 41 + 1).remote()),
                  "auth": os.environ.get("RAY_AUTH_MODE"), "nodes": [n["NodeManagerAddress"] for n in ray.nodes()]}))
_end_ray(True)
"""


def test_a_run_joins_the_cluster_that_ray_address_names_and_keeps_that_clusters_settings(short_tmp):
    import json
    import os
    import re
    import subprocess
    import sys

    # --block keeps the head in this Popen: ending it stops that cluster alone (`ray stop` would stop
    # every Ray instance on the machine).
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port=0",
                             "--num-cpus=1", f"--temp-dir={short_tmp}", "--include-dashboard=false",
                             "--disable-usage-stats"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        seen = []
        for line in head.stdout:  # the head prints how to join it, then blocks
            seen.append(line)
            found = re.search(r"--address='([^']+)'", line)
            if found:
                break
        assert found, "".join(seen)[-2000:]
        address = found.group(1)
        out = _probe(JOIN_PROBE, env={"RAY_ADDRESS": address}, timeout=90)
        assert out.returncode == 0, out.stderr[-2000:]
        rec = json.loads(out.stdout.splitlines()[0])
        # the head's 1 CPU, not ray_init.num_cpus (Ray refuses num_cpus when joining); auth left to the cluster
        assert rec == {"cpus": 1.0, "answer": 42, "auth": None, "nodes": [address.split(":")[0]]}
    finally:
        head.terminate()
        head.wait(timeout=60)
