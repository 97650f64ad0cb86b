"""Numeric tests of the policy losses (vanilla, gspo, geo_mean, the dispatcher and the registry) and the
critic's value loss against hand-computed values and verl's definitions."""

import math

import pytest
import torch

from test_core_algos import verl_agg_loss
from verl_lite.config.choices import LOSS_AGG_MODES
from verl_lite.trainer.algos import critic
from verl_lite.trainer.algos import policy_losses as pl
from verl_lite.trainer.algos.policy_losses import PolicyLossInput


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


# ---------------------------------------------------------------------------- vanilla


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


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
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


# ---------------------------------------------------------------------------- value loss


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


def test_every_policy_loss_mode_the_config_accepts_has_one_registered_loss():
    from verl_lite.config.choices import POLICY_LOSS_MODES

    assert tuple(pl.POLICY_LOSSES) == POLICY_LOSS_MODES
    with pytest.raises(ValueError, match="registered twice"):
        pl.register_policy_loss("vanilla")(lambda *a, **k: {})
    with pytest.raises(ValueError, match="loss_mode='bypass_mode' is not supported by verl_lite: .*rollout_correction"):
        pl.compute_policy_loss("bypass_mode", PolicyLossInput(*([torch.zeros(1, 1)] * 4)))
