"""Import order of the fully-async train worker on the npu key, against the MindSpeed contract double.

verl's fully-async worker resolved its copy/restore-to-CPU handlers in `__init__`, which imported
Megatron utilities before MindSpeed had patched Megatron and broke NPU runs. Here the snapshots are
methods of the engine, whose module imports megatron only inside its methods. In a fresh process
with tests/py/mindspeed_double first on sys.path (the double refuses to import once megatron is
imported, rule 10), the TrainWorker is constructed (nothing heavy may be imported yet), its
MindSpeed engine built (MindSpeed first, or the double raises), and the engine's Megatron
snapshots used for old log-probs from the published weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.megatron
REPO_ROOT = Path(__file__).resolve().parents[2]
DOUBLE_DIR = Path(__file__).resolve().parent / "mindspeed_double" / "core_r0.16.0"

SCENARIO = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {double!r})
    import torch
    from omegaconf import OmegaConf
    from verl_lite.config import load_config
    from verl_lite.trainer.async_workers import TrainWorker

    def heavy():
        return sorted({{m for m in sys.modules if m.split(".")[0] in ("megatron", "mindspeed", "torch_npu")}})

    cfg = load_config(["trainer.device=npu", "actor_rollout_ref.model.path=tiny-qwen3",
                       "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                       "data.train_batch_size=2", "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false",
                       "actor_rollout_ref.actor.megatron.sequence_parallel=false", "async_training.enable=True",
                       "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=1"])
    rec = {{}}
    worker = TrainWorker(OmegaConf.to_container(cfg, resolve=True), 0, 1, device="npu")
    rec["after_construct"] = heavy()
    from verl_lite.engine.megatron import mindspeed as ms
    ms.MindSpeedEngineMixin.internals_device = "cpu"  # megatron internals on CPU, device "npu" for the registry
    worker.ready()  # builds the engine: the double raises here if megatron came first
    import mindspeed._double as double
    rec["engine"] = type(worker.actor).__name__
    rec["adaptor_imported"] = "adaptor_imported" in double.kinds()
    from verl_lite.engine.megatron.engine import MegatronLMEngine
    rec["megatron_snapshots"] = type(worker.actor).snapshot_to_cpu is MegatronLMEngine.snapshot_to_cpu
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 48, (2, 8), generator=g)
    ones = torch.ones(2, 8, dtype=torch.long)
    batch = dict(input_ids=ids, attention_mask=ones, position_ids=torch.arange(8).expand(2, 8),
                 responses=ids[:, -3:], response_mask=ones[:, -3:], temperature=1.0)
    published = worker.compute_log_prob(batch)["old_log_probs"]
    worker.save_model_to_cpu("published")
    rec["snapshot_entries"] = [sorted(entry) for entry in worker.cpu_models["published"]]  # one per model chunk
    with torch.no_grad():
        for chunk in worker.actor.model:
            for p in chunk.parameters():
                p.add_(0.05 * torch.randn_like(p))
    current = worker.compute_log_prob(batch)["old_log_probs"]
    rec["moved"] = not torch.allclose(current, published)
    rec["published_back"] = torch.equal(worker.compute_log_prob_from(batch, "published")["old_log_probs"], published)
    rec["current_kept"] = torch.equal(worker.compute_log_prob(batch)["old_log_probs"], current)
    print(json.dumps(rec))
""")


def test_constructing_the_npu_train_worker_imports_no_megatron_and_its_engine_snapshots_work_after_mindspeed():
    script = SCENARIO.format(double=str(DOUBLE_DIR))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(REPO_ROOT),
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["after_construct"] == []  # no megatron, no mindspeed, no torch_npu
    assert rec["engine"] == "MindSpeedLMEngine" and rec["adaptor_imported"]
    assert rec["megatron_snapshots"] and rec["snapshot_entries"] == [["params"]]  # the Megatron engine's, per chunk
    assert rec["moved"] and rec["published_back"] and rec["current_kept"]
