"""Turn a local copy of GSM8K (openai/gsm8k) into verl's parquet rows: train.parquet and test.parquet.

Usage:
    python examples/data_preprocess/gsm8k.py --local_dataset_path DIR [--local_save_dir ~/data/gsm8k]

DIR holds each split (train, test) as the Hugging Face dataset lays it out, or as JSON lines:
    main/train-00000-of-00001.parquet, main/test-00000-of-00001.parquet   (a copy of openai/gsm8k)
    train.parquet, test.parquet   or   train.jsonl, test.jsonl             (one object a line)
with the columns `question` and `answer`. Nothing is downloaded: fetch the dataset yourself first.

Each row is written as verl's examples/data_preprocess/gsm8k.py writes it: data_source
"openai/gsm8k"; prompt, one user message: the question, a space and the instruction to answer after
"####"; ability "math"; reward_model {style: "rule", ground_truth: the number after the first
`#### ` of the answer, commas removed}; extra_info {split, index (the row's position in its split),
answer, question}. Columns other than question and answer are kept, before those. The default
reward scores these rows (data_source openai/gsm8k). `--local_dir` is the deprecated name of
`--local_save_dir`, as in verl. A missing directory, file or column, a malformed line or an answer
without `#### <number>` stops with one line naming the file (and line or row), and exit status 1.
"""

import os
import sys

# This directory holds math.py: left on sys.path, where Python puts a script's own directory, it would
# stand in for the standard library's math module in everything imported below.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402 (imports after the sys.path fix)
import json  # noqa: E402
import re  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

DATA_SOURCE = "openai/gsm8k"
CONFIG_DIR = "main"  # the Hugging Face dataset's configuration verl reads
SPLITS = ("train", "test")
COLUMNS = ("question", "answer")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


class InputError(Exception):
    """Input that cannot be turned into rows; the message names the file and what is expected."""


def split_files(root, split):
    """The files holding `split` in `root`, in one of the accepted layouts."""
    layouts = [
        [os.path.join(root, f"{split}.jsonl")],
        [os.path.join(root, f"{split}.parquet")],
        _shards(os.path.join(root, CONFIG_DIR), split),
        _shards(root, split),
    ]
    found = [files for files in layouts if files and all(os.path.isfile(f) for f in files)]
    if not found:
        raise InputError(f"{root} holds no {split} split; expected {split}.jsonl, {split}.parquet or "
                         f"{CONFIG_DIR}/{split}-*.parquet (the layout of the Hugging Face dataset {DATA_SOURCE})")
    if len(found) > 1:
        raise InputError(f"{root} holds the {split} split twice ({found[0][0]} and {found[1][0]}); keep one of them")
    return found[0]


def _shards(folder, split):
    if not os.path.isdir(folder):
        return []
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))
            if n.startswith(f"{split}-") and n.endswith(".parquet")]


def read_records(path):
    """(where, record) for each row of a .jsonl or .parquet file; `where` names the file and line/row."""
    expected = f"columns {', '.join(COLUMNS)}"
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
                missing = [c for c in COLUMNS if c not in record]
                if missing:
                    raise InputError(f"{path} line {number} has no '{missing[0]}'; "
                                     f"each line must be one JSON object with the {expected}")
                yield f"{path} line {number}", record
        return
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise InputError(f"{path} is not a readable parquet file ({type(e).__name__}: {_one_line(e)})") from None
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"{path} has no column '{missing[0]}' (columns: {', '.join(table.column_names)}); "
                         f"expected the {expected}")
    for i, record in enumerate(table.to_pylist()):
        yield f"{path} row {i}", record


def make_row(where, record, split, index):
    """verl's row for one GSM8K example: the columns besides question and answer, then verl's."""
    row = dict(record)
    question, answer = row.pop("question"), row.pop("answer")
    for name, value in (("question", question), ("answer", answer)):
        if not isinstance(value, str):
            raise InputError(f"{where}: '{name}' is {type(value).__name__}, expected a string")
    match = _ANSWER.search(answer)
    if match is None:
        raise InputError(f"{where}: the answer has no '#### <number>' to take the ground truth from")
    row.update({
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": match.group(1).replace(",", "")},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    })
    return row


def convert_split(root, split):
    rows = []
    for path in split_files(root, split):
        for where, record in read_records(path):
            rows.append(make_row(where, record, split, len(rows)))
    if not rows:
        raise InputError(f"the {split} split in {root} holds no rows")
    return rows


def to_table(rows, split):
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowException, TypeError, ValueError) as e:  # a kept column whose values differ in type
        raise InputError(f"the {split} rows cannot form one parquet table ({type(e).__name__}: {_one_line(e)}); "
                         "give each column one type in every row") from None


def _one_line(error):
    return " ".join(str(error).split())


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--local_dataset_path", default=None, help="directory holding the local copy of the dataset")
    parser.add_argument("--local_save_dir", default="~/data/gsm8k", help="directory for train.parquet and test.parquet")
    parser.add_argument("--local_dir", default=None, help="deprecated name of --local_save_dir")
    args = parser.parse_args(argv)
    save_dir = args.local_save_dir
    if args.local_dir is not None:
        print("Warning: Argument 'local_dir' is deprecated. Please use 'local_save_dir' instead.")
        save_dir = args.local_dir
    try:
        if args.local_dataset_path is None:
            raise InputError(f"--local_dataset_path is required: this script never downloads; copy the Hugging Face "
                             f"dataset {DATA_SOURCE} to a directory first and pass that directory")
        root = os.path.expanduser(args.local_dataset_path)
        if not os.path.isdir(root):
            raise InputError(f"--local_dataset_path {args.local_dataset_path} is not a directory; pass the "
                             f"directory holding the local copy of {DATA_SOURCE}")
        tables = {split: to_table(convert_split(root, split), split) for split in SPLITS}
        save_dir = os.path.expanduser(save_dir)
        os.makedirs(save_dir, exist_ok=True)
        for split, table in tables.items():
            path = os.path.join(save_dir, f"{split}.parquet")
            pq.write_table(table, path)
            print(f"wrote {table.num_rows} rows to {path}")
    except (InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
