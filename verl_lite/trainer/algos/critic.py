"""PPO's critic in numbers: GAE advantages from its values, and its clipped value loss.

As verl defines them (`verl/trainer/ppo/core_algos.py`), tensors (B, R): `gae` is the one advantage
estimator that reads a critic's values (algorithm.gamma, algorithm.lam; `compute_advantage` passes
them), `compute_value_loss` the loss the critic trains on (critic.cliprange_value, critic.loss_agg_mode).
tests/py/test_verl_core_algos_table.py compares gae with verl's own on the committed table.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from verl_lite.trainer.algos.advantages import register_adv_est
from verl_lite.trainer.core_algos import agg_loss, masked_mean, masked_whiten


@register_adv_est("gae", needs={"values"})
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (PPO with a critic), all tensors (B, R).

    Walks the response backwards: delta_t = r_t + gamma * V_{t+1} - V_t and
    A_t = delta_t + gamma * lam * A_{t+1}; masked-out positions carry the next value and advantage
    through unchanged. returns = A + V (before whitening); advantages are whitened over the mask.
    """
    with torch.no_grad():
        next_value = torch.zeros_like(values[:, 0])
        next_adv = torch.zeros_like(values[:, 0])
        reversed_adv = []
        for t in reversed(range(token_level_rewards.shape[-1])):
            m = response_mask[:, t].to(values.dtype)
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            adv_t = delta + gamma * lam * next_adv
            next_value = values[:, t] * m + (1 - m) * next_value
            next_adv = adv_t * m + (1 - m) * next_adv
            reversed_adv.append(next_adv)
        advantages = torch.stack(reversed_adv[::-1], dim=1)
        returns = advantages + values
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    global_batch_size: Optional[int] = None,
    global_token_num: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 * agg(max((v - G)^2, (clip(v, V_old +- c) - G)^2)).

    Returns (vf_loss, vf_clipfrac), the latter the share of tokens where the clipped error was larger.
    """
    vpred_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpred_clipped - returns) ** 2
    per_token = torch.maximum(err_unclipped, err_clipped)
    vf_loss = 0.5 * agg_loss(per_token, response_mask, loss_agg_mode, global_batch_size, global_token_num)
    vf_clipfrac = masked_mean(torch.gt(err_clipped, err_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac
