"""verl's rollout correction (`algorithm.rollout_correction`, decoupled mode): importance weights and
rejection of tokens/sequences where the actor's old log-probs and the rollout's own log-probs disagree.

As `verl/trainer/ppo/rollout_corr_helper.py` defines it, tensors (B, R):
- log r = old_log_probs - rollout_log_probs (the training policy over the policy that sampled).
- rollout_is=token: w_t = exp(clamp(log r_t, -20, 20)); rollout_is=sequence: one weight per response,
  exp(clamp(sum_t log r_t, -20, 20)), on every token. rollout_is_threshold "U" truncates w at U (TIS);
  "L_U" zeroes w outside [L, U] (IcePop). rollout_is_batch_normalize divides by the batch mean weight
  (per token, or per sequence for sequence weights). The weights multiply the per-token policy loss.
- rollout_rs: comma-separated criteria, each on k1 = -log r, k2 = (log r)^2 / 2 or k3 = r - 1 - log r
  (log r clamped to +-20) per token (token_k*) or per response as its sum / mean / max (seq_sum_k*,
  seq_mean_k*, seq_max_k*); k1 passes within log-bounds log(L) <= k1 <= log(U), k2/k3 pass at
  value <= U. A failing token (or every token of a failing response) leaves the response mask.
- metrics: rollout_corr/<verl's names>, IS and RS statistics plus the off-policy diagnostics
  (kl, k3_kl, ppl, chi2), computed on the mask before rejection.
- bypass mode (`bypass_policy_loss`): the same, per micro-batch, between the current policy and the
  rollout's log-probs, which are the old ones; then verl's ppo_clip or reinforce loss. Its batch
  normalisation is over the micro-batch of every data-parallel rank (an all-reduce, as verl's).
tests/py/test_rollout_correction_table.py compares all of it with verl's own functions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

import torch

from verl_lite.trainer.algos import policy_losses
from verl_lite.trainer.algos.policy_losses import PolicyLossInput
from verl_lite.trainer.core_algos import agg_loss, masked_mean, masked_sum

from verl_lite.decisions.rollout_correction import IS_LEVELS, SAFETY_BOUND, parse_is_threshold, parse_rs


def _std(values: torch.Tensor, mask: torch.Tensor, lo: float, hi: float) -> float:
    """Masked std of values clamped to [lo, hi], as verl reports it (0 with one token)."""
    if mask.sum() <= 1:
        return 0.0
    v = values.clamp(min=lo, max=hi)
    mean = masked_mean(v, mask)
    return torch.sqrt(torch.clamp(masked_mean(v.square(), mask) - mean.square(), min=0.0)).item()


def _seq_stats(prefix: str, seq: torch.Tensor, centre: float) -> Dict[str, float]:
    return {f"{prefix}_seq_mean": seq.mean().item(), f"{prefix}_seq_std": seq.std().item() if seq.numel() > 1 else 0.0,
            f"{prefix}_seq_max": seq.max().item(), f"{prefix}_seq_min": seq.min().item(),
            f"{prefix}_seq_max_deviation": (seq - centre).abs().max().item()}


def is_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str, threshold: Any,
               batch_normalize: bool, group: Any = None) -> Tuple[torch.Tensor, Dict[str, float]]:
    """The importance weights (B, R), 0 on padding, and verl's rollout_is_* metrics (unprefixed).
    `group`: the process group whose ranks hold the rest of the batch (bypass mode's micro-batches on
    several data-parallel ranks); batch_normalize then divides by the mean over all of them."""
    if level not in IS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={level!r}: choose null, token or sequence")
    upper, lower = parse_is_threshold(threshold)
    if level == "token":
        log_for_metrics = log_ratio
        raw = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    else:
        log_for_metrics = masked_sum(log_ratio, mask, dim=-1).unsqueeze(-1)
        raw = torch.exp(torch.clamp(log_for_metrics, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask
    if lower is None:
        w = raw.clamp(max=upper)
    else:
        w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    low_bound = 1.0 / upper if lower is None else lower
    m: Dict[str, float] = {}
    keep = mask.bool()
    if level == "sequence":
        log_up = torch.log(torch.tensor(upper, device=w.device))
        log_lo = torch.log(torch.tensor(low_bound, device=w.device))
        m["rollout_is_max"] = torch.exp(torch.clamp(log_for_metrics.max(), max=SAFETY_BOUND)).item()
        m["rollout_is_min"] = torch.exp(log_for_metrics.min()).item()
        m["rollout_is_mean"] = masked_mean(w, mask).item()
        m["rollout_is_ratio_fraction_high"] = (log_for_metrics > log_up).float().mean().item()
        m["rollout_is_ratio_fraction_low"] = (log_for_metrics < log_lo).float().mean().item()
    else:
        m["rollout_is_mean"] = masked_mean(w, mask).item()
        m["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).float(), mask).item()
        m["rollout_is_ratio_fraction_low"] = masked_mean((raw < low_bound).float(), mask).item()
        m["rollout_is_max"] = w.masked_fill(~keep, float("-inf")).max().item()
        m["rollout_is_min"] = w.masked_fill(~keep, float("inf")).min().item()
    m["rollout_is_std"] = _std(w, mask, 0.0, upper)
    ess_w = w.clamp(min=0.0, max=upper)
    normed = ess_w / (masked_mean(ess_w, mask) + 1e-8)
    m["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normed.square(), mask).item()
    seq_w = masked_mean(w, mask, dim=-1)
    m.update(_seq_stats("rollout_is", seq_w, 1.0))
    raw_seq = masked_mean(raw, mask, dim=-1)
    m["rollout_is_seq_fraction_high"] = (raw_seq > upper).float().mean().item()
    m["rollout_is_seq_fraction_low"] = (raw_seq < low_bound).float().mean().item()
    if lower is not None:
        m["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).float(), mask).item()
    w = w.detach()
    if batch_normalize:
        if level == "token":
            mean = _global_masked_mean(w, mask, group)
        else:
            seq_valid = (mask.sum(-1) > 0).to(w.dtype)
            mean = _global_masked_mean(masked_mean(w, mask, dim=-1), seq_valid, group)
        if mean > 1e-8:
            w = w / mean
            m["rollout_is_batch_norm_factor"] = mean.item()
        else:
            m["rollout_is_batch_norm_factor"] = 1.0
    return w, m


def _global_masked_mean(values: torch.Tensor, mask: torch.Tensor, group: Any = None) -> torch.Tensor:
    """The masked mean over this rank's values (the driver holds the whole batch), or with `group` over
    every rank of it: the sums and counts are all-reduced, as verl's `distributed_masked_mean`
    (a collective: every rank of the group calls it for the same micro-batch index)."""
    if group is None:
        return (values * mask).sum() / mask.sum().clamp_min(1e-8)
    import torch.distributed as dist

    total = torch.stack([(values * mask).sum(), mask.to(values.dtype).sum()])
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    return total[0] / total[1]


def rejection_mask(log_ratio: torch.Tensor, mask: torch.Tensor, rollout_rs: str,
                   threshold: Any) -> Tuple[torch.Tensor, Dict[str, float]]:
    """The response mask with rejected tokens removed, and verl's rollout_rs_* metrics (unprefixed)."""
    specs = parse_rs(rollout_rs, threshold)
    lr = torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND)
    per_token = {"k1": -lr, "k2": 0.5 * lr ** 2, "k3": torch.exp(lr) - 1.0 - lr}
    keep_bool = mask.bool()
    seq_valid = mask.sum(-1) > 0
    combined = torch.ones_like(mask, dtype=log_ratio.dtype)
    m: Dict[str, float] = {}
    for opt, lower, upper in specs:
        kind = opt[-2:]
        tok = per_token[kind]
        is_k1 = kind == "k1"
        lo_t, up_t = (math.log(lower), math.log(upper)) if is_k1 else (0.0, upper)
        if opt.startswith("token"):
            seq = None
            stat = tok
        else:
            if opt.startswith("seq_sum"):
                seq = masked_sum(tok, mask, dim=-1)
            elif opt.startswith("seq_mean"):
                seq = masked_mean(tok, mask, dim=-1)
            else:
                mx = tok.masked_fill(~keep_bool, float("-inf")).max(dim=-1).values
                seq = torch.where(mx == float("-inf"), torch.zeros_like(mx), mx)
            stat = seq.unsqueeze(-1).expand_as(mask)
        ok = (stat <= up_t) & (stat >= lo_t) if is_k1 else stat <= up_t
        ok_f = ok.to(log_ratio.dtype)
        combined = combined * ok_f
        m.update(_rs_metrics(f"rollout_rs_{opt}", stat, seq, mask, seq_valid, up_t, lo_t, is_k1))
        m[f"rollout_rs_{opt}_masked_fraction"] = masked_mean(1 - ok_f, mask).item()
        seq_kept = (~((~ok) & keep_bool)).all(dim=-1)
        valid = seq_valid.float()
        m[f"rollout_rs_{opt}_seq_masked_fraction"] = (
            (((1.0 - seq_kept.to(log_ratio.dtype)) * valid).sum() / valid.sum()).item() if valid.sum() > 0 else 0.0)
    m["rollout_rs_masked_fraction"] = masked_mean(1 - combined, mask).item()
    m["rollout_rs_seq_masked_fraction"] = (~((combined > 0.5) & keep_bool) & keep_bool).any(-1).float().mean().item()
    return (mask * combined).to(mask.dtype), m


