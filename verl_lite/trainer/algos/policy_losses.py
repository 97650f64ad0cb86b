"""The policy losses (`actor_rollout_ref.actor.policy_loss.loss_mode`, verl's names): their one input
type, their registry and every loss.

Each loss is defined as verl defines it (`verl/trainer/ppo/core_algos.py`), takes one `PolicyLossInput`
(tensors (B, R) and the actor's settings) and returns {"pg_loss": scalar, <metric>: scalar, ...} with
verl's metric names less the "actor/" prefix (the actor adds it): a loss that reports no clip fraction
(gpg, kl_cov, dro) has none here either. A loss reads the settings it uses and ignores the others, as
verl's do (gspo, geo_mean and sapo aggregate their own way, only vanilla and the dppo losses use the
dual clip); the settings beyond the clip ratios come from the actor config in `options`, by the names
each registration `reads` (actor.tau_pos/tau_neg, actor.policy_loss.clip_cov_ratio, ...).
tests/py/test_verl_core_algos_table.py compares every loss and its metrics with verl's own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from verl_lite.config.choices import REFUSED_POLICY_LOSSES
from verl_lite.decisions.rollout_correction import IS_WEIGHTED_LOSSES
from verl_lite.trainer.core_algos import agg_loss, masked_mean

Out = Dict[str, torch.Tensor]


@dataclass(frozen=True, eq=False)
class PolicyLossInput:
    """What every policy loss takes. Tensors (B, R): the log-probs of the responses under the policy that
    sampled them (`old_log_prob`, no gradient) and under the one being trained (`log_prob`), the
    advantages and the response mask. clip_ratio_low/high: PPO's clip, ratio in [1 - low, 1 + high];
    clip_ratio_c: the dual-clip bound; loss_agg_mode: `agg_loss`'s mode; global_batch_size /
    global_token_num: the mini-batch's counts, so micro-batch losses add up (`agg_loss`); options: the
    further settings a loss `reads` (`policy_loss_options(actor)`), a loss using its own default, verl's,
    for one that is absent; rollout_is_weights (B, R): algorithm.rollout_correction's importance weights,
    multiplied into the per-token loss by the losses that take them (IS_WEIGHTED_LOSSES)."""

    old_log_prob: torch.Tensor
    log_prob: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    global_batch_size: Optional[int] = None
    global_token_num: Optional[int] = None
    options: Mapping[str, Any] = field(default_factory=dict)
    rollout_is_weights: Optional[torch.Tensor] = None

    def agg(self, loss_mat: torch.Tensor, loss_agg_mode: Optional[str] = None) -> torch.Tensor:
        """`agg_loss` of a (B, R) per-token loss over the response mask with the global counts, in
        `loss_agg_mode` (this input's when None; a loss that aggregates its own way names its mode)."""
        mode = self.loss_agg_mode if loss_agg_mode is None else loss_agg_mode
        return agg_loss(loss_mat, self.response_mask, mode, self.global_batch_size, self.global_token_num)


# ---------------------------------------------------------------------------- the registry

# actor.policy_loss.loss_mode -> the loss, as verl's `register_policy_loss` / `get_policy_loss_fn`.
PolicyLoss = Callable[[PolicyLossInput], Out]
POLICY_LOSSES: Dict[str, PolicyLoss] = {}
READS: Dict[str, Tuple[str, ...]] = {}


def register_policy_loss(name: str, reads: Tuple[str, ...] = ()) -> Callable[[PolicyLoss], PolicyLoss]:
    """Register a policy loss under `name` (a user's own loss too; a name taken twice is refused): a function
    of one `PolicyLossInput`. `reads`: the names in its `options` it takes (see `policy_loss_options`);
    `compute_policy_loss` hands it those and no others."""
    def register(fn: PolicyLoss) -> PolicyLoss:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is registered twice ({POLICY_LOSSES[name].__name__}, {fn.__name__})")
        POLICY_LOSSES[name], READS[name] = fn, tuple(reads)
        return fn
    return register


def policy_loss_options(actor) -> Dict[str, Any]:
    """The settings beyond the clip ratios that the chosen loss (actor.policy_loss.loss_mode) reads, by the
    names it takes: actor.tau_pos/tau_neg (sapo), actor.policy_loss.clip_cov_ratio/clip_cov_lb/clip_cov_ub
    (clip_cov), kl_cov_ratio/ppo_kl_coef (kl_cov), dro_beta (dro)."""
    pl = actor.policy_loss
    sources = {"tau_pos": lambda: float(actor.tau_pos), "tau_neg": lambda: float(actor.tau_neg),
               "clip_cov_ratio": lambda: float(pl.clip_cov_ratio), "clip_cov_lb": lambda: float(pl.clip_cov_lb),
               "clip_cov_ub": lambda: float(pl.clip_cov_ub), "kl_cov_ratio": lambda: float(pl.kl_cov_ratio),
               "ppo_kl_coef": lambda: float(pl.ppo_kl_coef),
               "dro_beta": lambda: None if pl.dro_beta is None else float(pl.dro_beta)}
    return {name: sources[name]() for name in READS.get(pl.loss_mode, ()) if name in sources}


def compute_policy_loss(loss_mode: str, x: PolicyLossInput) -> Out:
    """The policy loss registered as `actor.policy_loss.loss_mode` (verl's names) of `x`, whose `options`
    are narrowed to the ones that loss reads. verl's losses verl_lite cannot run are refused with why, and
    so are rollout_is_weights for a loss that does not take them (one not in IS_WEIGHTED_LOSSES)."""
    if loss_mode not in POLICY_LOSSES:
        if loss_mode in REFUSED_POLICY_LOSSES:
            raise ValueError(f"policy_loss.loss_mode={loss_mode!r} is not supported by verl_lite: "
                             f"{REFUSED_POLICY_LOSSES[loss_mode]}")
        raise ValueError(f"policy_loss.loss_mode={loss_mode!r} is not supported: choose one of {', '.join(POLICY_LOSSES)}")
    if x.rollout_is_weights is not None and loss_mode not in IS_WEIGHTED_LOSSES:
        raise ValueError(f"algorithm.rollout_correction.rollout_is with policy_loss.loss_mode={loss_mode!r} is not "
                         f"supported: use one of {', '.join(IS_WEIGHTED_LOSSES)}, or rollout_is=null")
    options = {name: x.options[name] for name in READS[loss_mode] if name in x.options}
    return POLICY_LOSSES[loss_mode](dataclasses.replace(x, options=options))


def _log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """log(pi / pi_old) clamped to +-20 (exp of it stays finite), as verl's losses take it."""
    return torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)


