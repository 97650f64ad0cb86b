"""Preflight rule of the custom reward file (`custom_reward_function.path/name`, `check --training`):
the file is loaded the way the trainer loads it (`reward/custom.py:load_custom_reward_fn`), but in a
child process (`sys.executable -c ...`) with a timeout, so a file that imports heavy packages, hangs
or changes the interpreter cannot hang or pollute the check. Reported, each as one problem:

- the file does not exist;
- importing it raised (type, message, and the file's line); `No module named 'verl'` names the
  verl_lite module that has what the line imports from verl, or `pip install --no-deps verl`;
- the function is missing or not callable (with the callables the file defines);
- its signature cannot take verl's call `fn(data_source=, solution_str=, ground_truth=, extra_info=)`
  (keywords; **kwargs and `async def` are fine);
- it did not finish loading within the timeout, or the child died.

The child's answer is a JSON file it writes (the reward file may print anything). One answer per
file version is kept for the process (the device hint re-runs the rules: `preflight/run.py`).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

KEY = "custom_reward_function.path"
TIMEOUT_S = 60.0
# verl's call of a reward function (verl/workers/reward_manager/naive.py, verl_lite's RewardManager)
VERL_CALL = "fn(data_source=..., solution_str=..., ground_truth=..., extra_info=...)"
VERL_SCORES = "verl.utils.reward_score"
# verl.utils.reward_score modules verl_lite has under another name
RENAMED = {"math_reward": "math", "search_r1_like_qa_em": "qa_em"}
NO_DEPS = "pip install --no-deps verl"

_CHILD = r"""
import inspect, json, os, sys, traceback
root, path, name, out = sys.argv[1:5]
sys.path.insert(0, root)
from verl_lite.reward.custom import load_custom_reward_fn

def answer(**kw):
    with open(out, "w", encoding="utf-8") as f:
        json.dump(kw, f)

try:
    fn = load_custom_reward_fn(path, name)
except FileNotFoundError as e:
    answer(kind="missing_file", message=str(e))
except AttributeError as e:
    answer(kind="no_function", message=str(e))
except RuntimeError as e:
    cause = e.__cause__ or e
    full = os.path.abspath(os.path.expanduser(os.path.expandvars(path)))
    lineno, text = getattr(cause, "lineno", None), getattr(cause, "text", None)
    if not isinstance(cause, SyntaxError):
        lineno, text = None, None
        for frame in traceback.extract_tb(cause.__traceback__):
            if os.path.abspath(frame.filename) == full:
                lineno, text = frame.lineno, frame.line
    answer(kind="import_error", type=type(cause).__name__, message=str(cause), lineno=lineno,
           line=(text or "").strip(), module=getattr(cause, "name", None) if isinstance(cause, ImportError) else None)
else:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    problem = None
    if sig is not None:
        try:
            sig.bind(data_source=None, solution_str=None, ground_truth=None, extra_info=None)
        except TypeError as e:
            verl = ("data_source", "solution_str", "ground_truth", "extra_info")
            ps = sig.parameters.values()
            named = [p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            takes_all = any(p.kind == p.VAR_KEYWORD for p in ps)
            refused = [] if takes_all else [k for k in verl if k not in named]
            needed = [p.name for p in ps if p.default is p.empty and p.name not in verl
                      and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            parts = ([f"it takes no keyword {', '.join(refused)}"] if refused else []) + (
                [f"it needs {', '.join(needed)}, which verl does not pass"] if needed else [])
            problem = "; ".join(parts) or str(e)
    answer(kind="signature" if problem else "ok", signature=str(sig) if sig is not None else None,
           message=problem, is_async=inspect.iscoroutinefunction(fn))
"""


def reward_file_problems(cfg: Any, timeout_s: float = TIMEOUT_S) -> List[str]:
    """The custom reward file's problems ([] without a path, or when its function can be called)."""
    path, name = cfg.custom_reward_function.path, str(cfg.custom_reward_function.name)
    if not path:
        return []
    full = os.path.abspath(os.path.expanduser(os.path.expandvars(str(path))))
    if not os.path.isfile(full):
        return [f"{KEY}: {path} does not exist"]
    stat = os.stat(full)
    return list(_load_problems(str(path), full, name, stat.st_mtime_ns, stat.st_size, float(timeout_s)))


@functools.lru_cache(maxsize=32)
def _load_problems(path: str, full: str, name: str, _mtime: int, _size: int, timeout_s: float) -> tuple:
    """Load the file in a child process; the problems as a tuple (cached per file version)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory(prefix="verl_lite_reward_check_") as tmp:
        out = os.path.join(tmp, "answer.json")
        try:
            done = subprocess.run([sys.executable, "-c", _CHILD, root, full, name, out], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return (f"{KEY}: loading {path} did not finish in {timeout_s:.0f} s (custom_reward_function.name={name}): "
                    "the file hangs, or runs or imports something slow at load time; move it into the function, or "
                    "check the file with `python -c \"import runpy; runpy.run_path('" + full + "')\"`",)
        try:
            with open(out, encoding="utf-8") as f:
                answer: Dict[str, Any] = json.load(f)
        except (OSError, ValueError):
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
            return (f"{KEY}: loading {path} ended the process (exit code {done.returncode}) before its function could "
                    f"be checked{': ' + ' | '.join(tail) if tail else ''}",)
    return tuple(_messages(answer, path, name))


def _messages(answer: Dict[str, Any], path: str, name: str) -> List[str]:
    kind = answer.get("kind")
    if kind == "ok":
        return []
    if kind == "missing_file":
        return [f"{KEY}: {path} does not exist"]
    if kind == "no_function":
        return [f"custom_reward_function.name={name!r}: {answer.get('message')}"]
    if kind == "signature":
        what = "async def" if answer.get("is_async") else "def"
        return [f"custom_reward_function.name={name!r}: {what} {name}{answer.get('signature')} in {path} cannot "
                f"take verl's call {VERL_CALL} ({answer.get('message')}); give it those four keyword parameters "
                "(extra ones with defaults, or **kwargs)"]
    if kind == "import_error":
        where = f"line {answer['lineno']}" if answer.get("lineno") else "at load"
        line = f" (`{answer['line']}`)" if answer.get("line") else ""
        text = (f"{KEY}: importing {path} raised {answer.get('type')}: {answer.get('message')} at {where}{line}")
        if answer.get("type") == "ModuleNotFoundError" and str(answer.get("module") or "").split(".")[0] == "verl":
            text += ": " + verl_import_hint(answer.get("line") or "")
        return [text]
    return [f"{KEY}: checking {path} gave no answer ({answer!r})"]


def _verl_imports(line: str) -> List[tuple]:
    """(verl module, imported name or None, the name it is bound to) for each verl import on the line:
    `from verl.utils.reward_score import gsm8k` -> [("verl.utils.reward_score", "gsm8k", "gsm8k")]."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return []
    found: List[tuple] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "verl":
            found += [(node.module, a.name, a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None, a.asname or a.name) for a in node.names if a.name.split(".")[0] == "verl"]
    return found


def _ours(module: str) -> Optional[str]:
    """verl_lite's scorer module for a verl.utils.reward_score module name, None when it has none."""
    name = RENAMED.get(module, module)
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reward", f"{name}.py")
    return name if name not in ("custom", "manager", "__init__") and os.path.isfile(here) else None


def verl_lite_import(module: str, name: Optional[str], bound: str) -> Optional[str]:
    """The import line verl_lite takes instead of one from verl.utils.reward_score, None when it has none:
    `from verl.utils.reward_score import gsm8k` -> `from verl_lite.reward import gsm8k`,
    `... import math_reward` -> `from verl_lite.reward import math as math_reward`,
    `... import default_compute_score` -> `from verl_lite.reward import default_compute_score`."""
    def bind(ours: str, theirs: str) -> str:
        return ours if ours == bound == theirs else f"{ours} as {bound}"

    if module == VERL_SCORES and name == "default_compute_score":
        return f"from verl_lite.reward import {bind('default_compute_score', name)}"
    if module == VERL_SCORES and name is not None:
        ours = _ours(name)
        return f"from verl_lite.reward import {bind(ours, name)}" if ours else None
    if module.startswith(VERL_SCORES + ".") and module.count(".") == 3:
        ours = _ours(module.rsplit(".", 1)[1])
        if ours is None:
            return None
        if name is None:
            return f"import verl_lite.reward.{ours} as {bound if bound != module else ours}"
        return f"from verl_lite.reward.{ours} import {bind(name, name)}"
    return None


def verl_import_hint(line: str) -> str:
    """What to write instead of an import from verl (which is not installed here)."""
    imports = _verl_imports(line)
    ours = [verl_lite_import(*i) for i in imports]
    if ours and all(ours):
        return (f"verl is not installed; verl_lite has the same scorer: write `{'; '.join(ours)}`, or install "
                f"verl's package without its dependencies ({NO_DEPS}), which provides it")
    names = ", ".join(m + (f".{n}" if n else "") for m, n, _ in imports) or "this import"
    return (f"verl is not installed and verl_lite has no module for {names}: install verl's package without its "
            f"dependencies ({NO_DEPS}), which provides it")
