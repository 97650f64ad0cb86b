"""Write tests/py/data/lr_schedule_cases.json: verl's own LR schedules evaluated step by step, for
tests/py/test_lr_schedule.py to compare verl_lite's engines with.

Runs in the reference environment where verl (the pinned checkout) imports, never in verl_lite's
(see tools/gen_core_algos_cases.py for how it is made):

    /work/venv_verlref/bin/python tools/gen_lr_schedule_cases.py      # rewrites the table

- fsdp: verl's FSDPOptimizerConfig (it maps the deprecated warmup_style) and the LambdaLR of
  verl/utils/torch_functional.py (get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup),
  with the warm-up steps derived as verl's FSDP engine `_build_lr_scheduler` does; each case records
  the LR after every scheduler step, as verl's `lr_scheduler_step` returns it.
- megatron: the OptimizerParamScheduler arguments verl's get_megatron_optimizer_param_scheduler derives
  from McoreOptimizerConfig keys. megatron-core is not installed here, so the scheduler class is
  replaced by one that records its arguments (the LR itself is megatron-core's, in both projects).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "py" / "data" / "lr_schedule_cases.json"
STEPS = 12
LR = 2e-3

# (name, optim keys as a verl run sets them, total_training_steps)
FSDP_CASES = [
    ("constant", {}, 10),
    ("constant_warmup_steps", {"lr_warmup_steps": 3}, 10),
    ("constant_warmup_ratio", {"lr_warmup_steps_ratio": 0.25}, 10),
    ("cosine", {"lr_scheduler_type": "cosine"}, 10),
    ("cosine_warmup_min_lr", {"lr_scheduler_type": "cosine", "lr_warmup_steps": 2, "min_lr_ratio": 0.1}, 10),
    ("cosine_ratio_min_lr", {"lr_scheduler_type": "cosine", "lr_warmup_steps_ratio": 0.3, "min_lr_ratio": 0.2}, 10),
    ("cosine_one_cycle", {"lr_scheduler_type": "cosine", "lr_warmup_steps": 1, "num_cycles": 1.0,
                          "min_lr_ratio": 0.05}, 8),
    ("cosine_one_indexed", {"lr_scheduler_type": "cosine", "lr_warmup_steps": 3, "zero_indexed_step": False,
                            "min_lr_ratio": 0.1}, 10),
    ("warmup_style_cosine", {"warmup_style": "cosine", "lr_warmup_steps": 2}, 6),
    ("cosine_past_the_end", {"lr_scheduler_type": "cosine", "lr_warmup_steps": 2, "min_lr_ratio": 0.3}, 5),
    # the three-step training runs of tests/py/test_lr_schedule.py (actor and critic)
    ("run_cosine", {"lr_scheduler_type": "cosine", "lr_warmup_steps_ratio": 0.34, "min_lr_ratio": 0.1}, 3),
    ("run_constant", {"lr_warmup_steps": 2}, 3),
]
MEGATRON_CASES = [
    ("defaults", {}, 10),
    ("decay_steps_override", {"lr_decay_steps": 40, "lr_decay_style": "cosine", "min_lr": 1e-4}, 10),
    ("warmup_ratio_of_decay_steps", {"lr_warmup_steps_ratio": 0.1, "lr_decay_steps": 50}, 10),
    ("warmup_ratio_of_total", {"lr_warmup_steps_ratio": 0.3, "lr_decay_style": "linear"}, 10),
    ("warmup_steps_win", {"lr_warmup_steps": 2, "lr_warmup_steps_ratio": 0.5, "lr_warmup_init": 1e-4}, 10),
    ("wsd", {"lr_decay_style": "WSD", "lr_wsd_decay_steps": 4, "lr_wsd_decay_style": "cosine",
             "weight_decay_incr_style": "linear", "weight_decay": 0.05}, 12),
]


def fsdp_case(keys: dict, total: int) -> dict:
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup
    from verl.workers.config.optimizer import FSDPOptimizerConfig

    config = FSDPOptimizerConfig(lr=LR, total_training_steps=total, **keys)
    # verl/workers/engine/fsdp/transformer_impl.py FSDPEngine._build_lr_scheduler
    warmup = config.lr_warmup_steps
    if warmup <= 0:
        warmup = int(config.lr_warmup_steps_ratio * total)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    if config.lr_scheduler_type == "constant":
        scheduler = get_constant_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=warmup)
    else:
        scheduler = get_cosine_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=warmup,
                                                    num_training_steps=total, min_lr_ratio=config.min_lr_ratio,
                                                    num_cycles=config.num_cycles,
                                                    zero_indexed_step=config.zero_indexed_step)
    initial = scheduler.get_last_lr()[0]
    lrs = []
    for _ in range(STEPS):
        optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    return {"initial_lr": initial, "lr_after_step": lrs}


def megatron_case(keys: dict, total: int) -> dict:
    from omegaconf import OmegaConf
    from verl.workers.config.optimizer import McoreOptimizerConfig

    import dataclasses

    defaults = {f.name: getattr(McoreOptimizerConfig(lr=LR), f.name) for f in dataclasses.fields(McoreOptimizerConfig)
                if not f.name.startswith("_")}
    # verl's yaml default (optim/megatron.yaml) wins over the dataclass's "linear"
    defaults.update({"lr_decay_style": "constant", "total_training_steps": total, "betas": list(defaults["betas"])})
    defaults.update(keys)
    config = OmegaConf.create(defaults)
    from verl.utils.megatron import optimizer as verl_megatron_optimizer

    return verl_megatron_optimizer.get_megatron_optimizer_param_scheduler(optimizer=None, config=config).kwargs


class RecordingScheduler:
    def __init__(self, optimizer, **kwargs):
        self.kwargs = kwargs


def stub_megatron() -> None:
    """verl/utils/megatron/optimizer.py imports megatron-core at module level; only the scheduler is used."""
    for name in ("megatron", "megatron.core", "megatron.core.optimizer", "megatron.core.optimizer_param_scheduler"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["megatron.core.optimizer"].OptimizerConfig = object
    sys.modules["megatron.core.optimizer"].get_megatron_optimizer = None
    sys.modules["megatron.core.optimizer_param_scheduler"].OptimizerParamScheduler = RecordingScheduler


def main() -> None:
    stub_megatron()
    table = {
        "lr": LR,
        "steps": STEPS,
        "fsdp": [{"name": n, "keys": k, "total_training_steps": t, **fsdp_case(k, t)} for n, k, t in FSDP_CASES],
        "megatron": [{"name": n, "keys": k, "total_training_steps": t, "scheduler_kwargs": megatron_case(k, t)}
                     for n, k, t in MEGATRON_CASES],
    }
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{OUT}: {len(table['fsdp'])} fsdp and {len(table['megatron'])} megatron cases")


if __name__ == "__main__":
    main()
