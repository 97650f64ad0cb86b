"""The profilers of the steps global_profiler.steps lists, as verl's DistProfiler records them.

The driver asks each worker group to start before a profiled step (or run of steps) and to stop
after it; a worker records when its role's `profiler.enable` is on and its rank is profiled
(decisions/profiling.py). The actor's workers record the actor, the rollout and the ref with the
actor's settings; the critic's workers the critic. One recording per step with each stage
(decisions.profiling.STAGES) as a named range, or with `tool_config.<tool>.discrete` one per stage.

Tools: torch (torch.profiler, a chrome trace `<save_path>/<worker>_<stage|train>_step<N>_rank<R>
[-of-<W>][_tp.._pp.._dp.._cp..]_pid<P>_<time>.json.gz`, named as verl's build_trace_basename does),
npu (torch_npu.profiler with verl's mapping of tool_config.npu, under `<save_path>/<stage|train>`),
torch_memory (a snapshot of torch.cuda.memory's allocation history, torch_npu's on Ascend,
`<save_path>/step<N>/torch_memory_rank<R>_pid<P>.pickle`).
Roles sharing a process (trainer.ray=false) share one recording: torch.profiler takes one at a time.

The rollout's own traces (tool torch, rollout.profiler.tool_config.torch.discrete): each generation of a
profiled step on the ranks of the selected replicas, as verl's rollout servers write them:
`<save_path>/agent_loop_rollout_replica_<r>/<vLLM's worker name>.<ns>.pt.trace.json.gz` (moved up into
save_path as `rollout-replica<r>[-globalrank<g>]_<file>` with relocate_results). The generation runs in the
actor's process; when a recording of the process is running (the actor's trace of the step), a second
torch.profiler would end it, so the rollout's trace is cut from it when it ends: the events inside that
generate_sequences range (and the trace's metadata), as a recording of the generation alone holds them.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, List, NamedTuple, Optional

# what the settings ask for (torch-free, read by the preflight too)
from verl_lite.decisions.profiling import (
    HOSTS, ROLLOUT_STAGE, discrete, keep_global_ranks, rank_profiled, relocated_name, replica_profiled,
    rollout_records_own, rollout_trace_dir, section, tool_config)

logger = logging.getLogger(__name__)

# verl's file-name prefix of each worker (its worker role; the critic's engine worker is named by its model type)
WORKER_NAMES = {"actor_rollout_ref": "actor_rollout_ref", "actor_rollout": "actor_rollout", "critic": "value_model"}
# the recording window of the actor's workers is "train" in verl (start_profile(role="train")); the critic's has none
WINDOW = {"actor": "train", "critic": None}


def _part(text: Any) -> str:
    """A label made safe for a file name, as verl's _sanitize_name_part does (`_` -> `-`)."""
    return re.sub(r"[^0-9A-Za-z.=+-]+", "-", str(text)).strip("-")


def _topology(rank: int) -> dict:
    """rank and world size from torch.distributed, and Megatron's tp/pp/dp/cp ranks when Megatron's
    groups are up (read only when megatron is already imported)."""
    import torch.distributed as dist

    info: dict = {"rank": rank}
    if dist.is_available() and dist.is_initialized():
        info.update(rank=dist.get_rank(), world_size=dist.get_world_size())
    mpu = sys.modules.get("megatron.core.parallel_state")
    # Megatron's groups live in torch.distributed's default group: without it, a set parallel state is a
    # stale one (a process group destroyed before Megatron's) and its ranks cannot be read
    if mpu is not None and dist.is_available() and dist.is_initialized() and mpu.model_parallel_is_initialized():
        info.update(tp=mpu.get_tensor_model_parallel_rank(), pp=mpu.get_pipeline_model_parallel_rank(),
                    dp=mpu.get_data_parallel_rank(), cp=mpu.get_context_parallel_rank())
    return info


