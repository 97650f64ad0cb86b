"""torch_npu.npu.mstx of the double: ranges with ids, each ended once; the open recording sees them."""

import itertools

_IDS = itertools.count(1)
OPEN = {}
LISTENERS = []  # recordings running now: each gets (event, message) of every range


def range_start(message: str, stream=None, domain: str = "default") -> int:
    if not isinstance(message, str) or not message:
        raise ValueError(f"mstx.range_start: message must be a non-empty str, got {message!r}")
    range_id = next(_IDS)
    OPEN[range_id] = message
    for listener in LISTENERS:
        listener.append(("start", message, domain))
    return range_id


def range_end(range_id: int, domain: str = "default") -> None:
    if range_id not in OPEN:
        raise RuntimeError(f"mstx.range_end: range id {range_id!r} was not started or already ended")
    message = OPEN.pop(range_id)
    for listener in LISTENERS:
        listener.append(("end", message, domain))
