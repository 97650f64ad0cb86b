"""Run verl_lite's device=npu path on a CPU box, for trainer-level tests through the MindSpeed double.

`setup()` runs in the test's driver and, as Ray's `worker_process_setup_hook`, in every worker process
before its first task. Each process appends what it saw to the JSON-lines file NPU_ON_CPU_LOG.
- tests/py/mindspeed_double/<stack> goes first on sys.path (NPU_ON_CPU_STACK, default core_r0.16.0):
  `import mindspeed` is that stack's contract double, which refuses to import once megatron is
  imported (rule 10), so a run that trains kept the import order;
- the MindSpeed engines keep megatron's tensors on CPU (`MindSpeedEngineMixin.internals_device`, the
  seam the engine-level tests use); the engine class, its MindSpeed import and its repatch are the
  npu ones, chosen by the registry from device=npu;
- `torch.npu` gets the calls the worker plumbing makes with device=npu (set_device, current_device,
  synchronize, empty_cache) as no-ops;
- the hf rollout of the rollout pool builds its model on CPU (torch has no npu tensors here): the
  rollout is not what the double stands in for.
Logged per engine built: its class, the double's events so far, whether the repatch came after the
parallel init; after every forward_backward of a MindSpeed engine: the double's attention call counts.
Nothing in verl_lite imports this module.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

STACK = os.environ.get("NPU_ON_CPU_STACK", "core_r0.16.0")
DOUBLE_DIR = str(Path(__file__).resolve().parents[1] / "mindspeed_double" / STACK)


def log(event: str, **fields) -> None:
    path = os.environ.get("NPU_ON_CPU_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(event=event, pid=os.getpid(), **fields)) + "\n")


def _no_op(result=None):
    return lambda *args, **kwargs: result


def _double_state() -> dict:
    double = sys.modules.get("mindspeed._double")
    if double is None:
        return {"kinds": [], "repatch": [], "attention_calls": {}}
    repatch = [data for kind, data in double.EVENTS if kind == "repatch"]
    return {"kinds": double.kinds(), "repatch": [{"after_parallel_init": r["after_parallel_init"]} for r in repatch],
            "attention_calls": dict(double.STATE["attention_calls"])}


def setup() -> None:
    if DOUBLE_DIR not in sys.path:
        sys.path.insert(0, DOUBLE_DIR)
    import torch

    if not hasattr(torch, "npu"):
        torch.npu = types.SimpleNamespace(set_device=_no_op(), current_device=_no_op(0), synchronize=_no_op(),
                                          empty_cache=_no_op())
    from verl_lite.engine.megatron import mindspeed as ms
    from verl_lite.rollout import hf
    from verl_lite.trainer import workers

    ms.MindSpeedEngineMixin.internals_device = "cpu"
    if getattr(hf.HFRollout.__init__, "npu_on_cpu", False):
        return
    rollout_init, make_engine = hf.HFRollout.__init__, workers.EngineWorker._make_engine
    forward_backward = ms.MindSpeedLMEngine.forward_backward

    def init(self, model_config, rollout_config, tokenizer, device):
        log("hf_rollout", asked=str(device))
        rollout_init(self, model_config, rollout_config, tokenizer, "cpu" if device == "npu" else device)

    def engine(self, model_cfg, engine_cfg, optim_cfg, role):
        built = make_engine(self, model_cfg, engine_cfg, optim_cfg, role)
        log("engine", role=role, cls=type(built).__name__, device=str(self.device), **_double_state())
        return built

    def step(self, *args, **kwargs):
        out = forward_backward(self, *args, **kwargs)
        log("forward_backward", cls=type(self).__name__, **_double_state())
        return out

    init.npu_on_cpu = True
    hf.HFRollout.__init__, workers.EngineWorker._make_engine = init, engine
    ms.MindSpeedLMEngine.forward_backward = step
    log("setup", megatron_imported=any(m.split(".")[0] == "megatron" for m in sys.modules))
