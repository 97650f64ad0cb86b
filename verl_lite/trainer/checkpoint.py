"""Crash-safe checkpoints: written to a temporary directory, described by a manifest (file sizes and
SHA-256), then renamed into place; `latest_checkpointed_iteration.txt` is replaced atomically last.

A checkpoint directory is complete only if its manifest exists and every file matches it, so a
process killed at any moment leaves the previous complete checkpoint usable; a damaged one is
skipped with a warning naming it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from typing import Callable, List, Optional, Tuple

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LATEST = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointError(RuntimeError):
    pass


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
        tmp = tempfile.mkdtemp(prefix=f".global_step_{step}.tmp-", dir=self.root)
        try:
            write(tmp)
            write_manifest(tmp)
            final = self.step_dir(step)
            if os.path.exists(final):
                # Re-saving a step (after a resume): move the old one aside first, then drop it.
                old = tempfile.mkdtemp(prefix=f".global_step_{step}.old-", dir=self.root)
                os.rename(final, os.path.join(old, "ckpt"))
                os.rename(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        latest_tmp = os.path.join(self.root, LATEST + ".tmp")
        with open(latest_tmp, "w", encoding="utf-8") as f:
            f.write(str(step))
            f.flush()
            os.fsync(f.fileno())
        os.replace(latest_tmp, os.path.join(self.root, LATEST))
        self._prune()
        return final

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
        for _, path in steps[:-self.max_to_keep]:
            shutil.rmtree(path, ignore_errors=True)
