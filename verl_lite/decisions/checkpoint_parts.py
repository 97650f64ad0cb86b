"""What a checkpoint part can give this run: the parts its contents.json lists against the role's
`checkpoint.load_contents`, and the engine and parallel layout that cut its files against this run's
(`decisions/layout.checkpoint_mismatch`). The trainer asks before Ray starts, the engines when they load."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional

from verl_lite.decisions.layout import checkpoint_mismatch


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
    return checkpoint_mismatch(part, held["layout"], current, role, files, prefix)
