"""verl_lite's verdict on each run of the corpus (runs.json, every training run of verl's
repository at the pinned commit): the keys `python -m verl_lite.check` refuses, one per problem,
in order. An empty list means the run passes unchanged.

    python tests/py/verl_corpus/status.py           # prints the figures
    python tests/py/verl_corpus/status.py --write   # rewrites expected.json and docs/verl_corpus.md

tests/py/test_verl_corpus.py compares today's verdicts with expected.json and the docs with what
this module writes, so a change of behaviour in either direction shows in the diff of both.
"""

from __future__ import annotations

import collections
import functools
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS_FILE = HERE / "runs.json"
EXPECTED_FILE = HERE / "expected.json"
DOC = HERE.parents[2] / "docs" / "verl_corpus.md"
# verl's entry points -> the trainer config verl_lite composes for them (--config-name on the line wins)
ENTRY_CONFIG = {
    "verl.experimental.fully_async_policy.fully_async_main": "fully_async_ppo_trainer",
    "verl.experimental.one_step_off_policy.main_ppo": "one_step_off_ppo_trainer",
}
# the key a problem is about: "<role>: <key>=...", "<key>=...", "unknown key '<key>'", "cannot add '<key>'",
# "--config-name=...",
# "'<group>@<package>=...'" (a Hydra group line)
KEY = re.compile(r"(?:(?:actor|ref|critic): )?(?:unknown key |cannot add |')?'?(--config-name|--config-path|model_engine|"
                 r"[A-Za-z_][\w@]*(?:\.[A-Za-z_0-9][\w@-]*)+)")


@functools.lru_cache(maxsize=1)
def runs() -> dict:
    return {run["name"]: run for run in json.loads(RUNS_FILE.read_text())}


def line_of(run: dict) -> list:
    """The overrides verl_lite is given for the run: its device, its entry point's trainer config
    (unless the line names one), then verl's line as recorded."""
    head = [f"trainer.device={run['device']}"]
    named = any(a.partition("=")[0] in ("--config-name", "-cn") for a in run["argv"])
    if run["entry"] in ENTRY_CONFIG and not named:
        head.append(f"--config-name={ENTRY_CONFIG[run['entry']]}")
    return head + list(run["argv"])


def problems_of(run: dict) -> list:
    from verl_lite.preflight.run import compose_and_check

    return compose_and_check(line_of(run), for_training=False)[1]


def key_of(problem: str) -> str:
    match = KEY.match(problem)
    return match.group(1) if match else problem


def verdicts() -> dict:
    return {name: [key_of(p) for p in problems_of(run)] for name, run in sorted(runs().items())}


def figures(table: dict) -> dict:
    every = runs()
    composed = [name for name, run in every.items() if run["verl_composes"]]
    blocking = collections.Counter(k for name in composed for k in dict.fromkeys(table[name]))
    return {
        "runs": len(every),
        "scripts": len({run["script"] for run in every.values()}),
        "composed": len(composed),
        "passing": sum(not table[name] for name in composed),
        "passing_all": sum(not keys for keys in table.values()),
        "blocking": blocking.most_common(),
    }


def doc_text(table: dict) -> str:
    f = figures(table)
    lines = [
        "# verl's repository as the acceptance corpus",
        "",
        "<!-- written by `python tests/py/verl_corpus/status.py --write`; tests/py/test_verl_corpus.py checks it -->",
        "",
        f"Every training run of verl's repository at the pinned commit: {f['runs']} runs from {f['scripts']} "
        "scripts (`examples/` but SFT, `verl/experimental/*/shell`, `tests/special_*`, the quickstart; each "
        "with its default environment and, where the script reads them, `DEVICE=npu` and "
        "`DEVICE=npu USE_MINDSPEED_BRIDGE=True`), extracted by `tests/py/verl_corpus/extract.py`. Each run is "
        "checked with `python -m verl_lite.check` for the device it targets, as verl's user types it.",
        "",
        f"- verl's own Hydra composes **{f['composed']}** of the {f['runs']} runs (the others fail in verl "
        "too: a key verl lacks, a config or module not in its tree).",
        f"- Of those, **{f['passing']}** pass verl_lite's check unchanged "
        f"({100 * f['passing'] / max(f['composed'], 1):.0f}%).",
        "- Every other run is refused line by line: each line verl_lite cannot honour is named with "
        "\"not supported\" and what is missing.",
        "",
        "## What the other runs need",
        "",
        "The keys still refused, by how many of the runs verl composes each one blocks (a run is counted "
        "once per key):",
        "",
        "| key | runs |",
        "|---|---|",
    ]
    lines += [f"| `{key}` | {count} |" for key, count in f["blocking"]]
    return "\n".join(lines) + "\n"


def main(argv: list) -> int:
    table = verdicts()
    if "--write" in argv:
        EXPECTED_FILE.write_text(json.dumps(table, indent=1) + "\n")
        DOC.write_text(doc_text(table))
    f = figures(table)
    print(f"{f['runs']} runs, {f['composed']} composed by verl, {f['passing']} of those pass "
          f"({f['passing_all']} of all runs)")
    for key, count in f["blocking"][:40]:
        print(f"  {count:4d}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
