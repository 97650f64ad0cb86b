"""Reading checkpoint files safely: `torch.load(weights_only=True)` only, with errors that name the
file. Engines load their own shards with it, and the trainer its driver state; a file holding
pickled objects other than tensors and plain containers is refused, never executed."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

MANIFEST = "manifest.json"  # in each global_step_N dir: written last, so a save without it never finished
CONTENTS_FILE = "contents.json"  # in each role's part: what it holds, and the engine and layout that wrote it
ALL_CONTENTS = ("model", "optimizer", "extra")  # what a part written before contents.json held


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or loaded, with the path and the fix in the message."""


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


def read_contents(part: str) -> Dict[str, Any]:
    """A role part's contents.json: {"save_contents": [...], "layout": {...} or None}."""
    file = os.path.join(part, CONTENTS_FILE)
    if not os.path.isfile(file):
        return {"save_contents": list(ALL_CONTENTS), "layout": None}
    try:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
        return {"save_contents": list(data["save_contents"]), "layout": data.get("layout")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint file {file} is unusable ({type(e).__name__}: {e})") from e
