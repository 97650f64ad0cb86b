r"""Turn a local copy of Geometry3K (hiyouga/geometry3k) into verl's parquet rows: train.parquet and
test.parquet, with the images.

Usage:
    python examples/data_preprocess/geo3k.py --local_dataset_path DIR [--local_save_dir ~/data/geo3k]

DIR holds each split (train, test) as the Hugging Face dataset lays it out, or as JSON lines:
    data/train-00000-of-00001.parquet, data/test-00000-of-00001.parquet   (a copy of hiyouga/geometry3k)
    train.parquet, test.parquet   or   train.jsonl, test.jsonl             (one object a line)
with the columns `images` (a list of images, each {"bytes": ..., "path": ...} as the Hugging Face
Image feature stores it; in JSON lines, {"path": FILE} entries), `problem` (with one `<image>`
placeholder per image) and `answer`. The dataset's validation split is not read, as in verl.
Nothing is downloaded: fetch the dataset yourself first.

Each row is written as verl's examples/data_preprocess/geo3k.py writes it: data_source
"hiyouga/geometry3k"; prompt, one user message: the problem, a space and the instruction to think in
<think> </think> and answer in \boxed{}; images, the row's image entries as stored; ability "math";
reward_model {style: "rule", ground_truth: the answer}; extra_info {split, index (the row's position
in its split), answer, question (the problem)}. Columns other than images, problem and answer are
kept, before those. The default reward scores these rows (verl_lite.reward.geo3k, verl's mathruler
grading). `--local_dir` is the deprecated name of `--local_save_dir`, as in verl. A missing
directory, file or column, a malformed line, an image entry with neither bytes nor a path, image
bytes that are no image, or a problem whose `<image>` placeholders do not match its images stops
with one line naming the file (and line or row), and exit status 1.
"""

import io
import os
import sys

# This directory holds math.py: left on sys.path, where Python puts a script's own directory, it would
# stand in for the standard library's math module in everything imported below.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from verl_lite.data.local_dataset import Dataset, InputError, main, pop_text  # noqa: E402 (imports after the sys.path fix)

DATA_SOURCE = "hiyouga/geometry3k"
INSTRUCTION = (
    r"You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    r"The reasoning process MUST BE enclosed within <think> </think> tags. "
    r"The final answer MUST BE put in \boxed{}."
)
PLACEHOLDER = "<image>"


def check_images(where, images, problem):
    """The row's image entries as verl's dataset opens them: a list of {bytes} or {path} entries,
    bytes that PIL reads as an image, one `<image>` in the problem per image."""
    if not isinstance(images, list):
        raise InputError(f"{where}: 'images' is {type(images).__name__}, expected a list of "
                         "{{\"bytes\": ..., \"path\": ...}} entries")
    for i, entry in enumerate(images):
        if not isinstance(entry, dict) or (entry.get("bytes") is None and not entry.get("path")):
            raise InputError(f"{where}: image {i} is {entry!r:.80}; expected an entry with image bytes "
                             "('bytes') or a file ('path')")
        if entry.get("bytes") is not None:
            from PIL import Image, UnidentifiedImageError

            try:
                with Image.open(io.BytesIO(entry["bytes"])) as image:
                    image.verify()
            except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
                raise InputError(f"{where}: image {i} holds bytes that are no image PIL reads ({e})") from None
    placeholders = problem.count(PLACEHOLDER)
    if placeholders != len(images):
        raise InputError(f"{where}: the problem holds {placeholders} {PLACEHOLDER} placeholder(s) and the row "
                         f"{len(images)} image(s); the processor puts image i at the i-th {PLACEHOLDER}, so the "
                         "counts must match")


def make_row(where, record, split, index):
    """verl's row for one Geometry3K example: the columns besides images, problem and answer, then verl's."""
    row = dict(record)
    images = row.pop("images")
    problem, answer = pop_text(row, where, "problem", "answer")
    check_images(where, images, problem)
    row.update({
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem + " " + INSTRUCTION}],
        "images": images,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": problem},
    })
    return row


# "data" is the folder of the Hugging Face dataset's default configuration.
DATASET = Dataset(name=DATA_SOURCE, config_dir="data", columns=("images", "problem", "answer"), make_row=make_row,
                  default_save_dir="~/data/geo3k")

if __name__ == "__main__":
    sys.exit(main(DATASET, " ".join(__doc__.split("\n\n")[0].split())))
