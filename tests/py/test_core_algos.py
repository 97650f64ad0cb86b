"""Numeric tests of the advantage, loss, KL and aggregation functions against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from verl_lite.trainer import core_algos as ca
from verl_lite.trainer.algos import critic
from verl_lite.trainer.algos import group_estimators as ge
from verl_lite.trainer.algos import policy_losses as pl
from verl_lite.trainer.algos.policy_losses import PolicyLossInput


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


# ---------------------------------------------------------------------------- masked statistics


def test_masked_sum_ignores_nan_outside_the_mask():
    # 1 + 2; the NaN sits under mask 0 and must not poison the sum.
    assert ca.masked_sum(t([[1.0, 2.0, float("nan")]]), t([[1, 1, 0]])).item() == 3.0


def test_masked_mean_over_all_elements_and_along_a_dim():
    values, mask = t([[1, 2, 3], [4, 5, 6]]), t([[1, 1, 0], [0, 0, 1]])
    # all: (1 + 2 + 6) / 3 = 3; per row: (1 + 2) / 2 = 1.5 and 6 / 1 = 6
    assert ca.masked_mean(values, mask).item() == pytest.approx(3.0)
    assert ca.masked_mean(values, mask, dim=-1).tolist() == pytest.approx([1.5, 6.0])


def test_masked_var_is_unbiased_by_default_and_biased_on_request():
    values, mask = t([1, 2, 3, 100]), t([1, 1, 1, 0])
    # mean 2; squared deviations 1, 0, 1 -> biased 2/3, unbiased 2/2 = 1
    assert ca.masked_var(values, mask).item() == pytest.approx(1.0)
    assert ca.masked_var(values, mask, unbiased=False).item() == pytest.approx(2 / 3)


def test_masked_var_of_a_single_element_says_how_to_fix_it():
    with pytest.raises(ValueError, match=r"at least 2 masked elements, got 1.*unbiased=False"):
        ca.masked_var(t([5.0, 7.0]), t([1, 0]))


def test_masked_whiten_centres_and_scales_and_can_keep_the_mean():
    values, mask = t([1, 2, 3, 50]), t([1, 1, 1, 0])
    # mean 2, unbiased var 1 -> (x - 2) / sqrt(1 + 1e-8); the masked 50 becomes (50 - 2) = 48
    assert ca.masked_whiten(values, mask).tolist() == pytest.approx([-1, 0, 1, 48], abs=1e-6)
    assert ca.masked_whiten(values, mask, shift_mean=False).tolist() == pytest.approx([1, 2, 3, 50], abs=1e-6)


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


# ---------------------------------------------------------------------------- aggregation

# three sequences of length 4: token sums 3 and 4; the third has no valid token
LOSS = t([[1, 2, 30, 40], [4, 50, 60, 70], [7, 8, 9, 10]])
MASK = t([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("token-sum", 7.0),  # 1 + 2 + 4
        ("seq-mean-token-sum", 3.5),  # (3 + 4) / 2 sequences with tokens
        ("seq-mean-token-mean", 2.75),  # (1.5 + 4) / 2
        ("seq-mean-token-sum-norm", 0.875),  # (3 + 4) / 2 sequences / R=4 (verl 0.9 divides by both)
    ],
)
def test_each_aggregation_mode_reduces_the_loss_matrix_as_verl(mode, expected):
    assert ca.agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def verl_agg_loss(loss_mat, loss_mask, mode, global_batch_size=None, batch_num_tokens=None):
    """verl 0.9.0's `core_algos.agg_loss` at dp_size=1, written out from its definition."""
    if mode == "token-mean":
        return (loss_mat * loss_mask).sum() / (loss_mask.sum() if batch_num_tokens is None else batch_num_tokens)
    if mode == "token-sum":
        return (loss_mat * loss_mask).sum()
    seq_tokens = loss_mask.sum(-1)
    seq_mask = (seq_tokens > 0).float()
    seq_losses = (loss_mat * loss_mask).sum(-1)
    if mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (seq_tokens + 1e-8)
    gbs = seq_mask.sum() if global_batch_size is None else global_batch_size
    loss = (seq_losses * seq_mask).sum() / gbs
    return loss / loss_mask.shape[-1] if mode == "seq-mean-token-sum-norm" else loss


