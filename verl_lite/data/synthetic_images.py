"""A synthetic image task for the tiny vision-language run, written as verl-format parquet files with
an `images` column (verl's layout: a list of {"bytes": PNG} entries) and an `<image>` placeholder.

Tasks (one answer word, a single token of the shipped tiny-qwen3_vl_moe tokenizer):
  colour  a 64x64 image with one filled square or disc of red, green, blue or yellow on a dark
          background; prompt "<image>colour?" -> the shape's colour. `n_colours` (2-4) draws from the
          first n of those only (the answer set the scorer knows stays all four); the shape's side is
          20..44 pixels, or min_size..max(min_size, 44) (a larger solid region).
  count   one to three white shapes; prompt "<image>count?" -> one, two or three
Score (`compute_score`): 1.0 when the response's first word is the answer, 0.1 when it is another of
the task's answers (the right kind of word), else 0. Every prompt of a task is the same text, so a
policy that ignores the image answers every row alike: its best mean score is `blind_bound(rows)`
(the most frequent answer's share s: s + 0.1 (1 - s); 0.325 for four colours drawn evenly), and a
mean reward above that needs the image.

Usage: python -m verl_lite.data.synthetic_images --out-dir data/tiny_vl [--task colour] [--n-colours 2] [--min-size 56]
"""

from __future__ import annotations

import io
import random
import sys
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from verl_lite.data.synthetic import generator_cli, write_splits

SIZE = 64
MIN_SIZE, MAX_SIZE = 20, 44  # the colour task's shape side in pixels (min_size raises the lower end)
COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 80, 230), "yellow": (230, 210, 40)}
COUNTS = {1: "one", 2: "two", 3: "three"}
TASKS = {"colour": tuple(COLOURS), "count": tuple(COUNTS.values())}
DATA_SOURCE_PREFIX = "verl_lite/shapes_"  # + task


def _jitter(rng: random.Random, rgb, amount: int = 25):
    return tuple(max(0, min(255, c + rng.randint(-amount, amount))) for c in rgb)


def _draw_shape(draw: Any, rng: random.Random, fill, size: int, box: Optional[tuple] = None) -> None:
    x0, y0 = box if box else (rng.randint(0, SIZE - size), rng.randint(0, SIZE - size))
    shape = (x0, y0, x0 + size - 1, y0 + size - 1)
    if rng.random() < 0.5:
        draw.rectangle(shape, fill=fill)
    else:
        draw.ellipse(shape, fill=fill)


def _check_options(task: str, n_colours: Optional[int], min_size: Optional[int] = None) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown synthetic image task {task!r} (choose one of {', '.join(TASKS)})")
    if n_colours is not None and (task != "colour" or not 2 <= n_colours <= len(COLOURS)):
        raise ValueError(f"n_colours={n_colours} (the colour task only, 2..{len(COLOURS)})")
    if min_size is not None and (task != "colour" or not MIN_SIZE <= min_size <= SIZE):
        raise ValueError(f"min_size={min_size} (the colour task only, {MIN_SIZE}..{SIZE} pixels)")


def make_image(rng: random.Random, task: str, n_colours: Optional[int] = None, min_size: Optional[int] = None):
    """(PIL image, answer word) of one example."""
    from PIL import Image, ImageDraw

    _check_options(task, n_colours, min_size)
    background = tuple(rng.randint(0, 40) for _ in range(3))
    image = Image.new("RGB", (SIZE, SIZE), background)
    draw = ImageDraw.Draw(image)
    if task == "colour":
        answer = rng.choice(TASKS["colour"][:n_colours or len(COLOURS)])
        low = min_size or MIN_SIZE
        _draw_shape(draw, rng, _jitter(rng, COLOURS[answer]), rng.randint(low, max(low, MAX_SIZE)))
        return image, answer
    count = rng.randint(1, 3)
    cells = rng.sample([(x, y) for x in (2, 34) for y in (2, 34)], count)  # one shape per quadrant
    for cell in cells:
        _draw_shape(draw, rng, _jitter(rng, (235, 235, 235), 15), rng.randint(16, 28), cell)
    return image, COUNTS[count]


