"""The double's event log: every call the tests assert the order of."""

from typing import Any, Dict, List, Tuple

EVENTS: List[Tuple[str, Dict[str, Any]]] = []


def record(kind: str, **data: Any) -> None:
    EVENTS.append((kind, data))


def kinds() -> List[str]:
    return [kind for kind, _ in EVENTS]
