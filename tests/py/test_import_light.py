"""Importing the core and running the check import no heavy framework (checked in a fresh process)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "megatron", "mindspeed", "torch_npu", "ray", "transformers")
CORE = (
    "verl_lite",
    "verl_lite.config",
    "verl_lite.registry",
    "verl_lite.check",
    "verl_lite.preflight.run",
    "verl_lite.preflight.summary",
    "verl_lite.decisions.repatch",
    "verl_lite.device",
    "verl_lite.runtime_env",
)


def heavy_modules_after(code: str) -> list:
    script = textwrap.dedent(f"""
        import json, sys
        {code}
        print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(REPO_ROOT), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_core_modules_imports_no_heavy_framework():
    assert heavy_modules_after(f"import {', '.join(CORE)}") == []


def test_composing_checking_and_summarising_an_npu_megatron_run_imports_no_heavy_framework():
    code = textwrap.dedent("""
        from verl_lite.config import load_config
        from verl_lite.preflight.run import collect_problems
        from verl_lite.preflight.summary import summarize
        cfg = load_config([
            "trainer.device=npu", "actor_rollout_ref.actor.strategy=megatron", "algorithm.adv_estimator=gae",
            "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        ])
        collect_problems(cfg, for_training=False)
        summarize(cfg)
    """).replace("\n", "\n        ")
    assert heavy_modules_after(code) == []
