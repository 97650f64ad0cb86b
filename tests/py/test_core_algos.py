"""Numeric tests of core_algos (masked statistics, loss aggregation, KL, entropy) against hand-computed values."""

import math

import pytest
import torch

from verl_lite.trainer import core_algos as ca


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


# ---------------------------------------------------------------------------- KL, entropy

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