@pytest.mark.parametrize("mode", ca.LOSS_AGG_MODES)
def test_every_aggregation_mode_equals_verls_definition_on_ragged_batches_and_micro_batches(mode):
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(6, 7, generator=g)
    lengths = torch.tensor([7, 3, 0, 1, 5, 2])
    mask = (torch.arange(7) < lengths[:, None]).float()
    assert ca.agg_loss(loss, mask, mode).item() == pytest.approx(verl_agg_loss(loss, mask, mode).item(), abs=1e-6)
    # micro-batches of the same mini-batch with the global counts, as the workers pass them
    tokens, seqs = int(mask.sum()), int((mask.sum(-1) > 0).sum())
    for rows in (slice(0, 2), slice(2, 6)):
        ours = ca.agg_loss(loss[rows], mask[rows], mode, global_batch_size=seqs, global_token_num=tokens)
        theirs = verl_agg_loss(loss[rows], mask[rows], mode, global_batch_size=seqs, batch_num_tokens=tokens)
        assert ours.item() == pytest.approx(theirs.item(), abs=1e-6)


def verl_vanilla_policy_loss(old, new, adv, mask, low, high, clip_c, mode):
    """verl 0.9.0's `compute_policy_loss_vanilla` (no rollout weights), written out from its definition."""
    neg_kl = torch.clamp(new - old, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    masked_mean = lambda x: (x * mask).sum() / mask.sum()  # noqa: E731
    loss1, loss2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    clipped = torch.maximum(loss1, loss2)
    loss3 = -adv * clip_c
    losses = torch.where(adv < 0, torch.min(loss3, clipped), clipped)
    return {"pg_loss": verl_agg_loss(losses, mask, mode), "pg_clipfrac": masked_mean(torch.gt(loss2, loss1).float()),
            "ppo_kl": masked_mean(-neg_kl),
            "pg_clipfrac_lower": masked_mean(torch.gt(clipped, loss3) * (adv < 0).float())}


@pytest.mark.parametrize("mode", ca.LOSS_AGG_MODES)
def test_the_vanilla_policy_loss_and_its_metrics_equal_verls_in_every_aggregation_mode(mode):
    g = torch.Generator().manual_seed(5)
    old = torch.randn(5, 6, generator=g)
    new = old + 0.6 * torch.randn(5, 6, generator=g)  # ratios well outside [0.8, 1.28]: both clips fire
    adv = 2 * torch.randn(5, 1, generator=g).expand(5, 6)
    mask = (torch.arange(6) < torch.tensor([6, 4, 1, 3, 5])[:, None]).float()
    ours = pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask, 0.2, 0.28, 3.0, mode))
    theirs = verl_vanilla_policy_loss(old, new, adv, mask, 0.2, 0.28, 3.0, mode)
    assert theirs["pg_clipfrac"] > 0 and theirs["pg_clipfrac_lower"] > 0
    for key, value in theirs.items():
        assert ours[key].item() == pytest.approx(value.item(), abs=1e-6), key


def test_token_mean_is_the_default_aggregation_mode():
    assert ca.agg_loss(LOSS, MASK).item() == pytest.approx(7 / 3)


def test_an_unknown_aggregation_mode_lists_the_valid_ones():
    expected = r"unknown loss_agg_mode 'seq-mean'.*token-mean, token-sum, seq-mean-token-sum,"
    with pytest.raises(ValueError, match=expected):
        ca.agg_loss(LOSS, MASK, "seq-mean")


