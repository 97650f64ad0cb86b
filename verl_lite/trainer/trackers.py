"""verl's trackers beyond tensorboard and wandb, each through its own library and configured as verl's
verl/utils/tracking.py configures it at the pinned commit (the line numbers below are that file's):

- mlflow: the tracking URI from MLFLOW_TRACKING_URI (verl's default sqlite:////tmp/mlruns.db), the run
  of MLFLOW_RUN_ID when set, else experiment = trainer.project_name and run name = trainer.experiment_name;
  the config logged as params flattened with "/" (lists as list_len and their items); metric keys
  sanitized as verl does; validation samples as a val_step{N}.json artifact (:96-126, :452-517, :637-657).
- swanlab: SWANLAB_API_KEY (login), SWANLAB_LOG_DIR (default swanlog), SWANLAB_MODE (default cloud);
  project, experiment name and the config with a FRAMEWORK entry; samples as a table (:128-148, :622-635).
- clearml: Task.init(project, task name, continue_last_task, no output upload), the config as the
  "Hyperparameters" configuration, a metric "title/series" as a scalar's title and series, samples as
  a table (:365-414, :690-717). CLEARML_OFFLINE_MODE=1 writes the task locally (clearml's own switch).
- trackio: trackio.init(project, name, config) unless a run is open; samples as traces (:88-94, :659-688).
- file: one line {"step", "data"} per log call to VERL_FILE_LOGGER_PATH, else
  VERL_FILE_LOGGER_ROOT (default .)/project/experiment.jsonl, truncated at start as verl opens it (:430-449).

verl drops a tracker whose init fails after three tries (mlflow) and logs on; here a tracker that cannot
start stops the run with the reason, as a setting is never accepted and ignored.
Every backend has `log(metrics, step)` and `close()`; the validation samples travel in the metrics
under GENERATIONS_KEY as (input, output, score) triples (tracking.pick_generations chooses them).
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verl_lite.config.choices import LOGGER_PACKAGES

logger = logging.getLogger(__name__)

GENERATIONS_KEY = "val/generations"
Sample = Tuple[str, str, float]


def split_generations(metrics: Dict[str, Any]) -> Tuple[Dict[str, Any], List[Sample]]:
    """(the metrics without the validation samples, the samples)."""
    rest = {k: v for k, v in metrics.items() if k != GENERATIONS_KEY}
    return rest, list(metrics.get(GENERATIONS_KEY) or ())


def scalars(metrics: Mapping[str, Any]) -> Dict[str, float]:
    """The numeric metrics (bools and text left out: the trackers plot numbers)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def flat_params(config: Any, prefix: str = "") -> Dict[str, Any]:
    """verl's _compute_mlflow_params_from_objects: nested keys joined by "/", a list as {list_len, 0, 1, ...}."""
    if isinstance(config, Mapping):
        items = list(config.items())
    elif isinstance(config, (list, tuple)):
        items = [("list_len", len(config))] + [(str(i), v) for i, v in enumerate(config)]
    else:
        return {prefix: config}
    out: Dict[str, Any] = {}
    for k, v in items:
        out.update(flat_params(v, f"{prefix}/{k}" if prefix else str(k)))
    return out


_INVALID_MLFLOW_CHARS = re.compile(r"[^/\w.\- :]")
_SLASHES = re.compile(r"/+")


def mlflow_key(key: str) -> str:
    """verl's _MlflowLoggingAdapter._sanitize_key: @ -> _at_, runs of / -> one, other invalid characters -> _."""
    return _INVALID_MLFLOW_CHARS.sub("_", _SLASHES.sub("/", key.replace("@", "_at_")))


def _library(name: str, module: Optional[str] = None) -> Any:
    """The tracker's library (`module`, else the tracker's own module), or an error with its pip line."""
    try:
        return importlib.import_module(module or LOGGER_PACKAGES[name][0])
    except ImportError as e:
        raise ImportError(f"trainer.logger has {name} but its package is missing (pip install "
                          f"{LOGGER_PACKAGES[name][1]}, or drop {name} from trainer.logger)") from e


class MlflowLogger:
    DEFAULT_URI = "sqlite:////tmp/mlruns.db"  # verl's default when MLFLOW_TRACKING_URI is unset

    def __init__(self, project: str, experiment: str, config: Optional[Mapping[str, Any]]):
        self.mlflow = mlflow = _library("mlflow")
        uri = os.environ.get("MLFLOW_TRACKING_URI", self.DEFAULT_URI)
        logger.info("mlflow tracking URI: %s", uri)
        mlflow.set_tracking_uri(uri)
        run_id = os.environ.get("MLFLOW_RUN_ID")
        try:
            if run_id:  # e.g. Azure ML or Databricks start the run and set it
                self.run = mlflow.start_run(run_id=run_id)
            else:  # verl: the project is MLflow's experiment, the experiment name the run's
                exp = mlflow.set_experiment(project)
                self.run = mlflow.start_run(experiment_id=exp.experiment_id, run_name=experiment)
        except Exception as e:  # any store error: name the URI it came from
            e.add_note(f"trainer.logger=mlflow: starting a run at MLFLOW_TRACKING_URI={uri}"
                       + (f", MLFLOW_RUN_ID={run_id}" if run_id else ""))
            raise
        mlflow.log_params(flat_params(config or {}))

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        row = {mlflow_key(k): v for k, v in scalars(metrics).items()}
        if row:
            self.mlflow.log_metrics(row, step=step)
        if samples:  # verl: a val_step{step}.json artifact of {input, output, score} records
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, f"val_step{step}.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump([{"input": i, "output": o, "score": s} for i, o, s in samples], f)
                self.mlflow.log_artifact(path)

    def close(self) -> None:
        self.mlflow.end_run()


