"""What verl's profiler settings (global_profiler, <role>.profiler) ask for and whether verl_lite can do it:
the preflight's rules and the choices the workers make, torch-free (trainer/profiling.py records).

A worker process records the roles it hosts: the actor's workers the actor, the rollout and the ref
(as verl's colocated actor_rollout_ref worker, whose profiler is the actor's), the critic's the critic.
Each hosted role's work is a stage, named as verl names it.

With global_profiler.tool=torch the rollout's section is its own, as verl's rollout servers read it:
with tool_config.torch.discrete=True each generation of a profiled step is a trace of its own, of the
rollout replicas its ranks select (verl's build_rollout_dist_profiler), written where verl's engines
write them (`<save_path>/agent_loop_rollout_replica_<r>/`) and, with relocate_results, moved up into
save_path as verl's relocate_rollout_traces names them; with discrete=False verl's servers record
nothing of their own (the generation is then a range of the actor's trace when the actor records).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, List, Optional, Set, Tuple

from verl_lite.config.choices import NPU_PROFILER_CONTENTS, NPU_PROFILER_LEVELS, PROFILER_TOOLS, TORCH_PROFILER_CONTENTS

# verl's tools verl_lite does not run, and why
REFUSED_TOOLS = {
    "nsys": "Nsight Systems is not supported by verl_lite: it profiles workers that Ray starts under `nsys` "
            "(verl's nsight runtime env, which needs nsys on every worker's PATH), which verl_lite does not "
            "start; run the training command under `nsys profile` yourself, or use global_profiler.tool=torch",
    "precision_debugger": "msprobe's precision debugger is not supported by verl_lite: use global_profiler.tool=torch "
                          "(or npu on Ascend)",
}
# the devices each tool runs on (None: any)
TOOL_DEVICE = {"torch": None, "npu": ("npu",), "torch_memory": ("cuda", "npu")}
WHY_DEVICE = {
    "npu": "the Ascend profiler (torch_npu.profiler) records NPUs only; use global_profiler.tool=torch",
    "torch_memory": "the allocation history (torch.cuda.memory's, torch_npu's on Ascend, as verl reads it from the "
                    "device's torch module) exists only on CUDA and Ascend devices; use global_profiler.tool=torch "
                    "with <role>.profiler.tool_config.torch.contents=[memory]",
}
# role -> where its profiler section lives
SECTIONS = {"actor": "actor_rollout_ref.actor", "rollout": "actor_rollout_ref.rollout",
            "ref": "actor_rollout_ref.ref", "critic": "critic"}
# verl's stage names -> the role whose work it is
STAGES = {"generate_sequences": "rollout", "actor_compute_log_prob": "actor", "ref_compute_log_prob": "ref",
          "actor_update": "actor", "critic_compute_values": "critic", "critic_update": "critic"}
# the role whose profiler section a worker process records with, by the roles it hosts
HOSTS = {"actor": ("actor", "rollout", "ref"), "critic": ("critic",)}
TORCH_MEMORY_STACK_DEPTH = 32  # verl's default; torch's _record_memory_history takes no depth


def section(cfg: Any, role: str) -> Any:
    """`<role>.profiler` of the config."""
    node = cfg
    for part in SECTIONS[role].split("."):
        node = getattr(node, part)
    return node.profiler


def rank_profiled(profiler: Any, rank: int) -> bool:
    """Whether this rank records: enable, and all_ranks or a listed rank (rank 0 when none is listed),
    as verl's DistProfiler selects ranks."""
    if not profiler.enable:
        return False
    if profiler.all_ranks:
        return True
    return rank in profiler.ranks if profiler.ranks else rank == 0


def selected_ranks(profiler: Any) -> Any:
    """"all", or the sorted ranks rank_profiled selects."""
    return "all" if profiler.all_ranks else sorted(set(profiler.ranks or [0]))


def tool_config(profiler: Any, tool: Optional[str]) -> Any:
    """The role's settings of `tool` (tool_config.torch / .npu), None for a tool without any."""
    return getattr(profiler.tool_config, tool, None) if tool in ("torch", "npu") else None