@pytest.mark.parametrize("mode", ca.LOSS_AGG_MODES)
def test_micro_batch_losses_with_global_counts_add_up_to_the_whole_batch_loss(mode):
    whole = ca.agg_loss(LOSS, MASK, mode)
    # 3 valid tokens and 2 sequences with tokens in the mini-batch, split as rows [0] and [1, 2]
    micro = [
        ca.agg_loss(LOSS[rows], MASK[rows], mode, global_batch_size=2, global_token_num=3)
        for rows in ([0], [1, 2])
    ]
    assert (micro[0] + micro[1]).item() == pytest.approx(whole.item())


def test_token_mean_micro_batch_divides_by_the_global_token_count():
    # row 0 alone: (1 + 2) / 3 global tokens = 1, not (1 + 2) / 2 local tokens = 1.5
    assert ca.agg_loss(LOSS[:1], MASK[:1], "token-mean", global_token_num=3).item() == pytest.approx(1.0)


# ---------------------------------------------------------------------------- policy loss


def policy_batch():
    # old log-prob 0, so ratio = exp(log_prob). Tokens (row, col):
    # (0,0) A=+1, ratio e^0.5=1.6487: max(-1.6487, -1.2) = -1.2        clipped
    # (0,1) A=-1, ratio 0.5:          max(0.5, 0.8) = 0.8, below 3      clipped
    # (1,0) A=-1, ratio 4:            max(4, 1.2) = 4 -> dual clip 3    clipped lower
    # (1,1) A=+2, ratio 1:            -2
    # (*,2) masked out with extreme values that would change every number
    log_prob = t([[0.5, math.log(0.5), 30.0], [math.log(4.0), 0.0, -30.0]])
    advantages = t([[1.0, -1.0, 100.0], [-1.0, 2.0, -100.0]])
    mask = t([[1, 1, 0], [1, 1, 0]])
    return torch.zeros_like(log_prob), log_prob, advantages, mask


def test_vanilla_policy_loss_clips_and_dual_clips_as_verl():
    old, new, adv, mask = policy_batch()
    out = pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask))
    assert out["pg_loss"].item() == pytest.approx(0.15, abs=1e-6)  # (-1.2 + 0.8 + 3 - 2) / 4
    assert out["pg_clipfrac"].item() == pytest.approx(0.5)  # tokens (0,0) and (0,1)
    assert out["pg_clipfrac_lower"].item() == pytest.approx(0.25)  # token (1,0)
    # mean of old - new = -(0.5 - 0.693147 + 1.386294 + 0) / 4
    assert out["ppo_kl"].item() == pytest.approx(-0.2982868, abs=1e-6)


def test_vanilla_policy_loss_passes_gradient_only_through_unclipped_tokens():
    old, new, adv, mask = policy_batch()
    new.requires_grad_(True)
    pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask))["pg_loss"].backward()
    # only (1,1) is unclipped: d(-A * exp(logp)) / dlogp / 4 tokens = -2 * 1 / 4 = -0.5
    assert new.grad.flatten().tolist() == pytest.approx([0, 0, 0, 0, -0.5, 0])


def test_vanilla_policy_loss_uses_the_high_clip_for_positive_advantages():
    old, new, adv, mask = policy_batch()
    out = pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask, clip_ratio_high=0.28))
    # token (0,0) now clips at -1.28: (-1.28 + 0.8 + 3 - 2) / 4 = 0.13
    assert out["pg_loss"].item() == pytest.approx(0.13, abs=1e-6)


def test_vanilla_policy_loss_aggregates_with_the_requested_mode():
    old, new, adv, mask = policy_batch()
    out = pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask, loss_agg_mode="seq-mean-token-sum"))
    # rows: -1.2 + 0.8 = -0.4 and 3 - 2 = 1 -> (-0.4 + 1) / 2
    assert out["pg_loss"].item() == pytest.approx(0.3, abs=1e-6)


