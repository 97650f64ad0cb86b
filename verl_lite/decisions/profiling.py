"""What verl's profiler settings (global_profiler, <role>.profiler) ask for and whether verl_lite can do it:
the preflight's rules, torch-free (trainer/profiling.py records the traces).
"""

from __future__ import annotations

from typing import Any, List

# global_profiler.tool values that run; verl's others and why they are refused
TOOLS = ("torch",)
REFUSED_TOOLS = {
    "npu": "torch_npu's profiler (Ascend) is not supported by verl_lite yet: use global_profiler.tool=torch, "
           "or leave global_profiler.tool unset",
    "nsys": "Nsight Systems is not supported by verl_lite: it profiles a run started under `nsys launch` "
            "(verl's Ray workers with nsight runtime options), which verl_lite does not start; run the training "
            "command under `nsys profile` yourself, or use global_profiler.tool=torch",
    "torch_memory": "torch.cuda.memory snapshots are not supported by verl_lite yet: use global_profiler.tool=torch "
                    "with <role>.profiler.tool_config.torch.contents=[memory]",
}
CONTENTS = ("cuda", "cpu", "memory", "shapes", "stack")


def profiler_problems(cfg: Any) -> List[str]:
    """Why the profiler settings cannot run (empty when they can)."""
    g = cfg.global_profiler
    problems = []
    if g.tool is not None and g.tool not in TOOLS:
        why = REFUSED_TOOLS.get(g.tool)
        problems.append(f"global_profiler.tool={g.tool!r}: " + (why or f"choose one of {', '.join(TOOLS)} (or null)"))
    steps = list(g.steps or [])
    bad = [s for s in steps if not isinstance(s, int) or isinstance(s, bool) or s < 1]
    if bad:
        problems.append(f"global_profiler.steps={steps}: steps are training steps counted from 1; {bad} are not")
    if steps and g.tool is not None and bool(cfg.async_training.enable):
        problems.append(f"global_profiler.steps={steps} with async_training.enable=True: profiling the fully-async "
                        "trainer is not supported by verl_lite yet; profile a synchronous run, or unset "
                        "global_profiler.steps")
    sections = {"actor_rollout_ref.actor": cfg.actor_rollout_ref.actor, "critic": cfg.critic}
    enabled = [name for name, sec in sections.items() if sec.profiler.enable]
    if steps and g.tool is None and enabled:
        problems.append(f"global_profiler.steps={steps} with {enabled[0]}.profiler.enable=True but no "
                        "global_profiler.tool: set global_profiler.tool=torch")
    for name, sec in sections.items():
        unknown = [c for c in sec.profiler.tool_config.torch.contents if c not in CONTENTS]
        if unknown:
            problems.append(f"{name}.profiler.tool_config.torch.contents has {unknown}: choose from {', '.join(CONTENTS)}")
        if any(r < 0 for r in sec.profiler.ranks):
            problems.append(f"{name}.profiler.ranks={list(sec.profiler.ranks)}: ranks are >= 0")
    return problems


def is_profiled_step(cfg: Any, step: int) -> bool:
    g = cfg.global_profiler
    return g.tool in TOOLS and step in (g.steps or [])
