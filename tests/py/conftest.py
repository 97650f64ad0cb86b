"""Shared pytest fixtures: the repo on sys.path, a subprocess runner for `python -m` entry points,
and a writer for model config.json files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional

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
