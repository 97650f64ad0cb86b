"""Fault injection for the crash tests: off unless `VERL_LITE_FAULT` is set (docs/reliability.md).

`VERL_LITE_FAULT=ACTION:POINT[:N]` makes the N-th (default first) arrival at POINT in a process
`kill` it with SIGKILL, `raise` a RuntimeError, `oom` (raise a real MemoryError by allocating past
a lowered address-space limit), `hang` (sleep for an hour) or send itself `sigterm`/`sigint` (a
stop request arriving at a known moment). Counts start again with each `run()`. Points: `step` (mid-step, after the
actor update, before the weight sync), `ckpt_written` (worker files written, no manifest yet),
`ckpt_manifest` (manifest written, not yet renamed), `ckpt_renamed` (renamed, latest file not yet
updated), and `worker.METHOD` (on entry to that worker method, in the worker's own process).
On the Ray path `sigterm:step:N` stops after step N+1 when step N sent step N+1's generation
ahead (docs/reliability.md, "Stopping").
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Dict, Optional

logger = logging.getLogger(__name__)

FAULT_ENV = "VERL_LITE_FAULT"
FAULT_ACTIONS = ("kill", "raise", "oom", "hang", "sigterm", "sigint")
FAULT_POINTS = ("step", "ckpt_written", "ckpt_manifest", "ckpt_renamed", "worker.<method>")


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


