"""Run a scorer's slow step (sympy's simplify, which can run for minutes on some answers) with a time
limit, in any thread.

verl limits these steps with `verl.utils.py_functional.timeout_limit`, which forks a process per
call (its older SIGALRM mode only works in the main thread, and the reward runs in Ray worker
threads too). verl_lite keeps one helper process per scoring process instead: a plain
`python -c` of `main` below, started on first use (not a fork, so it is safe from any
thread and from a process that already runs threads), fed one call at a time over a pipe as JSON
lines. A call that runs past its limit kills the helper, whose next call starts a fresh one, and
gives the caller's `default`, as verl's timeout makes the check fail. Only functions of
`verl_lite.reward` run there, named by the caller (model output is data in the call, never code).

If the helper cannot be started (a sandbox that forbids processes), the call runs in this process
without a limit, and a warning says so once.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Optional

ALLOWED_PREFIX = "verl_lite.reward."
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_HELPER_CODE = "from verl_lite.reward.timelimit import main; main()"


class _Helper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._buffer = b""
        self._pid = os.getpid()
        self.broken = False

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_PACKAGE_ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self._proc = subprocess.Popen([sys.executable, "-c", _HELPER_CODE], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env, bufsize=0, close_fds=True)
        self._buffer = b""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.kill()
                proc.wait(timeout=5)
            except Exception:
                pass

    def _read_line(self, deadline: float) -> Optional[bytes]:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("the time-limit helper exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def call(self, function: str, args: list, timeout: float) -> Any:
        """(finished, value): finished is False when the call ran past `timeout` seconds."""
        with self._lock:
            if self._pid != os.getpid():  # a forked copy of the process: the helper is the parent's
                self._proc, self._pid = None, os.getpid()
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            deadline = time.monotonic() + timeout
            try:
                self._proc.stdin.write(json.dumps({"function": function, "args": args}).encode() + b"\n")
                line = self._read_line(deadline)
            except (OSError, EOFError) as e:  # the helper died (killed, out of memory): verl's child did too
                self.stop()
                raise RuntimeError(f"the time-limit helper died while running {function}: {e}") from None
            if line is None:
                self.stop()
                return False, None
            reply = json.loads(line)
            if not reply["ok"]:
                raise RuntimeError(f"{function} raised in the time-limit helper: {reply['error']}")
            return True, reply["value"]


_HELPER = _Helper()
atexit.register(_HELPER.stop)  # it would also exit on its own, at the end of its input


def _resolve(function: str):
    if not function.startswith(ALLOWED_PREFIX) or ":" not in function:
        raise ValueError(f"the time-limit helper runs functions of {ALLOWED_PREFIX}* as 'module:name', "
                         f"not {function!r}")
    import importlib

    module, name = function.split(":", 1)
    return getattr(importlib.import_module(module), name)


def call(function: str, *args: Any, timeout: float, default: Any) -> Any:
    """`function(*args)` (a 'verl_lite.reward.module:name' taking and returning JSON values), run in
    the helper process; `default` if it runs past `timeout` seconds. An exception of the function
    is raised here as RuntimeError (verl's scorers count it as a failed check)."""
    if not _HELPER.broken:
        try:
            finished, value = _HELPER.call(function, list(args), timeout)
            return value if finished else default
        except OSError as e:  # could not start a process at all
            _HELPER.broken = True
            warnings.warn(f"verl_lite.reward: cannot start the time-limit helper ({e}); sympy checks run "
                          "in this process without a time limit", RuntimeWarning, stacklevel=2)
    return _resolve(function)(*args)


def stop() -> None:
    """Stop the helper process (the next call starts a new one)."""
    with _HELPER._lock:
        _HELPER.stop()


def main() -> None:
    """The helper's loop: one JSON request a line on stdin, one JSON reply a line on stdout."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # nothing a function prints may mix with the replies
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"ok": True, "value": _resolve(request["function"])(*request["args"])}
        except Exception as e:
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
