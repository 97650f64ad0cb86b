"""The numbers under GRPO and PPO: masked statistics, loss aggregation, policy losses, KL estimators.

Pure torch functions, defined exactly as verl defines them (`verl/trainer/ppo/core_algos.py` and
`verl/utils/torch_functional.py`), so a run here and a verl run on the same batch produce the same
losses. The advantage estimators and the critic's value loss are in trainer/algos/. Shapes: B = responses in the batch, R = response length (padded), V = vocabulary size.

Micro-batching: `agg_loss` (and the losses built on it) take optional `global_batch_size` and
`global_token_num`. With them, the micro-batch losses of every data-parallel rank *add up* to the
loss of the whole mini-batch. An engine whose gradient all-reduce averages over DP ranks (FSDP)
multiplies each micro-batch loss by the DP world size to keep the sum (verl folds this factor into
its `agg_loss` as `dp_size`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch

from verl_lite.config.choices import KL_TYPES, LOSS_AGG_MODES
from verl_lite.decisions.rollout_correction import IS_WEIGHTED_LOSSES


# ---------------------------------------------------------------------------- masked statistics


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Sum of `values` where `mask` is non-zero; NaN/inf outside the mask do not leak in."""
    valid = torch.where(mask.bool(), values, torch.zeros_like(values))
    total = valid * mask
    return total.sum() if dim is None else total.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of `values` over the masked elements (an empty mask gives 0, not NaN: + 1e-8 as verl)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked elements; `unbiased` applies Bessel's n/(n-1) correction."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        if n < 2:
            raise ValueError(
                f"masked_var(unbiased=True) needs at least 2 masked elements, got {int(n.item())}: "
                "use a larger mini-batch or unbiased=False"
            )
        variance = variance * n / (n - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values - mean) / sqrt(var + 1e-8) with masked statistics; shift_mean=False keeps the mean."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


# ---------------------------------------------------------------------------- loss aggregation


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    global_batch_size: Optional[int] = None,
    global_token_num: Optional[int] = None,
) -> torch.Tensor:
    """Reduce a (B, R) loss matrix to a scalar.

    token-mean: masked sum / token count (`global_token_num` when given).
    token-sum: masked sum.
    seq-mean-token-sum: per-sequence token sums, averaged over sequences with at least one token
      (divided by `global_batch_size` when given).
    seq-mean-token-mean: per-sequence token means, averaged the same way.
    seq-mean-token-sum-norm: seq-mean-token-sum divided by R (loss_mask.shape[-1]), as verl 0.9
      (Dr. GRPO's constant normaliser): the sequence sums are averaged over the sequences too.
    """
    if loss_agg_mode == "token-mean":
        denom = loss_mask.sum() if global_token_num is None else global_token_num
        return masked_sum(loss_mat, loss_mask) / denom
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask)
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        seq_sums = masked_sum(loss_mat, loss_mask, dim=-1)
        tokens = loss_mask.sum(dim=-1)
        seq_values = seq_sums / (tokens + 1e-8) if loss_agg_mode == "seq-mean-token-mean" else seq_sums
        seq_mask = (tokens > 0).to(seq_values.dtype)  # fully masked sequences do not count
        denom = seq_mask.sum() if global_batch_size is None else global_batch_size
        loss = masked_sum(seq_values, seq_mask) / denom
        return loss / loss_mask.shape[-1] if loss_agg_mode == "seq-mean-token-sum-norm" else loss
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid modes: {', '.join(LOSS_AGG_MODES)}")


# ---------------------------------------------------------------------------- policy, entropy, KL

# actor.policy_loss.loss_mode -> the loss, as verl's `register_policy_loss` / `get_policy_loss_fn`.
# Every loss takes (old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high)
# and keyword arguments of `compute_policy_loss`; the settings a loss does not use (as in verl, where
# GSPO and GMPO ignore loss_agg_mode) are declared with its registration, not dropped unseen, and so are
# the further settings it reads from `options` (SAPO's tau_pos/tau_neg, Clip-Cov's clip_cov_ratio, ...).
# It returns {"pg_loss": ..., <verl's metric name without "actor/">: ...}.
PolicyLoss = Callable[..., Dict[str, torch.Tensor]]
POLICY_LOSSES: Dict[str, PolicyLoss] = {}
UNUSED_SETTINGS: Dict[str, Tuple[str, ...]] = {}
READS: Dict[str, Tuple[str, ...]] = {}


def register_policy_loss(name: str, unused: Tuple[str, ...] = (),
                         reads: Tuple[str, ...] = ()) -> Callable[[PolicyLoss], PolicyLoss]:
    """Register a policy loss under `name` (a user's own loss too; a name taken twice is refused).
    `unused`: the keyword arguments of `compute_policy_loss` that this loss does not read; `reads`: the
    names in `compute_policy_loss`'s `options` it takes as keyword arguments (see `policy_loss_options`)."""
    def register(fn: PolicyLoss) -> PolicyLoss:
        if name in POLICY_LOSSES:
            raise ValueError(f"policy loss {name!r} is registered twice ({POLICY_LOSSES[name].__name__}, {fn.__name__})")
        POLICY_LOSSES[name], UNUSED_SETTINGS[name], READS[name] = fn, tuple(unused), tuple(reads)
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