# ---------------------------------------------------------------------------- PPO, GSPO, GMPO


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(x: PolicyLossInput) -> Out:
    """PPO clipped surrogate with dual clip (https://arxiv.org/abs/1912.09729), tensors (B, R).

    ratio = exp(clamp(log_prob - old_log_prob, -20, 20)); per token
    loss = max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high)), and for A < 0 it is further capped
    at -A * clip_ratio_c so one very unlikely token cannot dominate the batch; times rollout_is_weights
    when given. Returns pg_loss (aggregated), pg_clipfrac (share of tokens where the clip was active),
    ppo_kl (masked mean of old - new log-prob) and pg_clipfrac_lower (share capped by the dual clip).
    """
    if not x.clip_ratio_c > 1.0:
        raise ValueError(
            f"clip_ratio_c={x.clip_ratio_c}: the dual-clip bound must be greater than 1.0 (verl's default is 3.0)"
        )
    advantages, response_mask = x.advantages, x.response_mask
    log_ratio = _log_ratio(x.log_prob, x.old_log_prob)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)

    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - x.clip_ratio_low, 1 + x.clip_ratio_high)
    clip_max = torch.maximum(unclipped, clipped)
    pg_clipfrac = masked_mean(torch.gt(clipped, unclipped).float(), response_mask)

    dual_bound = -advantages * x.clip_ratio_c
    dual_clipped = torch.minimum(dual_bound, clip_max)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_max, dual_bound).float() * (advantages < 0).float(), response_mask)

    pg_losses = torch.where(advantages < 0, dual_clipped, clip_max)
    if x.rollout_is_weights is not None:
        pg_losses = pg_losses * x.rollout_is_weights
    pg_loss = x.agg(pg_losses)
    return {"pg_loss": pg_loss, "pg_clipfrac": pg_clipfrac, "ppo_kl": ppo_kl, "pg_clipfrac_lower": pg_clipfrac_lower}


