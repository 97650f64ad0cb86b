"""Preflight rules of the algorithm section (`algorithm.*`): the advantage estimator and what it needs
(Pass@k's groups, the optimal token baselines' sum_pi_squared, GDPO's reward keys), the estimator
settings it does not read, a group baseline over groups of one, and the KL penalty in the reward with its
controller. Dynamic sampling and rollout correction have rules of their own (decisions/dynamic_sampling.py,
decisions/rollout_correction.py).
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config import schema
from verl_lite.config.choices import KL_CTRL_TYPES, KL_PENALTIES
from verl_lite.config.verl_names import NOT, YET
from verl_lite.preflight.defaults import changed_keys, plain

OTB_ESTIMATORS = ("optimal_token_baseline", "tir_optimal_token_baseline")
# the estimators whose baseline is the mean of the prompt's other responses (rollout.n of them)
GROUP_BASELINES = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg", "reinforce_plus_plus_baseline")
# algorithm settings -> the estimators that read them (verl's compute_advantage passes them only there)
_ESTIMATOR_READS = {"norm_adv_by_std_in_grpo": ("grpo", "grpo_vectorized", "grpo_passk"),
                    "gamma": ("gae", "reinforce_plus_plus"), "lam": ("gae",)}


def algorithm_problems(cfg: Any) -> List[str]:
    """The KL controller and penalty verl_lite has, Pass@k's groups, the estimators' own needs, and the KL
    penalty in the reward in fully-async training."""
    problems = []
    algo = cfg.algorithm
    if algo.kl_ctrl.type not in KL_CTRL_TYPES:
        problems.append(f"algorithm.kl_ctrl.type={algo.kl_ctrl.type!r} is {NOT}: choose one of {', '.join(KL_CTRL_TYPES)}")
    if str(algo.kl_penalty).removesuffix("+") not in KL_PENALTIES:
        problems.append(f"algorithm.kl_penalty={algo.kl_penalty!r} is {NOT}: choose one of {', '.join(KL_PENALTIES)} "
                        "(each may end in '+'; verl's full needs the whole distribution)")
    if algo.adv_estimator == "grpo_passk" and int(cfg.actor_rollout_ref.rollout.n) < 2:
        problems.append(f"algorithm.adv_estimator=grpo_passk with actor_rollout_ref.rollout.n="
                        f"{cfg.actor_rollout_ref.rollout.n}: Pass@k compares each prompt's best and second-best "
                        "responses (verl raises on a group of one); set actor_rollout_ref.rollout.n >= 2")
    problems.extend(_otb_and_gdpo_problems(cfg))
    if cfg.algorithm.use_kl_in_reward and cfg.async_training.enable:
        problems.append(f"algorithm.use_kl_in_reward=True with async_training.enable=True is {YET}: the fully-async "
                        "trainer builds no ref model; use actor_rollout_ref.actor.use_kl_loss=True")
    return problems


def _otb_and_gdpo_problems(cfg: Any) -> List[str]:
    """The optimal token baselines need sum_pi_squared from the actor's log-prob pass; gdpo needs its keys."""
    problems = []
    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    spsq = bool(actor.calculate_sum_pi_squared)
    if algo.adv_estimator in OTB_ESTIMATORS and not spsq:
        problems.append(f"algorithm.adv_estimator={algo.adv_estimator} needs sum_pi_squared from the actor's log-prob "
                        "pass (verl asserts it): set actor_rollout_ref.actor.calculate_sum_pi_squared=True")
    if spsq and cfg.actor_rollout_ref.model.use_fused_kernels:
        problems.append("actor_rollout_ref.actor.calculate_sum_pi_squared=True with actor_rollout_ref.model."
                        "use_fused_kernels=True is not supported (as in verl): the fused kernels never form the "
                        "logits sum_pi_squared sums over; set use_fused_kernels=False")
    if spsq and algo.rollout_correction.bypass_mode:
        problems.append("actor_rollout_ref.actor.calculate_sum_pi_squared=True with algorithm.rollout_correction."
                        "bypass_mode=True: bypass mode takes the rollout's log-probs as the old ones and runs no "
                        "actor log-prob pass, where sum_pi_squared is computed; set bypass_mode=False")
    if spsq and cfg.async_training.enable:
        problems.append(f"actor_rollout_ref.actor.calculate_sum_pi_squared=True with async_training.enable=True is "
                        f"{YET}: the fully-async trainer's advantages read no sum_pi_squared; use the synchronous "
                        "trainer (async_training.enable=False)")
    if algo.adv_estimator == "gdpo":
        keys, weights = list(algo.gdpo_reward_keys or []), algo.gdpo_reward_weights
        if not keys:
            problems.append("algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the keys of the reward "
                            "components the score function returns in its dict (e.g. ['accuracy_reward', "
                            "'format_reward'])")
        elif weights is not None and len(weights) != len(keys):
            problems.append(f"algorithm.gdpo_reward_weights has {len(weights)} weights for {len(keys)} "
                            f"gdpo_reward_keys {keys}: give one weight per key, or null for 1 each")
        if cfg.async_training.enable:
            problems.append(f"algorithm.adv_estimator=gdpo with async_training.enable=True is {YET}: the fully-async "
                            "trainer's advantages read no reward components; use async_training.enable=False")
    elif algo.gdpo_reward_keys or algo.gdpo_reward_weights is not None:
        problems.append(f"algorithm.gdpo_reward_keys / gdpo_reward_weights are set with algorithm.adv_estimator="
                        f"{algo.adv_estimator}: only gdpo reads them (as in verl); set adv_estimator=gdpo, or remove "
                        "them")
    return problems


