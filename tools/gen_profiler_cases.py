"""Write tests/py/data/profiler_rollout_cases.json: which rollout replicas verl's profiler records, and the
names verl's relocate_results gives their traces, computed by verl's own functions on fixed inputs, for
tests/py/test_profiler.py to compare verl_lite's (decisions/profiling.py) with.

Runs in the environment where verl (the pinned checkout) imports (see tools/gen_core_algos_cases.py
for how /work/venv_verlref is made), never in verl_lite's:

    /work/venv_verlref/bin/python tools/gen_profiler_cases.py

- selection: whether verl's rollout server of a replica profiles (its _should_profile: check_enable, check_this_rank
  and is_discrete_mode of build_rollout_dist_profiler(replica, world_size, config)) for a rollout profiler section (enable, all_ranks, ranks; ranks are global ranks) and replicas of `world_size` ranks;
- relocation: verl's relocate_rollout_traces moving the files of a replica's directory into save_path, with
  keep_global_ranks = verl's rollout_profiler_global_ranks(config): the names it gives them, and the files it
  leaves in the replica's directory.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "py" / "data" / "profiler_rollout_cases.json"
VERL_SRC = Path("/work/verl_src")
VERL_COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"  # the pinned checkout (verl_keys.VERL_COMMIT)

SECTIONS = [  # (enable, all_ranks, ranks)
    (True, False, []), (True, False, [0]), (True, False, [1]), (True, False, [0, 8]), (True, False, [3, 5]),
    (True, True, []), (False, False, []), (False, True, [2]),
]
WORLD_SIZES = (1, 2, 4, 8)
REPLICAS = range(4)
# engine trace names: vLLM's (dp.._pp.._tp.._dcp.._ep.._rank<g>), SGLang's (-TP-<t>), older vLLM's (host/pid), and
# names with other parallel dimensions
TRACE_NAMES = [
    "dp0_pp0_tp0_dcp0_ep0_rank0.1764650000000000000.pt.trace.json.gz",
    "dp0_pp0_tp1_dcp0_ep1_rank1.1764650000000000001.pt.trace.json.gz",
    "dp1_pp0_tp1_dcp0_ep3_rank3.1764650000000000002.pt.trace.json.gz",
    "1764650000-TP-0.trace.json.gz", "1764650000-TP-1-DP-1.trace.json.gz", "host_1234.1764650000.pt.trace.json.gz",
    "worker-rank-7.trace.json",
]


def main() -> int:
    sys.path.insert(0, str(VERL_SRC))
    from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig, relocate_rollout_traces, \
        rollout_profiler_global_ranks, rollout_trace_dir
    from verl.utils.profiler.profile import build_rollout_dist_profiler

    selection, relocation = [], []
    for enable, all_ranks, ranks in SECTIONS:
        for world_size in WORLD_SIZES:
            cfg = ProfilerConfig(tool="torch", enable=enable, all_ranks=all_ranks, ranks=list(ranks), save_path="x",
                                 tool_config=None)
            chosen = []
            for r in REPLICAS:  # what verl's rollout server asks before it profiles (_should_profile)
                prof = build_rollout_dist_profiler(r, world_size, config=cfg,
                                                   tool_config=TorchProfilerToolConfig(discrete=True))
                if prof.check_enable() and prof.check_this_rank() and prof.is_discrete_mode():
                    chosen.append(r)
            selection.append({"enable": enable, "all_ranks": all_ranks, "ranks": ranks, "world_size": world_size,
                              "replicas": chosen})
            if not enable:
                continue
            for replica in (0, 1):
                with tempfile.TemporaryDirectory() as save:
                    cfg = ProfilerConfig(tool="torch", enable=True, all_ranks=all_ranks, ranks=list(ranks),
                                         save_path=save, tool_config=None, relocate_results=True)
                    src = rollout_trace_dir(cfg, replica)
                    os.makedirs(src)
                    for name in TRACE_NAMES:
                        Path(src, name).write_text("{}")
                    moved = relocate_rollout_traces(cfg, replica, world_size, rollout_profiler_global_ranks(cfg))
                    relocation.append({
                        "all_ranks": all_ranks, "ranks": ranks, "world_size": world_size, "replica": replica,
                        "moved": {name: None for name in TRACE_NAMES} | {
                            _source(path): os.path.basename(path) for path in moved},
                        "left": sorted(os.listdir(src))})
    OUT.write_text(json.dumps({"about": "verl's rollout profiler selection and relocate_rollout_traces names, "
                                        "from tools/gen_profiler_cases.py; do not edit.",
                               "verl_commit": VERL_COMMIT, "selection": selection, "relocation": relocation},
                              indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(selection)} selections, {len(relocation)} relocations")
    return 0


def _source(moved: str) -> str:
    """The trace name a relocated path came from (the part after verl's `rollout-replica..._` prefix)."""
    return os.path.basename(moved).split("_", 1)[1]


if __name__ == "__main__":
    sys.exit(main())
