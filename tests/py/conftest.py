"""Shared pytest fixtures: the repo on sys.path, a subprocess runner for `python -m` entry points,
a writer for model config.json files, the synthetic task's data, a launcher of spawned megatron scenarios
(`spawn_ranks`) and the one two-rank world that the Megatron test modules share (`megatron_world`).

Tests marked `megatron`, and tests that use `spawn_ranks` or `megatron_world`, need megatron-core (the README's test
command installs it). Where it is missing they are skipped with one reason, decided here once: no
test checks for it itself.

With VERL_LITE_STRICT_SKIPS=1 (tests/run.sh, and so CI, sets it) a skip fails the run unless the
test is marked `gpu` (needs an accelerator), `no_wheel` (a package with no wheel for this
platform), `verl_source` (a checkout of verl's repository, which no pip install provides) or
`ascend_source` (clones of MindSpeed and the other Ascend-stack repositories, likewise):
everything else the suite needs is installed by the README's test command, so a skip there means a
dependency went missing and that its tests did not run.
"""

from __future__ import annotations

import functools
import importlib.util
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

MEGATRON_MISSING = "megatron-core is not installed (pip install -e '.[test]' installs it)"


def megatron_core_installed() -> bool:
    """Whether megatron.core can be imported, without importing it (that costs 7-9 s).
    find_spec("megatron.core") imports the parent package and raises ModuleNotFoundError when
    `megatron` itself is missing, so that counts as not installed."""
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:
        return False


ALLOWED_SKIP_MARKERS = ("gpu", "no_wheel", "verl_source", "ascend_source")
ALLOWED_SKIP_PROPERTY = "verl_lite_skip_allowed"
_unexpected_skips: List[str] = []


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if any(item.get_closest_marker(m) for m in ALLOWED_SKIP_MARKERS):
            # On the item's report, not in a set here: under pytest-xdist the workers collect and the
            # controller, which reads the reports, never does.
            item.user_properties.append((ALLOWED_SKIP_PROPERTY, True))
    if megatron_core_installed():
        return
    skip = pytest.mark.skip(reason=MEGATRON_MISSING)
    for item in items:
        if item.get_closest_marker("megatron") or {"spawn_ranks", "megatron_world"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(skip)


def _strict_skips() -> bool:
    return os.environ.get("VERL_LITE_STRICT_SKIPS") == "1"


def pytest_runtest_logreport(report) -> None:
    if report.skipped and _strict_skips() and (ALLOWED_SKIP_PROPERTY, True) not in report.user_properties:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter) -> None:
    if _unexpected_skips:
        terminalreporter.section("skips that fail the run (VERL_LITE_STRICT_SKIPS=1)", red=True)
        for line in _unexpected_skips:
            terminalreporter.line(line)
        terminalreporter.line(f"{len(_unexpected_skips)} test(s) skipped for a missing dependency: "
                              "pip install -e '.[test]' installs everything the suite needs")


def pytest_sessionfinish(session, exitstatus) -> None:
    if _unexpected_skips and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (tests/run.sh runs two workers): each test file goes whole to one worker, as
    `--dist loadfile` sends it, so its module fixtures (a Ray cluster, a trained run) are made once;
    and the files that share the Megatron world go together to one worker, so that the world (one
    megatron import per rank for all of them) starts once, not on both."""
    from xdist.scheduler import LoadFileScheduling

    class FilesAndOneMegatronWorld(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "megatron_world" if uses_megatron_world(str(config.rootpath / path)) else path

    return FilesAndOneMegatronWorld(config, log)


@functools.lru_cache(maxsize=None)
def uses_megatron_world(path: str) -> bool:
    """Whether the test file at `path` asks for the shared Megatron world."""
    file = Path(path)
    return file.suffix == ".py" and "megatron_world(__name__)" in file.read_text(encoding="utf-8")


# A port that free_port() found free can be taken by another process (a Ray node, the other pytest
# worker) before rank 0 binds it: the ranks are started again on a new port, this many times in all.
PORT_TRIES = 3


@pytest.fixture(scope="session")
def spawn_ranks(tmp_path_factory) -> Callable[..., List[Dict[str, Any]]]:
    """spawn_ranks(fn, name) -> [record of rank 0, record of rank 1]: runs fn(rank, 2, port, out_dir)
    in two spawned processes (a gloo group on a free port); each rank saves its record dict to
    out_dir/rank{rank}.pt, with an "error" traceback if it failed. Tests that use it skip without
    megatron-core (pytest_collection_modifyitems), which only the spawned ranks import (7-9 s each)."""

    def spawn(fn: Callable[..., None], name: str, nprocs: int = 2) -> List[Dict[str, Any]]:
        import torch

        from verl_lite.device import free_port

        for attempt in range(PORT_TRIES):
            out = tmp_path_factory.mktemp(name)
            try:
                torch.multiprocessing.spawn(fn, args=(nprocs, free_port(), str(out)), nprocs=nprocs, join=True)
            except torch.multiprocessing.ProcessRaisedException as e:
                if "EADDRINUSE" in str(e) and attempt + 1 < PORT_TRIES:
                    continue
                raise
            recs = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(nprocs)]
            if not any("EADDRINUSE" in rec.get("error", "") for rec in recs):
                break
        for r, rec in enumerate(recs):
            assert "error" not in rec, f"rank {r} failed:\n{rec['error']}"
        return recs

    return spawn


@pytest.fixture(scope="session")
def megatron_world(request, tmp_path_factory):
    """megatron_world(module_name) -> [record of rank 0, record of rank 1] of that test module's
    `@megatron_world.scenario`. The first call starts ONE spawn of two gloo ranks that runs the
    scenarios of every module among the session's selected tests, in the order the modules run
    (tests/py/megatron_world.py: one megatron import per rank for all of them, instead of one per
    module). It runs in the background: each call waits only until its own module's records are
    written, so a module waits about as long as its own scenario takes (within pytest's per-test
    timeout) and the tests between the Megatron modules run meanwhile."""
    import megatron_world as mw

    world: Dict[str, Any] = {}

    def get(module: str) -> List[Dict[str, Any]]:
        if not world:
            from verl_lite.device import free_port

            order = list(dict.fromkeys(item.module.__name__ for item in request.session.items
                                       if getattr(item, "module", None)))
            named = [(name, mw.SCENARIOS[name]) for name in order if name in mw.SCENARIOS]
            named += [(module, mw.SCENARIOS[module])] if module not in order and module in mw.SCENARIOS else []
            out = tmp_path_factory.mktemp("megatron_world")
            world.update(out=out, names={name for name, _ in named}, context=mw.start(str(out), free_port(), named))
        assert module in world["names"], f"{module} has no @megatron_world.scenario"
        return mw.wait_for(world["context"], world["out"] / module)

    yield get
    if world:
        mw.stop(world["context"])


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
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False,
             _temp_dir=os.environ.get("RAY_TMPDIR") or str(tmp_path_factory.mktemp("ray")))
    yield ray
    ray.shutdown()
