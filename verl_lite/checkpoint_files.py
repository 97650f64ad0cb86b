"""Reading checkpoint files safely: `torch.load(weights_only=True)` only, with errors that name the
file. Engines load their own shards with it, and the trainer its driver state; a file holding
pickled objects other than tensors and plain containers is refused, never executed."""

from __future__ import annotations

from typing import Any


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
