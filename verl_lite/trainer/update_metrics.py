"""How an update's metrics add up, from the micro-batches to the step's line: the loss parts
(`LOSS_METRICS`) are normalised by the mini-batch's global token and sequence counts, so they add up
over a mini-batch's micro-batches and over the data-parallel ranks; every other metric (ratios, clip
fractions, norms) averages. A worker reduces its micro-batches (`mini_batch_metrics`) into one list
per metric over its mini-batches (`per_mini_batch`); a driver merges the ranks' lists
(`merge_rank_metrics`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, Iterable, List

import numpy as np

LOSS_METRICS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "critic/vf_loss")


def mini_batch_metrics(outs: Iterable[Dict[str, Any]]) -> Dict[str, float]:
    """One mini-batch's metrics from its micro-batches' outputs (each with a `metrics` dict): loss parts
    are already normalised by global counts, so they add up; ratios average."""
    summed: Dict[str, float] = defaultdict(float)
    counts: Dict[str, int] = defaultdict(int)
    for o in outs:
        for k, v in o["metrics"].items():
            summed[k] += float(v)
            counts[k] += 1
    return {k: (summed[k] if k in LOSS_METRICS else summed[k] / counts[k]) for k in summed}


def per_mini_batch(per_mini: List[Dict[str, float]]) -> Dict[str, List[float]]:
    """A rank's answer to an update: each metric's values over its mini-batches (and epochs), in order."""
    out: Dict[str, List[float]] = defaultdict(list)
    for m in per_mini:
        for k, v in m.items():
            out[k].append(float(v))
    return dict(out)


def merge_rank_metrics(per_rank: List[Dict[str, List[float]]]) -> Dict[str, float]:
    """The step's metrics from the DP ranks' answers: loss parts add up over ranks (they are normalised
    by global counts), then average over mini-batches; the rest average over both."""
    keys = per_rank[0].keys()
    out = {}
    for k in keys:
        per_mini = np.array([r[k] for r in per_rank], dtype=np.float64)  # (ranks, minis)
        if k in LOSS_METRICS:
            out[k] = float(per_mini.sum(axis=0).mean())
        else:
            out[k] = float(per_mini.mean())
    return out