@register_policy_loss("gspo")
def compute_policy_loss_gspo(x: PolicyLossInput) -> Out:
    """GSPO (https://arxiv.org/abs/2507.18071), as verl's `compute_policy_loss_gspo`, tensors (B, R).

    The sequence ratio s_i = exp(mean over the response of (log_prob - old)); each token carries
    s_i with the gradient of its own log-prob (log s_it = sg[log s_i] + log_prob - sg[log_prob],
    clamped at 10). Per token max(-A * s_it, -A * clip(s_it, 1 - low, 1 + high)), times
    rollout_is_weights when given, always aggregated as seq-mean-token-mean (verl ignores
    loss_agg_mode here too); no dual clip.
    """
    log_prob, advantages, response_mask = x.log_prob, x.advantages, x.response_mask
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - x.old_log_prob
    seq_log_ratio = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    log_seq_ratio = torch.clamp(log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1), max=10.0)
    ratio = torch.exp(log_seq_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - x.clip_ratio_low, 1 + x.clip_ratio_high)
    pg_losses = torch.maximum(unclipped, clipped)
    if x.rollout_is_weights is not None:
        pg_losses = pg_losses * x.rollout_is_weights
    pg_loss = x.agg(pg_losses, "seq-mean-token-mean")
    return {
        "pg_loss": pg_loss,
        "pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).float(), response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
        "pg_clipfrac_lower": torch.zeros((), dtype=pg_loss.dtype),
    }


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(x: PolicyLossInput) -> Out:
    """GMPO (https://arxiv.org/abs/2507.20673), as verl's `compute_policy_loss_geo_mean`, tensors (B, R).

    Token log-ratios d = log_prob - old are clipped in log space to [-low, high] on the side that
    the advantage's sign makes pessimistic (sgn(A) * min(sgn(A) * d, sgn(A) * clip(d))); the sequence
    ratio is the geometric mean exp(mean of those over the response), the sequence advantage the mean
    of A over it, and the loss is -A_seq * ratio averaged over sequences (over `global_batch_size`
    when given, so micro-batches and data-parallel ranks add up to the mini-batch mean).
    loss_agg_mode does not apply (as in verl).
    """
    advantages, response_mask = x.advantages, x.response_mask
    mask = response_mask.to(x.log_prob.dtype)
    log_ratio = x.log_prob - x.old_log_prob
    sign = torch.sign(advantages)
    clamped = torch.clamp(log_ratio, -x.clip_ratio_low, x.clip_ratio_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    tokens = mask.sum(dim=-1)
    ratio = torch.exp((pessimistic * mask).sum(dim=-1) / (tokens + 1e-8))
    seq_advantage = (advantages * mask).sum(dim=-1) / (tokens + 1e-8)
    pg_losses = -seq_advantage * ratio
    denom = pg_losses.shape[0] if x.global_batch_size is None else x.global_batch_size
    was_clipped = torch.ne(log_ratio, clamped).float()
    return {
        "pg_loss": pg_losses.sum() / denom,
        "pg_clipfrac": masked_mean(was_clipped * (advantages > 0).float(), response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
        "pg_clipfrac_lower": masked_mean(was_clipped * (advantages < 0).float(), response_mask),
    }


# ---------------------------------------------------------------------------- verl's further losses


def _dppo(x: PolicyLossInput, valid: torch.Tensor) -> Out:
    """DPPO's shared tail: -A * sg(min(ratio, clip_ratio_c)) * log_prob on the tokens `valid` keeps."""
    log_ratio = _log_ratio(x.log_prob, x.old_log_prob)
    ratio = torch.exp(log_ratio)
    truncated = torch.clamp(ratio, max=x.clip_ratio_c).detach()
    valid = valid.detach().float()
    pg_losses = -x.advantages * truncated * x.log_prob * valid
    return {
        "pg_loss": x.agg(pg_losses),
        "pg_clipfrac": masked_mean(1.0 - valid, x.response_mask),
        "ppo_kl": masked_mean(-log_ratio, x.response_mask),
        "pg_clipfrac_lower": masked_mean((ratio > x.clip_ratio_c).float() * valid, x.response_mask),
    }


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(x: PolicyLossInput) -> Out:
    """DPPO-Binary-TV (https://arxiv.org/abs/2602.04879): a policy gradient that drops the tokens whose
    probability moved more than clip_ratio_high up (A > 0) or clip_ratio_low down (A <= 0), weighted by
    the ratio truncated at clip_ratio_c (a truncated importance weight, no gradient through it)."""
    moved = torch.exp(x.log_prob) - torch.exp(x.old_log_prob)
    valid = torch.where(x.advantages > 0, moved <= x.clip_ratio_high, moved >= -x.clip_ratio_low)
    return _dppo(x, valid)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(x: PolicyLossInput) -> Out:
    """DPPO-Binary-KL: as dppo_tv, with the binary KL between the old and new probability of the token
    as the divergence (bounded by clip_ratio_high when it rose with A > 0, clip_ratio_low when it fell)."""
    old_log_prob, log_prob = x.old_log_prob, x.log_prob
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8))
    valid = torch.where(x.advantages > 0, (binary_kl <= x.clip_ratio_high) | (prob <= old_prob),
                        (binary_kl <= x.clip_ratio_low) | (prob >= old_prob))
    return _dppo(x, valid)


