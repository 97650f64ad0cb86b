"""verl's advantage estimators, registered under `algorithm.adv_estimator` names, and the trainer's call.

Each estimator is defined as verl defines it (`verl/trainer/ppo/core_algos.py`) and returns
(advantages, returns), both (B, R). Inputs, as verl's `ray_trainer.compute_advantage` gives them:
token_level_rewards and response_mask (B, R); `index` the prompt uid of each response (responses of
one prompt form a group); `config` the algorithm section (gamma, norm_adv_by_std_in_grpo, ...);
`reward_baselines` (B,) the greedy response's reward for remax; `values` (B, R) for gae;
`old_log_probs`, `sum_pi_squared` and `rollout_is_weights` (B, R) for the optimal token baselines;
`reward_components` (per-response lists by the score function's dict keys) for gdpo.
tests/py/test_verl_core_algos_table.py compares every estimator with verl's own on a committed table.

A user's own estimator registers with `@register_adv_est("name")` and receives the same keywords.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Dict, FrozenSet, Hashable, Iterable, List, Optional, Sequence, Tuple

import torch

from verl_lite.config.choices import REFUSED_ADV_ESTIMATORS
from verl_lite.trainer import core_algos
from verl_lite.trainer.core_algos import masked_whiten

AdvEstimator = Callable[..., Tuple[torch.Tensor, torch.Tensor]]
ADV_ESTIMATORS: Dict[str, AdvEstimator] = {}
# The inputs an estimator may need beyond rewards, mask and uids, gathered by trainer/advantage_phase.py
ESTIMATOR_INPUTS = ("values", "reward_baselines", "sum_pi_squared", "reward_components")
ADV_NEEDS: Dict[str, FrozenSet[str]] = {}


def register_adv_est(name: str, needs: Iterable[str] = ()) -> Callable[[AdvEstimator], AdvEstimator]:
    """Register an advantage estimator under `name` (a user's own too; a name taken twice is refused),
    with the ESTIMATOR_INPUTS it `needs` (what the trainer gathers for it: estimator_needs)."""
    needs = frozenset(needs)
    if needs - set(ESTIMATOR_INPUTS):
        raise ValueError(f"advantage estimator {name!r} needs {sorted(needs - set(ESTIMATOR_INPUTS))}: "
                         f"choose from {', '.join(ESTIMATOR_INPUTS)}")

    def register(fn: AdvEstimator) -> AdvEstimator:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered twice "
                             f"({ADV_ESTIMATORS[name].__name__}, {fn.__name__})")
        ADV_ESTIMATORS[name], ADV_NEEDS[name] = fn, needs
        return fn
    return register


def estimator_needs(name: str) -> FrozenSet[str]:
    """The inputs the estimator `name` declared with register_adv_est(needs=...); unknown names are refused."""
    get_adv_estimator_fn(name)  # an unknown name is refused as there
    return ADV_NEEDS.get(name, frozenset())


def get_adv_estimator_fn(name: str) -> AdvEstimator:
    """The estimator registered as `name`; verl's estimators verl_lite cannot feed are refused with why."""
    if name in ADV_ESTIMATORS:
        return ADV_ESTIMATORS[name]
    if name in REFUSED_ADV_ESTIMATORS:
        raise ValueError(f"algorithm.adv_estimator={name!r} is not supported by verl_lite: {REFUSED_ADV_ESTIMATORS[name]}")
    raise ValueError(f"algorithm.adv_estimator={name!r} is not supported: choose one of {', '.join(ADV_ESTIMATORS)}")


def _groups(index: Sequence[Hashable], batch: int) -> Dict[Hashable, List[int]]:
    """Row numbers of each prompt uid, in order of first appearance."""
    groups: Dict[Hashable, List[int]] = defaultdict(list)
    for i, uid in enumerate(core_algos.uid_values(index, batch)):
        groups[uid].append(i)
    return groups


def _group_ids(index: Sequence[Hashable], batch: int) -> torch.Tensor:
    """(B,) long: the group number 0..G-1 of each response."""
    return core_algos.group_ids(index, batch)[0]


def _reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Sum of the masked rewards from each position to the end of the response (undiscounted)."""
    return (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


register_adv_est("gae", needs={"values"})(core_algos.compute_gae_advantage_return)
register_adv_est("grpo")(core_algos.compute_grpo_outcome_advantage)


@register_adv_est("grpo_vectorized")
def compute_grpo_vectorized_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                              index: Sequence[Hashable], epsilon: float = 1e-6,
                                              norm_adv_by_std_in_grpo: bool = True, **_: Any):
    """GRPO's advantage with per-group sums instead of a loop (verl's grpo_vectorized): the group's
    unbiased std is taken in float32 as sqrt(max(var, 0)); a group of one gets mean 0, std 1."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _group_ids(index, scores.shape[0])
        flat = scores.to(torch.float32)
        size = int(g.max()) + 1
        count = torch.zeros(size).index_add_(0, g, torch.ones_like(flat))
        mean = torch.zeros(size).index_add_(0, g, flat) / count.clamp_min(1.0)
        centred = flat - mean[g]
        var = torch.zeros(size).index_add_(0, g, centred * centred) / (count - 1.0).clamp_min(1.0)
        std = torch.sqrt(var.clamp(min=0.0))
        single = count <= 1.0
        mean, std = mean.masked_fill(single, 0.0), std.masked_fill(single, 1.0)
        centred = scores - mean[g]
        scalars = centred / (std[g] + epsilon) if norm_adv_by_std_in_grpo else centred
        advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("grpo_passk")
