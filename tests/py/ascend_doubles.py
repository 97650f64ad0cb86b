"""Where the doubles of the two documented Ascend stacks live, for tests that select one by a parameter:
tests/py/mindspeed_double/<stack> is the sys.path root of that stack's MindSpeed double (with
MegatronAdaptor's on core_r0.18.0, and the fla_npu device layer). `DEFAULT_STACK` serves tests that
exercise no stack difference."""

from pathlib import Path

from verl_lite.config.generated.ascend_facts import STACKS

ROOT = Path(__file__).resolve().parent / "mindspeed_double"
DEFAULT_STACK = "core_r0.16.0"


def double_dir(stack: str = DEFAULT_STACK) -> str:
    if stack not in STACKS:
        raise KeyError(f"no MindSpeed double for stack {stack!r}; the stacks are {', '.join(STACKS)}")
    return str(ROOT / stack)


__all__ = ["STACKS", "DEFAULT_STACK", "double_dir"]
