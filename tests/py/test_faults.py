"""Faults: real training processes killed (SIGKILL) mid-step and mid-checkpoint, stopped with
SIGTERM/SIGINT, and Ray workers that die or run out of memory. Every interrupted run must resume to
the weights and metrics of an uninterrupted one, bit for bit, and every failure must end the driver
quickly with one line naming the worker, its error and the step.

Faults land at known moments through the VERL_LITE_FAULT hook (verl_lite/trainer/checkpoint.py,
docs/reliability.md); the Ray worker kill is an outside `kill -9` of the worker's pid. Each
subprocess has a timeout, so no test can hang, and every test checks that nothing it started is
left running.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

from verl_lite.config import load_config

REPO_ROOT = Path(__file__).resolve().parents[2]
STEPS = 6
TIMEOUT_S = 240  # per subprocess: far above the ~10 s a healthy one takes on 2 busy cores


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def overrides(data_dir, out_dir, *extra: str) -> List[str]:
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.optim.lr=2e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={STEPS}",
        "trainer.save_freq=2", "trainer.test_freq=-1", f"trainer.default_local_dir={out_dir}",
        "trainer.logger=[jsonl]", "trainer.plot_rewards=false", *extra,
    ]


def start(args: List[str], log: Path, fault: Optional[str] = None, new_session: bool = False) -> subprocess.Popen:
    """`python -m verl_lite.main ARGS` in the background, stdout+stderr into `log`."""
    env = dict(os.environ)
    env.pop("VERL_LITE_FAULT", None)
    if fault:
        env["VERL_LITE_FAULT"] = fault
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(log, "w", encoding="utf-8") as f:
        return subprocess.Popen([sys.executable, "-m", "verl_lite.main", *args], stdout=f, stderr=subprocess.STDOUT,
                                env=env, cwd=str(REPO_ROOT), start_new_session=new_session)


def finish(proc: subprocess.Popen, timeout: float = TIMEOUT_S) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the run did not end within {timeout} s")


def run_cli(args: List[str], log: Path, fault: Optional[str] = None) -> int:
    return finish(start(args, log, fault))


def metrics(out_dir: Path) -> Dict[int, dict]:
    """Rows of metrics.jsonl by step; a step logged twice is an error (a resume must not repeat one)."""
    rows: Dict[int, dict] = {}
    for line in (out_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert row["step"] not in rows, f"step {row['step']} logged twice in {out_dir}/metrics.jsonl"
        rows[row["step"]] = row
    return rows


def weights(out_dir: Path, step: int) -> Dict[str, torch.Tensor]:
    return torch.load(out_dir / f"global_step_{step}" / "actor" / "model.pt", weights_only=True)["model"]


def latest(out_dir: Path):
    from verl_lite.trainer.checkpoint import CheckpointManager

    found = CheckpointManager(str(out_dir)).latest_complete()
    return found[0] if found else None


def assert_same_run(ref: Path, out: Path) -> None:
    a, b = weights(ref, STEPS), weights(out, STEPS)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"weights differ from the uninterrupted run: {k}"
    ra, rb = metrics(ref), metrics(out)
    assert sorted(rb) == sorted(ra) == list(range(1, STEPS + 1))
    for step in ra:
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
            assert rb[step][key] == ra[step][key], f"{key} differs at step {step}"


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory):
    """The uninterrupted run, in-process (trainer.ray=false): what every interrupted run must equal."""
    from verl_lite.trainer.run import run

    out = tmp_path_factory.mktemp("reference")
    assert run(load_config(overrides(data_dir, out, "trainer.ray=false"))) == 0
    return out


# ---------------------------------------------------------------------------- process tree


def _ppid_map() -> Dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                    stat = f.read()
                out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def descendants(pid: int) -> List[int]:
    parents = _ppid_map()
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def alive(pids: List[int]) -> List[str]:
    """The pids still running (zombies count as gone), with their command lines."""
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            left.append(f"{pid}: {cmdline[:100]}")
        except OSError:
            continue
    return left


def error_line(text: str) -> str:
    """The driver's one-line error, which must start a line of its own (the progress bar was closed
    first); Ray's log monitor may still print a line of its own after it."""
    lines = [x for x in text.splitlines() if x.startswith("verl_lite.main: ")]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def logged_steps(out_dir: Path) -> int:
    path = out_dir / "metrics.jsonl"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


# ---------------------------------------------------------------------------- tests