def trace_basename(worker: str, role: Optional[str], step: Optional[int], topology: dict) -> str:
    """`<worker>_<role>_step<N>_rank<R>[-of-<W>][_tp0-pp0-dp0-cp0]_pid<P>_<time>` (verl's layout)."""
    parts = [_part(worker)] + ([_part(role)] if role else []) + ([f"step{_part(step)}"] if step is not None else [])
    rank = f"rank{topology['rank']}" + (f"-of-{topology['world_size']}" if topology.get("world_size") else "")
    parts.append(rank)
    parallel = "-".join(f"{d}{topology[d]}" for d in ("tp", "pp", "dp", "cp") if d in topology)
    if parallel:
        parts.append(parallel)
    stamp = datetime.now(tz=timezone.utc).astimezone().strftime("%Y%m%d%H%M%S%f")[:-3]
    return "_".join(parts + [f"pid{os.getpid()}", stamp])


class _TorchRecording:
    """torch.profiler from begin to end; tool_config.torch.contents as verl maps it: CPU always, CUDA on a
    CUDA device when contents is [] or has cuda, shapes/memory/stack only when named."""

    def __init__(self, tc: Any, device: str, save_path: str, basename: str):
        from torch.profiler import ProfilerActivity, profile

        contents = set(tc.contents)
        activities = [ProfilerActivity.CPU]
        if device == "cuda" and (not contents or "cuda" in contents):
            activities.append(ProfilerActivity.CUDA)
        self.path = os.path.join(save_path, basename + ".json.gz")
        self.prof = profile(activities=activities, record_shapes="shapes" in contents,
                            profile_memory="memory" in contents, with_stack="stack" in contents)
        self.marks: dict = {}  # name -> how many ranges of that name were opened
        self.cuts: List[tuple] = []  # (name, ordinal of its range, write(events trace) -> paths)
        self.cut_paths: List[str] = []
        self.prof.start()

    def marker(self, name: str):
        import torch

        self.marks[name] = self.marks.get(name, 0) + 1
        return torch.profiler.record_function(name)

    def cut(self, name: str, write: Callable[[dict], List[str]]) -> None:
        """At the end, hand `write` a trace of the events inside the range `name` opened next."""
        self.cuts.append((name, self.marks.get(name, 0), write))

    def end(self, names: List[str]) -> str:
        self.prof.stop()
        head, tail = os.path.split(self.path)
        if len(names) > 1:  # roles sharing the process: the file is named after all of them
            first, _, rest = tail.partition("_")
            tail = "+".join([first] + [_part(n) for n in names[1:]]) + "_" + rest
        path = os.path.join(head, tail)
        os.makedirs(head, exist_ok=True)
        self.prof.export_chrome_trace(path)
        if self.cuts:
            trace = json.loads(gzip.decompress(open(path, "rb").read()))
            for name, ordinal, write in self.cuts:
                self.cut_paths += write(range_trace(trace, name, ordinal))
        return path