class SwanlabLogger:
    OFFLINE_MODES = ("local", "offline", "disabled")

    def __init__(self, project: str, experiment: str, config: Optional[Mapping[str, Any]]):
        self.swanlab = swanlab = _library("swanlab")
        key = os.environ.get("SWANLAB_API_KEY")
        mode = os.environ.get("SWANLAB_MODE", "cloud")
        if key:
            swanlab.login(key)  # verl: overwrites a previous login
        self.run = swanlab.init(project=project, experiment_name=experiment,
                                config={"FRAMEWORK": "verl_lite", **dict(config or {})},
                                logdir=os.environ.get("SWANLAB_LOG_DIR", "swanlog"), mode=mode)

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        row: Dict[str, Any] = scalars(metrics)
        if samples:  # verl: an echarts table with columns step, input, output, score
            table = self.swanlab.echarts.Table()
            table.add(headers=["step", "input", "output", "score"], rows=[[step, *s] for s in samples])
            row[GENERATIONS_KEY] = table
        self.swanlab.log(row, step=step)

    def close(self) -> None:
        self.swanlab.finish()


class ClearmlLogger:
    def __init__(self, project: str, experiment: str, config: Optional[Mapping[str, Any]]):
        self.task = _library("clearml").Task.init(task_name=experiment, project_name=project, continue_last_task=True,
                                      output_uri=False)
        self.task.connect_configuration(dict(config or {}), name="Hyperparameters")
        self.logger = self.task.get_logger()

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        for k, v in scalars(metrics).items():
            title, _, series = k.partition("/")  # verl splits at the first "/"; a key without one is both
            self.logger.report_scalar(title=title, series=series or title, value=v, iteration=step)
        if samples:
            import pandas as pd

            rows = [{"step": step, "input": i, "output": o, "score": s} for i, o, s in samples]
            self.logger.report_table(title="Validation", series="Validation generations",
                                     table_plot=pd.DataFrame.from_records(rows), iteration=step)

    def close(self) -> None:
        self.task.close()


class TrackioLogger:
    def __init__(self, project: str, experiment: str, config: Optional[Mapping[str, Any]]):
        self.trackio, self.context_vars = _library("trackio"), _library("trackio", "trackio.context_vars")
        if self.context_vars.current_run.get() is None:  # verl: join a run the caller opened
            self.trackio.init(project=project, name=experiment, config=dict(config or {}))

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        row: Dict[str, Any] = scalars(metrics)
        if samples:  # verl: a user/assistant trace per sample with its score
            row[GENERATIONS_KEY] = [
                self.trackio.Trace(messages=[{"role": "user", "content": str(i)},
                                             {"role": "assistant", "content": str(o)}],
                                   metadata={"source": "validation_generations", "sample_index": n, "score": s})
                for n, (i, o, s) in enumerate(samples)]
        self.trackio.log(row, step=step)

    def close(self) -> None:
        if self.context_vars.current_run.get() is not None:
            self.trackio.finish()


def _json_value(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


class FileLogger:
    def __init__(self, project: str, experiment: str):
        path = os.environ.get("VERL_FILE_LOGGER_PATH")
        if path is None:
            root = os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", "."))
            path = os.path.join(root, project, f"{experiment}.jsonl")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = os.path.abspath(path)
        logger.info("file logger: %s", self.path)
        self.f = open(self.path, "w", encoding="utf-8")  # verl opens it "wb": a new run starts the file afresh

    def log(self, metrics: Dict[str, Any], step: int) -> None:
        metrics, samples = split_generations(metrics)
        data = {k: _json_value(v) for k, v in metrics.items()}
        if samples:
            data[GENERATIONS_KEY] = [{"input": i, "output": o, "score": s} for i, o, s in samples]
        self.f.write(json.dumps({"step": step, "data": data}, ensure_ascii=False) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def verl_tracker(name: str, project: str, experiment: str, config: Optional[Mapping[str, Any]]) -> Any:
    """The backend of one of verl's trackers in this module (TRACKERS)."""
    if name == "file":  # verl's FileLogger takes no config
        return FileLogger(project, experiment)
    return TRACKERS[name](project, experiment, config)


TRACKERS = {"mlflow": MlflowLogger, "swanlab": SwanlabLogger, "clearml": ClearmlLogger, "trackio": TrackioLogger,
            "file": FileLogger}
