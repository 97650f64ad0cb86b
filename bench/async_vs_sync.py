#!/usr/bin/env python3
"""Sync vs fully-async GRPO on the tiny copy task, on the same CPU budget: wall time to reach the
same reward, generated tokens per second, and the fraction of time the trainer sits idle.

Usage:
  python bench/async_vs_sync.py                        # 100 steps per mode, target reward 0.15
  python bench/async_vs_sync.py --steps 150 --target 0.2 --seeds 1 2
  python bench/async_vs_sync.py --modes sync1t async   # some modes only

Each run is `python -m verl_lite.main` with the values of examples/grpo/run_tiny.sh (16 prompts x
8 samples, 3-token responses, lr 2e-3) in a fresh process with its own Ray instance of `--cpus`
CPUs (default: all cores):
- sync: one worker holding actor and rollout, with all the cores as torch threads (the default);
- sync1t: the same with one torch thread (the driver runs with os.cpu_count() patched to 1, which
  is how run.py sizes the worker's threads): on a busy 2-core box, two threads per tiny-model op
  cost more than they gain, so this separates the thread effect from the async one;
- async: one train worker and one rollout replica, one torch thread each.
Reward is the mean training reward (critic/score/mean) smoothed over `--window` steps; "time to
target" is the training wall time (the sum of timing_s/step, start-up excluded) until it first
reaches `--target`. Generated tokens/s counts every generated response token (async: the
rollout's own count, including run-ahead and dropped samples) over the training wall time. The
trainer's idle fraction: sync, the share of each step spent generating and scoring; async, the
time spent waiting on the rollout queue. The load average is printed: the figures mean little
on a machine busy with other work.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TINY = [
    "data.train_batch_size=16", "data.max_prompt_length=8", "data.max_response_length=3",
    "actor_rollout_ref.actor.optim.lr=2e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", "actor_rollout_ref.rollout.n=8",
    "trainer.device=cpu", "trainer.logger=[jsonl]", "trainer.resume_mode=disable", "trainer.save_freq=-1",
    "trainer.test_freq=-1", "trainer.plot_rewards=false",
]
ASYNC = ["async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
         "actor_rollout_ref.rollout.n_gpus_per_node=1"]
# verl_lite.main with os.cpu_count() = 1 in the driver: run.py then gives its worker 1 torch thread.
ONE_THREAD = ("import os, runpy, sys; os.cpu_count = lambda: 1; sys.argv = ['verl_lite.main'] + sys.argv[1:]; "
              "runpy.run_module('verl_lite.main', run_name='__main__')")


def run_mode(mode: str, steps: int, seed: int, cpus: int, data_dir: str, out_dir: str) -> Dict[str, Any]:
    args = TINY + [f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
                   f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={out_dir}",
                   f"trainer.seed={seed}", f"data.seed={seed}", f"ray_init.num_cpus={cpus + 1}"]
    if mode == "async":
        args += ASYNC
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    command = [sys.executable, "-m", "verl_lite.main"]
    if mode == "sync1t":
        command = [sys.executable, "-c", ONE_THREAD]
    start = time.perf_counter()
    proc = subprocess.run([*command, *args], env=env, capture_output=True, text=True)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return {"rows": rows, "process_s": total}


def summarize(mode: str, rows: List[Dict[str, Any]], process_s: float, target: float, window: int) -> Dict[str, Any]:
    scores = [r["critic/score/mean"] for r in rows]
    step_s = [r["timing_s/step"] for r in rows]
    smooth = [sum(scores[max(0, i - window + 1):i + 1]) / len(scores[max(0, i - window + 1):i + 1])
              for i in range(len(scores))]
    hit: Optional[int] = next((i for i, s in enumerate(smooth) if s >= target), None)
    train_s = sum(step_s)
    if mode == "async":
        tokens_per_s = rows[-1]["perf/rollout_tokens_per_s"]
        idle = rows[-1]["perf/trainer_idle_frac"]
    else:
        tokens = sum(r["response_length/mean"] * r["perf/num_sequences"] for r in rows)
        tokens_per_s = tokens / train_s
        idle = sum(r["timing_s/gen"] + r["timing_s/reward"] for r in rows) / train_s
    return {
        "mode": mode, "steps": len(rows), "step_s": train_s / len(rows), "train_s": train_s,
        "startup_s": process_s - train_s, "target_step": None if hit is None else hit + 1,
        "target_s": None if hit is None else sum(step_s[:hit + 1]), "final_reward": smooth[-1],
        "tokens_per_s": tokens_per_s, "trainer_idle": idle,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--target", type=float, default=0.15, help="smoothed mean training reward to reach")
    p.add_argument("--window", type=int, default=5, help="steps in the reward moving average")
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--modes", nargs="+", default=["sync", "sync1t", "async"], choices=["sync", "sync1t", "async"])
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPU budget of every run")
    args = p.parse_args()

    from verl_lite.data.synthetic import generate

    work = tempfile.mkdtemp(prefix="async_vs_sync.")
    data_dir = os.path.join(work, "data")
    generate(data_dir, task="copy", digits=3)
    print(f"tiny copy task, {args.steps} steps per run, target smoothed reward {args.target} (window {args.window}), "
          f"{args.cpus} CPUs per run; load average before: {os.getloadavg()[0]:.1f}")
    header = (f"{'mode':6s} {'seed':>4s} {'s/step':>7s} {'to target':>15s} {'final':>6s} {'gen tok/s':>9s} "
              f"{'trainer idle':>12s} {'start-up':>8s}")
    print(header)
    results = []
    for seed in args.seeds:
        for mode in args.modes:
            out = os.path.join(work, f"{mode}_{seed}")
            run = run_mode(mode, args.steps, seed, args.cpus, data_dir, out)
            s = summarize(mode, run["rows"], run["process_s"], args.target, args.window)
            results.append(s)
            to_target = "not reached" if s["target_s"] is None else f"{s['target_s']:5.1f} s @ {s['target_step']:3d}"
            print(f"{mode:6s} {seed:4d} {s['step_s']:7.2f} {to_target:>15s} {s['final_reward']:6.3f} "
                  f"{s['tokens_per_s']:9.0f} {100 * s['trainer_idle']:11.0f}% {s['startup_s']:7.1f}s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}; runs kept under {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
