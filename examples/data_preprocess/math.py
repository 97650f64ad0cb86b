"""Turn a local copy of MATH (DigitalLearningGmbH/MATH-lighteval) into verl's parquet rows:
train.parquet and test.parquet.

Usage:
    python examples/data_preprocess/math.py --local_dataset_path DIR [--local_save_dir ~/data/math]

DIR holds each split (train, test) as the Hugging Face dataset lays it out, or as JSON lines:
    data/train-00000-of-00001.parquet, data/test-00000-of-00001.parquet   (a copy of MATH-lighteval)
    train.parquet, test.parquet   or   train.jsonl, test.jsonl             (one object a line)
with the lighteval columns `problem`, `level`, `type` and `solution` (problem and solution are
required). Nothing is downloaded: fetch the dataset yourself first.

Each row is written as verl's examples/data_preprocess/math_dataset.py writes it: the columns other
than problem and solution (level, type) kept first, then data_source
"DigitalLearningGmbH/MATH-lighteval"; prompt, one user message: the problem, a space and the
instruction to answer within \\boxed{}; ability "math"; reward_model {style: "rule", ground_truth:
the last \\boxed{...} answer of the solution}; extra_info {split, index (the row's position in its
split)}. As verl, the first row of each split is also written as train_example.json and
test_example.json. The default reward scores these rows (verl_lite.reward.math). `--local_dir` is
the deprecated name of `--local_save_dir`, as in verl. A missing directory, file or column, a
malformed line or a solution without a \\boxed{...} answer stops with one line naming the file (and
line or row), and exit status 1.
"""

import os
import sys

# Python puts a script's own directory on sys.path; there this file, math.py, would stand in for the
# standard library's math module in everything imported below.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from verl_lite.data.local_dataset import Dataset, InputError, main, pop_text  # noqa: E402 (imports after the sys.path fix)
from verl_lite.reward.math import last_boxed_answer  # noqa: E402

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def make_row(where, record, split, index):
    """verl's row for one MATH example: the columns besides problem and solution, then verl's."""
    row = dict(record)
    problem, solution = pop_text(row, where, "problem", "solution")
    answer = last_boxed_answer(solution)
    if answer is None:
        raise InputError(f"{where}: the solution has no \\boxed{{...}} answer to take the ground truth from")
    row.update({
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index},
    })
    return row


# "data" is the folder of the Hugging Face dataset's default configuration.
DATASET = Dataset(name=DATA_SOURCE, config_dir="data", columns=("problem", "solution"), make_row=make_row,
                  default_save_dir="~/data/math", columns_note=" (level and type are kept as they are)",
                  write_examples=True)

if __name__ == "__main__":
    sys.exit(main(DATASET, " ".join(__doc__.split("\n\n")[0].split())))
