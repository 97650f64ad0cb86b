"""Which documented stack this double is, and that stack's facts: read from verl_lite's facts table
(verl_lite/config/generated/ascend_facts.json, generated from MindSpeed's pinned sources), so a fact
the double enforces has one home. The stack is named by the package root on sys.path
(tests/py/mindspeed_double/<stack>/mindspeed/__init__.py sets STACK).

`require(module)` makes a module of the double exist only on the stacks whose MindSpeed has it
(the kernels and modules the table lists)."""

from typing import Any, Dict

from verl_lite.config.generated import ascend_facts

import mindspeed

NAME: str = mindspeed.STACK
FACTS: Dict[str, Any] = ascend_facts.stack(NAME)["mindspeed"]
MODULES: Dict[str, Any] = ascend_facts.stack(NAME)["modules"]


def flag(option: str) -> bool:
    """Whether a MindSpeed feature of this stack registers `option`."""
    if option == "--use-naive-l2norm":
        return bool(FACTS["naive_l2norm_flag"])
    if option == "--fp8-reuse-quantized-weight":
        return bool(FACTS["fp8_reuse"]["flag"])
    if option in ("--use-flash-attn-npu-batch-invariant", "--use-batch-invariant-ops"):
        return bool(FACTS["batch_invariant"]) and option in FACTS["batch_invariant"]["flags"]
    raise KeyError(option)


def require(module: str) -> None:
    """ModuleNotFoundError unless this stack's MindSpeed has `module` (a module of the table, or a kernel
    entry of it)."""
    kernels = {entry.partition(":")[0] for entry in FACTS["kernels"]}
    if module not in MODULES and module not in kernels:
        raise ModuleNotFoundError(f"No module named '{module}' (MindSpeed {NAME} has no such module)", name=module)