def test_sigkill_mid_step_and_mid_checkpoint_and_a_sigterm_all_resume_to_the_uninterrupted_weights(
        data_dir, reference, tmp_path, monkeypatch, caplog):
    out = tmp_path / "run"
    args = overrides(data_dir, out, "trainer.ray=false")
    logs = tmp_path / "logs"
    logs.mkdir()

    # 1. SIGKILL inside the actor update of step 3: checkpoint 2 is what is left.
    assert run_cli(args, logs / "1.log", "kill:worker.update_actor:3") == -signal.SIGKILL
    assert latest(out) == 2
    assert sorted(metrics(out)) == [1, 2]

    # 2. Resumed at 2; SIGKILL after checkpoint 4's manifest, before its rename: 2 is still the newest.
    assert run_cli(args, logs / "2.log", "kill:ckpt_manifest:1") == -signal.SIGKILL
    assert latest(out) == 2
    assert [p.name for p in out.iterdir() if p.name.startswith(".global_step_4.tmp-")], "no half-written dir left"

    # 3. Resumed at 2 (the half-written dir is removed); SIGKILL after the rename of 4, before the
    #    latest file: 4 is complete and is used although latest_checkpointed_iteration.txt says 2.
    assert run_cli(args, logs / "3.log", "kill:ckpt_renamed:1") == -signal.SIGKILL
    assert "removed" in (logs / "3.log").read_text() and ".global_step_4.tmp-" in (logs / "3.log").read_text()
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert latest(out) == 4
    assert not [p for p in out.iterdir() if p.name.startswith(".global_step_")]

    # 4. Resumed at 4; SIGTERM arrives inside step 5: the step finishes, checkpoint 5 is written, exit 143.
    #    (In this process, which has torch loaded already: the signal path is the same.)
    from verl_lite.trainer.run import run

    cfg = load_config(args)
    monkeypatch.setenv("VERL_LITE_FAULT", "sigterm:step:1")
    with caplog.at_level("WARNING"):
        assert run(cfg) == 143
    monkeypatch.delenv("VERL_LITE_FAULT")
    assert "stopped by signal 15 after step 5 of 6" in caplog.text
    assert latest(out) == 5

    # 5. Resumed at 5 to the end.
    assert run(cfg) == 0
    assert_same_run(reference, out)


def test_a_checkpoint_moved_aside_by_an_interrupted_resave_is_put_back_and_leftovers_are_removed(tmp_path):
    from verl_lite.trainer.checkpoint import CheckpointManager, write_manifest

    def complete(path: Path, text: str) -> None:
        path.mkdir(parents=True)
        (path / "driver_state.json").write_text(text)
        write_manifest(str(path))

    complete(tmp_path / "global_step_2", "2")
    complete(tmp_path / ".global_step_4.old-x1" / "ckpt", "4")  # killed between the two renames of a re-save
    (tmp_path / ".global_step_6.tmp-x2").mkdir()  # killed while writing
    (tmp_path / ".global_step_6.tmp-x2" / "model.pt").write_bytes(b"half")
    (tmp_path / ".global_step_1.del-x3").mkdir()  # killed while pruning
    manager = CheckpointManager(str(tmp_path))
    done = manager.recover()
    assert any("restored" in line and "global_step_4" in line for line in done), done
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2", "global_step_4"]
    assert manager.latest_complete() == (4, str(tmp_path / "global_step_4"))
    assert (tmp_path / "global_step_4" / "driver_state.json").read_text() == "4"


def test_pruning_keeps_the_newest_checkpoints_and_leaves_no_half_deleted_dir(tmp_path):
    from verl_lite.trainer.checkpoint import CheckpointManager

    manager = CheckpointManager(str(tmp_path), max_to_keep=2)
    for step in (1, 2, 3):
        manager.save(step, lambda d, s=step: Path(d, "driver_state.json").write_text(str(s)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2", "global_step_3",
                                                         "latest_checkpointed_iteration.txt"]
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "3"


def test_a_disk_that_fills_up_during_a_save_names_the_intact_checkpoint_and_leaves_no_partial_dir(tmp_path):
    import errno

    from verl_lite.checkpoint_files import CheckpointError
    from verl_lite.trainer.checkpoint import CheckpointManager

    manager = CheckpointManager(str(tmp_path))
    manager.save(2, lambda d: Path(d, "driver_state.json").write_text("2"))

    def full_disk(d: str) -> None:
        Path(d, "model.pt").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match=r"writing checkpoint global_step_4 in .* failed \(No space left on "
                                              r"device\); global_step_2 is intact \(free space or point"):
        manager.save(4, full_disk)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2", "latest_checkpointed_iteration.txt"]
    assert manager.latest_complete() == (2, str(tmp_path / "global_step_2"))


def test_a_second_stop_signal_abandons_the_step_at_once():
    from verl_lite.trainer.loop import StopRequest
    from verl_lite.trainer.run import Abandoned, _stop_on_signals

    stop = StopRequest()
    before = signal.getsignal(signal.SIGTERM)
    with _stop_on_signals(stop):
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signum == signal.SIGINT
        with pytest.raises(Abandoned, match="second SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before, "the previous handler was not put back"


@pytest.fixture
def ray_env():
    # Ray's socket paths must stay under 107 bytes: a short temp dir (tests/run.sh sets RAY_TMPDIR).
    temp = os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="vl_ray")
    return ["trainer.ray=true", f"ray_init.temp_dir={temp}", "ray_init.num_cpus=2"]


