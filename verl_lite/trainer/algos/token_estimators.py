"""Advantage estimators built on each token's reward-to-go: reinforce_plus_plus's discounted return,
remax's greedy baseline and the optimal token baselines, with verl's variance proxies of the latter.

Each is defined as verl defines it (`verl/trainer/ppo/core_algos.py`; the proxies as
`verl/trainer/ppo/metric_utils.py`), takes the keywords of trainer/algos/advantages.py's
`compute_advantage` and returns (advantages, returns), both (B, R): `reward_baselines` (B,) the greedy
response's reward for remax; `old_log_probs`, `sum_pi_squared` and `rollout_is_weights` (B, R) for the
optimal token baselines, whose groups are trainer/algos/group_estimators.py's.
tests/py/test_verl_core_algos_table.py compares every estimator and the proxies with verl's own.
"""

from __future__ import annotations

from typing import Any, Dict, Hashable, Optional, Sequence

import torch

from verl_lite.trainer.algos.advantages import register_adv_est
from verl_lite.trainer.algos.group_estimators import group_rows
from verl_lite.trainer.core_algos import masked_whiten


def _reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Sum of the masked rewards from each position to the end of the response (undiscounted)."""
    return (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


@register_adv_est("reinforce_plus_plus")
def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  config: Any = None, **_: Any):
    """REINFORCE++ (https://arxiv.org/abs/2501.03262): the discounted return (algorithm.gamma) from
    each response token, masked positions carrying the running return through, whitened over the batch."""
    if config is None:
        raise ValueError("reinforce_plus_plus needs the algorithm config (its gamma)")
    gamma = float(config.gamma)
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running = torch.zeros_like(token_level_rewards[:, 0])
        for t in reversed(range(token_level_rewards.shape[1])):
            m = response_mask[:, t]
            new_running = token_level_rewards[:, t] + gamma * running
            returns[:, t] = new_running * m
            running = new_running * m + running * (1 - m)
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_adv_est("remax", needs={"reward_baselines"})
def compute_remax_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                    reward_baselines: Optional[torch.Tensor] = None, **_: Any):
    """ReMax (https://arxiv.org/abs/2310.10505): the reward-to-go of each token minus the reward of
    the prompt's greedy response (`reward_baselines`, (B,)); returns are the reward-to-go."""
    if reward_baselines is None:
        raise ValueError("remax needs reward_baselines: the reward of a greedy response to each prompt")
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


# ---------------------------------------------------------------------------- optimal token baselines


def _path_variance(old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor, response_mask: torch.Tensor,
                   rollout_is_weights: Optional[torch.Tensor]) -> torch.Tensor:
    """W_t = sum over j <= t of (1 - 2 pi_j + sum_pi_squared_j), each term scaled by the rollout IS
    weight squared when given: the optimal token baseline's cumulative path-variance proxy. (B, R)"""
    w = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        w = w * rollout_is_weights ** 2
    return (w * response_mask).cumsum(dim=-1)


def _zero_tail(baselines: torch.Tensor, row_of: Sequence[int], lengths: torch.Tensor) -> None:
    """The longest response of a group, when it is the only one that long, gets no baseline past the
    second-longest's end (verl's handle_zero_tail). `lengths` are the group's, `row_of` their rows."""
    ordered, _ = torch.sort(lengths)
    longest, second = int(ordered[-1].item()), int(ordered[-2].item())
    at = (lengths == longest).nonzero(as_tuple=True)[0]
    if at.numel() == 1 and longest > second:
        baselines[row_of[int(at[0])], second:] = 0.0


def _otb_inputs(name: str, old_log_probs: Optional[torch.Tensor], sum_pi_squared: Optional[torch.Tensor]) -> None:
    if sum_pi_squared is None:
        raise ValueError(f"{name} needs sum_pi_squared from the actor's log-prob pass: set "
                         "actor_rollout_ref.actor.calculate_sum_pi_squared=True")
    if old_log_probs is None:
        raise ValueError(f"{name} needs the old log-probs of the responses (the actor's log-prob pass)")


@register_adv_est("optimal_token_baseline", needs={"sum_pi_squared"})
def compute_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                            index: Sequence[Hashable], old_log_probs: Optional[torch.Tensor] = None,
                                            sum_pi_squared: Optional[torch.Tensor] = None,
                                            rollout_is_weights: Optional[torch.Tensor] = None,
                                            handle_zero_tail: bool = True, epsilon: float = 1e-8, **_: Any):
    """Optimal token baseline (verl's OTB): a baseline per token position and group,
    B_t = sum(G_t * W_t) / (sum(W_t) + epsilon) over the group's responses (masked), where G_t is the
    reward-to-go and W_t the cumulative path-variance proxy of 1 - 2 pi_t + sum_pi_squared_t (pi_t the
    old probability of the chosen token; times the rollout IS weight squared when given). A group of
    one keeps its return; the longest response's tail past the second-longest gets no baseline.
    Returns (G_t - B_t masked, G_t)."""
    _otb_inputs("optimal_token_baseline", old_log_probs, sum_pi_squared)
    with torch.no_grad():
        returns = _reward_to_go(token_level_rewards, response_mask)
        w_cumulative = _path_variance(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights)
        baselines = torch.zeros_like(returns)
        for rows in group_rows(index, returns.shape[0]).values():
            if len(rows) == 1:
                continue
            w, mask = w_cumulative[rows], response_mask[rows]
            numerator = (returns[rows] * w * mask).sum(dim=0)
            baselines[rows] = (numerator / ((w * mask).sum(dim=0) + epsilon)).unsqueeze(0).expand(len(rows), -1)
            if handle_zero_tail:
                _zero_tail(baselines, rows, mask.sum(dim=-1))
        advantages = (returns - baselines) * response_mask
    return advantages, returns


@register_adv_est("tir_optimal_token_baseline", needs={"sum_pi_squared"})
def compute_multi_turn_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor,
                                                        response_mask: torch.Tensor, index: Sequence[Hashable],
                                                        old_log_probs: Optional[torch.Tensor] = None,
                                                        sum_pi_squared: Optional[torch.Tensor] = None,
                                                        rollout_is_weights: Optional[torch.Tensor] = None,
                                                        handle_zero_tail: bool = True, epsilon: float = 1e-8,
                                                        **_: Any):
    """The optimal token baseline over each response's masked tokens packed to the left (verl's
    tir_optimal_token_baseline, for responses whose mask has holes: tool outputs between turns): the
    k-th trained token of every response of a group shares a baseline. Empty responses are left out;
    a group of one keeps its return. Returns (advantages, reward-to-go)."""
    _otb_inputs("tir_optimal_token_baseline", old_log_probs, sum_pi_squared)
    with torch.no_grad():
        token_returns = _reward_to_go(token_level_rewards, response_mask)
        w_cumulative = _path_variance(old_log_probs, sum_pi_squared, response_mask, rollout_is_weights)
        lengths = response_mask.sum(dim=-1).to(dtype=torch.long)
        width = int(lengths.max().item()) if lengths.numel() else 0
        packed_w = w_cumulative.new_zeros((len(lengths), width))
        packed_returns = torch.zeros_like(packed_w)
        for i in range(len(lengths)):
            if int(lengths[i]) > 0:
                keep = response_mask[i].bool()
                packed_w[i, :int(lengths[i])] = w_cumulative[i, keep]
                packed_returns[i, :int(lengths[i])] = token_returns[i, keep]
        baselines = torch.zeros_like(packed_returns)
        for rows in group_rows(index, len(lengths)).values():
            rows = [i for i in rows if int(lengths[i]) > 0]  # empty responses are left out of their group
            if len(rows) <= 1:
                continue
            w = packed_w[rows]
            b_star = (packed_returns[rows] * w).sum(dim=0) / (w.sum(dim=0) + epsilon)
            baselines[rows] = b_star.to(baselines.dtype)
            if handle_zero_tail:
                _zero_tail(baselines, rows, lengths[rows])
        packed_adv = packed_returns - baselines
        advantages = torch.zeros_like(token_returns)
        for i in range(len(lengths)):
            if int(lengths[i]) > 0:
                advantages[i, response_mask[i].bool()] = packed_adv[i, :int(lengths[i])]
        advantages = advantages * response_mask
    return advantages, token_returns


