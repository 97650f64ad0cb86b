"""Crash-safe checkpoints: written to a temporary directory, described by a manifest (file sizes and
SHA-256), then renamed into place; `latest_checkpointed_iteration.txt` is replaced atomically last.

A checkpoint directory is complete only if its manifest exists and every file matches it, so a
process killed at any moment leaves the previous complete checkpoint usable; a damaged one is
skipped with a warning naming it. What a killed writer leaves behind is tidied on the next start:
half-written `.global_step_N.tmp-*` dirs and `.del-*` dirs are removed, and a checkpoint moved aside
while being replaced (`.global_step_N.old-*`) is put back when its replacement never landed.

Checkpoint files are read with `torch.load(weights_only=True)` only (`load_tensors`): a file that
holds pickled objects other than tensors and plain containers is refused, never executed.

Fault injection, for the crash tests (off unless `VERL_LITE_FAULT` is set; see docs/reliability.md):
`VERL_LITE_FAULT=ACTION:POINT[:N]` makes the N-th (default first) arrival at POINT in a process
`kill` it with SIGKILL, `raise` a RuntimeError, `oom` (raise a real MemoryError by allocating past
a lowered address-space limit), `hang` (sleep for an hour) or send itself `sigterm`/`sigint` (a
stop request arriving at a known moment). Counts start again with each `run()`. Points: `step` (mid-step, after the
actor update, before the weight sync), `ckpt_written` (worker files written, no manifest yet),
`ckpt_manifest` (manifest written, not yet renamed), `ckpt_renamed` (renamed, latest file not yet
updated), and `worker.METHOD` (on entry to that worker method, in the worker's own process).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
DRIVER_STATE = "driver_state.json"
RESUME_FIX = "(delete that directory to resume from an earlier one, or set trainer.resume_mode=disable)"
LATEST = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
LEFTOVER = re.compile(r"^\.global_step_(\d+)\.(tmp|old|del)-")
FAULT_ENV = "VERL_LITE_FAULT"
FAULT_ACTIONS = ("kill", "raise", "oom", "hang", "sigterm", "sigint")
FAULT_POINTS = ("step", "ckpt_written", "ckpt_manifest", "ckpt_renamed", "worker.<method>")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or loaded, with the path and the fix in the message."""


# ---------------------------------------------------------------------------- fault injection


class FaultSpec:
    """A parsed VERL_LITE_FAULT value: ACTION:POINT[:N]."""

    def __init__(self, action: str, point: str, nth: int):
        self.action, self.point, self.nth = action, point, nth
        self.hits = 0

    @classmethod
    def parse(cls, text: str) -> "FaultSpec":
        parts = text.strip().split(":")
        usage = (f"{FAULT_ENV}={text!r} is not ACTION:POINT[:N] (ACTION: {', '.join(FAULT_ACTIONS)}; POINT: "
                 f"{', '.join(FAULT_POINTS)}; N >= 1); unset {FAULT_ENV} for a normal run")
        if len(parts) not in (2, 3) or parts[0] not in FAULT_ACTIONS:
            raise ValueError(usage)
        point = parts[1]
        if point not in FAULT_POINTS[:-1] and not (point.startswith("worker.") and len(point) > len("worker.")):
            raise ValueError(usage)
        nth = parts[2] if len(parts) == 3 else "1"
        if not nth.isdigit() or int(nth) < 1:
            raise ValueError(usage)
        return cls(parts[0], point, int(nth))

    def hit(self, point: str) -> None:
        """Count an arrival at `point`; act on the N-th."""
        if point != self.point:
            return
        self.hits += 1
        if self.hits == self.nth:
            inject(self.action, point)


_FAULT: Dict[str, Optional[FaultSpec]] = {}


def fault_spec(environ: Optional[Dict[str, str]] = None) -> Optional[FaultSpec]:
    """The VERL_LITE_FAULT of this process (parsed once), or None when unset."""
    text = (os.environ if environ is None else environ).get(FAULT_ENV, "")
    if text not in _FAULT:
        _FAULT[text] = FaultSpec.parse(text) if text else None
    return _FAULT[text]


def fault_point(point: str) -> None:
    """A place where the crash tests may inject a fault; a dict lookup when VERL_LITE_FAULT is unset."""
    spec = fault_spec()
    if spec is not None:
        spec.hit(point)


