"""Shared pytest fixtures: the repo on sys.path, a subprocess runner for `python -m` entry points,
a writer for model config.json files, the synthetic task's data, and a launcher of two-rank megatron scenarios."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # plain `pytest` (not `python -m pytest`) from a checkout
    sys.path.insert(0, str(REPO_ROOT))


@pytest.fixture
def run_module() -> Callable[..., subprocess.CompletedProcess]:
    """run_module("verl_lite.check", "k=v", env={...}) -> CompletedProcess (text, captured)."""

    def run(
        module: str, *args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd or str(REPO_ROOT),
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def copy_task_data(tmp_path_factory) -> Callable[..., Path]:
    """copy_task_data(n_train, n_val) -> a directory with train/val.parquet of the 3-digit copy task
    (seed 0), written once per size for the whole session; tests only read it."""
    made: Dict[tuple, Path] = {}

    def get(n_train: int, n_val: int) -> Path:
        if (n_train, n_val) not in made:
            from verl_lite.data.synthetic import generate

            d = tmp_path_factory.mktemp(f"copy_{n_train}_{n_val}")
            generate(str(d), task="copy", digits=3, n_train=n_train, n_val=n_val, seed=0)
            made[(n_train, n_val)] = d
        return made[(n_train, n_val)]

    return get


@pytest.fixture(scope="session")
def spawn_ranks(tmp_path_factory) -> Callable[..., List[Dict[str, Any]]]:
    """spawn_ranks(fn, name) -> [record of rank 0, record of rank 1]: runs fn(rank, 2, port, out_dir)
    in two spawned processes (a gloo group on a free port); each rank saves its record dict to
    out_dir/rank{rank}.pt, with an "error" traceback if it failed. Skips without megatron-core,
    never importing it here (7-9 s): only the spawned ranks do."""

    def spawn(fn: Callable[..., None], name: str, nprocs: int = 2) -> List[Dict[str, Any]]:
        import importlib.util

        if importlib.util.find_spec("megatron.core") is None:
            pytest.skip("megatron-core is not installed (pip install 'megatron-core==0.16.*')")
        import torch

        from verl_lite.trainer.worker_group import free_port

        out = tmp_path_factory.mktemp(name)
        torch.multiprocessing.spawn(fn, args=(nprocs, free_port(), str(out)), nprocs=nprocs, join=True)
        recs = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(nprocs)]
        for r, rec in enumerate(recs):
            assert "error" not in rec, f"rank {r} failed:\n{rec['error']}"
        return recs

    return spawn


@pytest.fixture
def write_model(tmp_path: Path) -> Callable[..., str]:
    """write_model({...hf config...}, name="m") -> path of a directory holding that config.json."""

    def write(config: Dict[str, Any], name: str = "model") -> str:
        path = tmp_path / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return str(path)

    return write


@pytest.fixture(autouse=True)
def _isolated_environ():
    """Each test sees the environment as it was: megatron records its attention backend in
    NVTE_* variables of the process, and a value left by one test trips the next test's model
    build (children spawned by later tests inherit it)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray instance for one test module (auth off, its own temp dir), shut down after."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False,
             _temp_dir=os.environ.get("RAY_TMPDIR") or str(tmp_path_factory.mktemp("ray")))
    yield ray
    ray.shutdown()