def compute_policy_loss(loss_mode: str, old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                        response_mask: torch.Tensor, clip_ratio_low: float = 0.2, clip_ratio_high: float = 0.2,
                        clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean",
                        global_batch_size: Optional[int] = None,
                        global_token_num: Optional[int] = None,
                        options: Optional[Mapping[str, Any]] = None,
                        rollout_is_weights: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """The policy loss registered as `actor.policy_loss.loss_mode` (verl's names). `options`: the further
    settings some losses read (`policy_loss_options(actor)`); a loss reading one that is absent uses its
    own default, which is verl's. `rollout_is_weights` (B, R): algorithm.rollout_correction's importance
    weights, multiplied into the per-token loss by the losses that take them (IS_WEIGHTED_LOSSES)."""
    if loss_mode not in POLICY_LOSSES:
        from verl_lite.config.choices import REFUSED_POLICY_LOSSES

        if loss_mode in REFUSED_POLICY_LOSSES:
            raise ValueError(f"policy_loss.loss_mode={loss_mode!r} is not supported by verl_lite: "
                             f"{REFUSED_POLICY_LOSSES[loss_mode]}")
        raise ValueError(f"policy_loss.loss_mode={loss_mode!r} is not supported: choose one of {', '.join(POLICY_LOSSES)}")
    settings = {"clip_ratio_c": clip_ratio_c, "loss_agg_mode": loss_agg_mode, "global_batch_size": global_batch_size,
                "global_token_num": global_token_num}
    for name in UNUSED_SETTINGS[loss_mode]:
        del settings[name]
    settings.update({name: options[name] for name in READS[loss_mode] if options is not None and name in options})
    if rollout_is_weights is not None:
        if loss_mode not in IS_WEIGHTED_LOSSES:
            raise ValueError(f"algorithm.rollout_correction.rollout_is with policy_loss.loss_mode={loss_mode!r} is not "
                             f"supported: use one of {', '.join(IS_WEIGHTED_LOSSES)}, or rollout_is=null")
        settings["rollout_is_weights"] = rollout_is_weights
    return POLICY_LOSSES[loss_mode](old_log_prob, log_prob, advantages, response_mask, clip_ratio_low,
                                    clip_ratio_high, **settings)




@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    global_batch_size: Optional[int] = None,
    global_token_num: Optional[int] = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """PPO clipped surrogate with dual clip (https://arxiv.org/abs/1912.09729), tensors (B, R).

    ratio = exp(clamp(log_prob - old_log_prob, -20, 20)); per token
    loss = max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high)), and for A < 0 it is further capped
    at -A * clip_ratio_c so one very unlikely token cannot dominate the batch.
    Returns pg_loss (aggregated), pg_clipfrac (share of tokens where the clip was active),
    ppo_kl (masked mean of old - new log-prob) and pg_clipfrac_lower (share capped by the dual clip).
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(
            f"clip_ratio_c={clip_ratio_c}: the dual-clip bound must be greater than 1.0 (verl's default is 3.0)"
        )
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    ppo_kl = masked_mean(-log_ratio, response_mask)

    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clip_max = torch.maximum(unclipped, clipped)
    pg_clipfrac = masked_mean(torch.gt(clipped, unclipped).float(), response_mask)

    dual_bound = -advantages * clip_ratio_c
    dual_clipped = torch.minimum(dual_bound, clip_max)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_max, dual_bound).float() * (advantages < 0).float(), response_mask)

    pg_losses = torch.where(advantages < 0, dual_clipped, clip_max)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, global_batch_size, global_token_num)
    return {"pg_loss": pg_loss, "pg_clipfrac": pg_clipfrac, "ppo_kl": ppo_kl, "pg_clipfrac_lower": pg_clipfrac_lower}


@register_policy_loss("gspo", unused=("clip_ratio_c", "loss_agg_mode"))
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    global_batch_size: Optional[int] = None,
    global_token_num: Optional[int] = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """GSPO (https://arxiv.org/abs/2507.18071), as verl's `compute_policy_loss_gspo`, tensors (B, R).

    The sequence ratio s_i = exp(mean over the response of (log_prob - old)); each token carries
    s_i with the gradient of its own log-prob (log s_it = sg[log s_i] + log_prob - sg[log_prob],
    clamped at 10). Per token max(-A * s_it, -A * clip(s_it, 1 - low, 1 + high)), always aggregated
    as seq-mean-token-mean (verl ignores loss_agg_mode here too); no dual clip.
    """
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    log_seq_ratio = torch.clamp(log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1), max=10.0)
    ratio = torch.exp(log_seq_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    pg_losses = torch.maximum(unclipped, clipped)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, "seq-mean-token-mean", global_batch_size, global_token_num)
    return {
        "pg_loss": pg_loss,
        "pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).float(), response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
        "pg_clipfrac_lower": torch.zeros((), dtype=pg_loss.dtype),
    }


@register_policy_loss("geo_mean", unused=("clip_ratio_c", "loss_agg_mode"))
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    global_batch_size: Optional[int] = None,
    global_token_num: Optional[int] = None,
) -> Dict[str, torch.Tensor]:
    """GMPO (https://arxiv.org/abs/2507.20673), as verl's `compute_policy_loss_geo_mean`, tensors (B, R).

    Token log-ratios d = log_prob - old are clipped in log space to [-low, high] on the side that
    the advantage's sign makes pessimistic (sgn(A) * min(sgn(A) * d, sgn(A) * clip(d))); the sequence
    ratio is the geometric mean exp(mean of those over the response), the sequence advantage the mean
    of A over it, and the loss is -A_seq * ratio averaged over sequences (over `global_batch_size`
    when given, so micro-batches and data-parallel ranks add up to the mini-batch mean).
    loss_agg_mode does not apply (as in verl).
    """
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    sign = torch.sign(advantages)
    clamped = torch.clamp(log_ratio, -clip_ratio_low, clip_ratio_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    tokens = mask.sum(dim=-1)
    ratio = torch.exp((pessimistic * mask).sum(dim=-1) / (tokens + 1e-8))
    seq_advantage = (advantages * mask).sum(dim=-1) / (tokens + 1e-8)
    pg_losses = -seq_advantage * ratio
    denom = pg_losses.shape[0] if global_batch_size is None else global_batch_size
    was_clipped = torch.ne(log_ratio, clamped).float()
    return {
        "pg_loss": pg_losses.sum() / denom,
        "pg_clipfrac": masked_mean(was_clipped * (advantages > 0).float(), response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
        "pg_clipfrac_lower": masked_mean(was_clipped * (advantages < 0).float(), response_mask),
    }


# ---------------------------------------------------------------------------- KL penalty in the reward


class FixedKLController:
    """The in-reward KL coefficient, constant (verl's FixedKLController)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass


class AdaptiveKLController:
    """The in-reward KL coefficient steered towards a target KL (https://arxiv.org/abs/1909.08593),
    as verl's AdaptiveKLController: value *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if not horizon > 0:
            raise ValueError(f"algorithm.kl_ctrl.horizon={horizon}: the adaptive KL controller needs a horizon > 0")
        self.value, self.target, self.horizon = float(init_kl_coef), float(target_kl), int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_steps / self.horizon


def get_kl_controller(kl_ctrl) -> "FixedKLController | AdaptiveKLController":
    """The controller of `algorithm.kl_ctrl` (type fixed or adaptive, kl_coef, target_kl, horizon)."""
    if kl_ctrl.type == "fixed":
        return FixedKLController(kl_ctrl.kl_coef)
    if kl_ctrl.type == "adaptive":
        return AdaptiveKLController(kl_ctrl.kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon)
    raise ValueError(f"algorithm.kl_ctrl.type={kl_ctrl.type!r} is not supported: choose one of fixed, adaptive")


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl,
    kl_penalty_type: str = "kl",
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """verl's `apply_kl_penalty` (ray_trainer.py): rewards = scores - beta * KL per token, tensors (B, R).

    KL is `kl_penalty(old_log_probs, ref_log_prob, kl_penalty_type)` masked by the response; beta is
    the controller's value before this step; the controller then updates with the batch's KL (mean
    over sequences of each sequence's mean token KL) and n_steps = the number of sequences.
    Returns the token-level rewards and actor/reward_kl_penalty(_coeff) metrics.
    """
    mask = response_mask.to(token_level_scores.dtype)
    kld = kl_penalty(old_log_probs, ref_log_prob, kl_penalty_type) * mask
    beta = kl_ctrl.value
    rewards = token_level_scores - beta * kld
    current_kl = masked_mean(kld, mask, dim=-1).mean().item()
    kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference.

    kl / k1: logprob - ref;  abs: |logprob - ref|;  mse / k2: 0.5 * (logprob - ref)^2;
    low_var_kl / k3: with d = ref - logprob (clamped to +-20), exp(d) - d - 1, clamped to +-10.
    A trailing "+" (e.g. "k3+") keeps the forward value but takes the gradient of k2
    (straight-through), whose expected gradient is the true KL gradient.
    """
    name = kl_type[:-1] if kl_type.endswith("+") else kl_type
    if name not in KL_TYPES:
        raise ValueError(
            f"unknown kl type {kl_type!r}; valid types: {', '.join(KL_TYPES)} "
            "(each may end in '+' to take the k2 gradient)"
        )
    kind = KL_TYPES[name]
    diff = logprob - ref_logprob
    if kind == "kl":
        value = diff
    elif kind == "abs":
        value = diff.abs()
    elif kind == "mse":
        value = 0.5 * diff.square()
    else:
        d = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)
        value = torch.clamp(torch.exp(d) - d - 1, min=-10.0, max=10.0)
    if not kl_type.endswith("+") or kind == "mse":
        return value
    k2 = 0.5 * diff.square()
    return k2 - k2.detach() + value.detach()


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: logsumexp(z) - sum(softmax(z) * z). (..., V) -> (...)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
