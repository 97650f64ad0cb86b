"""The bad-input corpus (tests/py/bad_inputs/cases.json): overrides, model configs, data files,
reward functions, checkpoints and env vars that must each end `python -m verl_lite.main` with exit 1
and one line saying what is wrong and how to fix it, never a traceback. The shell-side env var
cases are in tests/bats/bad_inputs.bats.

Every case runs in-process through `verl_lite.main.main` (one torch import for all of them); the
ones marked `cli` also run as a real subprocess. Then: the early refusals that cannot be faked
from the command line (a full disk, too few devices), and secrets staying out of the output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES_DIR = Path(__file__).resolve().parent / "bad_inputs"
CASES: List[Dict[str, Any]] = json.loads((CASES_DIR / "cases.json").read_text(encoding="utf-8"))["cases"]
CATEGORIES = ("override", "model", "data", "reward", "checkpoint", "env")


@pytest.fixture(scope="module")
def good_data(tmp_path_factory) -> Path:
    from verl_lite.data.synthetic import generate

    d = tmp_path_factory.mktemp("good_data")
    generate(str(d), task="copy", digits=2, n_train=16, n_val=4, seed=0)
    return d


def base_args(good: Path, tmp: Path) -> List[str]:
    return [
        f"data.train_files={good}/train.parquet", f"data.val_files={good}/val.parquet", "data.train_batch_size=4",
        "data.max_prompt_length=8", "data.max_response_length=3", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.total_training_steps=2", "trainer.save_freq=-1",
        "trainer.test_freq=-1", f"trainer.default_local_dir={tmp}/out", "trainer.ray=false",
        "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
    ]


class Payload:
    """Pickles to a call of os.mkdir: what an attacker's checkpoint would run if it were unpickled."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def make_checkpoint(kind: str, tmp: Path) -> None:
    """A checkpoint dir at tmp/ckpt/global_step_2, damaged as `kind` says."""
    import torch

    from verl_lite.trainer.checkpoint import write_manifest

    step_dir = tmp / "ckpt" / "global_step_2"
    (step_dir / "actor").mkdir(parents=True)
    state = {"global_step": 2, "sampler": {"epoch": 0, "cursor": 8, "seed": 1, "shuffle": True}, "history": []}
    (step_dir / "driver_state.json").write_text(json.dumps(state), encoding="utf-8")
    model: Dict[str, Any] = {"model": {"lm_head.weight": torch.zeros(2, 2)}, "optimizer": None, "lr_scheduler": None}
    if kind == "pickle":
        model["model"] = {"lm_head.weight": Payload(str(tmp / "pwned"))}
    torch.save(model, step_dir / "actor" / "model.pt")
    if kind == "bad_driver_state":
        (step_dir / "driver_state.json").write_text('{"global_step": 2, "sampler": ', encoding="utf-8")
    if kind != "no_manifest":
        write_manifest(str(step_dir))  # the damage is vouched for: only the loader can catch it
    if kind == "truncated":
        f = step_dir / "actor" / "model.pt"
        f.write_bytes(f.read_bytes()[:64])
    (tmp / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2", encoding="utf-8")


def prepare(case: Dict[str, Any], good: Path, tmp: Path) -> List[str]:
    """Write what the case needs into tmp; return the full argument list."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    setup = case.get("setup", {})
    if "rows" in setup:
        rows = setup["rows"]
        table = pa.Table.from_pylist(rows) if rows else pq.read_table(good / "train.parquet").slice(0, 0)
        pq.write_table(table, tmp / "train.parquet")
    if "file" in setup:
        (tmp / setup["file"]["name"]).write_text(setup["file"]["text"], encoding="utf-8")
    if "checkpoint" in setup:
        make_checkpoint(setup["checkpoint"], tmp)
    fill = {"{tmp}": str(tmp), "{good}": str(good), "{cases}": str(CASES_DIR)}
    args = base_args(good, tmp) + case["args"]
    for key, value in fill.items():
        args = [a.replace(key, value) for a in args]
    return args


def assert_one_line_error(case: Dict[str, Any], rc: int, stderr: str) -> None:
    import re

    assert "Traceback" not in stderr, f"{case['id']}: a traceback reached the user:\n{stderr[-3000:]}"
    assert rc == 1, f"{case['id']}: exit {rc}, expected 1; stderr:\n{stderr[-3000:]}"
    lines = [line.strip() for line in stderr.splitlines()]
    assert any(re.search(case["error"], line.removeprefix("- ")) for line in lines), (
        f"{case['id']}: no stderr line matches {case['error']!r}; stderr:\n{stderr[-3000:]}")


def test_the_corpus_has_at_least_40_cases_across_every_category():
    assert len(CASES) >= 40
    assert {c["category"] for c in CASES} == set(CATEGORIES)
    assert len({c["id"] for c in CASES}) == len(CASES), "case ids must be unique"


@pytest.mark.parametrize("case", CASES, ids=[c["id"].replace(" ", "_") for c in CASES])
def test_a_bad_input_ends_the_run_with_one_line_naming_it(case, good_data, tmp_path, monkeypatch):
    from verl_lite.main import main

    for name, value in case.get("env", {}).items():
        monkeypatch.setenv(name, value)
    args = prepare(case, good_data, tmp_path)
    # A plain StringIO, never closed: transformers binds its log handler to the sys.stderr it first
    # sees, and capsys' stream is closed after each test (a "Logging error" in the next one).
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(args)
    assert_one_line_error(case, rc, err.getvalue())
    assert not (tmp_path / "pwned").exists(), "a pickled payload in a checkpoint was executed"


CLI_CASES = [c for c in CASES if c.get("cli")]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c["id"].replace(" ", "_") for c in CLI_CASES])
def test_a_bad_input_on_the_real_command_line_prints_no_traceback(case, good_data, tmp_path):
    args = prepare(case, good_data, tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("VERL_LITE_FAULT", None)
    env.update(case.get("env", {}))
    done = subprocess.run([sys.executable, "-m", "verl_lite.main", *args], capture_output=True, text=True, env=env,
                          cwd=str(REPO_ROOT), timeout=300)
    assert_one_line_error(case, done.returncode, done.stderr)


# ---------------------------------------------------------------------------- early refusals


def test_a_checkpoint_dir_on_a_full_disk_is_refused_with_the_free_and_needed_sizes(good_data, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from verl_lite.preflight.run import collect_problems
    from verl_lite.config import load_config

    cfg = load_config(base_args(good_data, tmp_path) + ["trainer.save_freq=1"])
    assert collect_problems(cfg, for_training=True) == []
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 << 30, (10 << 30) - 4096, 4096))
    problems = collect_problems(cfg, for_training=True)
    assert len(problems) == 1
    assert problems[0].startswith(f"trainer.default_local_dir: {tmp_path}/out has 4.0 KiB free on its disk, but one "
                                  "checkpoint of this run needs about ")
    assert problems[0].endswith("free space or point it at a bigger disk")


def test_a_layout_wider_than_the_visible_gpus_is_refused_and_one_that_fits_is_not(tmp_path):
    from verl_lite.preflight.machine import device_count_problems
    from verl_lite.config import load_config
    from verl_lite.device import Probe

    (tmp_path / "dev").mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (tmp_path / "dev" / name).touch()
    probe = Probe(environ={"CUDA_VISIBLE_DEVICES": "0,1"}, root=str(tmp_path))
    wide = load_config(["trainer.device=cuda", "trainer.n_gpus_per_node=8"])
    assert device_count_problems(wide, "cuda", probe) == [
        "trainer.n_gpus_per_node=8, but this node shows 2 cuda device(s) (device nodes and CUDA_VISIBLE_DEVICES); "
        "lower trainer.n_gpus_per_node and the parallel sizes to fit 2, or run on a node with 8"]
    fits = load_config(["trainer.device=cuda", "trainer.n_gpus_per_node=2"])
    assert device_count_problems(fits, "cuda", probe) == []
    cluster = load_config(["trainer.device=cuda", "trainer.n_gpus_per_node=8", "trainer.nnodes=4"])
    assert device_count_problems(cluster, "cuda", probe) == []  # other nodes' devices are not visible here


def test_the_training_check_stays_free_of_torch_and_ray(good_data, tmp_path):
    code = (
        "import sys, json\n"
        "from verl_lite.config import load_config\n"
        "from verl_lite.preflight.run import collect_problems\n"
        f"cfg = load_config({base_args(good_data, tmp_path)!r})\n"
        "assert collect_problems(cfg, for_training=True) == [], collect_problems(cfg, for_training=True)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray', 'transformers'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO_ROOT), check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# ---------------------------------------------------------------------------- secrets

SECRETS = {"HF_TOKEN": "hf_s3cr3t_value_a1", "WANDB_API_KEY": "wandb_s3cr3t_b2", "NCCL_DEBUG": "s3cr3t_not"}


def test_the_check_summary_masks_a_secret_forwarded_in_the_runtime_env(run_module, monkeypatch):
    # TOKENIZERS_PARALLELISM is forwarded to workers when exported; make its name look secret-free
    # but its value one of the secrets, as a careless `export X=$HF_TOKEN` would.
    env = dict(SECRETS, TOKENIZERS_PARALLELISM=SECRETS["HF_TOKEN"])
    done = run_module("verl_lite.check", "trainer.device=cpu", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "runtime env   : TOKENIZERS_PARALLELISM=<masked>" in done.stdout
    for name in ("HF_TOKEN", "WANDB_API_KEY"):
        assert SECRETS[name] not in done.stdout + done.stderr


def test_training_logs_and_errors_never_print_a_secret_value(good_data, tmp_path, run_module):
    from verl_lite.secrets import redact

    secret = SECRETS["HF_TOKEN"]
    assert redact(f"path /x/{secret}/y", {"HF_TOKEN": secret}) == "path /x/<masked>/y"
    assert redact("flag 1", {"USE_KEY": "1"}) == "flag 1"  # short values are not masked everywhere
    # A secret that ends up in the output path shows in log lines and in the error that ends the run.
    out = tmp_path / secret
    args = base_args(good_data, tmp_path) + [
        f"trainer.default_local_dir={out}", "trainer.total_training_steps=1",
        f"custom_reward_function.path={CASES_DIR}/rewards/returns_nan.py"]
    done = run_module("verl_lite.main", *args, env=SECRETS, timeout=300)
    assert done.returncode == 1
    assert f"(traceback: {tmp_path}/<masked>/last_error.txt)" in done.stderr
    assert secret not in done.stdout + done.stderr
    assert secret not in (out / "last_error.txt").read_text(encoding="utf-8")


def test_a_checkpoint_with_a_pickled_payload_is_refused_by_the_loader_itself(tmp_path):
    from verl_lite.checkpoint_files import CheckpointError, load_tensors

    make_checkpoint("pickle", tmp_path)
    with pytest.raises(CheckpointError, match="holds objects other than tensors and was refused"):
        load_tensors(str(tmp_path / "ckpt" / "global_step_2" / "actor" / "model.pt"))
    assert not (tmp_path / "pwned").exists()
