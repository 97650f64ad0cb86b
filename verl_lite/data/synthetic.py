"""A small synthetic task for the embedded default run, written as verl-format parquet files.

Tasks (prompt -> answer, digits only, so the char tokenizer covers them):
  reverse  "3141=" -> "1413"
  copy     "3141=" -> "3141"
Score: characters in the right place over max(len(answer), len(response)), so an exact answer
scores 1.0, a right answer with trailing junk scores less, and a random policy scores ~0.05.

Usage: python -m verl_lite.data.synthetic --out-dir data/tiny [--task copy] [--digits 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

logger = logging.getLogger(__name__)

TASKS = ("reverse", "copy")
DATA_SOURCE_PREFIX = "verl_lite/"


def make_example(rng: random.Random, task: str, digits: int) -> Dict[str, str]:
    if task not in TASKS:
        raise ValueError(f"unknown synthetic task {task!r} (choose one of {', '.join(TASKS)})")
    number = "".join(rng.choice("0123456789") for _ in range(digits))
    answer = number[::-1] if task == "reverse" else number
    return {"question": f"{number}=", "answer": answer}


def make_rows(n: int, task: str, digits: int, seed: int, split: str) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        ex = make_example(rng, task, digits)
        rows.append(
            {
                "data_source": f"{DATA_SOURCE_PREFIX}{task}",
                "prompt": [{"role": "user", "content": ex["question"]}],
                "ability": "digits",
                "reward_model": {"style": "rule", "ground_truth": ex["answer"]},
                "extra_info": {"split": split, "index": i, "question": ex["question"]},
            }
        )
    return rows


def write_parquet(rows: List[Dict[str, Any]], path: str) -> None:
    """Write rows atomically (temp file + rename) so an interrupted run leaves no half file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)


def generate(
    out_dir: str,
    task: str = "copy",
    digits: int = 3,
    n_train: int = 4096,
    n_val: int = 128,
    seed: int = 0,
    force: bool = False,
) -> Dict[str, str]:
    """Write train.parquet and val.parquet under out_dir (kept if present unless force)."""
    if digits < 1:
        raise ValueError(f"--digits must be >= 1, got {digits}")
    return write_splits(out_dir, n_train, n_val, seed, force,
                        lambda n, split_seed, split: make_rows(n, task, digits, split_seed, split))


def write_splits(out_dir: str, n_train: int, n_val: int, seed: int, force: bool,
                 make_split: Callable[[int, int, str], List[Dict[str, Any]]]) -> Dict[str, str]:
    """Write train.parquet (`make_split(n_train, seed, "train")`) and val.parquet (`make_split(n_val,
    seed + 1, "val")`) under out_dir, a file already there kept unless force; returns split -> path."""
    paths = {"train": os.path.join(out_dir, "train.parquet"), "val": os.path.join(out_dir, "val.parquet")}
    for split, n, split_seed in (("train", n_train, seed), ("val", n_val, seed + 1)):
        path = paths[split]
        if os.path.exists(path) and not force:
            logger.info("keeping existing %s", path)
            continue
        write_parquet(make_split(n, split_seed, split), path)
        logger.info("wrote %d %s rows to %s", n, split, path)
    return paths


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Optional[dict] = None) -> float:
    """Fraction of answer characters in place, over max(len(answer), len(response))."""
    response = solution_str.strip()
    target = str(ground_truth)
    if not target:
        return 0.0
    matches = sum(1 for a, b in zip(response, target) if a == b)
    return matches / max(len(target), len(response))


def generator_cli(argv: Optional[List[str]], prog: str, description: str, tasks: Sequence[str],
                  default_task: str, n_train: int, n_val: int,
                  generate_from: Callable[[argparse.Namespace], Dict[str, str]],
                  add_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None,
                  describe: Optional[Callable[[str], str]] = None) -> int:
    """The command line of a synthetic data generator: --out-dir, --task, the generator's own options
    (`add_arguments`), --train, --val, --seed, --force; `generate_from(args)` writes the files and
    returns split -> path, printed one a line (with `describe(path)` after it, when given). A bad value
    or an unwritable directory is one `verl_lite: ...` line on stderr and exit status 1."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--task", default=default_task, choices=tuple(tasks))
    if add_arguments is not None:
        add_arguments(parser)
    parser.add_argument("--train", type=int, default=n_train, help="training rows")
    parser.add_argument("--val", type=int, default=n_val, help="validation rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        paths = generate_from(args)
        notes = {split: f" ({describe(path)})" if describe else "" for split, path in paths.items()}
    except (ValueError, OSError) as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        return 1
    for split, path in paths.items():
        print(f"{split}: {path}{notes[split]}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return generator_cli(
        argv, "python -m verl_lite.data.synthetic", __doc__.splitlines()[0], TASKS, "copy", 4096, 128,
        lambda a: generate(a.out_dir, a.task, a.digits, a.train, a.val, a.seed, a.force),
        lambda parser: parser.add_argument("--digits", type=int, default=3))


if __name__ == "__main__":
    sys.exit(main())
