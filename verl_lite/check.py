"""Preflight check: `python -m verl_lite.check <overrides...>` composes the config, reports every
problem at once (exit 1, no traceback: one line per problem, naming the key and the fix) or prints
what the run would do (exit 0): the target device, each role's parallel layout and engine class, the
MindSpeed repatch dict on npu+megatron, and the worker runtime env. No torch, megatron, ray or transformers is imported, so it answers in
well under a second on a laptop, for a cluster's layout.

The rules live in `verl_lite/preflight/` (one module per subject, `preflight/run.py` runs them) and
the summary in `preflight/summary.py`; this module is the command line. `--training` adds what only
matters on the machine that trains (data and model paths, the checkpoint dir, the device, packages).

An exception that no rule turned into a problem is a bug in verl_lite: exit 2 with one line naming the
exception, where it was raised and the command line, asking to report it; HYDRA_FULL_ERROR=1 (verl's
switch for Hydra's full traceback) or VERL_LITE_TRACEBACK=1 prints the traceback as well.

Secrets: values of env vars whose names contain KEY, TOKEN (not TOKENIZER), SECRET or PASSWORD
are printed as <masked> (`redact`), here and in the trainer's logs, wherever they appear.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback
from typing import List, Optional, Sequence

from verl_lite.config.verl_names import conversion_notes
from verl_lite.preflight.run import collect_warnings, compose_and_check, names_model
from verl_lite.preflight.summary import summarize
from verl_lite.secrets import redact

PROG = "verl_lite.check"


USAGE = f"""usage: python -m {PROG} [--training] key=value [+key=value ++key=value ~key ...]

Compose a verl_lite run config and check it without starting anything: print every problem
(exit 1) or a summary of devices, layouts, engine classes, repatch dicts and worker env (exit 0).
  --training  also check data and model paths, the checkpoint dir, the device and packages
Overrides are applied in order (the last one wins); see docs/config.md."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return 0
    try:
        return _check(args)
    except Exception as e:  # noqa: BLE001 - every bad line is a problem above; what escapes is a bug
        return internal_error(PROG, e, args)


def _check(args: List[str]) -> int:
    for_training = "--training" in args
    overrides = [a for a in args if a != "--training"]  # order kept: later overrides win
    start = time.perf_counter()
    cfg, problems = compose_and_check(overrides, for_training)
    if problems:
        print(f"{PROG}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:", file=sys.stderr)
        for p in problems:
            print(f"  - {redact(p)}", file=sys.stderr)
        return 1
    print(redact(summarize(cfg)))
    for note in conversion_notes(overrides):  # verl's legacy spellings, converted as verl converts them
        print(redact(f"verl spelling : {note}"))
    if not for_training and not names_model(overrides):
        print(f"{PROG}: note: the line names no model (actor_rollout_ref.model.path): head, expert, Gated DeltaNet "
              f"and length checks were skipped; a run would load verl_lite's default "
              f"{cfg.actor_rollout_ref.model.path}", file=sys.stderr)
    for warning in collect_warnings(cfg):
        print(redact(f"{PROG}: warning: {warning}"), file=sys.stderr)
    print(f"{PROG}: OK ({time.perf_counter() - start:.2f} s)")
    return 0


INTERNAL_ERROR_STATUS = 2


def full_traceback_wanted() -> bool:
    """HYDRA_FULL_ERROR=1 (verl's and Hydra's switch) or VERL_LITE_TRACEBACK=1: show the traceback."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1" or os.environ.get("VERL_LITE_TRACEBACK") == "1"


def internal_error(prog: str, error: Exception, args: Sequence[str]) -> int:
    """What an exception no rule turned into a problem becomes: a bug in verl_lite, not in the line. One
    line naming the exception, where it was raised and the command line to report (exit 2); with
    HYDRA_FULL_ERROR=1 the traceback too. Called from an `except` block."""
    if full_traceback_wanted():
        traceback.print_exc()
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}verl_lite{os.sep}" in f.filename]
    where = ""
    if frames:
        path = frames[-1].filename
        where = f" at {path[path.rindex(os.sep + 'verl_lite' + os.sep) + 1:]}:{frames[-1].lineno}"
    detail = (str(error).strip().splitlines() or [""])[0]
    command = " ".join(shlex.quote(a) for a in args)
    print(redact(f"{prog}: internal error: {type(error).__name__}: {detail}{where} while checking `{command}`; "
                 "please report it with the command line (HYDRA_FULL_ERROR=1 shows the traceback)"), file=sys.stderr)
    return INTERNAL_ERROR_STATUS


if __name__ == "__main__":
    sys.exit(main())
