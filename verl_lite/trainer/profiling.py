"""torch.profiler traces of the steps global_profiler.steps lists, as verl's global_profiler does.

The driver asks each worker group to start before a profiled step and to stop after it; a worker
records only when its role's `profiler.enable` is on and its rank is profiled (all_ranks, or the
listed ranks, rank 0 when none is listed). One trace per step, role and rank:
`<save_path>/<role>_step<N>_rank<R>.json.gz` (chrome trace format); roles sharing a process
(trainer.ray=false) share one, `actor+critic_step<N>_rank0.json.gz`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable, Optional

# what the settings ask for (torch-free, read by the preflight too)
from verl_lite.decisions.profiling import CONTENTS, REFUSED_TOOLS, TOOLS, is_profiled_step, profiler_problems  # noqa: F401

logger = logging.getLogger(__name__)


def trace_path(save_path: str, role: str, step: int, rank: int) -> str:
    return os.path.join(save_path, f"{role}_step{step}_rank{rank}.json.gz")


# The recording running in this process. torch.profiler takes one at a time per process, and workers
# of several roles share a process when trainer.ray=false: a second role joins the first's
# recording, which holds both roles' ops, and the trace is named after all of them.
_RUNNING: dict = {}


class StepProfiler:
    """torch.profiler over one step of one worker, or nothing when this rank is not profiled."""

    def __init__(self, role: str, profiler_cfg: Any, save_path: str, rank: int, device: str):
        ranks: Iterable[int] = profiler_cfg.ranks or [0]
        self.on = bool(profiler_cfg.enable) and (bool(profiler_cfg.all_ranks) or rank in ranks)
        self.role, self.save_path, self.rank, self.device = role, save_path, rank, device
        self.contents = set(profiler_cfg.tool_config.torch.contents)
        self.prof: Optional[Any] = None
        self.step = 0

    def start(self, step: int) -> None:
        if not self.on:
            return
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]  # always: the CPU side of every op, as verl collects it
        if self.device == "cuda" and (not self.contents or "cuda" in self.contents):
            activities.append(ProfilerActivity.CUDA)
        self.step = step
        if _RUNNING:  # another role of this process is recording: join it
            _RUNNING["roles"].append(self.role)
            return
        everything = not self.contents
        self.prof = profile(activities=activities, record_shapes=everything or "shapes" in self.contents,
                            profile_memory=everything or "memory" in self.contents,
                            with_stack=everything or "stack" in self.contents)
        self.prof.start()
        _RUNNING.update(roles=[self.role])

    def stop(self) -> Optional[str]:
        """Ends the recording and writes the trace; its path (None when this one started none)."""
        if self.prof is None:
            return None
        prof, self.prof = self.prof, None
        prof.stop()
        roles = "+".join(_RUNNING.pop("roles", [self.role]))
        _RUNNING.clear()
        os.makedirs(self.save_path, exist_ok=True)
        path = trace_path(self.save_path, roles, self.step, self.rank)
        prof.export_chrome_trace(path)
        logger.info("profiler trace of step %d written to %s", self.step, path)
        return path