def inject(action: str, point: str) -> None:
    logger.warning("%s: injecting %s at %s (pid %d)", FAULT_ENV, action, point, os.getpid())
    if action == "kill":
        for h in logging.getLogger().handlers:
            h.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise RuntimeError(f"fault injected by {FAULT_ENV} at {point}")
    elif action == "oom":
        _exhaust_memory()
    elif action == "hang":
        time.sleep(3600)
    elif action in ("sigterm", "sigint"):
        os.kill(os.getpid(), signal.SIGTERM if action == "sigterm" else signal.SIGINT)


def reset_faults() -> None:
    """Start counting arrivals afresh (each run() is one process's worth of a crash test)."""
    _FAULT.clear()


def _exhaust_memory() -> None:
    """Allocate past a lowered address-space limit: the allocator raises a real MemoryError, as on a
    node that ran out of memory, without touching the memory of anything else on the machine."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", encoding="ascii") as f:
        used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), hard))
    try:
        hog = bytearray(1 << 30)  # 1 GiB > the 256 MiB of headroom left
        del hog
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ---------------------------------------------------------------------------- reading


def load_tensors(path: str) -> Any:
    """torch.load(path, weights_only=True), with errors that name the file: a pickle of anything but
    tensors and plain containers is refused (loading it could run code), a damaged file says so."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"checkpoint file {path} holds objects other than tensors and was refused: loading it could run "
            f"code ({first[:160]}); only load checkpoints written by verl_lite from a source you trust"
        ) from e
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint file {path} cannot be read ({type(e).__name__}: {str(e)[:160]}); "
                              f"resume from another checkpoint or set trainer.resume_mode=disable") from e


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(ckpt_dir: str) -> None:
    files = {}
    for root, _, names in os.walk(ckpt_dir):
        for n in sorted(names):
            if n == MANIFEST:
                continue
            p = os.path.join(root, n)
            files[os.path.relpath(p, ckpt_dir)] = {"size": os.path.getsize(p), "sha256": _sha256(p)}
            _fsync_file(p)  # on disk before the manifest vouches for it (power loss, not just a kill)
    tmp = os.path.join(ckpt_dir, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(ckpt_dir, MANIFEST))


def verify(ckpt_dir: str) -> Optional[str]:
    """None if the checkpoint is complete and intact, else what is wrong."""
    manifest = os.path.join(ckpt_dir, MANIFEST)
    if not os.path.isfile(manifest):
        return "no manifest (interrupted while writing?)"
    try:
        with open(manifest, encoding="utf-8") as f:
            files = json.load(f)["files"]
    except (OSError, ValueError, KeyError) as e:
        return f"unreadable manifest ({e})"
    for rel, meta in files.items():
        p = os.path.join(ckpt_dir, rel)
        if not os.path.isfile(p):
            return f"missing file {rel}"
        if os.path.getsize(p) != meta["size"]:
            return f"file {rel} has {os.path.getsize(p)} bytes, manifest says {meta['size']} (truncated?)"
        if _sha256(p) != meta["sha256"]:
            return f"file {rel} does not match its SHA-256 (corrupted)"
    return None


