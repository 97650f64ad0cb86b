"""verl_lite's verdict on each run of the two corpora (runs.json, every training run of verl's
scripts at the pinned commit; docs_runs.json, every training command line of its docs, written by
docs_extract.py): the keys `python -m verl_lite.check` refuses, one per problem, in order. An empty
list means the run passes unchanged.

    python tests/py/verl_corpus/status.py           # prints the figures of both
    python tests/py/verl_corpus/status.py --write   # rewrites expected.json, docs_expected.json, docs/verl_corpus.md

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
DOCS_RUNS_FILE = HERE / "docs_runs.json"
DOCS_EXPECTED_FILE = HERE / "docs_expected.json"
DOC = HERE.parents[2] / "docs" / "verl_corpus.md"
# verl's entry points -> the trainer config verl_lite composes for them (--config-name on the line wins)
ENTRY_CONFIG = {
    "verl.experimental.fully_async_policy.fully_async_main": "fully_async_ppo_trainer",
    "verl.experimental.one_step_off_policy.main_ppo": "one_step_off_ppo_trainer",
}
# the key a problem is about: "<role>: <key>=...", "<key>=...", "unknown key '<key>'", "--config-name=...",
# "cannot add '<key>'" (`+` on a key the schema has), "'<group>@<package>=...'" (a Hydra group line)
KEY = re.compile(r"(?:(?:actor|ref|critic): )?(?:unknown key |cannot add |')?'?(--config-name|--config-path|model_engine|"
                 r"[A-Za-z_][\w@]*(?:\.[A-Za-z_0-9][\w@-]*)+)")


@functools.lru_cache(maxsize=2)
def runs(file: Path = RUNS_FILE) -> dict:
    return {run["name"]: run for run in json.loads(file.read_text())}


def docs_runs() -> dict:
    return runs(DOCS_RUNS_FILE)


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


def refusals(run: dict, expected: list, fragment: dict) -> tuple:
    """(the run's problems, what is wrong with them): the keys differ from `expected`, or a refusal does
    not say what `fragment` says for its key (one text or a tuple of alternatives; default "not supported")."""
    problems = problems_of(run)
    keys = [key_of(p) for p in problems]
    if keys != expected:
        return problems, [f"keys {keys} != expected {expected}"]
    wrong = []
    for key, problem in zip(keys, problems):
        texts = fragment.get(key, "not supported")
        if not any(t in problem for t in ((texts,) if isinstance(texts, str) else texts)):
            wrong.append(problem)
    return problems, wrong


def verdicts(every: dict = None) -> dict:
    every = runs() if every is None else every
    return {name: [key_of(p) for p in problems_of(run)] for name, run in sorted(every.items())}


def figures(table: dict, every: dict = None) -> dict:
    every = runs() if every is None else every
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


def doc_text(table: dict, docs_table: dict) -> str:
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
    d = figures(docs_table, docs_runs())
    lines += [
        "",
        "## verl's documented command lines",
        "",
        f"Every training command line in the code blocks of verl's docs at the pinned commit (docs/**/*.md and "
        f"*.rst): {d['runs']} lines from {len({r['script'].split(':')[0] for r in docs_runs().values()})} pages, "
        "extracted by `tests/py/verl_corpus/docs_extract.py` into `docs_runs.json` with the page and line of "
        "each, and checked as above (a line that names no device is checked for cuda, verl's default). A "
        "block's variables are expanded as bash does; what launches the command elsewhere (`ray job submit "
        "... --`, `srun`, a `$ ` prompt), comment lines inside the command and `...` placeholders are left out (each record lists its edits).",
        "",
        f"- verl's own Hydra composes **{d['composed']}** of the {d['runs']} (the others: a module verl's tree "
        "does not have, a key verl lacks).",
        f"- Of those, **{d['passing']}** pass verl_lite's check unchanged.",
        "",
        "| line | refused keys |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {', '.join(f'`{k}`' for k in dict.fromkeys(keys)) or 'passes'} |"
              for name, keys in sorted(docs_table.items())]
    return "\n".join(lines) + "\n"


def main(argv: list) -> int:
    table, docs_table = verdicts(), verdicts(docs_runs())
    if "--write" in argv:
        EXPECTED_FILE.write_text(json.dumps(table, indent=1) + "\n")
        DOCS_EXPECTED_FILE.write_text(json.dumps(docs_table, indent=1) + "\n")
        DOC.write_text(doc_text(table, docs_table))
    for title, f in (("scripts", figures(table)), ("docs", figures(docs_table, docs_runs()))):
        print(f"{title}: {f['runs']} runs, {f['composed']} composed by verl, {f['passing']} of those pass "
              f"({f['passing_all']} of all runs)")
        for key, count in f["blocking"][:40]:
            print(f"  {count:4d}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
