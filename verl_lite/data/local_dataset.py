"""Reading a local copy of a Hugging Face dataset (jsonl or parquet, in the dataset's own layout)
and writing verl's parquet rows from it: what examples/data_preprocess/gsm8k.py and math.py share.

A dataset script gives a `Dataset` (its name, the folder of its Hugging Face configuration, the
columns it needs, the function that turns one record into verl's row) and calls `main`. Nothing is
downloaded. Bad input raises `InputError`, whose message names the file and line or row; `main`
prints it as one line and returns 1, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

SPLITS = ("train", "test")


class InputError(Exception):
    """Input that cannot be turned into rows; the message names the file and what is expected."""


@dataclass
class Dataset:
    name: str  # the Hugging Face dataset, e.g. openai/gsm8k
    config_dir: str  # the folder of the configuration verl reads, e.g. main
    columns: Tuple[str, ...]  # the columns every record needs
    make_row: Callable[[str, Dict[str, Any], str, int], Dict[str, Any]]  # (where, record, split, index) -> row
    default_save_dir: str
    columns_note: str = ""  # said after the columns in errors
    write_examples: bool = False  # also write {split}_example.json (the first row), as verl's MATH script


def split_files(dataset: Dataset, root: str, split: str) -> List[str]:
    """The files holding `split` in `root`, in one of the accepted layouts."""
    layouts = [
        [os.path.join(root, f"{split}.jsonl")],
        [os.path.join(root, f"{split}.parquet")],
        _shards(os.path.join(root, dataset.config_dir), split),
        _shards(root, split),
    ]
    found = [files for files in layouts if files and all(os.path.isfile(f) for f in files)]
    if not found:
        raise InputError(f"{root} holds no {split} split; expected {split}.jsonl, {split}.parquet or "
                         f"{dataset.config_dir}/{split}-*.parquet (the layout of the Hugging Face dataset {dataset.name})")
    if len(found) > 1:
        raise InputError(f"{root} holds the {split} split twice ({found[0][0]} and {found[1][0]}); keep one of them")
    return found[0]


def _shards(folder: str, split: str) -> List[str]:
    if not os.path.isdir(folder):
        return []
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))
            if n.startswith(f"{split}-") and n.endswith(".parquet")]


def read_records(dataset: Dataset, path: str) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(where, record) for each row of a .jsonl or .parquet file; `where` names the file and line/row."""
    expected = f"columns {', '.join(dataset.columns)}{dataset.columns_note}"
    if path.endswith(".jsonl"):
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise InputError(f"{path} line {number} is not UTF-8 text; "
                                     f"each line must be one JSON object with the {expected}") from None
                except json.JSONDecodeError as e:
                    raise InputError(f"{path} line {number} is not valid JSON ({e}); "
                                     f"each line must be one JSON object with the {expected}") from None
                if not isinstance(record, dict):
                    raise InputError(f"{path} line {number} is a JSON {type(record).__name__}, not an object; "
                                     f"each line must be one JSON object with the {expected}")
                missing = [c for c in dataset.columns if c not in record]
                if missing:
                    raise InputError(f"{path} line {number} has no '{missing[0]}'; "
                                     f"each line must be one JSON object with the {expected}")
                yield f"{path} line {number}", record
        return
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise InputError(f"{path} is not a readable parquet file ({type(e).__name__}: {_one_line(e)})") from None
    missing = [c for c in dataset.columns if c not in table.column_names]
    if missing:
        raise InputError(f"{path} has no column '{missing[0]}' (columns: {', '.join(table.column_names)}); "
                         f"expected the {expected}")
    for i, record in enumerate(table.to_pylist()):
        yield f"{path} row {i}", record


def pop_text(row: Dict[str, Any], where: str, *names: str) -> List[str]:
    """Remove the named columns from a record and return them; each must be a string."""
    values = [row.pop(name) for name in names]
    for name, value in zip(names, values):
        if not isinstance(value, str):
            raise InputError(f"{where}: '{name}' is {type(value).__name__}, expected a string")
    return values


def convert_split(dataset: Dataset, root: str, split: str) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    for path in split_files(dataset, root, split):
        for where, record in read_records(dataset, path):
            rows.append(dataset.make_row(where, record, split, len(rows)))
    if not rows:
        raise InputError(f"the {split} split in {root} holds no rows")
    return rows


def to_table(rows: List[Dict[str, Any]], split: str) -> Any:
    import pyarrow as pa

    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowException, TypeError, ValueError) as e:  # a kept column whose values differ in type
        raise InputError(f"the {split} rows cannot form one parquet table ({type(e).__name__}: {_one_line(e)}); "
                         "give each column one type in every row") from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def main(dataset: Dataset, description: str, argv: Optional[Sequence[str]] = None) -> int:
    """The command line of a dataset script: read the local copy, write train/test.parquet."""
    import pyarrow.parquet as pq

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--local_dataset_path", default=None, help="directory holding the local copy of the dataset")
    parser.add_argument("--local_save_dir", default=dataset.default_save_dir, help="directory for train.parquet and test.parquet")
    parser.add_argument("--local_dir", default=None, help="deprecated name of --local_save_dir")
    args = parser.parse_args(argv)
    save_dir = args.local_save_dir
    if args.local_dir is not None:
        print("Warning: Argument 'local_dir' is deprecated. Please use 'local_save_dir' instead.")
        save_dir = args.local_dir
    try:
        if args.local_dataset_path is None:
            raise InputError(f"--local_dataset_path is required: this script never downloads; copy the Hugging Face "
                             f"dataset {dataset.name} to a directory first and pass that directory")
        root = os.path.expanduser(args.local_dataset_path)
        if not os.path.isdir(root):
            raise InputError(f"--local_dataset_path {args.local_dataset_path} is not a directory; pass the "
                             f"directory holding the local copy of {dataset.name}")
        tables = {split: to_table(convert_split(dataset, root, split), split) for split in SPLITS}
        save_dir = os.path.expanduser(save_dir)
        os.makedirs(save_dir, exist_ok=True)
        for split, table in tables.items():
            path = os.path.join(save_dir, f"{split}.parquet")
            pq.write_table(table, path)
            if dataset.write_examples:
                with open(os.path.join(save_dir, f"{split}_example.json"), "w", encoding="utf-8") as f:
                    json.dump(table.slice(0, 1).to_pylist()[0], f, indent=2, default=str)
            print(f"wrote {table.num_rows} rows to {path}")
    except (InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
