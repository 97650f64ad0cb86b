#!/usr/bin/env python3
"""Wall time of the preflight check for each Qwen3.5 script, through the launcher (`CHECK=1`).

Usage:
  python bench/check_bench.py                 # every examples/grpo/run_qwen3_5_*.sh on cuda and npu, 5 runs each
  python bench/check_bench.py --runs 10 --devices npu
  python bench/check_bench.py --limit 1.0     # exit 1 when a median exceeds the limit (seconds)

Each run is `CHECK=1 DEVICE=<device> bash <script>`: the launcher's shell work plus
`python -m verl_lite.check` with the script's overrides. The "check" column is the time the check
itself reports (composition, rules and summary, without interpreter start-up). Runs are sequential
so that the figures are not inflated by the benchmark competing with itself.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parents[1]
# verl 0.9.1 took 11-13 s on this kind of machine to print a GRPO config (docs: shared facts).
VERL_PRINT_CONFIG_S = 11.0
OK_LINE = re.compile(r"verl_lite\.check: OK \(([0-9.]+) s\)")


def run_once(script: Path, device: str) -> Tuple[float, Optional[float], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVICE", "CHECK", "DRY_RUN"))}
    env.update(
        CHECK="1",
        DEVICE=device,
        PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    )
    start = time.perf_counter()
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, cwd=str(REPO_ROOT), timeout=120
    )
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{script.name} on {device} exited {result.returncode}:\n{result.stderr.strip()}")
    match = OK_LINE.search(result.stdout)
    return wall, float(match.group(1)) if match else None, result.stdout


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--devices", nargs="+", default=["cuda", "npu"], choices=["cuda", "npu", "cpu"])
    parser.add_argument("--limit", type=float, default=1.0, help="seconds; a median above it fails the benchmark")
    parser.add_argument(
        "--scripts", nargs="*", type=Path, default=sorted((REPO_ROOT / "examples" / "grpo").glob("run_qwen3_5_*.sh"))
    )
    args = parser.parse_args(argv)
    if not args.scripts:
        print("check_bench: no examples/grpo/run_qwen3_5_*.sh scripts found", file=sys.stderr)
        return 1

    print(f"{'script':<28} {'device':<6} {'min s':>6} {'median s':>9} {'max s':>6} {'check s':>8} {'vs verl':>8}")
    worst = 0.0
    for script in args.scripts:
        for device in args.devices:
            walls, inner = [], []
            for _ in range(args.runs):
                wall, check_s, _ = run_once(script, device)
                walls.append(wall)
                if check_s is not None:
                    inner.append(check_s)
            median = statistics.median(walls)
            worst = max(worst, median)
            inner_s = f"{statistics.median(inner):8.2f}" if inner else f"{'?':>8}"
            print(
                f"{script.name:<28} {device:<6} {min(walls):6.2f} {median:9.2f} {max(walls):6.2f} {inner_s} "
                f"{VERL_PRINT_CONFIG_S / median:7.0f}x"
            )
    verdict = "OK" if worst <= args.limit else "TOO SLOW"
    print(
        f"check_bench: worst median {worst:.2f} s, limit {args.limit:.2f} s: {verdict} "
        f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f})"
    )
    return 0 if worst <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