def _rs_metrics(prefix: str, stat: torch.Tensor, seq: Optional[torch.Tensor], mask: torch.Tensor,
                seq_valid: torch.Tensor, upper: float, lower: float, use_lower: bool) -> Dict[str, float]:
    keep = mask.bool()
    seq_values = (seq if seq is not None else masked_mean(stat, mask, dim=-1))[seq_valid]
    m: Dict[str, float] = {f"{prefix}_mean": masked_mean(stat, mask).item()}
    by_seq = seq is not None and seq_values.numel() > 0
    if by_seq:
        m[f"{prefix}_max"], m[f"{prefix}_min"] = seq_values.max().item(), seq_values.min().item()
        m[f"{prefix}_fraction_high"] = (seq_values > upper).float().mean().item()
        m[f"{prefix}_fraction_low"] = (seq_values < lower).float().mean().item() if use_lower else 0.0
    else:
        m[f"{prefix}_max"] = stat.masked_fill(~keep, float("-inf")).max().item()
        m[f"{prefix}_min"] = stat.masked_fill(~keep, float("inf")).min().item()
        m[f"{prefix}_fraction_high"] = masked_mean((stat > upper).float(), mask).item()
        m[f"{prefix}_fraction_low"] = masked_mean((stat < lower).float(), mask).item() if use_lower else 0.0
    m[f"{prefix}_std"] = _std(stat, mask, lower if use_lower else 0.0, upper)
    if seq_values.numel() > 0:
        m.update(_seq_stats(prefix, seq_values, 0.0))
        m[f"{prefix}_seq_fraction_high"] = (seq_values > upper).float().mean().item()
        if use_lower:
            m[f"{prefix}_seq_fraction_low"] = (seq_values < lower).float().mean().item()
    else:
        m.update({f"{prefix}_seq_{k}": 0.0 for k in ("mean", "std", "max", "min", "max_deviation",
                                                       "fraction_high", "fraction_low")})
    return m