@register_policy_loss("sapo", reads=("tau_pos", "tau_neg"))
def compute_policy_loss_sapo(x: PolicyLossInput) -> Out:
    """SAPO (https://arxiv.org/abs/2511.20347): a smooth gate instead of the clip,
    loss = -A * sigmoid(tau * (ratio - 1)) * 4 / tau with tau = actor.tau_pos (default 1.0) for A > 0 else
    tau_neg (1.05), always aggregated as seq-mean-token-mean (as verl); no clip ratios, so no clip
    fractions (0)."""
    tau_pos, tau_neg = x.options.get("tau_pos", 1.0), x.options.get("tau_neg", 1.05)
    advantages = x.advantages
    log_ratio = _log_ratio(x.log_prob, x.old_log_prob)
    ratio = torch.exp(log_ratio)
    taus = torch.where(advantages > 0, torch.as_tensor(tau_pos, dtype=advantages.dtype),
                       torch.as_tensor(tau_neg, dtype=advantages.dtype))
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    pg_loss = x.agg(-gates * advantages, "seq-mean-token-mean")
    zero = torch.zeros((), dtype=pg_loss.dtype)
    return {"pg_loss": pg_loss, "pg_clipfrac": zero, "ppo_kl": masked_mean(-log_ratio, x.response_mask),
            "pg_clipfrac_lower": zero}


@register_policy_loss("gpg")
def compute_policy_loss_gpg(x: PolicyLossInput) -> Out:
    """GPG (https://arxiv.org/abs/2504.02546): the plain policy gradient -A * log_prob, no ratio; verl
    reports no metric for it."""
    return {"pg_loss": x.agg(-x.log_prob * x.advantages)}


