#!/usr/bin/env python3
"""The main job's reward over several seeds: `examples/grpo/run_tiny.sh` once per `trainer.seed`.

Usage:
  python bench/seed_sweep.py                               # seeds 1-5, 200 steps, the script's defaults
  python bench/seed_sweep.py --seeds 1,3 --steps 100
  python bench/seed_sweep.py --env ROLLOUT_N=16 --env LR=1e-3 actor_rollout_ref.actor.grad_clip=0.5

Each run is `bash examples/grpo/run_tiny.sh` with its own defaults (every env var the script reads
can be set with --env NAME=VALUE), plus `trainer.seed=S`, validation and checkpoints off
(TEST_FREQ=-1, SAVE_FREQ=-1), no plot, a fresh run directory, and any further Hydra overrides given
after the options. Only `trainer.seed` changes between rows: it seeds the workers' torch RNG and so
the rollout's sampling; the model's random init (`actor_rollout_ref.model.init_seed`) and the
prompt order (`data.seed`) are the same in every row. Runs are sequential (the CPU box has 2 cores).

Per row: mean of `critic/score/mean` over the first step and over the last 10 steps (the figure the
issue sets at >= 0.7 for every seed); wall seconds of the whole script (Ray start-up included) and
CPU seconds of the script's process tree (user + system of every waited-for descendant: the driver,
Ray's processes and the worker). Figures are printed, never asserted. `--json` also writes every row and the per-step score curves.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "examples" / "grpo" / "run_tiny.sh"
SCORE = "critic/score/mean"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_avg() -> List[float]:
    with open("/proc/loadavg", encoding="utf-8") as f:
        return [float(x) for x in f.read().split()[:3]]


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parse_seeds(text: str) -> List[int]:
    seeds: List[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if int(hi) < int(lo):
                raise ValueError(f"--seeds range {part!r} runs backwards (write low-high, e.g. 1-5)")
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise ValueError(f"--seeds {text!r} names no seed (e.g. 1-5 or 1,3,7)")
    return seeds


def parse_env(items: List[str]) -> Dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--env {item!r} is not NAME=VALUE (e.g. --env ROLLOUT_N=16)")
        env[name] = value
    return env


def run_seed(seed: int, steps: int, run_dir: Path, env_extra: Dict[str, str], overrides: List[str]) -> Dict[str, Any]:
    env = dict(os.environ)
    env.update(
        TOTAL_STEPS=str(steps),
        TEST_FREQ="-1",
        SAVE_FREQ="-1",
        LOGGER="[jsonl]",
        PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.update(env_extra)
    cmd = ["bash", str(SCRIPT), f"trainer.seed={seed}", f"trainer.default_local_dir={run_dir}",
           "trainer.resume_mode=disable", "trainer.plot_rewards=false", "trainer.ray_timeout_s=900"] + overrides
    run_dir.mkdir(parents=True, exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(run_dir / "run.log", "w", encoding="utf-8") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        tail = (run_dir / "run.log").read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise RuntimeError(f"seed {seed}: run_tiny.sh exited {proc.returncode}; log {run_dir / 'run.log'}:\n"
                           + "\n".join(tail))
    scores = []
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if SCORE in row:
                scores.append(float(row[SCORE]))
    if not scores:
        raise RuntimeError(f"seed {seed}: {run_dir / 'metrics.jsonl'} holds no {SCORE}")
    return {"seed": seed, "steps": len(scores), "first": scores[0], "last10": statistics.fmean(scores[-10:]),
            "wall_s": wall, "cpu_s": cpu, "scores": scores}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="bench/seed_sweep.py", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1-5", help="seeds: a range 1-5, a list 1,3,7, or both (default 1-5)")
    p.add_argument("--steps", type=int, default=200, help="training steps per run (default 200, the main job's)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an env var of run_tiny.sh (ROLLOUT_N, LR, TRAIN_BATCH_SIZE, BACKEND, ...); repeatable")
    p.add_argument("--work-dir", default="", help="run directories (default: a new temp dir)")
    p.add_argument("--json", default="", help="also write every row and score curve here")
    p.add_argument("overrides", nargs="*", help="Hydra overrides passed to run_tiny.sh after the script's own")
    args = p.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
        env_extra = parse_env(args.env)
    except ValueError as e:
        p.error(str(e))
    if args.steps < 10:
        p.error(f"--steps {args.steps}: the last-10 mean needs at least 10 steps")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="seed_sweep_"))
    head = commit()
    load0 = load_avg()
    settings = " ".join([f"{k}={v}" for k, v in env_extra.items()] + args.overrides) or "(script defaults)"
    log(f"commit {head}, {len(seeds)} seeds x {args.steps} steps, {settings}, work dir {work}")
    rows = []
    for seed in seeds:
        log(f"seed {seed}: running (load {load_avg()[0]:.2f})")
        row = run_seed(seed, args.steps, work / f"seed{seed}", env_extra, args.overrides)
        row["load"] = load_avg()[0]
        log(f"seed {seed}: {row['first']:.3f} -> {row['last10']:.3f} in {row['wall_s']:.0f} s")
        rows.append(row)
    load1 = load_avg()
    print(f"# bench/seed_sweep.py  commit {head}  {args.steps} steps  settings: {settings}")
    print(f"# load average (1/5/15 min) before {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, "
          f"after {load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}")
    print(f"| seed | {SCORE} step 1 | mean of last 10 | wall s | CPU s | load after |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['first']:.3f} | {r['last10']:.3f} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
              f"{r['load']:.2f} |")
    last = [r["last10"] for r in rows]
    print(f"| all | {statistics.fmean(r['first'] for r in rows):.3f} | mean {statistics.fmean(last):.3f}, "
          f"min {min(last):.3f} | {sum(r['wall_s'] for r in rows):.0f} | {sum(r['cpu_s'] for r in rows):.0f} | |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"commit": head, "steps": args.steps, "settings": settings, "load_before": load0,
                       "load_after": load1, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