class CheckpointManager:
    def __init__(self, root: str, max_to_keep: Optional[int] = None):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.max_to_keep = max_to_keep

    def step_dir(self, step: int) -> str:
        return os.path.join(self.root, f"global_step_{step}")

    def save(self, step: int, write: Callable[[str], None]) -> str:
        """`write(tmp_dir)` fills a temp dir; it becomes global_step_<step> only when complete."""
        os.makedirs(self.root, exist_ok=True)
        self.recover()
        tmp = tempfile.mkdtemp(prefix=f".global_step_{step}.tmp-", dir=self.root)
        try:
            write(tmp)
            fault_point("ckpt_written")
            write_manifest(tmp)
            fault_point("ckpt_manifest")
            final = self.step_dir(step)
            if os.path.exists(final):
                # Re-saving a step (after a resume): move the old one aside first, then drop it.
                # A kill between the two renames leaves .old-*/ckpt, which recover() puts back.
                old = tempfile.mkdtemp(prefix=f".global_step_{step}.old-", dir=self.root)
                os.rename(final, os.path.join(old, "ckpt"))
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(self.root)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            kept = self.list_steps()  # not re-hashed: a big checkpoint takes minutes to verify
            raise CheckpointError(
                f"writing checkpoint global_step_{step} in {self.root} failed ({e.strerror or e}); "
                f"{'global_step_%d is intact' % kept[-1][0] if kept else 'no earlier checkpoint exists'} "
                f"(free space or point trainer.default_local_dir at a writable disk with room)") from e
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fault_point("ckpt_renamed")
        latest_tmp = os.path.join(self.root, LATEST + ".tmp")
        with open(latest_tmp, "w", encoding="utf-8") as f:
            f.write(str(step))
            f.flush()
            os.fsync(f.fileno())
        os.replace(latest_tmp, os.path.join(self.root, LATEST))
        self._prune()
        return final

    def recover(self) -> List[str]:
        """Tidy what a killed writer left: put back a checkpoint moved aside whose replacement never
        landed, delete half-written and half-deleted dirs. Returns what was done, one line each."""
        done: List[str] = []
        if not os.path.isdir(self.root):
            return done
        for name in sorted(os.listdir(self.root)):
            m = LEFTOVER.match(name)
            if not m:
                continue
            path = os.path.join(self.root, name)
            moved = os.path.join(path, "ckpt")
            final = self.step_dir(int(m.group(1)))
            if m.group(2) == "old" and os.path.isdir(moved) and not os.path.exists(final):
                os.rename(moved, final)
                done.append(f"restored {final} (the write replacing it was interrupted)")
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {path} (left by an interrupted checkpoint write)")
        for line in done:
            logger.warning("checkpoint dir: %s", line)
        return done

    def list_steps(self) -> List[Tuple[int, str]]:
        if not os.path.isdir(self.root):
            return []
        out = []
        for name in os.listdir(self.root):
            m = STEP_DIR.match(name)
            if m:
                out.append((int(m.group(1)), os.path.join(self.root, name)))
        return sorted(out)

    def latest_complete(self) -> Optional[Tuple[int, str]]:
        """The newest intact checkpoint; damaged newer ones are skipped with a warning."""
        for step, path in reversed(self.list_steps()):
            problem = verify(path)
            if problem is None:
                return step, path
            logger.warning("skipping checkpoint %s: %s", path, problem)
        return None

    def _prune(self) -> None:
        if not self.max_to_keep or self.max_to_keep <= 0:
            return
        steps = self.list_steps()
        for step, path in steps[:-self.max_to_keep]:
            # Rename first (atomic), so a kill mid-delete never leaves a half-deleted global_step_N.
            doomed = tempfile.mkdtemp(prefix=f".global_step_{step}.del-", dir=self.root)
            os.rename(path, os.path.join(doomed, "ckpt"))
            shutil.rmtree(doomed, ignore_errors=True)


def select_checkpoint(cfg: Any) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(path, driver state) of the checkpoint trainer.resume_mode selects, verified against its
    manifest, or None to start afresh. Imports no torch and builds nothing, so run.py asks before
    Ray starts and a bad checkpoint is refused early. Tidies what an interrupted save left first."""
    t = cfg.trainer
    manager = CheckpointManager(t.default_local_dir, t.max_actor_ckpt_to_keep)
    manager.recover()
    if t.resume_mode == "disable":
        return None
    if t.resume_mode == "resume_path":
        path = os.path.abspath(os.path.expanduser(t.resume_from_path or ""))
        problem = verify(path) if os.path.isdir(path) else "no such directory"
        if problem:
            raise CheckpointError(f"trainer.resume_from_path={t.resume_from_path!r} is not a usable checkpoint: "
                                  f"{problem} (point it at a global_step_N directory, or set trainer.resume_mode=auto)")
    else:
        found = manager.latest_complete()
        if found is None:
            return None
        path = found[1]
    try:
        with open(os.path.join(path, DRIVER_STATE), encoding="utf-8") as f:
            state = json.load(f)
        int(state["global_step"]), dict(state["sampler"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: {DRIVER_STATE} is unusable ({type(e).__name__}: {e}) "
                              f"{RESUME_FIX}") from e
    return path, state
