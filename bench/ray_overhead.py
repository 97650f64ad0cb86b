#!/usr/bin/env python3
"""Where the Ray path's extra cost goes: the main job with Ray workers vs in-process (`trainer.ray=false`).

Usage:
  python bench/ray_overhead.py                      # 3 rounds x (ray, inproc), 60 steps, 3-token responses
  python bench/ray_overhead.py --probe              # the driver's and a Ray worker's thread/env settings
  python bench/ray_overhead.py --transport          # a batch's round trip: Ray's tensor pickling vs verl_lite's,
                                                    # then verl_lite's by payload, right away and after compute
  python bench/ray_overhead.py --driver-gap --steps 80   # the driver's work the worker waits through, timed
  python bench/ray_overhead.py --modes ray,ray+env --ray-env RAY_enable_worker_prestart=0
  python bench/ray_overhead.py --rounds 6 --steps 100 --modes ray,ray+env,inproc --ray-env VERL_LITE_GENERATE_AHEAD=0
  python bench/ray_overhead.py --response-length 16 --rounds 2 --steps 80

Each run is `python -m verl_lite.main` with the main job's overrides (bench/trl_compare.py's: 16
prompts x 8 samples, one update per step, validation and checkpoints off), the environment left as
the main job leaves it. While it runs, the job's process tree (the driver and every process under
it: Ray's GCS, raylet, agents and the worker) is read from /proc when metrics.jsonl reaches step
`--warmup` and again at the last step: CPU time (user + system) per step of each process, the busiest
threads of the process that computes (the Ray worker, or the driver in-process), the computing thread's CPU
time in generation and in the update (`perf/cpu_s/*`, the medians), and what that
process runs with: its thread count, OMP/MKL/MALLOC variables, LD_PRELOAD and any allocator library
mapped (jemalloc, tcmalloc). CPU seconds per step are far less sensitive to other jobs on the box than
wall seconds; `perf stat -e instructions,cycles` would be better still, but this VM does not expose
hardware counters. The rounds alternate ray / inproc so load changes hit both. The period is the
wall time per step between those two marks (what a user waits: the driver's work between steps and
any overlap included); the speed of each mode against in-process is the ratio of periods, round by
round.
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
sys.path.insert(0, str(REPO_ROOT / "bench"))
sys.path.insert(0, str(REPO_ROOT))

from trl_compare import verl_lite_overrides  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
ENV_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_ARENA_MAX", "LD_PRELOAD",
            "OMP_PROC_BIND", "KMP_AFFINITY", "GOMP_CPU_AFFINITY")


def _stat(path: str) -> Optional[List[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces
    return [text[text.index("(") + 1:text.rindex(")")]] + text[text.rindex(")") + 2:].split()


def _cpu_s(fields: List[str]) -> float:
    return (int(fields[12]) + int(fields[13])) / TICK  # utime, stime (fields 14, 15 of proc(5))


def tree(root: int) -> Dict[int, Dict[str, Any]]:
    """Every process under `root` (and root): name, CPU seconds, thread count, per-thread CPU."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat(f"/proc/{entry}/stat")
            if f:
                parent[int(entry)] = int(f[2])
    keep = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in keep and pid not in keep:
                keep.add(pid)
                changed = True
    out = {}
    for pid in keep:
        f = _stat(f"/proc/{pid}/stat")
        if not f:
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = f[0]
        threads = {}
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                t = _stat(f"/proc/{pid}/task/{tid}/stat")
                if t:
                    threads[int(tid)] = (t[0], _cpu_s(t))
        except OSError:
            pass
        out[pid] = {"name": f[0], "cmd": cmd[:120], "cpu_s": _cpu_s(f), "threads": threads, "nice": int(f[17]),
                    "sys_s": int(f[13]) / TICK, "minflt": int(f[8])}  # stime, minor page faults (proc(5) 15, 10)
    return out


def process_env(pid: int) -> Dict[str, Any]:
    info: Dict[str, Any] = {}
    try:
        env = dict(kv.split("=", 1) for kv in open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
                   .split("\0") if "=" in kv)
        info.update({k: env[k] for k in ENV_KEYS if k in env})
    except OSError:
        pass
    try:
        maps = open(f"/proc/{pid}/maps", encoding="utf-8").read()
        info["allocators"] = sorted({lib for lib in ("jemalloc", "tcmalloc", "mimalloc") if lib in maps})
        info["omp_libs"] = sorted({os.path.basename(line.split()[-1]) for line in maps.splitlines()
                                   if ("omp" in line.split()[-1] or "mkl" in line.split()[-1]) and "/" in line})
    except OSError:
        pass
    try:
        info["affinity"] = sorted(os.sched_getaffinity(pid))
    except OSError:
        pass
    return info


