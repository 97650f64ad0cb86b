"""The schema's profiler sections: a role's profiler (`<role>.profiler`, its tools' settings) and the
run's (`global_profiler`: which steps, which tool, where the traces go)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class TorchProfilerToolConfig:
    # What torch.profiler records (verl's names): cuda (kernels, on a CUDA device), cpu, memory,
    # shapes, stack. CPU activity and the stage markers are always recorded; [] = CPU and CUDA
    # activity without shapes, memory or stacks (as verl's torch profiler reads it).
    contents: List[str] = field(default_factory=list)
    # True: one trace per stage (generate_sequences, actor_compute_log_prob, ref_compute_log_prob,
    # actor_update; critic_compute_values, critic_update); False: one trace per profiled step (or run
    # of steps, global_profiler.profile_continuous_steps) with the stages as named ranges.
    discrete: bool = False


@dataclass
class NPUProfilerToolConfig:
    # What the Ascend profiler (torch_npu.profiler, global_profiler.tool=npu) records besides CPU
    # activity and the stage markers (verl's names): npu (device activity), memory, shapes, module,
    # stack, cpu. [] = none of them (as verl passes it: CPU activity only).
    contents: List[str] = field(default_factory=list)
    # Collection level: level_none, level0, level1, level2 (torch_npu.profiler.ProfilerLevel).
    level: str = "level0"
    # Parse the collected data when a recording ends (tensorboard_trace_handler's analyse_flag).
    analysis: bool = True
    # True: one recording per stage; False: one per profiled step (as tool_config.torch.discrete).
    discrete: bool = False


@dataclass
class ProfilerToolConfig:
    # The torch profiler's settings (global_profiler.tool=torch).
    torch: TorchProfilerToolConfig = field(default_factory=TorchProfilerToolConfig)
    # The Ascend profiler's settings (global_profiler.tool=npu, trainer.device=npu).
    npu: NPUProfilerToolConfig = field(default_factory=NPUProfilerToolConfig)


@dataclass
class ProfilerConfig:
    # Profile this role in the steps global_profiler.steps lists, with global_profiler.tool, the traces
    # under global_profiler.save_path. The ref runs in the actor's workers and is recorded by them (as
    # verl's colocated actor_rollout_ref worker), so its section may repeat the actor's settings but not
    # differ from them; so does the rollout's except with global_profiler.tool=torch (see
    # actor_rollout_ref.rollout.profiler).
    enable: bool = False
    # Profile every rank of the role; False = the ranks listed in ranks.
    all_ranks: bool = False
    # The role's ranks to profile when all_ranks is False (verl's default [] with enable=True: rank 0).
    ranks: List[int] = field(default_factory=list)
    tool_config: ProfilerToolConfig = field(default_factory=ProfilerToolConfig)
    # Move the traces written outside save_path into it when a recording ends (verl's relocate_results):
    # the rollout's own traces (actor_rollout_ref.rollout.profiler), written per replica under
    # <save_path>/agent_loop_rollout_replica_<r>/, become <save_path>/rollout-replica<r>_<file> (or
    # rollout-replica<r>-globalrank<g>_<file> for a replica of several ranks). The training roles' traces
    # are in save_path already (verl moves only nsys's and the rollout engines'). Follows
    # global_profiler.relocate_results (the rollout's and the ref's: the actor's) unless set; false in a
    # section built on its own (verl's oc.select default).
    relocate_results: bool = "${oc.select:global_profiler.relocate_results,false}"  # type: ignore[assignment]


@dataclass
class TorchMemoryToolConfig:
    # The allocation history (global_profiler.tool=torch_memory; CUDA, and Ascend through torch_npu): the most
    # allocation and free events kept (older ones are dropped).
    trace_alloc_max_entries: int = 100000
    # Frames of each event's call stack that are kept.
    stack_depth: int = 32


@dataclass
class GlobalToolConfig:
    # The torch_memory tool's settings.
    torch_memory: TorchMemoryToolConfig = field(default_factory=TorchMemoryToolConfig)


@dataclass
class GlobalProfilerConfig:
    # The profiler: torch (torch.profiler; cpu, cuda and npu), npu (the Ascend profiler,
    # torch_npu.profiler; trainer.device=npu), torch_memory (a snapshot of the allocation history per
    # profiled step: torch.cuda.memory's on cuda, torch_npu's on npu, as verl). null = none. verl's nsys
    # (needs the workers started under Nsight Systems) and precision_debugger are refused.
    tool: Optional[str] = None
    # The training steps to profile (1-based), e.g. [1, 3]; null = none. Each role whose
    # <role>.profiler.enable is True records them on its profiled ranks.
    steps: Optional[List[int]] = None
    # True: consecutive profiled steps ([1, 2] of [1, 2, 5]) share one recording, started before the
    # first and stopped after the last; False: one recording per step. True needs tool_config.<tool>.
    # discrete=False.
    profile_continuous_steps: bool = False
    # Directory of the traces, laid out as verl writes them. torch: one file per recording,
    # <worker>_<stage or train>_step<N>_rank<R>-of-<W>_pid<P>_<time>.json.gz (chrome trace format; open in
    # https://ui.perfetto.dev), <worker> being actor-rollout-ref (actor-rollout without a ref) or
    # value-model (the critic); npu: torch_npu's directories under <save_path>/train (one recording per
    # step) or <save_path>/<stage> (discrete); torch_memory: <save_path>/step<N>/
    # torch_memory_rank<R>.pickle (open in https://pytorch.org/memory_viz).
    save_path: str = "outputs/profile"
    # Settings of the tools that are the run's, not a role's (verl's global_tool_config).
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)
    # Move the rollout's own traces from their replica directories up into save_path when they are written
    # (verl's relocate_results; see <role>.profiler.relocate_results, which follow this one).
    relocate_results: bool = False
