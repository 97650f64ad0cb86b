"""The fully-async VL run with trainer.device=npu on a CPU box, through the MindSpeed contract double:
GRPO of the shipped tiny Qwen3-VL-MoE on the two-colour shapes task, the Megatron training pool on
the npu key (the registry gives the MindSpeed engine; its megatron internals on CPU) and the hf
rollout in its own pool, with the images from the parquet rows to the loss. The same run on
device=cpu (the plain Megatron engine) in the same Ray session gives the same metrics step for step:
the double's patched attention computes megatron's own, so nothing but the engine class may differ.

tests/py/npu_on_cpu/npu_on_cpu.py puts the double first on sys.path in every process (Ray's
worker_process_setup_hook) and logs the engine built and the double's events.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

# Ray start and two 3-step runs: 95 s measured on the shared 2-core box, 320 s under heavier load
pytestmark = [pytest.mark.megatron, pytest.mark.slow, pytest.mark.timeout(900)]
REPO_ROOT = Path(__file__).resolve().parents[2]
SHIM_DIR = Path(__file__).resolve().parent / "npu_on_cpu"
STEPS = 3

DRIVER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {shim!r})
    import npu_on_cpu
    npu_on_cpu.setup()
    import ray
    from verl_lite.config import load_config
    from verl_lite.data.synthetic_images import generate
    from verl_lite.trainer.run import _set_local_env, run

    out = {out!r}
    generate(out + "/data", "colour", n_train=32, n_val=8, seed=0, n_colours=2, min_size=56)
    _set_local_env()
    ray.init(num_cpus=4, resources={{"NPU": 2}}, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={{"worker_process_setup_hook": "npu_on_cpu.setup",
                          "env_vars": {{"PYTHONPATH": os.pathsep.join([{shim!r}, {repo!r}]),
                                       "NPU_ON_CPU_LOG": os.environ["NPU_ON_CPU_LOG"], "OMP_NUM_THREADS": "1"}}}})
    for device in ("npu", "cpu"):
        npu_on_cpu.log("run", device=device)
        lines = [f"trainer.device={{device}}", "actor_rollout_ref.model.path=tiny-qwen3_vl_moe",
                 f"data.train_files={{out}}/data/train.parquet", f"data.val_files={{out}}/data/val.parquet",
                 "data.train_batch_size=4", "data.max_prompt_length=40", "data.max_response_length=2",
                 "actor_rollout_ref.actor.optim.lr=3e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", "actor_rollout_ref.rollout.n=4",
                 "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=hf",
                 "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "trainer.total_training_steps={steps}",
                 f"trainer.default_local_dir={{out}}/{{device}}", "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
                 "trainer.save_freq=-1", "trainer.test_freq=-1", "async_training.enable=True",
                 "async_training.staleness_threshold=0", "async_training.trigger_parameter_sync_step=1",
                 "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1",
                 "actor_rollout_ref.actor.strategy=megatron",
                 "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false",
                 "actor_rollout_ref.actor.megatron.sequence_parallel=false"]
        assert run(load_config(lines)) == 0, device
    ray.shutdown()
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("vl_npu")
    log = out / "events.jsonl"
    ray_dir = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths must stay under 107 bytes
    env = dict(os.environ, NPU_ON_CPU_LOG=str(log), RAY_TMPDIR=ray_dir,
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    script = DRIVER.format(shim=str(SHIM_DIR), out=str(out), repo=str(REPO_ROOT), steps=STEPS)
    try:
        proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(REPO_ROOT), capture_output=True,
                              text=True, timeout=900)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    events, device = {"npu": [], "cpu": []}, None
    for line in log.read_text().splitlines():
        e = json.loads(line)
        device = e["device"] if e["event"] == "run" else device
        if device is not None and e["event"] != "run":
            events[device].append(e)
    metrics = {d: [json.loads(x) for x in (out / d / "metrics.jsonl").read_text().splitlines() if x.strip()]
               for d in ("npu", "cpu")}
    return events, metrics


def test_the_npu_run_trains_on_the_mindspeed_engine_imported_and_repatched_as_on_ascend(runs):
    events, metrics = runs
    npu = events["npu"]
    assert [r["step"] for r in metrics["npu"] if "critic/score/mean" in r] == list(range(1, STEPS + 1))
    actor = [e for e in npu if e["event"] == "engine" and e["role"] == "actor"]
    assert len(actor) == 1 and actor[0]["cls"] == "MindSpeedLMEngine" and actor[0]["device"] == "npu", actor
    kinds = actor[0]["kinds"]
    assert kinds.index("adaptor_imported") < kinds.index("repatch") < kinds.index("initialize_model_parallel"), kinds
    assert "megatron_imported_before_mindspeed" not in kinds
    assert actor[0]["repatch"] == [{"after_parallel_init": False}]
    # the double's attention ran in the training steps (old log-probs, then the update, every step)
    calls = [e["attention_calls"] for e in npu if e["event"] == "forward_backward"]
    assert len(calls) >= 2 * STEPS and calls[-1].get("fusion_attention", 0) > calls[0].get("fusion_attention", 0) > 0
    # every process of the run (driver, training pool, rollout pool) imported megatron only after the double
    assert all(not e["megatron_imported"] for e in events["npu"] if e["event"] == "setup")
    assert [e["asked"] for e in npu if e["event"] == "hf_rollout"] == ["npu"]  # the rollout pool, on the npu key
    cpu_engines = [e["cls"] for e in events["cpu"] if e["event"] == "engine" and e["role"] == "actor"]
    assert cpu_engines == ["MegatronLMEngine"]


def test_the_npu_runs_metrics_equal_the_plain_megatron_runs_step_for_step(runs):
    _, metrics = runs
    npu, cpu = ([r for r in metrics[d] if "critic/score/mean" in r] for d in ("npu", "cpu"))
    assert len(npu) == len(cpu) == STEPS
    keys = ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl")
    for key in keys:
        a, b = [r[key] for r in npu], [r[key] for r in cpu]
        assert all(math.isfinite(x) for x in a), (key, a)
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7), (key, a, b)
    assert any(r["actor/grad_norm"] > 0 for r in npu), "no step had a gradient: the comparison would be empty"
