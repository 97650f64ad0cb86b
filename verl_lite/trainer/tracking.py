"""Per-step metrics: console lines (key=value), a JSONL file, and verl's trackers when asked: tensorboard
and wandb here, mlflow, swanlab, clearml, trackio and verl's file logger in `trackers`.

Every backend is an object with `log(metrics, step)` and `close()`; unknown names are an error.
Validation samples (trainer.log_val_generations) travel in the metrics under GENERATIONS_KEY as
(input, output, score) triples, chosen by `pick_generations` as verl chooses them; each backend
writes them as verl's ValidationGenerationsLogger does for its kind (tensorboard: a text entry,
wandb: a table that grows by a row per validation), the console as a table and jsonl as a list of
{input, output, score} records in the step's row.
wandb runs as verl's does (project = trainer.project_name, run name = trainer.experiment_name,
the resolved config attached); its files go under the run's output dir, and WANDB_MODE=offline
writes the run there with no network (`wandb sync` uploads it later). tensorboard writes to
TENSORBOARD_DIR when set (verl's variable), else under the run's output dir.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from verl_lite.config.choices import LOGGERS
from verl_lite.trainer.dumps import decode_texts
from verl_lite.trainer.trackers import GENERATIONS_KEY, split_generations, verl_tracker

logger = logging.getLogger(__name__)


# Characters of an input or output the console table shows (the jsonl row keeps the whole text).
CONSOLE_TEXT_CHARS = 120
VAL_GENERATIONS_SEED = 42  # verl's fixed seed for the shuffle


def pick_generations(inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float],
                     n: int) -> List[Tuple[str, str, float]]:
    """verl's `_maybe_log_val_generations` choice: the (input, output, score) triples sorted by input,
    shuffled by numpy's RandomState(42), the first `n` (none when n is 0)."""
    import numpy as np

    if n <= 0:
        return []
    if not len(inputs) == len(outputs) == len(scores):
        raise ValueError(f"validation samples differ in length: {len(inputs)} inputs, {len(outputs)} outputs, "
                         f"{len(scores)} scores")
    samples = sorted(zip(inputs, outputs, [float(s) for s in scores]), key=lambda x: x[0])
    np.random.RandomState(VAL_GENERATIONS_SEED).shuffle(samples)
    return [tuple(x) for x in samples[:n]]


def val_generations(tokenizer: Any, gen: Mapping[str, Any], outputs: Sequence[str], scores: Sequence[float],
                    n: int) -> Dict[str, Any]:
    """{GENERATIONS_KEY: the n samples to log} of a scored validation batch (`gen` has the left-padded
    `prompts` and the `attention_mask` of prompt + response), or {} when n is 0. Inputs are decoded
    as verl decodes them: the prompt tokens without special tokens."""
    if n <= 0:
        return {}
    width = gen["prompts"].shape[1]
    inputs = decode_texts(tokenizer, gen["prompts"], gen["attention_mask"][:, :width])
    return {GENERATIONS_KEY: pick_generations(inputs, outputs, scores, n)}


def _cell(text: str) -> str:
    text = repr(text)[1:-1]  # newlines shown as \n, so a row stays one line
    return text if len(text) <= CONSOLE_TEXT_CHARS else text[:CONSOLE_TEXT_CHARS - 3] + "..."


def generations_table(samples: Sequence[Tuple[str, str, float]], step: int) -> str:
    """The samples as a plain-text table: step, input, output, score (verl's columns)."""
    rows = [("step", "input", "output", "score")] + [(str(step), _cell(i), _cell(o), _fmt(float(s)))
                                                     for i, o, s in samples]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def generations_markdown(samples: Sequence[Tuple[str, str, float]], step: int) -> str:
    """verl's tensorboard text for the samples: a heading per sample with its input, output and score."""
    parts = [f"**Generation Results - Step {step}**\n\n"]
    for k, (i, o, s) in enumerate(samples, 1):
        parts.append(f"### Sample {k}\n**Input:** {i}\n\n**Output:** {o}\n\n**Score:** {s}\n\n---\n\n")
    return "".join(parts)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class ConsoleLogger:
    def __init__(self, keys: Sequence[str] = ()):
        self.keys = list(keys)

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        shown = {k: metrics[k] for k in self.keys if k in metrics} if self.keys else metrics
        logger.info("step:%d - %s", step, " - ".join(f"{k}:{_fmt(v)}" for k, v in shown.items()))
        if samples:
            logger.info("validation generations at step %d:\n%s", step, generations_table(samples, step))

    def close(self) -> None:
        pass


