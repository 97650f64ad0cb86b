"""Training entry: `python -m verl_lite.main <overrides...>` (what the launcher scripts call).

Composes the config, runs the preflight check for training (layout, batch arithmetic, data and
model paths, tokenizer, checkpoint dir and its free space, device count and packages), prints every
problem and exits 1 without a traceback, or hands the config to the trainer.

Exit status: 0 done; 1 a problem or a failure (one line on stderr naming it and the step it
interrupted; HYDRA_FULL_ERROR=1 or VERL_LITE_TRACEBACK=1 shows the traceback too); 2 an internal error
of the check (a bug: one line with the exception and the command line to report, as in
`verl_lite.check`); 130/143 stopped by SIGINT/SIGTERM after saving a checkpoint.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Optional, Sequence

from verl_lite.check import full_traceback_wanted, internal_error
from verl_lite.preflight.run import collect_warnings, compose_and_check
from verl_lite.secrets import redact

PROG = "verl_lite.main"


def _report(problems: Sequence[str]) -> None:
    print(f"{PROG}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:", file=sys.stderr)
    for p in problems:
        print(f"  - {redact(p)}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    if overrides[:1] in (["-h"], ["--help"]):
        print(
            f"usage: python -m {PROG} key=value [+key=value ~key ...]\n"
            f"Checks the config (as python -m verl_lite.check --training does), then trains."
        )
        return 0
    try:
        cfg, problems = compose_and_check(overrides, for_training=True)
        if problems:
            _report(problems)
            return 1
        for warning in collect_warnings(cfg):
            print(redact(f"{PROG}: warning: {warning}"), file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - every bad line is a problem above; what escapes is a bug
        return internal_error(PROG, e, overrides)  # before torch and Ray start
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from verl_lite.trainer.run import run  # torch and Ray: only once the config passed

    try:
        return int(run(cfg))
    except KeyboardInterrupt:  # Ctrl-C before the trainer's own handler was installed
        print(f"{PROG}: interrupted before training started", file=sys.stderr)
        return 130
    except Exception as e:  # one line naming what failed and where, not a traceback
        from verl_lite.trainer.run import describe_failure  # loaded above by run

        if full_traceback_wanted():
            traceback.print_exc()
        print(redact(f"{PROG}: {describe_failure(e)}{_save_traceback(cfg)}"), file=sys.stderr)
        return 1


def _save_traceback(cfg) -> str:
    """Write the traceback next to the checkpoints (a long run's failure must be debuggable without
    a rerun); returns the note pointing at it, or "" when it could not be written."""
    path = os.path.join(os.path.abspath(os.path.expanduser(cfg.trainer.default_local_dir)), "last_error.txt")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(redact(traceback.format_exc()))
    except OSError:
        return ""
    return f" (traceback: {path})"


if __name__ == "__main__":
    sys.exit(main())