def _is_worker(q: Dict[str, Any]) -> bool:
    # Ray sets the worker's process title (the comm name is cut at 15 characters; cmdline may be empty)
    return "ActorRolloutRef" in q["cmd"] or q["name"].startswith("ray::ActorRollo")


def steps_done(path: Path) -> int:
    try:
        return sum(1 for _ in open(path, encoding="utf-8"))
    except OSError:
        return 0


def run(mode: str, data_dir: str, run_dir: str, args) -> Dict[str, Any]:
    cmd = [sys.executable, "-m", "verl_lite.main"] + verl_lite_overrides(
        data_dir, run_dir, args.response_length, args.steps, mode.startswith("ray")) + list(args.override)
    env = dict(os.environ)
    if mode == "ray+env":
        env.update(kv.split("=", 1) for kv in args.ray_env)
    env.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="ray_overhead_"))
    metrics = Path(run_dir) / "metrics.jsonl"
    os.makedirs(run_dir, exist_ok=True)
    log = open(Path(run_dir) / "run.log", "w", encoding="utf-8")
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    snaps: List[Dict[int, Dict[str, Any]]] = []
    marks = [args.warmup, args.steps]
    loads, stamps = [], []
    while proc.poll() is None and marks:
        if steps_done(metrics) >= marks[0]:
            stamps.append(time.perf_counter())
            snaps.append(tree(proc.pid))
            if len(snaps) == 1:  # at the warm-up mark: at the last step the worker is already shutting down
                envs = {pid: process_env(pid) for pid, q in snaps[-1].items()
                        if pid == proc.pid or _is_worker(q)}
            loads.append(os.getloadavg()[0])
            marks.pop(0)
        time.sleep(0.02)
    proc.wait()
    log.close()
    if proc.returncode != 0 or len(snaps) != 2:
        tail = open(Path(run_dir) / "run.log", encoding="utf-8", errors="replace").read()[-2000:]
        raise RuntimeError(f"{mode} run failed (exit {proc.returncode}); the end of its log:\n{tail}")
    n = args.steps - args.warmup
    a, b = snaps
    rows = []
    for pid, p in b.items():
        if pid in a:
            rows.append({"pid": pid, "name": p["name"], "cmd": p["cmd"], "nice": p["nice"],
                         "cpu_ms_per_step": (p["cpu_s"] - a[pid]["cpu_s"]) / n * 1e3,
                         "sys_ms_per_step": (p["sys_s"] - a[pid]["sys_s"]) / n * 1e3,
                         "minflt_per_step": (p["minflt"] - a[pid]["minflt"]) / n,
                         "threads": len(a[pid]["threads"]),  # at the warm-up mark, as the env above
                         "busy_threads": sorted(((t[0], round((t[1] - a[pid]["threads"].get(tid, (0, 0))[1]) / n * 1e3, 2))
                                                 for tid, t in p["threads"].items()), key=lambda x: -x[1])[:4]})
    rows.sort(key=lambda r: -r["cpu_ms_per_step"])
    worker = next((r for r in rows if _is_worker(r)), None)
    compute = worker or next(r for r in rows if r["pid"] == proc.pid)
    with open(metrics, encoding="utf-8") as f:
        ms = [json.loads(line) for line in f][args.warmup:]
    med = lambda key: sorted(m[key] for m in ms)[len(ms) // 2]  # noqa: E731
    p10 = lambda key: sorted(m[key] for m in ms)[len(ms) // 10]  # noqa: E731  (the host's quiet steps)
    return {"mode": mode, "procs": rows, "compute_pid": compute["pid"], "compute": compute,
            "env": envs.get(compute["pid"], {}), "driver_env": envs.get(proc.pid, {}),
            "total_cpu_ms_per_step": sum(r["cpu_ms_per_step"] for r in rows),
            "wall_step_s": med("timing_s/step"), "gen_s": med("timing_s/gen"),
            # wall seconds per step between the two marks (the driver's logging and any overlap included)
            "period_s": (stamps[1] - stamps[0]) / n,
            "update_s": med("timing_s/update_actor"), "load": loads,
            "gen_cpu_s": med("perf/cpu_s/gen"), "update_cpu_s": med("perf/cpu_s/update_actor"),
            "wall_step_p10_s": p10("timing_s/step"), "update_cpu_p10_s": p10("perf/cpu_s/update_actor")}


def settings() -> Dict[str, Any]:
    """What a process computes with: torch's thread pools, OpenMP/MKL/allocator variables, GC and the
    interpreter's switch interval, niceness and CPU affinity, the allocator libraries mapped."""
    import gc

    import torch

    torch.set_num_threads(1)  # as the workers' set-up does (verl_lite.trainer.workers._setup_process)
    out = {"pid": os.getpid(), "torch_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
           "gc_threshold": gc.get_threshold(), "switch_interval": sys.getswitchinterval(), "nice": os.nice(0),
           "affinity": sorted(os.sched_getaffinity(0)), "threads": len(os.listdir("/proc/self/task"))}
    out.update({k: os.environ.get(k) for k in ENV_KEYS})
    maps = open("/proc/self/maps", encoding="utf-8").read()
    out["libs"] = sorted({os.path.basename(line.split()[-1]) for line in maps.splitlines() if "/" in line and any(
        x in line.split()[-1] for x in ("jemalloc", "tcmalloc", "mimalloc", "gomp", "iomp", "mkl", "openblas"))})
    # the same 128 x 11 forward+backward of a 2-layer MLP, CPU seconds of this thread
    g = torch.Generator().manual_seed(0)
    w1, w2 = torch.randn(64, 128, generator=g, requires_grad=True), torch.randn(128, 48, generator=g, requires_grad=True)
    x = torch.randn(1408, 64, generator=g)
    c = time.thread_time()
    for _ in range(200):
        torch.nn.functional.silu(x @ w1).matmul(w2).logsumexp(-1).sum().backward()
    out["probe_cpu_ms"] = round((time.thread_time() - c) / 200 * 1e3, 3)
    return out


def probe(args) -> int:
    """`settings()` in the driver and in a Ray worker started as the trainer starts them."""
    from verl_lite.config import load_config, to_dataclass
    from verl_lite.trainer.run import _end_ray, _init_ray
    from verl_lite.trainer.worker_group import worker_resources

    cfg = to_dataclass(load_config(["trainer.device=cpu"]))
    started = _init_ray(cfg, "cpu", 1)
    try:
        import ray

        remote = ray.remote(**worker_resources("cpu"))(settings)
        worker = ray.get(remote.remote())
        driver = settings()
        loads = os.getloadavg()[0]
    finally:
        _end_ray(started)
    print(f"driver vs Ray worker (started as the trainer starts them), load average {loads:.2f}")
    for k in driver:
        if k != "pid":
            print(f"  {k:<22} {str(driver[k]):<40} {str(worker[k])}")
    return 0


class _Echo:
    """A Ray actor that answers a batch with a batch of the same tensors, as a worker call does."""

    def set_transport(self, on: bool) -> None:
        _set_transport(on)

    def echo(self, batch: Dict[str, Any], work_s: float = 0.0) -> Dict[str, Any]:
        import torch

        t, x = time.perf_counter(), torch.ones(128, 128)
        while time.perf_counter() - t < work_s:  # compute first, as a worker call does
            x = (x @ x).tanh_()
        return {k: v + 0 for k, v in batch.items()}


def _set_transport(on: bool) -> None:
    import torch
    from ray.util import deregister_serializer

    from verl_lite.trainer import tensor_transport

    if on:
        tensor_transport.install()
    else:
        deregister_serializer(torch.Tensor)
        tensor_transport._installed = False


def transport(args) -> int:
    """Round trips of one update-sized batch (the main job's 16 x 8 rows) to a Ray actor and back, with
    Ray's default tensor pickling (torch.save per storage) and with verl_lite's (tensor_transport)."""
    import torch

    from verl_lite.config import load_config, to_dataclass
    from verl_lite.trainer.run import _end_ray, _init_ray
    from verl_lite.trainer.worker_group import worker_resources

    rows, tokens = 128, 16 + args.response_length
    g = torch.Generator().manual_seed(0)
    batch = {k: torch.randint(0, 40, (rows, tokens), generator=g)
             for k in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")}
    batch.update({k: torch.randn(rows, args.response_length, generator=g)
                  for k in ("advantages", "old_log_probs", "token_level_rewards")})
    cfg = to_dataclass(load_config(["trainer.device=cpu"]))
    started = _init_ray(cfg, "cpu", 1)
    try:
        import ray

        actor = ray.remote(**worker_resources("cpu"))(_Echo).remote()
        out = {}
        for rnd in range(args.rounds):
            for name, on in (("Ray's default (torch.save per tensor)", False), ("verl_lite tensor_transport", True)):
                _set_transport(on)
                ray.get(actor.set_transport.remote(on))
                for _ in range(20):
                    ray.get(actor.echo.remote(batch))
                t, c = time.perf_counter(), time.thread_time()
                n = 200
                for _ in range(n):
                    back = ray.get(actor.echo.remote(batch))
                assert torch.equal(back["advantages"], batch["advantages"])
                out.setdefault(name, []).append(((time.perf_counter() - t) / n * 1e3, (time.thread_time() - c) / n * 1e3))
        # the call by payload, right away and when the actor computes for 20 ms first (both ends idle
        # meanwhile, as in a step), verl_lite's transport on
        payloads = {"no tensor": {"x": 1}, "one 1-element tensor": {"x": torch.zeros(1)},
                    "the batch's bytes as one tensor": {"x": torch.cat([v.reshape(-1).float() for v in batch.values()])},
                    "the batch (8 tensors)": batch}
        for rnd in range(args.rounds):
            for work in (0.0, 0.02):
                for label, payload in payloads.items():
                    for _ in range(10):
                        ray.get(actor.echo.remote(payload, work))
                    t, n = time.perf_counter(), 100
                    for _ in range(n):
                        ray.get(actor.echo.remote(payload, work))
                    out.setdefault(f"{label}, after {work * 1e3:.0f} ms of compute", []).append(
                        (((time.perf_counter() - t) / n - work) * 1e3, float("nan")))
        loads = os.getloadavg()[0]
    finally:
        _end_ray(started)
    print(f"round trip of a {rows} x {tokens} batch (8 tensors, {sum(v.numel() * v.element_size() for v in batch.values()) // 1024} KiB) "
          f"to a Ray actor and back, load {loads:.2f}, medians of {args.rounds} rounds of 200 calls")
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    for name, xs in out.items():
        cpu = med([x[1] for x in xs])
        print(f"  {name:<56} {med([x[0] for x in xs]):6.2f} ms per call"
              + ("" if cpu != cpu else f", driver thread CPU {cpu:6.2f} ms"))  # nan: not measured
    return 0


def task_data(tmp: str) -> str:
    """The synthetic copy task's parquet files under tmp/data, written by its own command."""
    data = os.path.join(tmp, "data")
    subprocess.run([sys.executable, "-m", "verl_lite.data.synthetic", "--out-dir", data], check=True,
                   cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    return data


def driver_gap(args) -> int:
    """The main job on the Ray path run in this process, with timers around the driver's work between
    the generation's answer and the update's call (the stretch the worker waits through every step):
    from the answer to the call (the reward and the advantages within it), and sending it."""
    import statistics

    from verl_lite.main import main as train
    from verl_lite.trainer import ppo_trainer, worker_group
    from verl_lite.trainer.algos import advantages

    now = time.perf_counter
    cur: Dict[str, float] = {}
    steps: List[Dict[str, float]] = []

    def timed(owner: Any, name: str, key: str) -> None:
        fn = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            t = now()
            out = fn(*a, **k)
            cur[key] = cur.get(key, 0.0) + now() - t
            return out

        setattr(owner, name, wrapper)

    batch = worker_group.PendingCall.batch

    def answer(self: Any) -> Any:  # when the generation's answer is in the driver's hands
        out = batch(self)
        if self.method == "generate_sequences":
            cur["answered"] = now()
        return out

    worker_group.PendingCall.batch = answer
    timed(ppo_trainer.PPOTrainer, "_score", "reward")
    timed(advantages, "compute_advantage", "advantages")
    submit = worker_group.WorkerGroup.submit_shards

    def submit_shards(self: Any, method: str, *a: Any, **k: Any) -> Any:
        t = now()
        out = submit(self, method, *a, **k)
        if method == "update_actor" and "answered" in cur:
            steps.append({"answer to call": t - cur["answered"], "reward": cur.get("reward", 0.0),
                          "advantages": cur.get("advantages", 0.0), "send": now() - t})
        cur.clear()
        return out

    worker_group.WorkerGroup.submit_shards = submit_shards
    with tempfile.TemporaryDirectory() as tmp:
        data = task_data(tmp)
        rc = train(verl_lite_overrides(data, os.path.join(tmp, "run"), args.response_length, args.steps, True)
                   + list(args.override))
    if rc != 0 or len(steps) <= args.warmup:
        print(f"bench: the run exited {rc} after {len(steps)} steps", file=sys.stderr)
        return 1
    kept = steps[args.warmup:]
    print(f"driver between the generation's answer and the update's call, steps {args.warmup}-{len(steps)}, "
          f"load {os.getloadavg()[0]:.2f}: median (10th-90th percentile) ms")
    for key in kept[0]:
        xs = sorted(x[key] * 1e3 for x in kept)
        print(f"  {key:<16} {statistics.median(xs):6.2f}  ({xs[len(xs) // 10]:.2f}-{xs[9 * len(xs) // 10]:.2f})")
    return 0


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--response-length", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--modes", default="ray,inproc")
    p.add_argument("--override", nargs="*", default=[], help="extra Hydra overrides for both modes")
    p.add_argument("--ray-env", nargs="*", default=[], help="NAME=VALUE for the `ray+env` mode (e.g. Ray settings)")
    p.add_argument("--json")
    p.add_argument("--probe", action="store_true", help="only print the driver's and a Ray worker's settings")
    p.add_argument("--transport", action="store_true",
                   help="only time a batch's round trip to a Ray actor with Ray's default tensor pickling and verl_lite's")
    p.add_argument("--driver-gap", action="store_true",
                   help="only time, inside the driver, the work between the generation's answer and the update's call")
    args = p.parse_args(argv)
    if args.driver_gap:
        return driver_gap(args)
    if args.probe:
        return probe(args)
    if args.transport:
        return transport(args)
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data = task_data(tmp)
        for rnd in range(args.rounds):
            for mode in args.modes.split(","):
                r = run(mode, data, os.path.join(tmp, f"{mode}{rnd}"), args)
                r["round"] = rnd
                results.append(r)
                c = r["compute"]
                print(f"bench: round {rnd} {mode}: compute pid {c['pid']} {c['cpu_ms_per_step']:.1f} ms CPU/step, "
                      f"all {r['total_cpu_ms_per_step']:.1f}, wall {r['wall_step_s'] * 1e3:.0f} ms/step, "
                      f"load {r['load']}", flush=True)
    print(f"\nmain job, {args.response_length}-token responses, steps {args.warmup}-{args.steps}, commit {commit}, "
          f"load average {min(l for r in results for l in r['load']):.2f}-{max(l for r in results for l in r['load']):.2f}"
          f" on {os.cpu_count()} cores")
    print(f"{'round':>5} {'mode':<7} {'compute CPU ms/step':>20} {'all procs CPU ms/step':>22} {'wall ms/step':>13} {'period ms':>10} "
          f"{'gen ms':>7} {'update ms':>10} {'gen CPU ms':>11} {'update CPU ms':>14} {'sys ms':>7} {'faults':>7} {'threads':>8} {'p10 wall':>9} {'p10 update CPU':>15}")
    for r in results:
        print(f"{r['round']:>5} {r['mode']:<7} {r['compute']['cpu_ms_per_step']:>20.1f} {r['total_cpu_ms_per_step']:>22.1f} "
              f"{r['wall_step_s'] * 1e3:>13.0f} {r['period_s'] * 1e3:>10.1f} {r['gen_s'] * 1e3:>7.0f} {r['update_s'] * 1e3:>10.0f} "
              f"{r['gen_cpu_s'] * 1e3:>11.1f} {r['update_cpu_s'] * 1e3:>14.1f} "
              f"{r['compute']['sys_ms_per_step']:>7.1f} {r['compute']['minflt_per_step']:>7.0f} {r['compute']['threads']:>8} "
              f"{r['wall_step_p10_s'] * 1e3:>9.0f} {r['update_cpu_p10_s'] * 1e3:>15.1f}")
    modes = args.modes.split(",")
    if "inproc" in modes:  # speed against in-process, by the period (wall seconds per step), round by round
        for mode in (m for m in modes if m != "inproc"):
            ratios = [base["period_s"] / r["period_s"] for base in results if base["mode"] == "inproc"
                      for r in results if r["mode"] == mode and r["round"] == base["round"]]
            print(f"\n{mode} / inproc speed (in-process period over {mode}'s), per round: "
                  f"{' '.join(f'{x:.2f}x' for x in ratios)}; median {sorted(ratios)[len(ratios) // 2]:.2f}x")
    last = {r["mode"]: r for r in results}
    for mode, r in last.items():
        print(f"\n{mode}: the computing process runs with {r['env']}")
        print(f"\n{mode}: processes by CPU ms/step (last round)")
        for q in r["procs"][:8]:
            print(f"  {q['cpu_ms_per_step']:>7.1f}  nice {q['nice']:>3}  threads {q['threads']:>3}  {q['cmd'][:70]}"
                  f"  busiest: {q['busy_threads'][:3]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
