"""Metric loggers as verl users name them: `trainer.logger=console` as one string, and wandb
(verl's default) writing a run offline, with no network; its credentials checked before Ray."""

from __future__ import annotations

import json

import pytest

from verl_lite.config import load_config


def test_one_logger_name_as_a_plain_string_is_taken_as_a_list_as_verl_does():
    assert list(load_config(["trainer.logger=console"]).trainer.logger) == ["console"]
    assert list(load_config(["trainer.logger=[console,wandb]"]).trainer.logger) == ["console", "wandb"]


def test_an_unknown_logger_name_is_refused_with_the_valid_names():
    from verl_lite.config.compose import ConfigError

    with pytest.raises(ConfigError,
                       match=r"trainer.logger contains .wandbb.*console, jsonl, tensorboard, wandb, mlflow"):
        load_config(["trainer.logger=wandbb"])


def test_wandb_offline_writes_a_run_with_the_metrics_under_the_output_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    from verl_lite.trainer.tracking import Tracking

    tracking = Tracking("wandb", str(tmp_path), project="proj", experiment="exp", config={"data": {"seed": 3}})
    for step in (1, 2):
        tracking.log({"critic/score/mean": 0.25 * step, "note": "text is skipped"}, step)
    run = tracking.loggers[0].run
    assert (run.project, run.name, dict(run.config)) == ("proj", "exp", {"data": {"seed": 3}})
    tracking.close()
    # run.finish() returns once wandb-core has the run's exit, and only then tells core the run is done
    # (inform_finish, not awaited); core writes the rest of the .wandb file when it handles that. A read
    # right away can find the 7-byte header alone (seen under two pytest workers). wandb.teardown()
    # waits for core to shut down, so the file is whole; a process that ends does this at exit.
    import wandb

    wandb.teardown()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    data = next(runs[0].glob("run-*.wandb")).read_bytes()
    # history rows hold each value as JSON text right after its key; the text metric is not logged
    logged = {data[i + 17:i + 24] for i in range(len(data)) if data.startswith(b"critic/score/mean", i)}
    # what a failure needs: the file's size, and wandb's own logs
    logs = sorted((runs[0] / "logs").glob("*.log"))
    why = (f"{logged}; {len(data)} bytes, 'critic' {data.count(b'critic')} times; "
           + "".join(f"\n--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}" for log in logs))
    assert any(b"0.25" in v for v in logged) and any(b"0.5" in v and b"0.25" not in v for v in logged), why
    assert b"text is skipped" not in data


def test_wandb_without_credentials_is_refused_before_ray_unless_offline(tmp_path):
    from verl_lite.preflight.machine import wandb_problems

    bare = {"NETRC": str(tmp_path / "netrc")}
    assert "no wandb credentials are set" in wandb_problems(bare)[0]
    assert "WANDB_MODE=offline" in wandb_problems(bare)[0]
    assert wandb_problems({**bare, "WANDB_MODE": "offline"}) == []
    assert wandb_problems({**bare, "WANDB_API_KEY": "k" * 40}) == []
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password x\n")
    assert wandb_problems(bare) == []


# -- verl's other trackers (verl/utils/tracking.py), each offline, read back from what it wrote --------------

CONFIG = {"data": {"seed": 3, "files": ["a", "b"]}, "trainer": {"project_name": "proj"}}
SAMPLES = [("1+1=", "2", 1.0), ("2+2=", "5", 0.0)]


def log_two_steps(backend, tmp_path, **kw):
    from verl_lite.trainer.trackers import GENERATIONS_KEY
    from verl_lite.trainer.tracking import Tracking

    tracking = Tracking(backend, str(tmp_path / "out"), project="proj", experiment="exp", config=CONFIG)
    tracking.log({"critic/score/mean": 0.25, "val-core/acc@mean": 1.0, "note": "text"}, 1)
    tracking.log({"critic/score/mean": 0.5, GENERATIONS_KEY: SAMPLES}, 2)
    tracking.close()
    return tracking


def test_mlflow_logs_the_metrics_by_step_the_config_as_params_and_the_samples_as_an_artifact(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # mlflow's artifacts go under ./mlartifacts for a sqlite store
    tracking = log_two_steps("mlflow", tmp_path)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run_id = tracking.loggers[0].run.info.run_id
    run = client.get_run(run_id)
    assert run.info.run_name == "exp" and client.get_experiment(run.info.experiment_id).name == "proj"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "critic/score/mean")] == [(1, 0.25), (2, 0.5)]
    # verl's key sanitizing: @ -> _at_
    assert [m.value for m in client.get_metric_history(run_id, "val-core/acc_at_mean")] == [1.0]
    assert "note" not in run.data.metrics
    # verl's params: nested keys joined by "/", a list as list_len and its items
    assert {k: run.data.params[k] for k in ("data/seed", "data/files/list_len", "data/files/1")} == {
        "data/seed": "3", "data/files/list_len": "2", "data/files/1": "b"}
    (artifact,) = client.list_artifacts(run_id)
    assert artifact.path == "val_step2.json"
    local = client.download_artifacts(run_id, artifact.path, str(tmp_path))
    assert json.loads(open(local, encoding="utf-8").read()) == [
        {"input": i, "output": o, "score": s} for i, o, s in SAMPLES]


