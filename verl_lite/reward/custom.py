"""Load a user's reward function from a Python file (verl's `custom_reward_function.path/name`).

The file is executed as code, with the rights of the training process: only point at files you
trust. The module it becomes is not registered in `sys.modules`, so Ray ships the function to its
workers by value instead of trying to import a module that only exists here.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from typing import Callable, List


def _defined_callables(module) -> List[str]:
    """Public callables defined by the file itself (not the ones it imports)."""
    return sorted(
        n
        for n, v in vars(module).items()
        if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
    )


def load_custom_reward_fn(path: str, name: str = "compute_score") -> Callable:
    """Execute the file at `path` and return its callable `name`.

    The function is called as `name(data_source=..., solution_str=..., ground_truth=...,
    extra_info=...)` and returns a float (or a dict with a "score" key).
    """
    full = os.path.abspath(os.path.expanduser(os.path.expandvars(path)))
    if not os.path.isfile(full):
        raise FileNotFoundError(
            f"custom reward file not found: {path!r} (resolved to {full}); "
            "set custom_reward_function.path to an existing Python file"
        )
    module_name = "verl_lite_custom_reward_" + os.path.splitext(os.path.basename(full))[0]
    loader = importlib.machinery.SourceFileLoader(module_name, full)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(module_name, loader))
    try:
        loader.exec_module(module)
    except Exception as e:
        raise RuntimeError(
            f"custom reward file {full} (custom_reward_function.path) failed while running: {type(e).__name__}: {e}"
        ) from e
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        defined = _defined_callables(module)
        what = "is not callable" if fn is not None else "is not defined"
        raise AttributeError(
            f"custom reward function {name!r} {what} in {full}; "
            f"callables the file defines: {', '.join(defined) if defined else '(none)'}; "
            "set custom_reward_function.name to one of them"
        )
    return fn