def _cov_surrogate(x: PolicyLossInput) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-ratio, ratio, the unclipped surrogate -A * ratio) of the covariance losses, clip_cov and kl_cov
    (verl's: the log-ratio unclamped)."""
    log_ratio = x.log_prob - x.old_log_prob
    ratio = torch.exp(log_ratio)
    return log_ratio, ratio, -x.advantages * ratio


@register_policy_loss("clip_cov", reads=("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"))
def compute_policy_loss_clip_cov(x: PolicyLossInput) -> Out:
    """Clip-Cov (https://arxiv.org/abs/2505.22617): PPO's clipped loss, with the gradient of a random
    clip_cov_ratio share of tokens (at least one; default 0.0002) cut off, chosen among the unclipped
    tokens whose covariance (A - mean A) * (log_prob - mean log_prob) lies in (clip_cov_lb, clip_cov_ub)
    (defaults 1.0, 5.0). The draw uses torch's global generator (torch.randperm), as verl's."""
    clip_cov_ratio = x.options.get("clip_cov_ratio", 0.0002)
    clip_cov_lb, clip_cov_ub = x.options.get("clip_cov_lb", 1.0), x.options.get("clip_cov_ub", 5.0)
    if not clip_cov_ratio > 0:
        raise ValueError(f"policy_loss.clip_cov_ratio={clip_cov_ratio}: must be > 0")
    log_prob, advantages, response_mask = x.log_prob, x.advantages, x.response_mask
    log_ratio, ratio, unclipped = _cov_surrogate(x)
    clipped = -advantages * torch.clamp(ratio, 1 - x.clip_ratio_low, 1 + x.clip_ratio_high)
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
    return {"pg_loss": x.agg(pg_losses), "pg_clipfrac": masked_mean((keep == 0).float(), response_mask),
            "ppo_kl": masked_mean(-log_ratio, response_mask)}


@register_policy_loss("kl_cov", reads=("kl_cov_ratio", "ppo_kl_coef"))
def compute_policy_loss_kl_cov(x: PolicyLossInput) -> Out:
    """KL-Cov (https://arxiv.org/abs/2505.22617): the unclipped surrogate -A * ratio, plus
    ppo_kl_coef (default 0.1) * |log-ratio| on the kl_cov_ratio (0.0002) share of tokens (at least one)
    with the largest covariance (A - mean A) * (log_prob - mean log_prob). Its ppo_kl metric is the mean
    |log-ratio|."""
    kl_cov_ratio, ppo_kl_coef = x.options.get("kl_cov_ratio", 0.0002), x.options.get("ppo_kl_coef", 0.1)
    if not kl_cov_ratio > 0:
        raise ValueError(f"policy_loss.kl_cov_ratio={kl_cov_ratio}: must be > 0")
    log_prob, advantages, response_mask = x.log_prob, x.advantages, x.response_mask
    log_ratio, _, surrogate = _cov_surrogate(x)
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
    return {"pg_loss": x.agg(surrogate), "ppo_kl": masked_mean(log_ratio.abs(), response_mask)}


@register_policy_loss("dro", reads=("dro_beta",))
def compute_policy_loss_dro(x: PolicyLossInput) -> Out:
    """DRO: -(A * log_prob - dro_beta / 2 * log-ratio^2), a policy gradient with a quadratic pull
    towards the old policy; policy_loss.dro_beta must be set > 0."""
    dro_beta = x.options.get("dro_beta")
    if dro_beta is None or not dro_beta > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.dro_beta={dro_beta}: loss_mode=dro needs a "
                         "positive beta (e.g. 0.1)")
    log_ratio = x.log_prob - x.old_log_prob
    pg_losses = -(x.log_prob * x.advantages - 0.5 * dro_beta * log_ratio.square())
    return {"pg_loss": x.agg(pg_losses), "ppo_kl": masked_mean(-log_ratio, x.response_mask)}


@register_policy_loss("cispo")
def compute_policy_loss_cispo(x: PolicyLossInput) -> Out:
    """CISPO (https://arxiv.org/abs/2506.13585): -sg(clip(ratio, 1 - low, 1 + high)) * A * log_prob:
    the clipped ratio weights every token's gradient instead of zeroing the clipped ones."""
    log_ratio = _log_ratio(x.log_prob, x.old_log_prob)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - x.clip_ratio_low, 1 + x.clip_ratio_high)
    pg_losses = -clipped.detach() * x.advantages * x.log_prob
    pg_loss = x.agg(pg_losses)
    return {"pg_loss": pg_loss, "pg_clipfrac": masked_mean(torch.ne(ratio, clipped).float(), x.response_mask),
            "ppo_kl": masked_mean(-log_ratio, x.response_mask),
            "pg_clipfrac_lower": torch.zeros((), dtype=pg_loss.dtype)}
