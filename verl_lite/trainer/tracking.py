"""Per-step metrics: console lines (key=value), a JSONL file, tensorboard and wandb when asked.

Every backend is an object with `log(metrics, step)` and `close()`; unknown names are an error.
wandb runs as verl's does (project = trainer.project_name, run name = trainer.experiment_name,
the resolved config attached); its files go under the run's output dir, and WANDB_MODE=offline
writes the run there with no network (`wandb sync` uploads it later).
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from verl_lite.config.choices import LOGGERS

logger = logging.getLogger(__name__)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class ConsoleLogger:
    def __init__(self, keys: Sequence[str] = ()):
        self.keys = list(keys)

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        shown = {k: metrics[k] for k in self.keys if k in metrics} if self.keys else metrics
        logger.info("step:%d - %s", step, " - ".join(f"{k}:{_fmt(v)}" for k, v in shown.items()))

    def close(self) -> None:
        pass


class JsonlLogger:
    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self.f = open(path, "a", encoding="utf-8")

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        row = {"step": step}
        for k, v in metrics.items():
            row[k] = None if isinstance(v, float) and not math.isfinite(v) else v
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
        for k, v in metrics.items():
            if isinstance(v, (int, float)):
                self.writer.add_scalar(k, v, step)

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
        self.run = wandb.init(project=project, name=experiment, config=dict(config or {}), dir=out_dir)

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        self.run.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

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
        for b in backends:
            if b == "console":
                self.loggers.append(ConsoleLogger(console_keys))
            elif b == "jsonl":
                self.loggers.append(JsonlLogger(self.jsonl_path))
            elif b == "tensorboard":
                self.loggers.append(TensorboardLogger(os.path.join(out_dir, "tensorboard")))
            else:
                self.loggers.append(WandbLogger(project, experiment, config, out_dir))

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