def range_trace(trace: dict, name: str, ordinal: int) -> dict:
    """The chrome trace of the events inside the `ordinal`-th (0-based) range `name` of `trace` (a
    torch.profiler export), with its metadata events and fields."""
    events = trace["traceEvents"]
    ranges = [e for e in events if e.get("name") == name and e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    if ordinal >= len(ranges):
        raise RuntimeError(f"the profiler's trace has {len(ranges)} range(s) {name!r}, not the {ordinal + 1}th to cut")
    first, last = float(ranges[ordinal]["ts"]), float(ranges[ordinal]["ts"]) + float(ranges[ordinal].get("dur", 0))
    inside = [e for e in events if e.get("ph") == "M" or (
        "ts" in e and first <= float(e["ts"]) and float(e["ts"]) + float(e.get("dur", 0) or 0) <= last)]
    return dict(trace, traceEvents=inside)


class _NpuRecording:
    """torch_npu.profiler from begin to end, with verl's mapping of tool_config.npu (mstx_profile.py):
    CPU activity always, NPU activity / modules / stacks / shapes / memory only when contents names them,
    the level as torch_npu's ProfilerLevel, data written by tensorboard_trace_handler (parsed when
    analysis), exported as a database with mstx markers, communication markers excluded."""

    LEVELS = {"level_none": "Level_none", "level0": "Level0", "level1": "Level1", "level2": "Level2"}

    def __init__(self, tc: Any, save_path: str, role: Optional[str]):
        import torch_npu

        if tuple(int(n) for n in re.findall(r"\d+", torch_npu.__version__)[:2]) < (2, 1):
            raise RuntimeError(f"global_profiler.tool=npu needs torch_npu>=2.1 (its mstx_domain_exclude), found "
                               f"{torch_npu.__version__}")
        npu_prof = torch_npu.profiler
        contents = set(tc.contents)
        self.path = os.path.join(save_path, role) if role else save_path
        experimental = npu_prof._ExperimentalConfig(
            profiler_level=getattr(npu_prof.ProfilerLevel, self.LEVELS[tc.level]),
            export_type=npu_prof.ExportType.Db, data_simplification=True, msprof_tx=True,
            mstx_domain_exclude=["communication"])
        activities = [npu_prof.ProfilerActivity.CPU]
        if "npu" in contents:
            activities.append(npu_prof.ProfilerActivity.NPU)
        self.prof = npu_prof.profile(
            with_modules="module" in contents, with_stack="stack" in contents, record_shapes="shapes" in contents,
            profile_memory="memory" in contents, activities=activities,
            on_trace_ready=npu_prof.tensorboard_trace_handler(self.path, analyse_flag=bool(tc.analysis)),
            experimental_config=experimental)
        self.prof.start()

    @staticmethod
    @contextlib.contextmanager
    def marker(name: str) -> Iterator[None]:
        from torch_npu.npu import mstx

        range_id = mstx.range_start(message=name)
        try:
            yield
        finally:
            mstx.range_end(range_id)

    def end(self, names: List[str]) -> str:
        self.prof.step()  # hands the recording to on_trace_ready, as verl stops it
        self.prof.stop()
        return self.path


class _MemoryRecording:
    """The device's allocation history over the recording, dumped as a snapshot at its end: torch.cuda.memory's,
    on Ascend torch_npu's (torch.npu.memory, which verl's get_torch_device() reaches there)."""

    def __init__(self, g: Any, save_path: str, step: Optional[int], rank: int, device: str = "cuda"):
        import importlib

        import torch

        self.memory = importlib.import_module("torch_npu").npu.memory if device == "npu" else torch.cuda.memory
        self.path = os.path.join(save_path, f"step{step}", f"torch_memory_rank{rank}_pid{os.getpid()}.pickle")
        # verl's context/stacks: every event, with Python and C++ frames
        self.memory._record_memory_history(
            context="all", stacks="all", max_entries=int(g.global_tool_config.torch_memory.trace_alloc_max_entries))

    @staticmethod
    def marker(name: str):
        return contextlib.nullcontext()

    def end(self, names: List[str]) -> str:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.memory._dump_snapshot(self.path)
        self.memory._record_memory_history(enabled=None)  # stop recording, drop the history
        return self.path


# The recording running in this process and the workers that share it: one at a time per process.
_RUNNING: dict = {}


class RolloutReplica(NamedTuple):
    """Where a worker's rollout stands: its replica, the ranks a replica spans, and the name its engine gives
    this rank's traces (vLLM's worker rank suffix)."""
    replica: int
    world_size: int
    worker_name: str


def _write_rollout_trace(directory: str, worker_name: str, write: Callable[[str], None]) -> str:
    """`<directory>/<worker_name>.<ns>.pt.trace.json.gz`, torch's tensorboard_trace_handler's name (vLLM's)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{worker_name}.{time.time_ns()}.pt.trace.json.gz")
    write(path)
    return path


class WorkerProfiler:
    """The profiler of one worker: `host` is actor (actor, rollout, ref) or critic; `worker` the file-name
    prefix (WORKER_NAMES); `rollout` where the actor's worker's rollout stands (for the rollout's own traces).
    Records nothing when this rank is not profiled."""

    def __init__(self, cfg: Any, host: str, worker: str, rank: int, device: str,
                 rollout: Optional[RolloutReplica] = None):
        assert host in HOSTS, host
        self.cfg, self.host, self.worker, self.rank, self.device = cfg, host, worker, rank, device
        self.tool = cfg.global_profiler.tool
        self.own = section(cfg, host)
        self.on = self.tool is not None and rank_profiled(self.own, rank)
        self.discrete = discrete(self.own, self.tool)
        self.save_path = cfg.global_profiler.save_path
        # the rollout's own traces (tool torch, its section discrete), on the ranks of the selected replicas
        self.rollout = rollout
        self.rollout_section = section(cfg, "rollout")
        self.rollout_on = (host == "actor" and rollout is not None and rollout_records_own(cfg)
                           and replica_profiled(self.rollout_section, rollout.replica, rollout.world_size))
        self.step: Optional[int] = None
        self.active = False
        self.rollout_active = False
        self.written: List[str] = []

    def _begin(self, role: Optional[str]):
        if self.tool == "torch":
            base = trace_basename(WORKER_NAMES[self.worker], role, self.step, _topology(self.rank))
            return _TorchRecording(tool_config(self.own, "torch"), self.device, self.save_path, base)
        if self.tool == "npu":
            return _NpuRecording(tool_config(self.own, "npu"), self.save_path, role)
        return _MemoryRecording(self.cfg.global_profiler, self.save_path, self.step, self.rank, self.device)

    def start(self, step: int) -> None:
        if not self.on and not self.rollout_on:
            return
        self.step, self.written = step, []
        self.rollout_active = self.rollout_on
        if not self.on:
            return
        self.active = True
        if self.discrete:
            return
        if _RUNNING:  # another worker of this process is recording: its recording holds this one's stages too
            _RUNNING["names"].append(WORKER_NAMES[self.worker])
            return
        _RUNNING.update(recording=self._begin(WINDOW[self.host]), names=[WORKER_NAMES[self.worker]], owner=self)

    def stop(self) -> List[str]:
        """Ends this worker's recording; the files or directories written since start."""
        if not self.active and not self.rollout_active:
            return []
        self.rollout_active = False
        if self.active and not self.discrete and _RUNNING.get("owner") is self:
            recording, names = _RUNNING["recording"], _RUNNING["names"]
            _RUNNING.clear()
            self.written.append(recording.end(names))
            self.written += getattr(recording, "cut_paths", [])
        self.active = False
        for path in self.written:
            logger.info("profile of step %d written to %s", self.step, path)
        return self.written

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """One stage of a profiled step: a named range of the running recording, or (discrete) a
        recording of its own; the rollout's generation also a trace of the rollout's own."""
        running = _RUNNING.get("recording")
        if name == ROLLOUT_STAGE and self.tool == "torch" and self.host == "actor":
            with self._rollout_stage(running):
                yield
            return
        if not self.active:
            yield
            return
        if running is not None or not self.discrete:
            with (running.marker(name) if running is not None else contextlib.nullcontext()):
                yield
            return
        recording = self._begin(name)
        try:
            with recording.marker(name):
                yield
        finally:
            self.written.append(recording.end([WORKER_NAMES[self.worker]]))

    @contextlib.contextmanager
    def _rollout_stage(self, running: Any) -> Iterator[None]:
        """The generation under tool torch: a range of the running recording (the actor's trace of the step);
        with the rollout's own section recording, a trace of its own, cut from the running recording when
        there is one (a second torch.profiler would end it), recorded alone otherwise."""
        if not self.rollout_active:
            with (running.marker(ROLLOUT_STAGE) if running is not None else contextlib.nullcontext()):
                yield
            return
        replica = self.rollout
        directory = rollout_trace_dir(self.save_path, replica.replica)

        def write_cut(trace: dict) -> List[str]:
            def dump(path: str) -> None:
                with open(path, "wb") as f:
                    f.write(gzip.compress(json.dumps(trace).encode()))
            return [self._relocate(_write_rollout_trace(directory, replica.worker_name, dump))]

        if running is not None:
            running.cut(ROLLOUT_STAGE, write_cut)
            with running.marker(ROLLOUT_STAGE):
                yield
            return
        recording = _TorchRecording(tool_config(self.rollout_section, "torch"), self.device, directory, "unused")
        try:
            with recording.marker(ROLLOUT_STAGE):
                yield
        finally:
            recording.prof.stop()
            path = _write_rollout_trace(directory, replica.worker_name, recording.prof.export_chrome_trace)
            self.written.append(self._relocate(path))

    def _relocate(self, path: str) -> str:
        """relocate_results: the rollout's trace moved up into save_path under verl's name (where it stays
        when the rollout's ranks leave its global rank out); the path it ends at."""
        if not self.rollout_section.relocate_results:
            return path
        replica = self.rollout
        name = relocated_name(os.path.basename(path), replica.replica, replica.world_size,
                              keep_global_ranks(self.rollout_section))
        if name is None:
            return path
        dst = os.path.join(self.save_path, name)
        shutil.move(path, dst)
        return dst
