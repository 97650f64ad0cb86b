"""Reading checkpoint files safely: `torch.load(weights_only=True)` only, with errors that name the
file. Engines load their own shards with it, and the trainer its driver state; a file holding
pickled objects other than tensors and plain containers is refused, never executed."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Optional

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


def contents_problem(part: str, held: Dict[str, Any], load: Iterable[str], role: str, prefix: str,
                     current: Dict[str, Any]) -> Optional[str]:
    """Why the part at `part` (its contents.json, `held`) cannot give what `load` (the role's
    checkpoint.load_contents) asks, or None: a listed part it lacks; files that another engine or
    parallel layout wrote (`current`: this run's engine and sizes; only keys both name are compared,
    so a torch engine's data-parallel size, which its full state dicts do not depend on, is not)."""
    load = set(load)
    saved = set(held["save_contents"])
    wanted = load - {"hf_model"} if "model" in load else load
    missing = sorted(wanted - saved)
    if missing:
        return (f"the {role} checkpoint {part} holds no {', '.join(missing)} (it was saved with save_contents="
                f"[{','.join(sorted(saved))}]): remove {', '.join(missing)} from {prefix}.load_contents, or "
                f"resume from a checkpoint that holds {'them' if len(missing) > 1 else 'it'}")
    files = [p for p in ("model", "optimizer", "extra") if p in load]
    return layout_mismatch(part, held["layout"], current, role, files, prefix)


def layout_mismatch(part: str, saved: Optional[Dict[str, Any]], current: Dict[str, Any], role: str,
                    what: List[str], prefix: str) -> Optional[str]:
    """Why files cut for the saved engine and layout cannot load into this run's, or None."""
    if not saved or not what:
        return None
    diff = {k: (saved.get(k), v) for k, v in current.items() if k in saved and saved.get(k) != v}
    if not diff:
        return None
    parts = ", ".join(what[:-1]) + (" and " if len(what) > 1 else "") + what[-1]
    instead = (f"or load the weights alone from the checkpoint's HF copy ({prefix}.load_contents=[hf_model], which "
               "needs hf_model in the saved save_contents)")
    if "engine" in diff:
        key = "critic.strategy" if role == "critic" else "actor_rollout_ref.actor.strategy"
        strategy = {"megatron": "megatron", "fsdp": "fsdp"}.get(saved["engine"], saved["engine"])
        return (f"the {role} checkpoint {part} was written by the {saved['engine']} engine and this run's {role} "
                f"runs on the {current['engine']} engine; its {parts} files are that engine's. Resume with "
                f"{key}={strategy}, {instead}")
    section = prefix.rsplit(".", 1)[0] + ".megatron"  # `prefix` is the role's config.roles.SECTION + ".checkpoint"
    shown = ", ".join(f"{k}={old} (this run: {new})" for k, (old, new) in sorted(diff.items()))

    def setting(key: str, value: Any) -> Optional[str]:
        if key == "data_parallel_size":  # the device count over TP * PP * CP
            return None
        if key == "expert_tensor_parallel_size" and value == saved.get("tensor_model_parallel_size"):
            return None  # null follows tensor_model_parallel_size
        if key == "virtual_pipeline_model_parallel_size" and value == 1:
            return f"{section}.{key}=null"
        return f"{section}.{key}={value}"

    sets = " ".join(s for s in (setting(k, old) for k, (old, _) in sorted(diff.items())) if s)
    return (f"the {role} checkpoint {part} was saved with another parallel layout: {shown}; its {parts} files are "
            f"cut for that layout. Resume with the saved layout{' (' + sets + ')' if sets else ''}, {instead}")
