"""The micro-batch size a pass runs with: the first of its settings that is set, in the order the
workers read them, else the fallback of 64 rows (the schema's comments on ppo_micro_batch_size_per_gpu
and log_prob_micro_batch_size_per_gpu say so). One home for the workers (`trainer/workers.py`) and
the preflight's memory model (`preflight/memory.py`), which must pick the same size."""

from __future__ import annotations

from typing import Optional

FALLBACK_MICRO_BATCH = 64  # rows per rank when every micro-batch size a pass reads is null


def micro_batch_size(*settings: Optional[int]) -> int:
    """The first micro-batch size that is set, in the order a pass reads them, else the fallback."""
    return int(next((s for s in settings if s), FALLBACK_MICRO_BATCH))