def compute_grpo_passk_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                         index: Sequence[Hashable], epsilon: float = 1e-6, config: Any = None,
                                         **_: Any):
    """Pass@k (https://arxiv.org/abs/2503.19595): only each group's best response gets an advantage,
    best - second best (over the group's std + epsilon with config.norm_adv_by_std_in_grpo).
    Every group needs at least 2 responses (rollout.n >= 2)."""
    norm = bool(getattr(config, "norm_adv_by_std_in_grpo", True)) if config is not None else True
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        advantages = torch.zeros_like(scores)
        for uid, rows in _groups(index, scores.shape[0]).items():
            group = scores[rows]
            if group.numel() < 2:
                raise ValueError(f"grpo_passk needs at least 2 responses per prompt, got {group.numel()} for "
                                 f"prompt {uid!r}: set actor_rollout_ref.rollout.n >= 2")
            top, top_idx = torch.topk(group, 2)
            gap = top[0] - top[1]
            advantages[rows[int(top_idx[0])]] = gap / (group.std() + epsilon) if norm else gap
        advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


def _group_means(scores: torch.Tensor, index: Sequence[Hashable]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B,) mean score of each response's group (0 for a group of one) and (B,) group sizes."""
    means, sizes = torch.zeros_like(scores), torch.zeros_like(scores)
    for rows in _groups(index, scores.shape[0]).values():
        means[rows] = scores[rows].mean() if len(rows) > 1 else 0.0
        sizes[rows] = float(len(rows))
    return means, sizes