def png_bytes(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def make_rows(n: int, task: str, seed: int, split: str, n_colours: Optional[int] = None,
              min_size: Optional[int] = None) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    question = "colour?" if task == "colour" else "count?"
    rows = []
    for i in range(n):
        image, answer = make_image(rng, task, n_colours, min_size)
        rows.append({
            "data_source": f"{DATA_SOURCE_PREFIX}{task}",
            "prompt": [{"role": "user", "content": f"<image>{question}"}],
            "images": [{"bytes": png_bytes(image)}],
            "ability": "vision",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": i, "question": question},
        })
    return rows


def generate(out_dir: str, task: str = "colour", n_train: int = 1024, n_val: int = 64, seed: int = 0,
             force: bool = False, n_colours: Optional[int] = None, min_size: Optional[int] = None) -> Dict[str, str]:
    """Write train.parquet and val.parquet under out_dir (kept if present unless force)."""
    _check_options(task, n_colours, min_size)
    return write_splits(out_dir, n_train, n_val, seed, force,
                        lambda n, split_seed, split: make_rows(n, task, split_seed, split, n_colours, min_size))


def read_rows(path: str) -> List[Dict[str, Any]]:
    """The rows of a parquet file written by generate, as dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Optional[dict] = None) -> float:
    """1.0 for the answer as the first word, 0.1 for another of the task's answers, else 0."""
    task = data_source[len(DATA_SOURCE_PREFIX):]
    if task not in TASKS:
        raise ValueError(f"data_source {data_source!r} is not a synthetic image task "
                         f"({', '.join(DATA_SOURCE_PREFIX + t for t in TASKS)})")
    words = solution_str.strip().split()
    first = words[0].strip(".,!?").lower() if words else ""
    if first == str(ground_truth):
        return 1.0
    return 0.1 if first in TASKS[task] else 0.0


def blind_bound(rows: List[Dict[str, Any]]) -> Tuple[float, str]:
    """(the best mean score a policy that ignores the image can reach on rows, the answer it gives).

    The rows of a task share one prompt text, so such a policy gives every row the same distribution
    over responses, and its mean score is that distribution's average of the per-response means: a
    single response does best. A response scores 0.1 on a row it misses when it is one of the task's
    answers and 0 otherwise, so the best is an answer word w, scoring (n_w + 0.1 (N - n_w)) / N."""
    if not rows:
        raise ValueError("blind_bound needs at least one row")
    tasks = {r["data_source"][len(DATA_SOURCE_PREFIX):] for r in rows}
    if len(tasks) != 1 or not tasks <= set(TASKS):
        raise ValueError(f"blind_bound takes the rows of one synthetic image task (got data sources {sorted(tasks)})")
    answers = TASKS[tasks.pop()]
    counts = Counter(str(r["reward_model"]["ground_truth"]) for r in rows)
    n = len(rows)
    best = max(answers, key=lambda w: (counts[w], -answers.index(w)))
    return (counts[best] + 0.1 * (n - counts[best])) / n, best


def main(argv: Optional[List[str]] = None) -> int:
    def options(parser) -> None:
        parser.add_argument("--n-colours", type=int, default=None,
                            help=f"colour task: draw from the first N colours only (2..{len(COLOURS)}; default all)")
        parser.add_argument("--min-size", type=int, default=None,
                            help=f"colour task: the shape's smallest side in pixels ({MIN_SIZE}..{SIZE}; default "
                                 f"{MIN_SIZE}; sides are drawn up to max(this, {MAX_SIZE}))")

    def bound(path: str) -> str:
        value, answer = blind_bound(read_rows(path))
        return f"image-blind bound {value:.4f}: always {answer!r}"

    return generator_cli(
        argv, "python -m verl_lite.data.synthetic_images", __doc__.splitlines()[0], TASKS, "colour", 1024, 64,
        lambda a: generate(a.out_dir, a.task, a.train, a.val, a.seed, a.force, a.n_colours, a.min_size),
        options, bound)


if __name__ == "__main__":
    sys.exit(main())
