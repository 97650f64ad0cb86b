"""The shared numbers under GRPO's and PPO's algorithms: masked statistics, loss aggregation, KL.

Pure torch functions, defined exactly as verl defines them (`verl/trainer/ppo/core_algos.py`,
`verl/trainer/ppo/ray_trainer.py` and `verl/utils/torch_functional.py`), so a run here and a verl run
on the same batch produce the same numbers: masked sum/mean/var/whiten, `agg_loss`, the KL estimators
(`kl_penalty`), the in-reward KL penalty and its controllers, and the entropy of logits. The advantage
estimators and the losses built on these are in trainer/algos/. Shapes: B = responses in the batch,
R = response length (padded), V = vocabulary size.

Micro-batching: `agg_loss` (and the losses built on it) take optional `global_batch_size` and
`global_token_num`. With them, the micro-batch losses of every data-parallel rank *add up* to the
loss of the whole mini-batch. An engine whose gradient all-reduce averages over DP ranks (FSDP)
multiplies each micro-batch loss by the DP world size to keep the sum (verl folds this factor into
its `agg_loss` as `dp_size`).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from verl_lite.config.choices import KL_TYPES, LOSS_AGG_MODES


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


# ---------------------------------------------------------------------------- KL, in the reward and per token


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


# ---------------------------------------------------------------------------- entropy


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: logsumexp(z) - sum(softmax(z) * z). (..., V) -> (...)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
