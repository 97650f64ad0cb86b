"""How a step's batch is dealt to the data-parallel ranks of an update: the row order that gives each
rank its part of every mini-batch (so DP=2 computes the same update as DP=1), verl's sequence-length
balancing within each mini-batch (`trainer.balance_batch`), and the update's metadata (the global
token and sequence counts per mini-batch, so that per-rank losses add up to the global one). Both
drivers (`ppo_trainer`, `async_run`) deal their updates through here."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch

from verl_lite.batch import Batch, select, split


def num_mini_batches(step_prompts: int, mini_prompts: int) -> int:
    """Mini-batches of a step of `step_prompts` prompt groups, `mini_prompts` each (at least one)."""
    return max(1, int(step_prompts) // int(mini_prompts))


def reorder_for_dp(n: int, num_mini: int, dp: int) -> List[int]:
    """Sample order so that DP rank r's shard is [mini_0 part r, mini_1 part r, ...].

    Each mini-batch is then the same set of samples whatever the DP size, so DP=2 computes the
    same update as DP=1 on the same global batch.
    """
    per_mini = n // num_mini
    per_part = per_mini // dp
    order = []
    for r in range(dp):
        for j in range(num_mini):
            start = j * per_mini + r * per_part
            order.extend(range(start, start + per_part))
    return order


def update_meta(batch: Batch, num_mini: int, dp: int) -> Dict[str, Any]:
    """Global token and sequence counts per mini-batch, so per-rank losses add up to the global one."""
    mask = batch["response_mask"]
    per_mini = mask.shape[0] // num_mini
    tokens = [int(mask[j * per_mini:(j + 1) * per_mini].sum()) for j in range(num_mini)]
    return {"num_mini_batches": num_mini, "mini_tokens": tokens, "mini_seqs": [per_mini] * num_mini, "dp_size": dp}


def workload(seqlens: torch.Tensor) -> torch.Tensor:
    """verl's `calculate_workload`: the relative FLOPs of a sequence of each length (a 7B-sized block)."""
    return 24576 * seqlens + seqlens ** 2


def equal_size_partitions(costs: Sequence[int], k: int) -> List[List[int]]:
    """Indices of `costs` in `k` parts of equal size with near-equal cost sums: the costliest item
    goes to the cheapest part that still has room (len(costs) must divide by k)."""
    size = len(costs) // k
    parts: List[List[int]] = [[] for _ in range(k)]
    sums = [0] * k
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        p = min((j for j in range(k) if len(parts[j]) < size), key=lambda j: (sums[j], j))
        parts[p].append(i)
        sums[p] += costs[i]
    return parts


def balanced_order(attention_mask: torch.Tensor, num_mini: int, dp: int) -> List[int]:
    """verl's `_balance_batch` with keep_minibatch: a row order in which each mini-batch keeps its
    rows, and the part of it each DP rank gets (see reorder_for_dp) has balanced total tokens.

    Keeping the mini-batches (rather than verl's default, which balances the whole batch and so
    changes which rows share a mini-batch) keeps each update the same set of samples as with
    balance_batch off or DP=1. Within a part, short rows are at both ends (as verl places them)."""
    n = attention_mask.shape[0]
    per_mini, per_part = n // num_mini, n // num_mini // dp
    costs = workload(attention_mask.reshape(n, -1).sum(-1).long()).tolist()
    order: List[int] = []
    for j in range(num_mini):
        rows = list(range(j * per_mini, (j + 1) * per_mini))
        for part in equal_size_partitions([costs[i] for i in rows], dp):
            part.sort(key=lambda x: (costs[rows[x]], x))
            order.extend(rows[x] for x in part[::2] + part[1::2][::-1])
    assert len(order) == n and per_part * dp * num_mini == n
    return order


def seqlen_balance_metrics(attention_mask: torch.Tensor, order: List[int], num_mini: int, dp: int,
                           prefix: str = "global_seqlen") -> Dict[str, float]:
    """verl's `log_seqlen_unbalance`: total tokens per DP rank before (min, max, minmax_diff) and after
    balancing (balanced_min, balanced_max), and the mean per rank."""
    seqlens = attention_mask.reshape(attention_mask.shape[0], -1).sum(-1).long()

    def per_rank(rows: List[int]) -> List[int]:
        share = len(rows) // dp
        return [int(seqlens[rows[r * share:(r + 1) * share]].sum()) for r in range(dp)]

    n = seqlens.shape[0]
    before = per_rank(reorder_for_dp(n, num_mini, dp))
    after = per_rank([order[k] for k in reorder_for_dp(n, num_mini, dp)])
    return {f"{prefix}/min": min(before), f"{prefix}/max": max(before), f"{prefix}/minmax_diff": max(before) - min(before),
            f"{prefix}/balanced_min": min(after), f"{prefix}/balanced_max": max(after),
            f"{prefix}/mean": int(seqlens.sum()) / dp}


def dp_shards(batch: Batch, num_mini: int, dp: int, balance: bool = False,
              metrics: Optional[Dict[str, Any]] = None) -> List[Batch]:
    """The batch split over `dp` ranks, mini-batch by mini-batch (reorder_for_dp). With `balance`
    (trainer.balance_batch) the rows of each mini-batch are first regrouped so each rank's part has
    balanced total tokens; verl's global_seqlen metrics go into `metrics`."""
    n = batch["response_mask"].shape[0]
    if balance and dp > 1:
        order = balanced_order(batch["attention_mask"], num_mini, dp)
        if metrics is not None:
            metrics.update(seqlen_balance_metrics(batch["attention_mask"], order, num_mini, dp))
        batch = select(batch, order)
    ordered = select(batch, reorder_for_dp(n, num_mini, dp))
    return split(ordered, [n // dp] * dp)
