"""verl's policy losses beyond PPO's, GSPO's and GMPO's, registered in trainer/core_algos.py's registry.

Each is defined as verl defines it (`verl/trainer/ppo/core_algos.py`), tensors (B, R), and returns
{"pg_loss": scalar, <metric>: scalar, ...} with verl's metric names less the "actor/" prefix (the
actor adds it): a loss that reports no clip fraction (gpg, kl_cov, dro) has none here either.
Settings beyond the clip ratios come from the actor config as keyword arguments named in each
registration's `reads` (actor.tau_pos/tau_neg, actor.policy_loss.clip_cov_ratio, ...).
tests/py/test_verl_core_algos_table.py compares every loss and its metrics with verl's own.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from verl_lite.trainer.core_algos import agg_loss, masked_mean, register_policy_loss

Out = Dict[str, torch.Tensor]
# settings of a loss that does not use the dual clip / the chosen aggregation (as in verl)
NO_DUAL_CLIP = ("clip_ratio_c",)
OWN_AGGREGATION = ("clip_ratio_c", "loss_agg_mode")


def _log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """log(pi / pi_old) clamped to +-20 (exp of it stays finite), as verl's losses take it."""
    return torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)


def _dppo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_c, loss_agg_mode, global_batch_size,
          global_token_num, valid: torch.Tensor) -> Out:
    """DPPO's shared tail: -A * sg(min(ratio, clip_ratio_c)) * log_prob on the tokens `valid` keeps."""
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    truncated = torch.clamp(ratio, max=clip_ratio_c).detach()
    valid = valid.detach().float()
    pg_losses = -advantages * truncated * log_prob * valid
    return {
        "pg_loss": agg_loss(pg_losses, response_mask, loss_agg_mode, global_batch_size, global_token_num),
        "pg_clipfrac": masked_mean(1.0 - valid, response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
        "pg_clipfrac_lower": masked_mean((ratio > clip_ratio_c).float() * valid, response_mask),
    }


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                                clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode="token-mean",
                                global_batch_size=None, global_token_num=None) -> Out:
    """DPPO-Binary-TV (https://arxiv.org/abs/2602.04879): a policy gradient that drops the tokens whose
    probability moved more than clip_ratio_high up (A > 0) or clip_ratio_low down (A <= 0), weighted by
    the ratio truncated at clip_ratio_c (a truncated importance weight, no gradient through it)."""
    moved = torch.exp(log_prob) - torch.exp(old_log_prob)
    valid = torch.where(advantages > 0, moved <= clip_ratio_high, moved >= -clip_ratio_low)
    return _dppo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_c, loss_agg_mode, global_batch_size,
                 global_token_num, valid)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                                clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode="token-mean",
                                global_batch_size=None, global_token_num=None) -> Out:
    """DPPO-Binary-KL: as dppo_tv, with the binary KL between the old and new probability of the token
    as the divergence (bounded by clip_ratio_high when it rose with A > 0, clip_ratio_low when it fell)."""
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8))
    valid = torch.where(advantages > 0, (binary_kl <= clip_ratio_high) | (prob <= old_prob),
                        (binary_kl <= clip_ratio_low) | (prob >= old_prob))
    return _dppo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_c, loss_agg_mode, global_batch_size,
                 global_token_num, valid)


@register_policy_loss("sapo", unused=OWN_AGGREGATION, reads=("tau_pos", "tau_neg"))
def compute_policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                             clip_ratio_high=0.2, global_batch_size=None, global_token_num=None, *,
                             tau_pos: float = 1.0, tau_neg: float = 1.05) -> Out:
    """SAPO (https://arxiv.org/abs/2511.20347): a smooth gate instead of the clip,
    loss = -A * sigmoid(tau * (ratio - 1)) * 4 / tau with tau = actor.tau_pos for A > 0 else tau_neg,
    always aggregated as seq-mean-token-mean (as verl); no clip ratios, so no clip fractions (0)."""
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    taus = torch.where(advantages > 0, torch.as_tensor(tau_pos, dtype=advantages.dtype),
                       torch.as_tensor(tau_neg, dtype=advantages.dtype))
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    pg_loss = agg_loss(-gates * advantages, response_mask, "seq-mean-token-mean", global_batch_size, global_token_num)
    zero = torch.zeros((), dtype=pg_loss.dtype)
    return {"pg_loss": pg_loss, "pg_clipfrac": zero, "ppo_kl": masked_mean(-log_ratio, response_mask),
            "pg_clipfrac_lower": zero}


@register_policy_loss("gpg", unused=NO_DUAL_CLIP)
def compute_policy_loss_gpg(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                            clip_ratio_high=0.2, loss_agg_mode="token-mean", global_batch_size=None,
                            global_token_num=None) -> Out:
    """GPG (https://arxiv.org/abs/2504.02546): the plain policy gradient -A * log_prob, no ratio; verl
    reports no metric for it."""
    return {"pg_loss": agg_loss(-log_prob * advantages, response_mask, loss_agg_mode, global_batch_size,
                                global_token_num)}