def discrete(profiler: Any, tool: Optional[str]) -> bool:
    tc = tool_config(profiler, tool)
    return bool(tc.discrete) if tc is not None else False


def is_profiled_step(cfg: Any, step: int) -> bool:
    g = cfg.global_profiler
    return g.tool in PROFILER_TOOLS and step in (g.steps or [])


def recording_bounds(cfg: Any, step: int) -> Tuple[bool, bool]:
    """(start before `step`, stop after it): each profiled step alone, or with
    global_profiler.profile_continuous_steps a run of consecutive profiled steps in one recording
    (started before its first step, stopped after its last), as verl's trainer drives it."""
    if not is_profiled_step(cfg, step):
        return False, False
    if not cfg.global_profiler.profile_continuous_steps:
        return True, True
    steps = set(cfg.global_profiler.steps)
    return step - 1 not in steps, step + 1 not in steps


# -- the rollout's own traces (tool=torch), as verl's rollout servers write them ----------------------

ROLLOUT_STAGE = "generate_sequences"


def rollout_records_own(cfg: Any) -> bool:
    """Whether the rollout's section asks for traces of its own: tool torch, enable, discrete (verl's servers
    start the engine profiler in discrete mode only)."""
    own = section(cfg, "rollout")
    return cfg.global_profiler.tool == "torch" and bool(own.enable) and discrete(own, "torch")


