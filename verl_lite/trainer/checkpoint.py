"""Crash-safe checkpoints: written to a temporary directory, described by a manifest (file sizes and
SHA-256), then renamed into place; `latest_checkpointed_iteration.txt` is replaced atomically last.

A checkpoint directory is complete only if its manifest exists and every file matches it, so a
process killed at any moment leaves the previous complete checkpoint usable; a damaged one is
skipped with a warning naming it. What a killed writer leaves behind is tidied on the next start:
half-written `.global_step_N.tmp-*` dirs and `.del-*` dirs are removed, and a checkpoint moved aside
while being replaced (`.global_step_N.old-*`) is put back when its replacement never landed.

Checkpoint files are read with `torch.load(weights_only=True)` only
(`verl_lite.checkpoint_files.load_tensors`): a file that holds pickled objects other than tensors
and plain containers is refused, never executed.

Fault points for the crash tests (`verl_lite.faults`) sit in the save path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from verl_lite.checkpoint_files import MANIFEST, CheckpointError, read_contents
from verl_lite.decisions.checkpoint_parts import contents_problem
from verl_lite.decisions.layout import role_layout
from verl_lite.config import roles
from verl_lite.faults import fault_point

logger = logging.getLogger(__name__)

DRIVER_STATE = "driver_state.json"
RESUME_FIX = "(delete that directory to resume from an earlier one, or set trainer.resume_mode=disable)"
LATEST = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
LEFTOVER = re.compile(r"^\.global_step_(\d+)\.(tmp|old|del)-")


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


PARTS = ("actor", "critic")  # the roles' subdirs of a global_step_N dir
REMOVED = "removed_parts"  # manifest key: part -> why it was removed


def _keep(value: Optional[int]) -> Optional[int]:
    return int(value) if value is not None and int(value) > 0 else None


def manifest_removed(ckpt_dir: str) -> Dict[str, str]:
    """The parts a retention limit removed from an intact checkpoint, with the setting that did."""
    try:
        with open(os.path.join(ckpt_dir, MANIFEST), encoding="utf-8") as f:
            return dict(json.load(f).get(REMOVED, {}))
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


class CheckpointManager:
    """global_step_N dirs under `root`. Retention, as verl's trainer counts it: the actor parts of the
    newest `max_to_keep` checkpoints stay (trainer.max_actor_ckpt_to_keep), the critic parts of the
    newest `max_critic_to_keep` (trainer.max_critic_ckpt_to_keep); null or <= 0 keeps all. A part is
    removed with its manifest entries rewritten (the dir stays intact, and says what went and why);
    a dir left with neither part is removed whole."""

    def __init__(self, root: str, max_to_keep: Optional[int] = None, max_critic_to_keep: Any = "actor"):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.max_to_keep = max_to_keep
        self.max_critic_to_keep = max_to_keep if max_critic_to_keep == "actor" else max_critic_to_keep

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

    def latest_complete(self, needed: Tuple[str, ...] = ()) -> Optional[Tuple[int, str]]:
        """The newest intact checkpoint holding the parts `needed`; damaged newer ones, and ones whose
        needed parts a retention limit removed, are skipped with a warning."""
        for step, path in reversed(self.list_steps()):
            problem = verify(path) or missing_parts(path, needed)
            if problem is None:
                return step, path
            logger.warning("skipping checkpoint %s: %s", path, problem)
        return None

    def _prune(self) -> None:
        limits = {"actor": (_keep(self.max_to_keep), "trainer.max_actor_ckpt_to_keep"),
                  "critic": (_keep(self.max_critic_to_keep), "trainer.max_critic_ckpt_to_keep")}
        if limits["actor"][0] is None and limits["critic"][0] is None:
            return
        steps = self.list_steps()
        doomed_parts: Dict[str, List[str]] = {}
        for part, (keep, _) in limits.items():
            # a dir with neither part (the fully-async trainer's has an actor part; tests) counts as the actor's
            holding = [path for _, path in steps if os.path.isdir(os.path.join(path, part)) or (
                part == "actor" and not any(os.path.isdir(os.path.join(path, p)) for p in PARTS))]
            if keep is not None:
                for path in holding[:-keep]:
                    doomed_parts.setdefault(path, []).append(part)
        for step, path in steps:
            parts = doomed_parts.get(path)
            if not parts:
                continue
            left = [p for p in PARTS if os.path.isdir(os.path.join(path, p)) and p not in parts]
            if not left:
                # Rename first (atomic), so a kill mid-delete never leaves a half-deleted global_step_N.
                doomed = tempfile.mkdtemp(prefix=f".global_step_{step}.del-", dir=self.root)
                os.rename(path, os.path.join(doomed, "ckpt"))
                shutil.rmtree(doomed, ignore_errors=True)
                continue
            self._remove_parts(path, {p: f"{limits[p][1]}={limits[p][0]}" for p in parts})

    def _remove_parts(self, path: str, why: Dict[str, str]) -> None:
        """Drop parts of an intact checkpoint: the manifest is rewritten first (without their files,
        saying why they went), then the parts are moved out and deleted; a kill in between leaves
        the files the manifest no longer lists, which verify() does not look at."""
        manifest = os.path.join(path, MANIFEST)
        with open(manifest, encoding="utf-8") as f:
            data = json.load(f)
        data["files"] = {rel: meta for rel, meta in data["files"].items() if rel.split(os.sep)[0] not in why}
        data[REMOVED] = {**data.get(REMOVED, {}), **why}
        tmp = manifest + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, manifest)
        step = STEP_DIR.match(os.path.basename(path)).group(1)
        for part in why:
            doomed = tempfile.mkdtemp(prefix=f".global_step_{step}.del-", dir=self.root)
            os.rename(os.path.join(path, part), os.path.join(doomed, part))
            shutil.rmtree(doomed, ignore_errors=True)
        logger.info("checkpoint %s: removed %s", path, ", ".join(f"{p} ({w})" for p, w in why.items()))


def missing_parts(path: str, needed: Tuple[str, ...]) -> Optional[str]:
    """Why the checkpoint at `path` cannot resume a run with the roles `needed`, or None."""
    removed = manifest_removed(path)
    gone = [p for p in needed if not os.path.isdir(os.path.join(path, p))]
    if not gone:
        return None
    return "; ".join(f"its {p} part was removed by {removed[p]}" if p in removed else f"it has no {p} part"
                     for p in gone)


_PREFIX = {"actor": "actor_rollout_ref.actor.checkpoint", "critic": "critic.checkpoint"}


def _load_contents(cfg: Any, role: str) -> List[str]:
    section = roles.section(cfg, role).checkpoint
    return list(section.save_contents if section.load_contents is None else section.load_contents)


def manager_for(cfg: Any) -> CheckpointManager:
    """The run's checkpoint dir with its retention limits (trainer.max_actor_ckpt_to_keep,
    trainer.max_critic_ckpt_to_keep; the latter only where a critic saves)."""
    t = cfg.trainer
    critic = roles.critic_enabled(cfg) and not cfg.async_training.enable
    return CheckpointManager(t.default_local_dir, t.max_actor_ckpt_to_keep,
                             t.max_critic_ckpt_to_keep if critic else None)


def load_into_workers(path: str, *worker_groups: Any) -> None:
    """Load the checkpoint at `path` into every rank of each worker group (None entries skipped);
    a failure is a CheckpointError naming the checkpoint and the way out."""
    try:
        for group in worker_groups:
            if group is not None:
                group.call_all("load_checkpoint", path)
    except Exception as e:
        raise CheckpointError(f"resuming from {path} failed: {e} {RESUME_FIX}") from e


def select_checkpoint(cfg: Any) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(path, driver state) of the checkpoint trainer.resume_mode selects, verified against its
    manifest, or None to start afresh. Imports no torch and builds nothing, so run.py asks before
    Ray starts and a bad checkpoint is refused early. Tidies what an interrupted save left first."""
    t = cfg.trainer
    manager = manager_for(cfg)
    manager.recover()
    if t.resume_mode == "disable":
        return None
    needed = ("actor", "critic") if roles.critic_enabled(cfg) and not cfg.async_training.enable else ("actor",)
    if t.resume_mode == "resume_path":
        path = os.path.abspath(os.path.expanduser(t.resume_from_path or ""))
        problem = verify(path) if os.path.isdir(path) else "no such directory"
        problem = problem or missing_parts(path, needed)
        if problem:
            raise CheckpointError(f"trainer.resume_from_path={t.resume_from_path!r} is not a usable checkpoint: "
                                  f"{problem} (point it at a global_step_N directory, or set trainer.resume_mode=auto)")
    else:
        found = manager.latest_complete(needed)
        if found is None:
            return None
        path = found[1]
    for role in needed:  # what the engines would refuse on load, said before Ray and the models start
        problem = contents_problem(os.path.join(path, role), read_contents(os.path.join(path, role)),
                                   _load_contents(cfg, role), role, _PREFIX[role], role_layout(cfg, role).checkpoint_sizes())
        if problem:
            raise CheckpointError(f"{problem} {RESUME_FIX}")
    try:
        with open(os.path.join(path, DRIVER_STATE), encoding="utf-8") as f:
            state = json.load(f)
        int(state["global_step"]), dict(state["sampler"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: {DRIVER_STATE} is unusable ({type(e).__name__}: {e}) "
                              f"{RESUME_FIX}") from e
    return path, state