class JsonlLogger:
    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self.f = open(path, "a", encoding="utf-8")

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        row = {"step": step}
        for k, v in metrics.items():
            row[k] = None if isinstance(v, float) and not math.isfinite(v) else v
        if samples:
            row[GENERATIONS_KEY] = [{"input": i, "output": o, "score": s} for i, o, s in samples]
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()

    def rewind(self, keep_through: int) -> int:
        """Keep only rows with step <= keep_through (drop all when it is < 0), so a run resumed
        from a checkpoint does not repeat the steps a crash lost; a torn last line is dropped too.
        Returns how many rows were dropped. The file is replaced atomically."""
        self.f.close()
        kept, dropped = [], 0
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                    step = int(row["step"])
                except (ValueError, KeyError, TypeError):
                    dropped += 1
                    continue
                if step <= keep_through:
                    kept.append(line if line.endswith("\n") else line + "\n")
                else:
                    dropped += 1
        if dropped:
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(kept)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        self.f = open(self.path, "a", encoding="utf-8")
        return dropped

    def close(self) -> None:
        self.f.close()


class TensorboardLogger:
    def __init__(self, log_dir: str):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError("trainer.logger has tensorboard but the tensorboard package is missing "
                              "(pip install tensorboard, or drop it from trainer.logger)") from e
        self.writer = SummaryWriter(log_dir)

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        for k, v in metrics.items():
            if isinstance(v, (int, float)):
                self.writer.add_scalar(k, v, step)
        if samples:
            self.writer.add_text(GENERATIONS_KEY, generations_markdown(samples, step), step)
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, project: str, experiment: str, config: Optional[Mapping[str, Any]], out_dir: str):
        try:
            import wandb
        except ImportError as e:
            raise ImportError("trainer.logger has wandb but the wandb package is missing "
                              "(pip install wandb, or drop it from trainer.logger)") from e
        os.makedirs(out_dir, exist_ok=True)
        self.wandb = wandb
        self.run = wandb.init(project=project, name=experiment, config=dict(config or {}), dir=out_dir)
        self.rows: List[List[Any]] = []  # verl's validation table: one row per validation, all kept

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        row = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        if samples:
            # verl's columns: step, then input_i, output_i, score_i per sample; a new Table each time
            # (a logged wandb Table cannot take more rows: wandb issue 2981)
            columns = ["step"] + [f"{c}_{k}" for k in range(1, len(samples) + 1) for c in ("input", "output", "score")]
            self.rows.append([step] + [x for sample in samples for x in sample])
            row[GENERATIONS_KEY] = self.wandb.Table(columns=columns, data=list(self.rows))
        self.run.log(row, step=step)

    def close(self) -> None:
        self.run.finish()


class Tracking:
    def __init__(self, backends: Sequence[str], out_dir: str, console_keys: Sequence[str] = (),
                 project: str = "verl_lite", experiment: str = "run", config: Optional[Mapping[str, Any]] = None):
        backends = [backends] if isinstance(backends, str) else list(backends)
        unknown = [b for b in backends if b not in LOGGERS]
        if unknown:
            raise ValueError(f"trainer.logger has unknown backend(s) {unknown} (choose from {', '.join(LOGGERS)})")
        self.jsonl_path = os.path.join(out_dir, "metrics.jsonl")
        self.loggers: List[Any] = []
        try:
            for b in backends:
                self.loggers.append(self._backend(b, out_dir, console_keys, project, experiment, config))
        except BaseException:  # a tracker that cannot start: the ones started are closed, the error goes on
            self.close()
            raise

    def _backend(self, b: str, out_dir: str, console_keys: Sequence[str], project: str, experiment: str,
                 config: Optional[Mapping[str, Any]]) -> Any:
        if b == "console":
            return ConsoleLogger(console_keys)
        if b == "jsonl":
            return JsonlLogger(self.jsonl_path)
        if b == "tensorboard":
            return TensorboardLogger(os.environ.get("TENSORBOARD_DIR") or os.path.join(out_dir, "tensorboard"))
        if b == "wandb":
            return WandbLogger(project, experiment, config, out_dir)
        return verl_tracker(b, project, experiment, config)  # mlflow, swanlab, clearml, trackio, file

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)

    def rewind(self, keep_through: int) -> None:
        """Forget logged steps after `keep_through` (the step a run resumes from; -1: a fresh start)."""
        for lg in self.loggers:
            if isinstance(lg, JsonlLogger):
                dropped = lg.rewind(keep_through)
                if dropped:
                    logger.info("%s: dropped %d row(s) after step %d (steps lost with the process that wrote them)",
                                lg.path, dropped, max(keep_through, 0))

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()