def test_log_ratio_is_clamped_to_twenty():
    # log_prob - old = 50 is clamped to 20, so ppo_kl = -20 (not -50) and the loss stays finite
    out = pl.compute_policy_loss_vanilla(PolicyLossInput(t([[0.0]]), t([[50.0]]), t([[-1.0]]), t([[1]])))
    assert out["ppo_kl"].item() == -20.0
    assert out["pg_loss"].item() == pytest.approx(3.0)  # A=-1: capped by the dual clip at 3


def test_dual_clip_bound_not_above_one_is_rejected_with_the_value():
    old, new, adv, mask = policy_batch()
    with pytest.raises(ValueError, match=r"clip_ratio_c=1.0: .*greater than 1.0"):
        pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask, clip_ratio_c=1.0))


# ---------------------------------------------------------------------------- KL, entropy, value loss

LOGP, REF = t([0.0, -1.0]), t([-1.0, 0.0])  # logp - ref = 1, -1


@pytest.mark.parametrize(
    "kl_type, expected",
    [
        ("kl", [1.0, -1.0]),
        ("k1", [1.0, -1.0]),
        ("abs", [1.0, 1.0]),
        ("mse", [0.5, 0.5]),  # 0.5 * (+-1)^2
        ("k2", [0.5, 0.5]),
        # d = ref - logp = -1, 1: e^-1 + 1 - 1 = 0.367879; e^1 - 1 - 1 = 0.718282
        ("low_var_kl", [0.367879, 0.718282]),
        ("k3", [0.367879, 0.718282]),
    ],
)
def test_each_kl_type_and_alias_matches_its_estimator(kl_type, expected):
    assert ca.kl_penalty(LOGP, REF, kl_type).tolist() == pytest.approx(expected, abs=1e-6)


def test_low_var_kl_is_clamped_to_ten():
    # d = 30 -> clamped to 20 -> e^20 - 21 = 4.85e8 -> clamped to 10
    assert ca.kl_penalty(t([0.0]), t([30.0]), "low_var_kl").item() == 10.0


def test_kl_type_with_plus_keeps_the_value_and_takes_the_k2_gradient():
    logp = LOGP.clone().requires_grad_(True)
    value = ca.kl_penalty(logp, REF, "k3+")
    assert value.tolist() == pytest.approx([0.367879, 0.718282], abs=1e-6)
    value.sum().backward()
    # d/dlogp of 0.5 * (logp - ref)^2 = logp - ref = 1, -1
    assert logp.grad.tolist() == pytest.approx([1.0, -1.0])


def test_an_unknown_kl_type_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown kl type 'k4'; valid types: kl, k1, abs, mse, k2, low_var_kl, k3"):
        ca.kl_penalty(LOGP, REF, "k4")


def test_entropy_from_logits_matches_the_closed_form_and_is_stable_for_large_logits():
    logits = t([[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e9, -1e9], [1000.0, 1000.0, -1e9, -1e9]])
    # uniform over 4: ln 4 = 1.386294; p = (1/4, 3/4): 0.25 ln 4 + 0.75 ln(4/3) = 0.562335; 2 equal: ln 2
    # (-1e9 logits have p = 0, where a naive -sum p log p gives 0 * -inf = nan; at 1000, float32
    # rounding of two ~1000.69 terms leaves ~3e-5 error, hence abs=1e-4)
    assert ca.entropy_from_logits(logits).tolist() == pytest.approx([1.386294, 0.562335, 0.693147], abs=1e-4)


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_errors():
    vpreds, values = t([[1.0, 0.0, 2.0, 99.0]]), t([[0.0, 0.0, 0.0, 0.0]])
    returns, mask = t([[1.0, 0.5, 0.0, 0.0]]), t([[1, 1, 1, 0]])
    vf_loss, clipfrac = critic.compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    # token 0: v=1 clipped to 0.5: max(0, 0.25) = 0.25 (clipped error larger)
    # token 1: v=0 inside the range: 0.25
    # token 2: v=2 clipped to 0.5: max(4, 0.25) = 4
    # 0.5 * (0.25 + 0.25 + 4) / 3 = 0.75; clip fraction 1/3
    assert vf_loss.item() == pytest.approx(0.75)
    assert clipfrac.item() == pytest.approx(1 / 3)


