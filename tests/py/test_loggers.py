"""Metric loggers as verl users name them: `trainer.logger=console` as one string, and wandb
(verl's default) writing a run offline, with no network; its credentials checked before Ray."""

from __future__ import annotations

import pytest

from verl_lite.config import load_config


def test_one_logger_name_as_a_plain_string_is_taken_as_a_list_as_verl_does():
    assert list(load_config(["trainer.logger=console"]).trainer.logger) == ["console"]
    assert list(load_config(["trainer.logger=[console,wandb]"]).trainer.logger) == ["console", "wandb"]


def test_an_unknown_logger_name_is_refused_with_the_valid_names():
    from verl_lite.config.compose import ConfigError

    with pytest.raises(ConfigError, match=r"trainer.logger contains 'wandbb'.*console, jsonl, tensorboard, wandb"):
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
