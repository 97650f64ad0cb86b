"""What each documented Ascend stack offers the NPU engines, loaded from ascend_facts.json (written by
`python tools/gen_ascend_facts.py --sources DIR` from the pinned sources of MindSpeed, Megatron-LM,
MindSpeed-MM, Megatron-Bridge and flash-linear-attention-npu; do not edit it by hand).

FACTS: the whole table. STACKS: the stack names (core_r0.16.0, core_r0.18.0). `stack(name)`: one
stack's entry: its pinned commits, MindSpeed's facts at its commit (adaptor and repatch, the fla
functions MindSpeed stands in, the GatedDeltaNet swap, the GDN kernel entries, context-parallel
algorithms, batch-invariant and FP8-reuse support, flash attention) and the names each module the
NPU engine path imports defines there. UNVERIFIED: what no reachable source shows, with what
verl_lite assumes instead. Every fact carries the file and line it was read from.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ascend_facts.json")

with open(TABLE_PATH, encoding="utf-8") as _f:
    FACTS: Dict[str, Any] = json.load(_f)

STACKS: Tuple[str, ...] = tuple(sorted(FACTS["stacks"]))
UNVERIFIED: List[Dict[str, str]] = FACTS["unverified"]


def stack(name: str) -> Dict[str, Any]:
    """The facts of stack `name` (one of STACKS); a KeyError names the valid ones."""
    try:
        return FACTS["stacks"][name]
    except KeyError:
        raise KeyError(f"unknown Ascend stack {name!r}; the documented stacks are {', '.join(STACKS)}") from None


def unverified(name: str) -> List[Dict[str, str]]:
    """The parts of stack `name` that no reachable source shows, with what verl_lite assumes there."""
    return [u for u in UNVERIFIED if u["stack"] == name]