def group_baseline_warnings(cfg: Any) -> List[str]:
    """A group baseline over groups of one response: a run that does not learn, or plain REINFORCE."""
    algo, rollout = cfg.algorithm, cfg.actor_rollout_ref.rollout
    if not (int(rollout.n) == 1 and algo.adv_estimator in GROUP_BASELINES):
        return []
    what = ("every advantage is 0 and the policy does not learn" if algo.adv_estimator == "rloo_vectorized" else
            "there is no group baseline: each advantage is the response's own score (a group of one has mean "
            "0, std 1), plain REINFORCE")
    return [f"algorithm.adv_estimator={algo.adv_estimator} with actor_rollout_ref.rollout.n=1: each group holds one "
            f"response, so {what}; set actor_rollout_ref.rollout.n >= 2 (verl's GRPO scripts use 5-8), or "
            "algorithm.adv_estimator=gae to train a critic"]


def algorithm_warnings(algo: Any) -> List[str]:
    """The estimator settings the chosen estimator does not read, then the KL controller and penalty
    while the KL penalty in the reward is off."""
    warnings = estimator_setting_warnings(algo)
    if not algo.use_kl_in_reward:
        changed = changed_keys(algo.kl_ctrl, schema.KLControlConfig, "algorithm.kl_ctrl")
        changed += ["algorithm.kl_penalty"] if algo.kl_penalty != schema.AlgorithmConfig().kl_penalty else []
        if changed:
            warnings.append(f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: the KL penalty "
                            "in the reward is off (algorithm.use_kl_in_reward=False)")
    return warnings


def estimator_setting_warnings(algo: Any) -> List[str]:
    """A changed algorithm setting that the chosen advantage estimator does not read."""
    values, default = plain(algo), plain(schema.AlgorithmConfig())
    unread = [k for k, readers in _ESTIMATOR_READS.items()
              if algo.adv_estimator not in readers and values[k] != default[k]]
    if not unread:
        return []
    keys = ", ".join(f"algorithm.{k}" for k in unread)
    return [f"{keys} {'has' if len(unread) == 1 else 'have'} no effect with algorithm.adv_estimator="
            f"{algo.adv_estimator} (as in verl: the estimator does not read it)"]
