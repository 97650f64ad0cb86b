"""Training entry: `python -m verl_lite.main <overrides...>` (what the launcher scripts call).

Composes the config, runs the preflight check for training (layout, batch arithmetic, data and
model paths, checkpoint dir, device and packages), prints every problem and exits 1 without a
traceback, or hands the config to the trainer.
"""

from __future__ import annotations

import logging
import sys
from typing import Optional, Sequence

PROG = "verl_lite.main"
TRAINER_MODULE = "verl_lite.trainer.run"


def _report(problems: Sequence[str]) -> None:
    print(f"{PROG}: {len(problems)} problem{'s' if len(problems) != 1 else ''}:", file=sys.stderr)
    for p in problems:
        print(f"  - {p}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from verl_lite.check import collect_problems
    from verl_lite.config.compose import compose_config

    overrides = list(sys.argv[1:] if argv is None else argv)
    if overrides[:1] in (["-h"], ["--help"]):
        print(
            f"usage: python -m {PROG} key=value [+key=value ~key ...]\n"
            f"Checks the config (as python -m verl_lite.check --training does), then trains."
        )
        return 0
    cfg, problems = compose_config(overrides)
    problems += [p for p in collect_problems(cfg, for_training=True) if p not in problems]
    if problems:
        _report(problems)
        return 1
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from verl_lite.trainer.run import run
    except ModuleNotFoundError as e:
        if e.name != TRAINER_MODULE:
            raise  # a dependency of the trainer is missing: show the real import error
        print(
            f"{PROG}: the config is valid, but this checkout has no trainer ({TRAINER_MODULE} is missing)",
            file=sys.stderr,
        )
        return 1
    return int(run(cfg))


if __name__ == "__main__":
    sys.exit(main())