def replica_profiled(profiler: Any, replica: int, world_size: int) -> bool:
    """Whether rollout replica `replica` (spanning `world_size` ranks) records: verl's build_rollout_dist_profiler
    maps the listed global ranks to the replicas owning them (rank // world_size); none listed: replica 0."""
    if not profiler.enable:
        return False
    if profiler.all_ranks:
        return True
    ranks = list(profiler.ranks or [])
    return replica in {int(r) // world_size for r in ranks} if ranks and world_size > 0 else replica == 0


def keep_global_ranks(profiler: Any) -> Optional[Set[int]]:
    """The global ranks whose rollout traces are moved up (verl's rollout_profiler_global_ranks): None = all."""
    if profiler.all_ranks:
        return None
    return {int(r) for r in profiler.ranks or []} or None


def rollout_trace_dir(save_path: str, replica: int) -> str:
    """Where replica `replica` writes its traces (verl's rollout_trace_dir)."""
    return f"{save_path.rstrip('/')}/agent_loop_rollout_replica_{replica}"


# verl's readings of an engine trace's name: its tensor-parallel rank, and the dimensions that make it ambiguous
_TRACE_TP_RANK = (re.compile(r"(?:^|[-_.])TP-(\d+)", re.IGNORECASE), re.compile(r"(?:^|[-_.])rank[-_]?(\d+)", re.IGNORECASE))
_TRACE_MULTI_DIM = re.compile(r"(?:^|[-_.])(?:DP|PP|EP)-\d+", re.IGNORECASE)


def trace_local_rank(name: str, world_size: int) -> Optional[int]:
    """The rank within its replica that an engine trace's file name gives (verl's rollout_trace_local_rank)."""
    if world_size <= 1 or _TRACE_MULTI_DIM.search(name):
        return None
    for pattern in _TRACE_TP_RANK:
        match = pattern.search(name)
        if match:
            local = int(match.group(1))
            return local if 0 <= local < world_size else None
    return None


def relocated_name(name: str, replica: int, world_size: int, keep: Optional[Iterable[int]]) -> Optional[str]:
    """The name relocate_results gives replica `replica`'s trace `name` in save_path (verl's
    relocate_rollout_traces): `rollout-replica<r>_<name>`, or `rollout-replica<r>-globalrank<g>_<name>` where
    the name gives the rank in a replica of several; None for a trace of a global rank `keep` leaves out
    (it stays in the replica's directory)."""
    local = trace_local_rank(name, world_size) if world_size else None
    base = replica * world_size if world_size and world_size > 0 else replica
    global_rank = base + local if local is not None else None
    keep = {int(r) for r in keep} if keep is not None else None
    if keep is not None and global_rank is not None and global_rank not in keep:
        return None
    if global_rank is not None:
        return f"rollout-replica{replica}-globalrank{global_rank}_{name}"
    return f"rollout-replica{replica}_{name}"


def _tool_problems(g: Any, device: str) -> List[str]:
    if g.tool is None:
        return []
    if g.tool not in PROFILER_TOOLS:
        why = REFUSED_TOOLS.get(g.tool)
        return [f"global_profiler.tool={g.tool!r}: " + (why or f"choose one of {', '.join(PROFILER_TOOLS)} (or null)")]
    needs = TOOL_DEVICE[g.tool]
    if needs is not None and device not in needs:
        return [f"global_profiler.tool={g.tool!r} with trainer.device={device} is not supported: {WHY_DEVICE[g.tool]}"]
    depth = g.global_tool_config.torch_memory.stack_depth
    if g.tool == "torch_memory" and depth != TORCH_MEMORY_STACK_DEPTH:
        return [f"global_profiler.global_tool_config.torch_memory.stack_depth={depth}: torch.cuda.memory."
                f"_record_memory_history keeps whole call stacks (it takes no depth); leave it at "
                f"{TORCH_MEMORY_STACK_DEPTH}"]
    return []


def _section_problems(name: str, profiler: Any) -> List[str]:
    problems = []
    torch_tc, npu_tc = profiler.tool_config.torch, profiler.tool_config.npu
    unknown = [c for c in torch_tc.contents if c not in TORCH_PROFILER_CONTENTS]
    if unknown:
        problems.append(f"{name}.profiler.tool_config.torch.contents has {unknown}: choose from "
                        f"{', '.join(TORCH_PROFILER_CONTENTS)}")
    unknown = [c for c in npu_tc.contents if c not in NPU_PROFILER_CONTENTS]
    if unknown:
        problems.append(f"{name}.profiler.tool_config.npu.contents has {unknown}: choose from "
                        f"{', '.join(NPU_PROFILER_CONTENTS)}")
    if npu_tc.level not in NPU_PROFILER_LEVELS:
        problems.append(f"{name}.profiler.tool_config.npu.level={npu_tc.level!r}: choose one of "
                        f"{', '.join(NPU_PROFILER_LEVELS)}")
    if any(r < 0 for r in profiler.ranks):
        problems.append(f"{name}.profiler.ranks={list(profiler.ranks)}: ranks are >= 0")
    return problems


def _colocated_problems(cfg: Any, role: str) -> List[str]:
    """The rollout and the ref run in the actor's workers, which record with the actor's section: theirs
    may repeat it, not ask for something else."""
    own, actor = section(cfg, role), section(cfg, "actor")
    name, tool = SECTIONS[role], cfg.global_profiler.tool
    if role == "rollout" and tool == "torch":
        return _rollout_problems(cfg)
    if role == "rollout" and actor.enable and not own.enable:
        return [f"{name}.profiler.enable=False with actor_rollout_ref.actor.profiler.enable=True: the rollout's "
                f"generation runs in the actor's workers and is recorded in their traces (stage generate_sequences); "
                f"verl_lite cannot leave it out: leave {name}.profiler.enable out (it follows the actor's)"]
    if not own.enable:
        return []
    if not actor.enable:
        return [f"{name}.profiler.enable=True with actor_rollout_ref.actor.profiler.enable=False: the {role} runs in "
                f"the actor's workers, which record with the actor's profiler settings (as verl's colocated "
                f"actor_rollout_ref worker); set actor_rollout_ref.actor.profiler.enable=True (its traces hold the "
                f"{role}'s stage), or leave {name}.profiler.enable out"]
    pairs = []
    if selected_ranks(own) != selected_ranks(actor):  # [] and [0] select the same rank
        key = "all_ranks" if own.all_ranks != actor.all_ranks else "ranks"
        pairs.append((key, getattr(own, key) if key == "all_ranks" else list(own.ranks),
                      getattr(actor, key) if key == "all_ranks" else list(actor.ranks)))
    tc, atc = tool_config(own, tool), tool_config(actor, tool)
    if tc is not None:
        for field in ("contents", "discrete", "level", "analysis"):
            if hasattr(tc, field):
                mine, theirs = getattr(tc, field), getattr(atc, field)
                pairs.append((f"tool_config.{tool}.{field}",
                              list(mine) if field == "contents" else mine, list(theirs) if field == "contents" else theirs))
    return [f"{name}.profiler.{key}={mine!r} differs from actor_rollout_ref.actor.profiler.{key}={theirs!r}: the "
            f"{role} runs in the actor's workers, which record it with the actor's settings (settings of its own "
            f"are not supported); set the same value, or leave it out" for key, mine, theirs in pairs if mine != theirs]


def _rollout_problems(cfg: Any) -> List[str]:
    """The rollout's own section under tool=torch: its settings are its own (verl's rollout servers read them);
    what cannot be done is a setting that records nothing, and a continuous actor trace without the generation."""
    own, actor, name = section(cfg, "rollout"), section(cfg, "actor"), SECTIONS["rollout"]
    actor_window = actor.enable and not discrete(actor, "torch")
    if actor_window and not own.enable:
        return [f"{name}.profiler.enable=False with actor_rollout_ref.actor.profiler.enable=True and its tool_config."
                f"torch.discrete=False: the rollout's generation runs in the actor's workers and is recorded in their "
                f"traces of whole steps (stage generate_sequences); verl_lite cannot leave it out: leave {name}."
                f"profiler.enable out (it follows the actor's), or set actor_rollout_ref.actor.profiler.tool_config."
                f"torch.discrete=True"]
    mine, theirs = list(own.tool_config.torch.contents), list(actor.tool_config.torch.contents)
    if actor_window and own.enable and discrete(own, "torch") and mine != theirs:
        return [f"{name}.profiler.tool_config.torch.contents={mine!r} differs from actor_rollout_ref.actor.profiler."
                f"tool_config.torch.contents={theirs!r}: the rollout's traces are cut from the actor's traces of whole "
                f"steps (the generation runs in the actor's process, where torch.profiler records one trace at a "
                f"time), which record the actor's contents; set the same contents, or actor_rollout_ref.actor.profiler."
                f"tool_config.torch.discrete=True"]
    if own.enable and not discrete(own, "torch") and not actor.enable:
        return [f"{name}.profiler.enable=True with {name}.profiler.tool_config.torch.discrete=False records nothing: "
                f"verl's rollout servers record their own traces in discrete mode only (and the actor, which would "
                f"record the generation in its traces, is not profiled); set {name}.profiler.tool_config.torch."
                f"discrete=True for a trace of each generation"]
    return []


def profiler_problems(cfg: Any, device: str) -> List[str]:
    """Why the profiler settings cannot run on `device` (empty when they can)."""
    g = cfg.global_profiler
    problems = _tool_problems(g, device)
    steps = list(g.steps or [])
    bad = [s for s in steps if not isinstance(s, int) or isinstance(s, bool) or s < 1]
    if bad:
        problems.append(f"global_profiler.steps={steps}: steps are training steps counted from 1; {bad} are not")
    if steps and g.tool is not None and bool(cfg.async_training.enable):
        problems.append(f"global_profiler.steps={steps} with async_training.enable=True: profiling the fully-async "
                        "trainer is not supported by verl_lite yet; profile a synchronous run, or unset "
                        "global_profiler.steps")
    enabled = [role for role in SECTIONS if section(cfg, role).enable]
    if steps and g.tool is None and enabled:
        problems.append(f"global_profiler.steps={steps} with {SECTIONS[enabled[0]]}.profiler.enable=True but no "
                        "global_profiler.tool: set global_profiler.tool=torch")
    if g.profile_continuous_steps:
        for role in ("actor", "critic"):
            if section(cfg, role).enable and discrete(section(cfg, role), g.tool):
                problems.append(f"global_profiler.profile_continuous_steps=True with {SECTIONS[role]}.profiler."
                                f"tool_config.{g.tool}.discrete=True: a recording of several steps cannot be one per "
                                "stage; set one of them False")
    for role, name in SECTIONS.items():
        problems += _section_problems(name, section(cfg, role))
    for role in ("rollout", "ref"):
        problems += _colocated_problems(cfg, role)
    return problems