def offpolicy_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                      mask: torch.Tensor) -> Dict[str, float]:
    """verl's off-policy diagnostics (unprefixed): kl, k3_kl, training/rollout ppl, log_ppl_diff*, ppl_ratio,
    chi2_token, chi2_seq."""
    m: Dict[str, float] = {}
    train_lp = masked_mean(old_log_prob, mask, dim=-1)
    m["training_ppl"] = torch.exp(-train_lp).mean().item()
    m["training_log_ppl"] = (-train_lp).mean().item()
    m["kl"] = masked_mean(rollout_log_prob - old_log_prob, mask).item()
    lr = old_log_prob - rollout_log_prob
    m["k3_kl"] = masked_mean(torch.exp(lr) - lr - 1, mask).item()
    roll_lp = masked_mean(rollout_log_prob, mask, dim=-1)
    m["rollout_ppl"] = torch.exp(-roll_lp).mean().item()
    m["rollout_log_ppl"] = (-roll_lp).mean().item()
    diff = roll_lp - train_lp
    m["log_ppl_diff"] = diff.mean().item()
    m["log_ppl_abs_diff"] = diff.abs().mean().item()
    m["log_ppl_diff_max"] = diff.max().item()
    m["log_ppl_diff_min"] = diff.min().item()
    m["ppl_ratio"] = torch.exp(diff).mean().item()
    rho = torch.exp(torch.clamp(lr, -SAFETY_BOUND, SAFETY_BOUND))
    m["chi2_token"] = (masked_mean(rho.square(), mask) - 1.0).item()
    seq_sum = torch.clamp(masked_sum(lr, mask, dim=-1), -SAFETY_BOUND, SAFETY_BOUND)
    m["chi2_seq"] = (torch.exp(2.0 * seq_sum).mean() - 1.0).item()
    return m