def test_value_loss_micro_batch_uses_the_global_token_count():
    vf_loss, _ = critic.compute_value_loss(t([[2.0]]), t([[0.0]]), t([[2.0]]), t([[1]]), 0.5, global_token_num=4)
    # 0.5 * (2 - 0)^2 / 4 global tokens = 0.5
    assert vf_loss.item() == pytest.approx(0.5)


# ---------------------------------------------------------------------------- policy loss modes (gspo, geo_mean)


def _logp(*ratios):
    """New log-probs for old log-probs of 0: the token ratios themselves."""
    return torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64, requires_grad=True)


def test_gspo_uses_the_geometric_mean_sequence_ratio_with_each_tokens_own_gradient():
    new = _logp(1.1, 1.3)
    old, mask = torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    out = pl.compute_policy_loss("gspo", PolicyLossInput(old, new, torch.ones(1, 2, dtype=torch.float64), mask,
                                                         0.2, 0.2))
    s = math.sqrt(1.1 * 1.3)  # s_i = (1.1 * 1.3) ** (1 / 2), inside [0.8, 1.2]: no clip
    assert out["pg_loss"].item() == pytest.approx(-s)
    out["pg_loss"].backward()
    # loss = mean_t(-s_it), d s_it / d logp_t = s: each token gets -s / 2
    assert new.grad[0].tolist() == pytest.approx([-s / 2, -s / 2])
    assert out["pg_clipfrac"].item() == 0.0


def test_gspo_clips_the_sequence_ratio_and_then_passes_no_gradient():
    new = _logp(1.5, 1.5)
    old, mask = torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    out = pl.compute_policy_loss("gspo", PolicyLossInput(old, new, torch.ones(1, 2, dtype=torch.float64), mask,
                                                         0.2, 0.2))
    assert out["pg_loss"].item() == pytest.approx(-1.2)  # max(-1.5, -clip(1.5) = -1.2)
    out["pg_loss"].backward()
    assert new.grad[0].tolist() == [0.0, 0.0]
    assert out["pg_clipfrac"].item() == pytest.approx(1.0)
    # a negative advantage keeps the unclipped (larger) loss 1.5 and its gradient s / 2 per token
    new = _logp(1.5, 1.5)
    out = pl.compute_policy_loss("gspo", PolicyLossInput(old, new, -torch.ones(1, 2, dtype=torch.float64), mask,
                                                         0.2, 0.2))
    assert out["pg_loss"].item() == pytest.approx(1.5)
    out["pg_loss"].backward()
    assert new.grad[0].tolist() == pytest.approx([0.75, 0.75])


def test_gspo_averages_per_sequence_whatever_the_aggregation_mode_and_ignores_masked_tokens():
    new = torch.log(torch.tensor([[1.1, 1.3, 9.0], [1.0, 1.0, 1.0]], dtype=torch.float64))
    old = torch.zeros_like(new)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.float64)
    adv = torch.ones_like(new)
    expected = (-math.sqrt(1.1 * 1.3) + -1.0) / 2  # the masked 9.0 counts nowhere
    for mode in ("token-mean", "token-sum"):
        out = pl.compute_policy_loss("gspo", PolicyLossInput(old, new, adv, mask, 0.2, 0.2, loss_agg_mode=mode))
        assert out["pg_loss"].item() == pytest.approx(expected)