@register_adv_est("reinforce_plus_plus_baseline")
def compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards: torch.Tensor,
                                                           response_mask: torch.Tensor, index: Sequence[Hashable],
                                                           **_: Any):
    """REINFORCE++ with a baseline (https://arxiv.org/abs/2501.03262): score minus its group's mean
    (0 for a group of one), on every response token, then whitened over the batch's tokens."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        means, _ = _group_means(scores, index)
        centred = (scores - means).unsqueeze(-1).tile([1, token_level_rewards.shape[-1]]) * response_mask
        advantages = masked_whiten(centred, response_mask) * response_mask
    return advantages, advantages


@register_adv_est("rloo")
def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: Sequence[Hashable], **_: Any):
    """RLOO (https://arxiv.org/abs/2402.14740): score minus the mean of the other responses of its
    group, written as (score - group mean) * n / (n - 1); a group of one keeps its score."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        means, sizes = _group_means(scores, index)
        scale = sizes / (sizes - 1).clamp(min=1)
        loo = scores * scale - means * scale
        scores = torch.where(sizes > 1, loo, scores)
        advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("rloo_vectorized")
def compute_rloo_vectorized_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                              index: Sequence[Hashable], **_: Any):
    """RLOO from per-group sums (verl's rloo_vectorized): (n * score - group sum) / (n - 1); unlike
    rloo, a group of one gets 0."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _group_ids(index, scores.shape[0])
        count = torch.bincount(g)[g].to(scores.dtype)
        total = torch.bincount(g, weights=scores)[g]
        adv = (count * scores - total) / (count - 1).clamp_min(1) * (count > 1)
        advantages = adv.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("opo")
def compute_opo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: Sequence[Hashable], **_: Any):
    """OPO (https://arxiv.org/abs/2505.23585): score minus its group's length-weighted mean score
    (sum of len * score / sum of len, response lengths from the mask); a group of one keeps its score."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        lengths = response_mask.sum(dim=-1)
        baseline = torch.zeros_like(scores)
        for rows in _groups(index, scores.shape[0]).values():
            if len(rows) > 1:
                baseline[rows] = (lengths[rows] * scores[rows]).sum() / lengths[rows].sum()
        advantages = (scores - baseline).unsqueeze(-1) * response_mask
    return advantages, advantages


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


@register_adv_est("gpg")
def compute_gpg_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: Sequence[Hashable], f_norm: float = 1.0, **_: Any):
    """GPG (https://arxiv.org/abs/2504.02546): alpha * (score - group mean) / f_norm, where
    alpha = batch size / number of non-zero scores (at least 1); a group of one has mean 0."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)
        means, _ = _group_means(scores, index)
        advantages = (alpha * (scores - means) / f_norm).unsqueeze(-1) * response_mask
    return advantages, advantages


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
        for rows in _groups(index, returns.shape[0]).values():
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
        for rows in _groups(index, len(lengths)).values():
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


@register_adv_est("gdpo", needs={"reward_components"})
def compute_gdpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: Sequence[Hashable], epsilon: float = 1e-6,
                                   norm_adv_by_std_in_grpo: bool = True, config: Any = None,
                                   reward_components: Optional[Dict[str, Sequence[Any]]] = None,
                                   response_lengths: Optional[torch.Tensor] = None, **_: Any):
    """GDPO (https://arxiv.org/abs/2601.05242): each reward component of algorithm.gdpo_reward_keys
    (the per-response values the score function's dict returned under those keys) is normalised
    within its prompt's group as grpo does, the normalised components are summed with
    algorithm.gdpo_reward_weights (1 each when null), and the sum is whitened over the batch's tokens.
    Each component sits on the response's last token (`response_lengths` - 1, from the attention mask)."""
    keys = list(getattr(config, "gdpo_reward_keys", None) or [])
    if not keys:
        raise ValueError("gdpo needs algorithm.gdpo_reward_keys: the reward components the score function returns "
                         "in its dict (e.g. ['format_reward', 'accuracy_reward'])")
    components = reward_components or {}
    missing = [k for k in keys if k not in components]
    if missing:
        raise ValueError(f"gdpo: algorithm.gdpo_reward_keys {missing} are not among the reward's extra keys "
                         f"({', '.join(sorted(components)) or 'none'}): the score function must return a dict "
                         "with each of them")
    weights = getattr(config, "gdpo_reward_weights", None)
    weights = [1.0] * len(keys) if weights is None else [float(w) for w in weights]
    if len(weights) != len(keys):
        raise ValueError(f"algorithm.gdpo_reward_weights has {len(weights)} weights for {len(keys)} "
                         f"gdpo_reward_keys {keys}: give one weight per key")
    if response_lengths is None:
        response_lengths = response_mask.sum(dim=-1)
    last = response_lengths.to(torch.long) - 1
    rows = torch.arange(response_mask.shape[0])
    total = None
    for key, weight in zip(keys, torch.tensor(weights, dtype=torch.float32)):
        values = components[key]
        if any(v is None for v in values):
            raise ValueError(f"gdpo: the reward gave no {key!r} for some responses: the score function must return "
                             f"{key!r} in every dict")
        scores = torch.zeros_like(response_mask, dtype=torch.float32)
        scores[rows, last] = torch.tensor([float(v) for v in values], dtype=torch.float32)
        normalised, _ = core_algos.compute_grpo_outcome_advantage(scores, response_mask, index, epsilon,
                                                                  norm_adv_by_std_in_grpo)
        total = weight * normalised if total is None else total + weight * normalised
    advantages = masked_whiten(total, response_mask) * response_mask
    return advantages, advantages


# ---------------------------------------------------------------------------- the trainer's call


def compute_advantage(algorithm: Any, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                      index: Sequence[Hashable], values: Optional[torch.Tensor] = None,
                      reward_baselines: Optional[torch.Tensor] = None, old_log_probs: Optional[torch.Tensor] = None,
                      sum_pi_squared: Optional[torch.Tensor] = None, rollout_is_weights: Optional[torch.Tensor] = None,
                      reward_components: Optional[Dict[str, Sequence[Any]]] = None,
                      response_lengths: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of `algorithm.adv_estimator`, given the inputs verl's compute_advantage gives.

    gae: values, gamma, lam. grpo and grpo_vectorized: index, norm_adv_by_std_in_grpo (verl's trainer
    passes the latter only to grpo and grpo_vectorized always normalises; here it applies to both, so
    the setting is never ignored). optimal_token_baseline and tir_optimal_token_baseline: also
    old_log_probs, sum_pi_squared and rollout_is_weights (None without rollout correction's IS weights).
    gdpo: also reward_components (the reward's extra info, per-response lists by key), response_lengths
    (from the attention mask) and norm_adv_by_std_in_grpo (verl's gdpo always normalises: as for
    grpo_vectorized, the setting applies). Every other estimator: token_level_rewards, response_mask,
    config (the algorithm section), index, and reward_baselines when given.
    """
    name = str(algorithm.adv_estimator)
    fn = get_adv_estimator_fn(name)
    if name == "gae":
        if values is None:
            raise ValueError("algorithm.adv_estimator=gae needs the critic's values")
        return fn(token_level_rewards, values, response_mask, float(algorithm.gamma), float(algorithm.lam))
    if name in ("grpo", "grpo_vectorized"):
        return fn(token_level_rewards, response_mask, index,
                  norm_adv_by_std_in_grpo=bool(algorithm.norm_adv_by_std_in_grpo))
    kwargs: Dict[str, Any] = {"token_level_rewards": token_level_rewards, "response_mask": response_mask,
                              "config": algorithm, "index": index}
    if reward_baselines is not None:
        kwargs["reward_baselines"] = reward_baselines
    if name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        kwargs.update(old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared,
                      rollout_is_weights=rollout_is_weights)
    if name == "gdpo":
        kwargs.update(reward_components=reward_components, response_lengths=response_lengths,
                      norm_adv_by_std_in_grpo=bool(algorithm.norm_adv_by_std_in_grpo))
    return fn(**kwargs)


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
