"""Numeric tests of GRPO's and GAE's advantages against hand-computed values and verl's definitions."""

import numpy as np
import pytest
import torch

from verl_lite.trainer.algos import critic
from verl_lite.trainer.algos import group_estimators as ge


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


# ---------------------------------------------------------------------------- GRPO


def grpo_batch():
    # scores (sum of token rewards): 3, 1, 2 for prompt "a"; 2 for prompt "b" (a group of one)
    rewards = t([[0, 0, 3], [0, 1, 0], [1, 1, 0], [0, 2, 0]])
    mask = t([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    return rewards, mask, ["a", "a", "a", "b"]


def test_grpo_advantage_is_the_group_normalised_score_broadcast_over_the_mask():
    rewards, mask, uids = grpo_batch()
    adv, returns = ge.compute_grpo_outcome_advantage(rewards, mask, uids)
    # group a: mean 2, unbiased std sqrt((1 + 1 + 0) / 2) = 1 -> (1, -1, 0) / (1 + 1e-6)
    # group b (one response): mean 0, std 1 -> 2 / (1 + 1e-6) = 1.999998
    s = 1 / (1 + 1e-6)
    expected = [[s, s, s], [-s, -s, 0], [0, 0, 0], [2 * s, 2 * s, 0]]
    assert adv.flatten().tolist() == pytest.approx(sum(expected, []), abs=1e-7)
    assert torch.equal(adv, returns)


def test_grpo_without_std_normalisation_only_subtracts_the_group_mean():
    rewards, mask, uids = grpo_batch()
    adv, _ = ge.compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=False)
    # group a: 3 - 2, 1 - 2, 2 - 2; group b: 2 - 0
    assert adv[:, 0].tolist() == pytest.approx([1.0, -1.0, 0.0, 2.0])


def test_grpo_group_with_equal_scores_gets_zero_advantage_not_nan():
    # scores 1, 1: mean 1, std 0 -> 0 / (0 + 1e-6) = 0
    adv, _ = ge.compute_grpo_outcome_advantage(t([[1.0], [1.0]]), t([[1], [1]]), ["p", "p"])
    assert adv.tolist() == [[0.0], [0.0]]


def test_grpo_groups_numpy_and_tensor_uids_by_value():
    rewards, mask, _ = grpo_batch()
    expected, _ = ge.compute_grpo_outcome_advantage(rewards, mask, ["a", "a", "a", "b"])
    as_numpy, _ = ge.compute_grpo_outcome_advantage(rewards, mask, np.array(["a", "a", "a", "b"], dtype=object))
    as_tensor, _ = ge.compute_grpo_outcome_advantage(rewards, mask, torch.tensor([7, 7, 7, 8]))
    assert torch.equal(as_numpy, expected)
    assert torch.equal(as_tensor, expected)


def test_grpo_of_an_empty_batch_is_empty():
    adv, returns = ge.compute_grpo_outcome_advantage(torch.zeros(0, 3), torch.zeros(0, 3), [])
    assert adv.shape == returns.shape == (0, 3)


def test_grpo_rejects_an_index_of_the_wrong_length():
    rewards, mask, _ = grpo_batch()
    with pytest.raises(ValueError, match="index has 2 uids but token_level_rewards has 4 rows"):
        ge.compute_grpo_outcome_advantage(rewards, mask, ["a", "b"])


def verl_grpo_loop(scores, uids, epsilon=1e-6):
    """verl's compute_grpo_outcome_advantage's definition, row by row: each group's scores stacked in row
    order, torch.mean and torch.std of that 1-D tensor, a group of one mean 0 and std 1."""
    groups = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(scores[i])
    stats = {uid: (torch.tensor(0.0), torch.tensor(1.0)) if len(rows) == 1
             else (torch.mean(torch.stack(rows)), torch.std(torch.stack(rows))) for uid, rows in groups.items()}
    out = scores.clone()
    for i, uid in enumerate(uids):
        out[i] = (scores[i] - stats[uid][0]) / (stats[uid][1] + epsilon)
    return out


def test_grpo_equals_verls_row_by_row_definition_to_the_bit_even_where_float32_rounding_shows():
    # 7 equal scores of 1/3: their float32 mean is not exactly 1/3, so verl's advantage is not 0 but
    # rounding over (std + 1e-6); a float64 or dim-wise reduction would give other numbers there
    g = torch.Generator().manual_seed(0)
    cases = [(torch.full((7,), 1 / 3), [0] * 7)]
    for n, groups in ((8, 16), (5, 3), (16, 2)):
        uids = torch.randint(0, groups, (n * groups,), generator=g).tolist()
        cases.append((torch.randn(n * groups, generator=g), uids))
        cases.append((torch.randint(0, 4, (n * groups,), generator=g).float() / 3, [str(u) for u in uids]))
    rounding_shown = False
    for scores, uids in cases:
        adv, _ = ge.compute_grpo_outcome_advantage(scores.unsqueeze(-1), torch.ones(len(uids), 1), uids)
        want = verl_grpo_loop(scores, uids)
        assert torch.equal(adv[:, 0], want), (adv[:, 0] - want).abs().max()
        rounding_shown |= bool((want != 0).any() and len(set(uids)) == 1)
    assert rounding_shown  # the first case is the one where the reduction's rounding decides


# ---------------------------------------------------------------------------- GAE


def test_gae_walks_backwards_skips_masked_tokens_and_whitens_advantages():
    rewards, values, mask = t([[1, 0, 2, 0]]), t([[0.5, 1.0, 1.5, 9.0]]), t([[1, 1, 1, 0]])
    adv, returns = critic.compute_gae_advantage_return(rewards, values, mask, gamma=0.5, lam=0.5)
    # t=3 masked: next value and advantage stay 0 (the 9.0 must not leak into t=2)
    # t=2: delta = 2 + 0.5*0 - 1.5 = 0.5;          A = 0.5
    # t=1: delta = 0 + 0.5*1.5 - 1.0 = -0.25;      A = -0.25 + 0.25*0.5 = -0.125
    # t=0: delta = 1 + 0.5*1.0 - 0.5 = 1.0;        A = 1.0 + 0.25*(-0.125) = 0.96875
    # returns = raw A + V = 1.46875, 0.875, 2.0, 0 + 9.0
    assert returns[0].tolist() == pytest.approx([1.46875, 0.875, 2.0, 9.0])
    # whiten over the 3 masked tokens: mean 0.4479167, unbiased var 0.3011068 (std 0.5487320)
    # -> 0.5208333/0.548732 = 0.949158, -0.5729167/0.548732 = -1.044074, 0.0520833/0.548732 = 0.094916
    assert adv[0, :3].tolist() == pytest.approx([0.949158, -1.044074, 0.094916], abs=1e-5)