@register_policy_loss("clip_cov", unused=NO_DUAL_CLIP, reads=("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"))
def compute_policy_loss_clip_cov(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                                 clip_ratio_high=0.2, loss_agg_mode="token-mean", global_batch_size=None,
                                 global_token_num=None, *, clip_cov_ratio: float = 0.0002,
                                 clip_cov_lb: float = 1.0, clip_cov_ub: float = 5.0) -> Out:
    """Clip-Cov (https://arxiv.org/abs/2505.22617): PPO's clipped loss, with the gradient of a random
    clip_cov_ratio share of tokens (at least one) cut off, chosen among the unclipped tokens whose
    covariance (A - mean A) * (log_prob - mean log_prob) lies in (clip_cov_lb, clip_cov_ub).
    The draw uses torch's global generator (torch.randperm), as verl's."""
    if not clip_cov_ratio > 0:
        raise ValueError(f"policy_loss.clip_cov_ratio={clip_cov_ratio}: must be > 0")
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    valid = response_mask > 0
    cov = (advantages - masked_mean(advantages, response_mask)) * (
        log_prob - masked_mean(log_prob.detach(), response_mask))
    cov = cov.masked_fill(~valid | (torch.gt(clipped, unclipped) & valid), -torch.inf)
    budget = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    candidates = torch.nonzero((cov < clip_cov_ub) & (cov > clip_cov_lb) & valid)
    if len(candidates) > 0:
        candidates = candidates[torch.randperm(len(candidates))[:min(budget, len(candidates))]]
    keep = torch.ones_like(advantages)
    keep[candidates[:, 0], candidates[:, 1]] = 0
    pg_losses = torch.maximum(unclipped, clipped) * keep
    return {"pg_loss": agg_loss(pg_losses, response_mask, loss_agg_mode, global_batch_size, global_token_num),
            "pg_clipfrac": masked_mean((keep == 0).float(), response_mask),
            "ppo_kl": masked_mean(-log_ratio, response_mask)}


@register_policy_loss("kl_cov", unused=NO_DUAL_CLIP, reads=("kl_cov_ratio", "ppo_kl_coef"))
def compute_policy_loss_kl_cov(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                               clip_ratio_high=0.2, loss_agg_mode="token-mean", global_batch_size=None,
                               global_token_num=None, *, kl_cov_ratio: float = 0.0002,
                               ppo_kl_coef: float = 0.1) -> Out:
    """KL-Cov (https://arxiv.org/abs/2505.22617): the unclipped surrogate -A * ratio, plus
    ppo_kl_coef * |log-ratio| on the kl_cov_ratio share of tokens (at least one) with the largest
    covariance (A - mean A) * (log_prob - mean log_prob). Its ppo_kl metric is the mean |log-ratio|."""
    if not kl_cov_ratio > 0:
        raise ValueError(f"policy_loss.kl_cov_ratio={kl_cov_ratio}: must be > 0")
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    surrogate = -advantages * ratio
    penalised = surrogate + ppo_kl_coef * log_ratio.abs()
    valid = response_mask > 0
    flat_valid = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    if len(flat_valid) > 0:
        adv, logp = advantages[valid].detach().reshape(-1), log_prob[valid].detach().reshape(-1)
        cov = (adv - adv.mean()) * (logp - logp.mean())
        top = flat_valid[torch.topk(cov, max(1, int(len(cov) * kl_cov_ratio)), largest=True).indices]
        chosen = torch.zeros(valid.numel(), dtype=torch.bool)
        chosen[top] = True
        surrogate = torch.where(chosen.view_as(valid), penalised, surrogate)
    return {"pg_loss": agg_loss(surrogate, response_mask, loss_agg_mode, global_batch_size, global_token_num),
            "ppo_kl": masked_mean(log_ratio.abs(), response_mask)}


@register_policy_loss("dro", unused=NO_DUAL_CLIP, reads=("dro_beta",))
def compute_policy_loss_dro(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                            clip_ratio_high=0.2, loss_agg_mode="token-mean", global_batch_size=None,
                            global_token_num=None, *, dro_beta: Optional[float] = None) -> Out:
    """DRO: -(A * log_prob - dro_beta / 2 * log-ratio^2), a policy gradient with a quadratic pull
    towards the old policy; policy_loss.dro_beta must be set > 0."""
    if dro_beta is None or not dro_beta > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.dro_beta={dro_beta}: loss_mode=dro needs a "
                         "positive beta (e.g. 0.1)")
    log_ratio = log_prob - old_log_prob
    pg_losses = -(log_prob * advantages - 0.5 * dro_beta * log_ratio.square())
    return {"pg_loss": agg_loss(pg_losses, response_mask, loss_agg_mode, global_batch_size, global_token_num),
            "ppo_kl": masked_mean(-log_ratio, response_mask)}


@register_policy_loss("cispo", unused=NO_DUAL_CLIP)
def compute_policy_loss_cispo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low=0.2,
                              clip_ratio_high=0.2, loss_agg_mode="token-mean", global_batch_size=None,
                              global_token_num=None) -> Out:
    """CISPO (https://arxiv.org/abs/2506.13585): -sg(clip(ratio, 1 - low, 1 + high)) * A * log_prob:
    the clipped ratio weights every token's gradient instead of zeroing the clipped ones."""
    log_ratio = _log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    pg_losses = -clipped.detach() * advantages * log_prob
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, global_batch_size, global_token_num)
    return {"pg_loss": pg_loss, "pg_clipfrac": masked_mean(torch.ne(ratio, clipped).float(), response_mask),
            "ppo_kl": masked_mean(-log_ratio, response_mask), "pg_clipfrac_lower": torch.zeros((), dtype=pg_loss.dtype)}
