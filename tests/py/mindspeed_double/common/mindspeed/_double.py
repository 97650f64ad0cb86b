"""Event log and state of the MindSpeed double (what tests read)."""

from typing import Any, Dict, List, Tuple

EVENTS: List[Tuple[str, Dict[str, Any]]] = []
STATE: Dict[str, Any] = {"cp_ring_groups": False, "attention_calls": {}}


def record(kind: str, **data: Any) -> None:
    EVENTS.append((kind, data))


def kinds() -> List[str]:
    return [kind for kind, _ in EVENTS]


def megatron_parallel_initialized() -> bool:
    import sys

    mpu = sys.modules.get("megatron.core.parallel_state")
    return bool(mpu is not None and mpu.model_parallel_is_initialized())