def test_geo_mean_clips_each_token_on_the_pessimistic_side_then_takes_the_geometric_mean():
    old, mask = torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64)
    # A > 0: log-ratios [log 1.5, log 0.5] -> min(d, clip(d, -0.2, 0.2)) = [0.2, log 0.5]
    new = _logp(1.5, 0.5)
    out = pl.compute_policy_loss("geo_mean", PolicyLossInput(old, new, torch.ones(1, 2, dtype=torch.float64), mask,
                                                             0.2, 0.2))
    ratio = math.exp((0.2 + math.log(0.5)) / 2)
    assert out["pg_loss"].item() == pytest.approx(-ratio)
    out["pg_loss"].backward()
    assert new.grad[0].tolist() == pytest.approx([0.0, -ratio / 2])  # the clipped token passes no gradient
    # verl counts a token as clipped wherever the clamp changed its log-ratio (both tokens here)
    assert out["pg_clipfrac"].item() == pytest.approx(1.0) and out["pg_clipfrac_lower"].item() == 0.0
    # A < 0: max(d, clip(d)) = [log 1.5, -0.2]
    new = _logp(1.5, 0.5)
    out = pl.compute_policy_loss("geo_mean", PolicyLossInput(old, new, -torch.ones(1, 2, dtype=torch.float64), mask,
                                                             0.2, 0.2))
    ratio = math.exp((math.log(1.5) - 0.2) / 2)
    assert out["pg_loss"].item() == pytest.approx(ratio)
    out["pg_loss"].backward()
    assert new.grad[0].tolist() == pytest.approx([ratio / 2, 0.0])
    assert out["pg_clipfrac_lower"].item() == pytest.approx(1.0) and out["pg_clipfrac"].item() == 0.0


def test_geo_mean_averages_sequences_over_the_global_batch_size_so_micro_batches_add_up():
    new = torch.log(torch.tensor([[1.5, 0.5], [1.1, 0.9], [1.0, 2.0]], dtype=torch.float64))
    old = torch.zeros_like(new)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0], [0.5, 0.5]], dtype=torch.float64)
    whole = pl.compute_policy_loss("geo_mean", PolicyLossInput(old, new, adv, mask, 0.2, 0.2))["pg_loss"]
    parts = [pl.compute_policy_loss("geo_mean", PolicyLossInput(old[i:j], new[i:j], adv[i:j], mask[i:j], 0.2, 0.2,
                                                                global_batch_size=3))["pg_loss"]
             for i, j in ((0, 1), (1, 3))]
    assert sum(parts).item() == pytest.approx(whole.item())
    # the second sequence: one token; A < 0 keeps max(d, clip(d)) = log 1.1, so the loss is -(-2) * 1.1
    second = pl.compute_policy_loss("geo_mean", PolicyLossInput(old[1:2], new[1:2], adv[1:2], mask[1:2], 0.2,
                                                                0.2))["pg_loss"]
    assert second.item() == pytest.approx(2 * 1.1)


def test_vanilla_through_the_dispatcher_equals_the_vanilla_function():
    g = torch.Generator().manual_seed(0)
    old, new, adv = (torch.randn(3, 4, generator=g) for _ in range(3))
    mask = torch.ones(3, 4)
    a = pl.compute_policy_loss("vanilla", PolicyLossInput(old, new, adv, mask, 0.2, 0.28, 3.0, "seq-mean-token-sum"))
    b = pl.compute_policy_loss_vanilla(PolicyLossInput(old, new, adv, mask, 0.2, 0.28, 3.0, "seq-mean-token-sum"))
    assert {k: v.item() for k, v in a.items()} == {k: v.item() for k, v in b.items()}


def test_an_unknown_policy_loss_mode_names_the_valid_ones():
    t = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="loss_mode='clip_covv' is not supported: choose one of vanilla, gspo, geo_mean, "
                                         "dppo_tv"):
        pl.compute_policy_loss("clip_covv", PolicyLossInput(t, t, t, t))


# ---------------------------------------------------------------------------- KL penalty in the reward


class _KLCtrl:
    def __init__(self, type, kl_coef=0.1, target_kl=0.05, horizon=100):
        self.type, self.kl_coef, self.target_kl, self.horizon = type, kl_coef, target_kl, horizon


