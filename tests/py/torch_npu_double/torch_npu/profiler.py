"""torch_npu.profiler of the double: the documented signatures and value types, a start/step/stop life
cycle, and a handler that writes what a recording was asked for (see ../README.md)."""

import enum
import json
import os
import time

from torch_npu.npu import mstx


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel(enum.Enum):
    Level_none = "Level_none"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class ExportType(enum.Enum):
    Db = "db"
    Text = "text"


class AiCMetrics(enum.Enum):
    AiCoreNone = "AiCoreNone"
    PipeUtilization = "PipeUtilization"


class _ExperimentalConfig:
    def __init__(self, profiler_level=ProfilerLevel.Level0, aic_metrics=AiCMetrics.AiCoreNone, l2_cache=False,
                 msprof_tx=False, data_simplification=True, record_op_args=False, op_attr=False,
                 gc_detect_threshold=None, export_type=ExportType.Text, host_sys=None, mstx_domain_include=None,
                 mstx_domain_exclude=None, sys_io=False, sys_interconnection=False):
        if not isinstance(profiler_level, ProfilerLevel):
            raise TypeError(f"profiler_level must be a torch_npu.profiler.ProfilerLevel, got {profiler_level!r}")
        types = export_type if isinstance(export_type, list) else [export_type]
        if not types or not all(isinstance(t, ExportType) for t in types):
            raise TypeError(f"export_type must be a torch_npu.profiler.ExportType (or a list of them), got {export_type!r}")
        for name, value in (("mstx_domain_include", mstx_domain_include), ("mstx_domain_exclude", mstx_domain_exclude)):
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise TypeError(f"{name} must be a list of str, got {value!r}")
        self.settings = dict(profiler_level=profiler_level.name, export_type=[t.name for t in types],
                             msprof_tx=bool(msprof_tx), data_simplification=bool(data_simplification),
                             mstx_domain_exclude=mstx_domain_exclude, mstx_domain_include=mstx_domain_include)


class _TraceHandler:
    def __init__(self, dir_name, worker_name, analyse_flag):
        self.dir_name, self.worker_name, self.analyse_flag = dir_name, worker_name, analyse_flag

    def __call__(self, prof: "profile") -> None:
        worker = self.worker_name or f"{os.uname().nodename}_{os.getpid()}"
        out = os.path.join(self.dir_name, f"{worker}_{time.strftime('%Y%m%d%H%M%S')}{time.time_ns() % 1000:03d}_ascend_pt")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "double_profile.json"), "w") as f:
            json.dump(dict(prof.settings, analyse=self.analyse_flag, ranges=prof.ranges, steps=prof.steps), f)


def tensorboard_trace_handler(dir_name: str = None, worker_name: str = None, analyse_flag: bool = True,
                              async_mode: bool = False) -> _TraceHandler:
    if dir_name is None or not isinstance(dir_name, str):
        raise ValueError(f"tensorboard_trace_handler: dir_name must be a path, got {dir_name!r}")
    if not isinstance(analyse_flag, bool):
        raise TypeError(f"analyse_flag must be a bool, got {analyse_flag!r}")
    return _TraceHandler(dir_name, worker_name, analyse_flag)


class profile:
    def __init__(self, activities=None, schedule=None, on_trace_ready=None, record_shapes=False, profile_memory=False,
                 with_stack=False, with_modules=False, with_flops=False, experimental_config=None):
        activities = list(activities) if activities is not None else [ProfilerActivity.CPU, ProfilerActivity.NPU]
        if not activities or not all(isinstance(a, ProfilerActivity) for a in activities):
            raise TypeError(f"activities must be torch_npu.profiler.ProfilerActivity members, got {activities!r}")
        if on_trace_ready is not None and not isinstance(on_trace_ready, _TraceHandler):
            raise TypeError("on_trace_ready takes what torch_npu.profiler.tensorboard_trace_handler returns")
        if experimental_config is not None and not isinstance(experimental_config, _ExperimentalConfig):
            raise TypeError("experimental_config must be a torch_npu.profiler._ExperimentalConfig")
        for name, value in (("record_shapes", record_shapes), ("profile_memory", profile_memory),
                            ("with_stack", with_stack), ("with_modules", with_modules), ("with_flops", with_flops)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
        self.settings = dict(activities=sorted(a.name for a in activities), record_shapes=record_shapes,
                             profile_memory=profile_memory, with_stack=with_stack, with_modules=with_modules,
                             experimental=experimental_config.settings if experimental_config else None)
        self.on_trace_ready = on_trace_ready
        self.ranges = []
        self.steps = 0
        self.running = False

    def start(self) -> None:
        if self.running:
            raise RuntimeError("torch_npu.profiler.profile.start: the profiler is already started")
        self.running = True
        mstx.LISTENERS.append(self.ranges)

    def step(self) -> None:
        if not self.running:
            raise RuntimeError("torch_npu.profiler.profile.step: call start() first")
        self.steps += 1

    def stop(self) -> None:
        if not self.running:
            raise RuntimeError("torch_npu.profiler.profile.stop: the profiler is not started")
        self.running = False
        mstx.LISTENERS.remove(self.ranges)
        if self.on_trace_ready is not None:  # without a schedule the recording is handed over at stop
            self.on_trace_ready(self)