def test_ctrl_c_on_a_ray_run_checkpoints_exits_130_and_the_resumed_run_matches_the_uninterrupted_one(
        data_dir, reference, tmp_path, ray_env, ray_here):
    out = tmp_path / "run"
    # The default reward, 0.05 s slower per response (~0.8 s a step): the Ctrl-C below must land
    # mid-run, and a step of the tiny model alone takes ~0.1 s, so all six could finish first.
    slow = tmp_path / "slow_reward.py"
    slow.write_text("import time\nfrom verl_lite.data.synthetic import compute_score as score\n\n\n"
                    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    time.sleep(0.05)\n    return score(data_source, solution_str, ground_truth, extra_info)\n")
    args = overrides(data_dir, out, *ray_env, f"custom_reward_function.path={slow}")
    proc = start(args, tmp_path / "1.log", new_session=True)
    wait_for(lambda: logged_steps(out) >= 1 or proc.poll() is not None, TIMEOUT_S, "the first step")
    tree = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    assert finish(proc) == 130, (tmp_path / "1.log").read_text()[-3000:]
    stopped_at = latest(out)
    assert stopped_at is not None and 1 <= stopped_at < STEPS
    wait_for(lambda: not alive(tree), 30, f"the run's processes to exit: {alive(tree)}")

    # Resumed through Ray too: a Ray worker loads what a Ray worker saved (the cluster of this
    # process, so no second Ray start).
    from verl_lite.trainer.run import run

    assert run(load_config(args)) == 0
    assert_same_run(reference, out)


def test_a_killed_ray_worker_ends_the_driver_within_60_s_naming_the_worker_and_step_with_no_orphans(
        data_dir, tmp_path, ray_env):
    out = tmp_path / "run"
    log = tmp_path / "run.log"
    proc = start(overrides(data_dir, out, *ray_env, "trainer.total_training_steps=1000",
                           "trainer.total_epochs=1000"), log)
    wait_for(lambda: logged_steps(out) >= 1 or proc.poll() is not None, TIMEOUT_S, "the first step")
    match = re.search(r"actor_rollout_ref: 1 rank\(s\) ready, pids \[(\d+)\]", log.read_text())
    assert match, log.read_text()[-3000:]
    worker = int(match.group(1))
    tree = descendants(proc.pid)
    assert worker in tree
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    rc = finish(proc, timeout=90)
    took = time.monotonic() - killed
    text = log.read_text()
    assert rc == 1, text[-3000:]
    assert took < 60, f"the driver took {took:.1f} s to notice the dead worker"
    line = error_line(text)
    # The kill lands mid-step or while the step's checkpoint is being written: both name the step.
    assert re.match(rf"verl_lite.main: (at step|saving the checkpoint of step) \d+ of 1000: actor_rollout_ref rank 0 "
                    rf"\(pid {worker}\) failed in \w+: its process died \(", line), line
    assert "Traceback" not in text
    wait_for(lambda: not alive(tree), 30, f"the run's processes to exit: {alive(tree)}")
    print(f"dead worker noticed in {took:.1f} s: {line}")


@pytest.fixture(scope="module")
def ray_here():
    """Ray in this process, for worker groups of a light worker (no torch import: ~1 s to start)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=os.environ.get("RAY_TMPDIR") or tempfile.mkdtemp(prefix="vl_ray"))
    yield ray
    ray.shutdown()


def light_worker_class():
    """A worker with the interface WorkerGroup needs; defined in a function so Ray ships it by value."""

    class LightWorker:
        def __init__(self, *args):
            pass

        def ready(self):
            return True

        def topology(self):
            return {"dp_rank": 0, "dp_size": 1, "leader": True}

        def work(self):
            return "done"

    return LightWorker


@pytest.mark.parametrize("fault, expected", [
    ("raise:worker.work:2", r"failed in work: RuntimeError: fault injected by VERL_LITE_FAULT at worker.work"),
    ("oom:worker.work:2", r"failed in work: MemoryError"),
    ("hang:worker.work:2", r"work: no answer from ranks \[0\] within 3 s \(raise trainer.ray_timeout_s"),
])
def test_a_ray_worker_that_raises_runs_out_of_memory_or_hangs_fails_the_call_naming_rank_pid_and_error(
        ray_here, monkeypatch, fault, expected):
    from verl_lite.faults import reset_faults
    from verl_lite.trainer.worker_group import WorkerError, WorkerGroup

    monkeypatch.setenv("VERL_LITE_FAULT", fault)
    reset_faults()
    group = WorkerGroup(light_worker_class(), "light", {}, 1, "cpu", use_ray=True, call_timeout_s=3)
    try:
        pid = group.pids[0]
        assert group.call_all("work") == ["done"]  # the first call is let through
        started = time.monotonic()
        with pytest.raises(WorkerError) as err:
            group.call_all("work")
        took = time.monotonic() - started
        assert re.match(rf"light(\.work: | rank 0 \(pid {pid}\) )", str(err.value)), str(err.value)
        assert re.search(expected, str(err.value)), str(err.value)
        assert took < 20, f"the failure took {took:.1f} s to surface"
    finally:
        group.shutdown()
    wait_for(lambda: not alive([pid]), 20, f"worker pid {pid} to exit after shutdown")


def ranked_worker_class():
    """A light worker whose ranks join one gloo group as the trainer's workers do (workers._setup_process)."""

    class RankedWorker:
        def __init__(self, cfg, rank, world_size, master_addr, master_port, device, threads):
            from types import SimpleNamespace

            from verl_lite.trainer.workers import _setup_process

            _setup_process(SimpleNamespace(trainer=SimpleNamespace(seed=0)), rank, world_size, master_addr,
                           master_port, device, threads)
            self.rank = rank

        def ready(self):
            return True

        def topology(self):
            return {"dp_rank": self.rank, "dp_size": 2, "leader": True}

        def work(self):
            import torch
            import torch.distributed as dist

            t = torch.tensor([self.rank + 1.0])
            dist.all_reduce(t)
            return dist.get_world_size(), int(os.environ["MASTER_PORT"]), float(t)

    return RankedWorker


def test_a_rendezvous_port_taken_before_rank_0_listens_starts_the_ranks_again_on_a_new_port(
        ray_here, monkeypatch, caplog):
    import logging
    import socket

    import verl_lite.trainer.worker_group as wg_mod
    from verl_lite.device import free_port
    from verl_lite.trainer.worker_group import WorkerError, WorkerGroup

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # another job's listener on the picked port
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    picks: List[int] = []
    monkeypatch.setattr(wg_mod, "free_port", lambda: picks.append(port if not picks else free_port()) or picks[-1])
    caplog.set_level(logging.WARNING, logger=wg_mod.logger.name)
    try:
        monkeypatch.setattr(wg_mod, "PORT_TRIES", 1)
        with pytest.raises(WorkerError, match=r"ranked rank 0 (\(pid \d+\) )?failed in __init__: .*EADDRINUSE"):
            WorkerGroup(ranked_worker_class(), "ranked", {}, 2, "cpu", use_ray=True, init_timeout_s=120)
        assert picks == [port]

        picks.clear()
        monkeypatch.setattr(wg_mod, "PORT_TRIES", 3)
        group = WorkerGroup(ranked_worker_class(), "ranked", {}, 2, "cpu", use_ray=True, init_timeout_s=120)
        try:
            assert len(picks) == 2 and picks[0] == port != picks[1]
            assert group.call_all("work") == [(2, picks[1], 3.0)] * 2
        finally:
            group.shutdown()
        assert (f"ranked: port {port} on 127.0.0.1 was taken before rank 0 listened on it; starting the 2 ranks "
                "again on a new port (try 2 of 3)") in caplog.text
    finally:
        taken.close()


@pytest.mark.megatron
def test_an_interrupted_megatron_run_resumes_to_the_same_weights_and_metrics(data_dir, tmp_path):
    # megatron sets NVTE_* variables in os.environ; conftest's autouse fixture puts the env back.
    from verl_lite.trainer.run import run

    megatron = ["trainer.ray=false", "trainer.total_training_steps=4", "actor_rollout_ref.model.path=tiny-qwen3",
                "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.sequence_parallel=false",
                "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert run(load_config(overrides(data_dir, full, *megatron))) == 0
    assert run(load_config(overrides(data_dir, part, *megatron, "trainer.total_training_steps=2"))) == 0
    assert run(load_config(overrides(data_dir, part, *megatron))) == 0  # resumes at 2
    shard = Path("global_step_4", "actor", "actor_tp00_pp00.pt")
    a = torch.load(full / shard, weights_only=True)["model"][0]
    b = torch.load(part / shard, weights_only=True)["model"][0]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"megatron weights differ after resume: {k}"
    ma, mb = metrics(full), metrics(part)
    assert sorted(mb) == [1, 2, 3, 4]
    assert [mb[s]["actor/pg_loss"] for s in (3, 4)] == [ma[s]["actor/pg_loss"] for s in (3, 4)]
    assert any(ma[s]["actor/pg_loss"] != 0 for s in ma), "a zero loss everywhere would make the check vacuous"