def compute(rc: Any, old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor,
            group: Any = None) -> Tuple[Optional[torch.Tensor], torch.Tensor, Dict[str, float]]:
    """(importance weights or None, response mask after rejection, metrics prefixed rollout_corr/).
    `group`: see is_weights (used only by rollout_is_batch_normalize)."""
    if not response_mask.any():
        raise ValueError("rollout correction: the batch has no response token")
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(f"rollout correction: old_log_probs {tuple(old_log_prob.shape)}, rollout_log_probs "
                         f"{tuple(rollout_log_prob.shape)} and response_mask {tuple(response_mask.shape)} differ")
    log_ratio = old_log_prob - rollout_log_prob
    metrics: Dict[str, float] = {}
    weights = None
    if rc.rollout_is is not None and rc.rollout_is_threshold is not None:
        weights, is_m = is_weights(log_ratio, response_mask, rc.rollout_is, rc.rollout_is_threshold,
                                   bool(rc.rollout_is_batch_normalize), group)
        metrics.update(is_m)
    new_mask = response_mask.clone()
    if rc.rollout_rs is not None:
        new_mask, rs_m = rejection_mask(log_ratio, response_mask, rc.rollout_rs, rc.rollout_rs_threshold)
        metrics.update(rs_m)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    return weights, new_mask, {f"rollout_corr/{k}": v for k, v in metrics.items()}


def apply_to_batch(rc: Any, batch: Dict[str, Any]) -> Dict[str, float]:
    """Where verl applies it (before the advantages): the batch's response_mask loses the rejected tokens
    and, with rollout_is set, gains `rollout_is_weights`, which the actor multiplies into the policy loss."""
    if "rollout_log_probs" not in batch:
        raise ValueError("algorithm.rollout_correction needs the rollout's log-probs: set "
                         "actor_rollout_ref.rollout.calculate_log_probs=True")
    mask = batch["response_mask"]
    weights, new_mask, metrics = compute(rc, batch["old_log_probs"].float(), batch["rollout_log_probs"].float(),
                                         mask.float())
    batch["response_mask"] = new_mask.to(mask.dtype)
    if weights is not None:
        batch["rollout_is_weights"] = weights
    return metrics


def bypass_policy_loss(rc: Any, x: PolicyLossInput,
                       group: Any = None) -> Tuple[Dict[str, torch.Tensor], Dict[str, float]]:
    """verl's bypass mode (`compute_policy_loss_bypass_mode`): the rollout's log-probs are the old ones
    (`x.old_log_prob`); the weights and the rejection are measured per micro-batch between the current
    policy and the rollout's, then loss_type=ppo_clip trains PPO's clipped loss against the rollout
    log-probs on the kept tokens (no weights: the ratio is the correction), reinforce trains
    -A * w * log_prob. `x.options` and `x.rollout_is_weights` are not read (the weights are this
    function's own). With rollout_is_batch_normalize the weights are divided by their mean over the
    micro-batches of this index on every rank of `group` (the engine's data-parallel group), as verl does.
    Returns ({"pg_loss", <verl's metric names without "actor/">}, rollout_corr/* metrics)."""
    rollout_log_prob, log_prob = x.old_log_prob, x.log_prob
    with torch.no_grad():
        weights, mask, metrics = compute(rc, log_prob.detach(), rollout_log_prob, x.response_mask, group)
    if rc.loss_type == "reinforce":
        pg_losses = -x.advantages * log_prob * (weights if weights is not None else 1.0)
        pg = {"pg_loss": agg_loss(pg_losses, mask, x.loss_agg_mode, x.global_batch_size, x.global_token_num),
              "ppo_kl": masked_mean(-(log_prob - rollout_log_prob), mask)}
    elif rc.loss_type == "ppo_clip":
        kept = dataclasses.replace(x, response_mask=mask, rollout_is_weights=None)
        pg = policy_losses.compute_policy_loss_vanilla(kept)
    else:
        raise ValueError(f"algorithm.rollout_correction.loss_type={rc.loss_type!r}: choose ppo_clip or reinforce")
    return pg, metrics