def test_kl_in_reward_subtracts_beta_times_the_masked_kl_and_reports_the_batch_kl():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -3.0]])
    ref = torch.tensor([[-1.5, -2.0, -1.0], [-0.5, -2.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    ctrl = ca.get_kl_controller(_KLCtrl("fixed", kl_coef=0.1))
    rewards, metrics = ca.apply_kl_penalty(scores, old, ref, mask, ctrl, "kl")
    # k1 = old - ref: [[0.5, 0, 0.5], [-0.5, 1.0, (masked)]]
    expected = [[0.0 - 0.05, 0.0, 1.0 - 0.05], [0.0 + 0.05, 2.0 - 0.1, 0.0]]
    for row, want in zip(rewards.tolist(), expected):
        assert row == pytest.approx(want)
    # per-sequence means 1/3 and 0.25, batch mean 7/24
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(7 / 24, rel=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    assert ctrl.value == 0.1  # fixed


def test_kl_in_reward_uses_the_chosen_estimator():
    scores, old, ref = torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
    mask = torch.ones(1, 1)
    ctrl = ca.FixedKLController(1.0)
    rewards, _ = ca.apply_kl_penalty(scores, old, ref, mask, ctrl, "low_var_kl")
    d = -2.0 - -1.0  # ref - old
    assert rewards.item() == pytest.approx(-(math.exp(d) - d - 1))
    rewards, _ = ca.apply_kl_penalty(scores, old, ref, mask, ctrl, "mse")
    assert rewards.item() == pytest.approx(-0.5)


def test_the_adaptive_kl_controller_moves_the_coefficient_towards_the_target_as_verl():
    ctrl = ca.get_kl_controller(_KLCtrl("adaptive", kl_coef=0.2, target_kl=0.1, horizon=1000))
    ctrl.update(current_kl=0.11, n_steps=50)  # error 0.1: value *= 1 + 0.1 * 50 / 1000
    assert ctrl.value == pytest.approx(0.2 * 1.005)
    ctrl.update(current_kl=1.0, n_steps=100)  # error clipped to 0.2
    assert ctrl.value == pytest.approx(0.2 * 1.005 * 1.02)
    ctrl.update(current_kl=0.0, n_steps=100)  # error clipped to -0.2
    assert ctrl.value == pytest.approx(0.2 * 1.005 * 1.02 * 0.98)
    # apply_kl_penalty uses the value before the update, then updates with n_steps = sequences
    before = ctrl.value
    _, metrics = ca.apply_kl_penalty(torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2), torch.ones(4, 2), ctrl)
    assert metrics["actor/reward_kl_penalty_coeff"] == before
    assert ctrl.value == pytest.approx(before * (1 - 0.2 * 4 / 1000))  # KL 0: error -1 clipped to -0.2


def test_kl_controller_errors_name_the_setting():
    with pytest.raises(ValueError, match="kl_ctrl.type='pid' is not supported: choose one of fixed, adaptive"):
        ca.get_kl_controller(_KLCtrl("pid"))
    with pytest.raises(ValueError, match="kl_ctrl.horizon=0"):
        ca.get_kl_controller(_KLCtrl("adaptive", horizon=0))


def test_every_policy_loss_mode_the_config_accepts_has_one_registered_loss():
    from verl_lite.config.choices import POLICY_LOSS_MODES

    assert tuple(pl.POLICY_LOSSES) == POLICY_LOSS_MODES
    with pytest.raises(ValueError, match="registered twice"):
        pl.register_policy_loss("vanilla")(lambda *a, **k: {})
    with pytest.raises(ValueError, match="loss_mode='bypass_mode' is not supported by verl_lite: .*rollout_correction"):
        pl.compute_policy_loss("bypass_mode", PolicyLossInput(*([torch.zeros(1, 1)] * 4)))