# ---------------------------------------------------------------------------- verl's variance proxies


def variance_proxy_metrics(old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor, advantages: torch.Tensor,
                           response_mask: torch.Tensor, rollout_is_weights: Optional[torch.Tensor] = None,
                           gradient_norm: Optional[float] = None) -> Dict[str, float]:
    """verl's variance_proxy/* metrics (compute_variance_proxy_metrics), logged whenever sum_pi_squared is
    computed: with W = sum_t (1 - 2 pi_t + sum_pi_squared_t) over the response (times the IS weight squared
    per token when given) and A the response's mean advantage, proxy2 = E[A^2 max(W, 0)] (with IS weights
    E[mean(rho)^2 A^2 W_unweighted]), proxy1 = grad_norm^2, proxy3 = max(0, (proxy2 - proxy1) / (N - 1))."""
    with torch.no_grad():
        w = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
        if rollout_is_weights is not None:
            w = w * rollout_is_weights.detach() ** 2
        mask = response_mask.float()
        adv = (advantages * mask).sum(-1) / (mask.sum(-1) + 1e-8)
        w_values = (w * mask).sum(-1)
        if rollout_is_weights is not None:
            is_scalar = (rollout_is_weights * mask).sum(-1) / (mask.sum(-1) + 1e-8)
            w_original = ((w / torch.clamp(rollout_is_weights.detach() ** 2, min=1e-10)) * mask).sum(-1)
            proxy2 = ((is_scalar ** 2) * (adv ** 2) * torch.clamp(w_original, min=0.0)).mean()
        else:
            proxy2 = (adv ** 2 * torch.clamp(w_values, min=0.0)).mean()
        proxy1 = float(gradient_norm) ** 2 if gradient_norm is not None else None
        proxy3 = 0.0
        if proxy1 is not None and adv.shape[0] > 1:
            proxy3 = max(0.0, float((proxy2 - proxy1) / (adv.shape[0] - 1)))
        return {"variance_proxy/proxy1_signal_strength": proxy1 if proxy1 is not None else 0.0,
                "variance_proxy/proxy2_total_power": float(proxy2),
                "variance_proxy/proxy3_pure_noise": proxy3,
                "variance_proxy/expected_a_squared": float((adv ** 2).mean()),
                "variance_proxy/expected_w": float(w_values.mean())}
