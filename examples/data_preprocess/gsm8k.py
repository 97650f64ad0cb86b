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

import re  # noqa: E402 (imports after the sys.path fix)

from verl_lite.data.local_dataset import Dataset, InputError, main, pop_text  # noqa: E402

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def make_row(where, record, split, index):
    """verl's row for one GSM8K example: the columns besides question and answer, then verl's."""
    row = dict(record)
    question, answer = pop_text(row, where, "question", "answer")
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


DATASET = Dataset(name=DATA_SOURCE, config_dir="main", columns=("question", "answer"), make_row=make_row,
                  default_save_dir="~/data/gsm8k")

if __name__ == "__main__":
    sys.exit(main(DATASET, " ".join(__doc__.split("\n\n")[0].split())))
