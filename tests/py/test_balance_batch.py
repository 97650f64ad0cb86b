"""trainer.balance_batch: each DP rank's part of a mini-batch gets balanced total tokens (verl's
_balance_batch, keeping each mini-batch's samples), the rows are only reordered, and the update
is the same as without it."""

from __future__ import annotations

import torch

from verl_lite.trainer.data_parallel import (balanced_order, dp_shards, equal_size_partitions, reorder_for_dp,
                                             seqlen_balance_metrics, update_meta, workload)


def _mask(lengths, width=None):
    width = width or max(lengths)
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()


def _rank_tokens(mask, order, num_mini, dp):
    n = mask.shape[0]
    rows = [order[k] for k in reorder_for_dp(n, num_mini, dp)]
    share = n // dp
    return [int(mask[rows[r * share:(r + 1) * share]].sum()) for r in range(dp)]


def test_equal_size_partitions_balance_hand_made_costs():
    costs = [10, 9, 8, 7, 6, 5, 4, 3]
    parts = equal_size_partitions(costs, 2)
    assert sorted(len(p) for p in parts) == [4, 4]
    assert sorted(i for p in parts for i in p) == list(range(8))
    assert [sum(costs[i] for i in p) for p in parts] == [26, 26]


def test_balanced_order_evens_the_ranks_where_consecutive_slices_do_not():
    # long rows first: consecutive slices give rank 0 all of them
    lengths = [60, 58, 55, 50, 5, 4, 3, 2]
    mask = _mask(lengths)
    order = balanced_order(mask, num_mini=1, dp=2)
    assert sorted(order) == list(range(8))  # a permutation: nothing lost or duplicated
    assert _rank_tokens(mask, list(range(8)), 1, 2) == [223, 14]
    assert _rank_tokens(mask, order, 1, 2) == [118, 119]
    metrics = seqlen_balance_metrics(mask, order, 1, 2)
    assert metrics["global_seqlen/minmax_diff"] == 209
    assert (metrics["global_seqlen/balanced_min"], metrics["global_seqlen/balanced_max"]) == (118, 119)
    assert metrics["global_seqlen/mean"] == 237 / 2


def test_each_mini_batch_keeps_its_rows():
    lengths = [9, 1, 8, 2, 30, 31, 1, 2, 7, 7, 3, 40]
    mask = _mask(lengths)
    order = balanced_order(mask, num_mini=3, dp=2)
    assert sorted(order) == list(range(12))
    for j in range(3):
        assert sorted(order[4 * j:4 * j + 4]) == list(range(4 * j, 4 * j + 4))


def test_one_dp_rank_is_a_no_op():
    mask = _mask([5, 1, 9, 3])
    batch = {"response_mask": mask, "attention_mask": mask, "x": torch.arange(4)}
    metrics = {}
    (shard,) = dp_shards(batch, 2, 1, balance=True, metrics=metrics)
    assert shard["x"].tolist() == [0, 1, 2, 3] and metrics == {}


def test_shards_hold_the_same_rows_and_the_same_mini_batch_sets_as_without_balancing():
    torch.manual_seed(0)
    lengths = torch.randint(1, 33, (16,)).tolist()
    mask = _mask(lengths, 32)
    batch = {"response_mask": mask, "attention_mask": mask, "x": torch.arange(16)}
    num_mini, dp = 2, 2
    metrics = {}
    on = dp_shards(batch, num_mini, dp, balance=True, metrics=metrics)
    off = dp_shards(batch, num_mini, dp)
    per_part = 16 // num_mini // dp
    for j in range(num_mini):  # mini-batch j of each rank: same set of samples over the ranks
        def mini(shards):
            return sorted(x for s in shards for x in s["x"][j * per_part:(j + 1) * per_part].tolist())
        assert mini(on) == mini(off)
    assert metrics["global_seqlen/balanced_max"] - metrics["global_seqlen/balanced_min"] <= \
        metrics["global_seqlen/minmax_diff"]
    assert update_meta(batch, num_mini, dp) == update_meta(batch, num_mini, dp)


def test_the_per_mini_batch_loss_summed_over_ranks_is_the_same_on_and_off():
    # A token-mean loss as the workers compute it (each rank's sum over the global token count of
    # the mini-batch), added over the ranks: only the order of rows changes with balancing.
    torch.manual_seed(1)
    lengths = torch.randint(1, 17, (8,)).tolist()
    mask = _mask(lengths, 16)
    batch = {"response_mask": mask, "attention_mask": mask, "v": torch.randn(8, 16)}
    num_mini, dp = 2, 2
    meta = update_meta(batch, num_mini, dp)

    def losses(shards):
        per_part = 8 // num_mini // dp
        out = []
        for j in range(num_mini):
            total = sum((s["v"][j * per_part:(j + 1) * per_part] * s["response_mask"][j * per_part:(j + 1) * per_part])
                        .sum() for s in shards)
            out.append(float(total) / meta["mini_tokens"][j])
        return out

    on, off = losses(dp_shards(batch, num_mini, dp, balance=True)), losses(dp_shards(batch, num_mini, dp))
    assert on == [pytest_approx(x) for x in off]


def pytest_approx(x):
    import pytest
    return pytest.approx(x, rel=1e-6)


def test_workload_is_verls_estimate():
    assert workload(torch.tensor([1, 100])).tolist() == [24577, 24576 * 100 + 10000]
