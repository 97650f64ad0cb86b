"""The advantage-estimator registry (`algorithm.adv_estimator`, verl's names) and the trainer's one call.

Every estimator is defined as verl defines it (`verl/trainer/ppo/core_algos.py`) and returns
(advantages, returns), both (B, R). Inputs, as verl's `ray_trainer.compute_advantage` gives them:
token_level_rewards and response_mask (B, R); `index` the prompt uid of each response (responses of
one prompt form a group); `config` the algorithm section (gamma, norm_adv_by_std_in_grpo, ...);
`reward_baselines` (B,) the greedy response's reward for remax; `values` (B, R) for gae;
`old_log_probs`, `sum_pi_squared` and `rollout_is_weights` (B, R) for the optimal token baselines;
`reward_components` (per-response lists by the score function's dict keys) for gdpo.
verl's estimators register here from critic.py (gae), group_estimators.py (grpo and the others that
compare a response's score with its group's) and token_estimators.py (reward-to-go: reinforce_plus_plus,
remax, the optimal token baselines), which the package imports, so importing this module registers all.
tests/py/test_verl_core_algos_table.py compares every estimator with verl's own on a committed table.

A user's own estimator registers with `@register_adv_est("name", needs=...)` and receives the same keywords;
`needs` names what the trainer must gather for it (ESTIMATOR_INPUTS: the critic's values, remax's greedy
baseline, the actor's sum_pi_squared, the reward's components).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, FrozenSet, Hashable, Iterable, Optional, Sequence, Tuple

import torch

from verl_lite.config.choices import REFUSED_ADV_ESTIMATORS

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
    the setting is never ignored). Every other estimator: token_level_rewards, response_mask, config (the
    algorithm section), index, reward_baselines when given, and by what it declared (`needs`): with values
    the critic's values; with sum_pi_squared (the optimal token baselines) also old_log_probs, sum_pi_squared and rollout_is_weights
    (None without rollout correction's IS weights); with reward_components (gdpo) also reward_components
    (the reward's extra info, per-response lists by key), response_lengths (from the attention mask) and
    norm_adv_by_std_in_grpo (verl's gdpo always normalises: as for grpo_vectorized, the setting applies).
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
    needs = estimator_needs(name)  # what the estimator declared, a user's own too
    if "values" in needs:
        kwargs["values"] = values
    if "sum_pi_squared" in needs:
        kwargs.update(old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared,
                      rollout_is_weights=rollout_is_weights)
    if "reward_components" in needs:
        kwargs.update(reward_components=reward_components, response_lengths=response_lengths,
                      norm_adv_by_std_in_grpo=bool(algorithm.norm_adv_by_std_in_grpo))
    return fn(**kwargs)
