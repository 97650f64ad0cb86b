"""torch_npu.npu.memory of the double: the allocation-history calls torch_npu declares
(torch_npu/csrc/npu/memory_snapshot.h: _record_memory_history(enabled="all", context="all", stacks="all",
max_entries), and the python side's _dump_snapshot(filename)), recorded in CALLS; a dump writes an empty
snapshot pickle (no device, no allocations)."""

import pickle
import sys

CALLS = []
_ENABLED = "all", "state", None  # torch's values of `enabled` (None stops the recording)


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize) -> None:
    if enabled not in _ENABLED or context not in ("all", "state", "alloc", None) or stacks not in ("all", "python"):
        raise ValueError(f"_record_memory_history: enabled={enabled!r} context={context!r} stacks={stacks!r}")
    if not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"_record_memory_history: max_entries={max_entries!r}")
    CALLS.append(("record", {"enabled": enabled, "context": context, "stacks": stacks, "max_entries": max_entries}))


def _dump_snapshot(filename="dump_snapshot.pickle") -> None:
    CALLS.append(("dump", filename))
    with open(filename, "wb") as f:
        pickle.dump({"segments": [], "device_traces": []}, f)