def test_swanlab_offline_writes_the_run_under_swanlab_log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    monkeypatch.setenv("SWANLAB_LOG_DIR", str(tmp_path / "swanlog"))
    log_two_steps("swanlab", tmp_path)
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (path,) = (tmp_path / "swanlog").glob("run-*/run-*.swanlab")
    reader = DataStoreReader()
    reader.open(path)
    records = []
    for raw in reader:
        record = Record()
        record.ParseFromString(raw)
        records.append(record)
    reader.close()
    start = next(r.start for r in records if r.HasField("start"))
    assert (start.project, start.name) == ("proj", "exp")
    scalars = [(r.scalar.step, r.scalar.value.number) for r in records
               if r.HasField("scalar") and r.scalar.key == "critic/score/mean"]
    assert scalars == [(1, 0.25), (2, 0.5)]
    config = (path.parent / "files" / "config.yaml").read_text(encoding="utf-8")
    assert "FRAMEWORK" in config and "verl_lite" in config and "seed" in config


def test_clearml_offline_reports_scalars_by_title_and_series_and_the_config(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEARML_OFFLINE_MODE", "1")
    monkeypatch.setenv("CLEARML_CACHE_DIR", str(tmp_path / "clearml"))
    monkeypatch.setenv("HOME", str(tmp_path))  # clearml keeps its session file under ~/.clearml
    log_two_steps("clearml", tmp_path)
    (task_dir,) = (tmp_path / "clearml" / "offline").glob("offline-*/")
    events = [e for line in (task_dir / "metrics.jsonl").read_text().splitlines() for e in json.loads(line)]
    scalars = [(e["iter"], e["value"]) for e in events
               if e["type"] == "training_stats_scalar" and (e["metric"], e["variant"]) == ("critic", "score/mean")]
    assert scalars == [(1, 0.25), (2, 0.5)]
    assert any(e["type"] == "training_stats_scalar" and e["metric"] == "val-core" for e in events)
    task = json.loads((task_dir / "task.json").read_text())
    assert task["name"] == "exp" and "Hyperparameters" in task["configuration"]
    assert "seed" in task["configuration"]["Hyperparameters"]["value"]


def test_trackio_logs_the_metrics_by_step_into_its_local_project_database(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    log_two_steps("trackio", tmp_path)
    db = sqlite3.connect(tmp_path / "trackio" / "proj.db")
    rows = db.execute("SELECT run_name, step, metrics FROM metrics ORDER BY step").fetchall()
    logged = [(name, step, json.loads(m)) for name, step, m in rows]
    assert [(n, s, m["critic/score/mean"]) for n, s, m in logged] == [("exp", 1, 0.25), ("exp", 2, 0.5)]
    assert "note" not in logged[0][2]
    (config,) = db.execute("SELECT config FROM configs WHERE run_name = 'exp'").fetchone()
    assert json.loads(config)["data"]["seed"] == 3


def test_verls_file_logger_writes_step_and_data_lines_where_verl_puts_them(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path / "root"))
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    log_two_steps("file", tmp_path)
    lines = (tmp_path / "root" / "proj" / "exp.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [list(r) for r in rows] == [["step", "data"]] * 2
    assert rows[0] == {"step": 1, "data": {"critic/score/mean": 0.25, "val-core/acc@mean": 1.0, "note": "text"}}
    assert rows[1]["data"]["critic/score/mean"] == 0.5
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "one.jsonl"))
    log_two_steps("file", tmp_path)
    assert len((tmp_path / "one.jsonl").read_text().splitlines()) == 2


def test_verls_trackers_verl_lite_does_not_run_are_refused_by_name_with_the_reason():
    from verl_lite.config.compose import ConfigError

    with pytest.raises(ConfigError, match=r"'vemlp_wandb'.*volcengine_ml_platform.*not on PyPI"):
        load_config(["trainer.logger=[console,vemlp_wandb]"])
    with pytest.raises(ConfigError, match=r"'rl_insight'.*Prometheus"):
        load_config(["trainer.logger=rl_insight"])
    cfg = load_config(["trainer.logger=[console,mlflow,swanlab,clearml,trackio,file,tracking]"])
    assert list(cfg.trainer.logger) == ["console", "mlflow", "swanlab", "clearml", "trackio", "file", "wandb"]


def test_swanlab_cloud_and_clearml_without_credentials_are_refused_before_ray_unless_offline(tmp_path):
    from verl_lite.preflight.machine import tracker_credential_problems

    bare = {"HOME": str(tmp_path)}
    swan, clear = tracker_credential_problems(["swanlab", "clearml"], bare)
    assert "SWANLAB_API_KEY" in swan and "SWANLAB_MODE=offline" in swan
    assert "CLEARML_API_ACCESS_KEY" in clear and "CLEARML_OFFLINE_MODE=1" in clear
    offline = {**bare, "SWANLAB_MODE": "offline", "CLEARML_OFFLINE_MODE": "1"}
    assert tracker_credential_problems(["swanlab", "clearml"], offline) == []
    assert tracker_credential_problems(["swanlab"], {**bare, "SWANLAB_API_KEY": "k"}) == []
    (tmp_path / "clearml.conf").write_text("api {}\n")
    assert tracker_credential_problems(["clearml"], bare) == []


def test_a_tracker_that_cannot_start_stops_the_run_and_closes_those_started(tmp_path, monkeypatch):
    from verl_lite.trainer.tracking import Tracking

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "file.jsonl"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://host")
    closed = []
    monkeypatch.setattr("verl_lite.trainer.trackers.FileLogger.close", lambda self: closed.append(self.path))
    with pytest.raises(Exception) as err:  # mlflow's own error, with a note naming where it looked
        Tracking(["file", "mlflow"], str(tmp_path / "out"), project="proj", experiment="exp")
    assert any("MLFLOW_TRACKING_URI=nosuchscheme://host" in note for note in getattr(err.value, "__notes__", []))
    assert closed == [str(tmp_path / "file.jsonl")]
