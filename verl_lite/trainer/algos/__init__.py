"""verl's algorithms by verl's names: advantage estimators (`algorithm.adv_estimator`), policy losses
(`actor_rollout_ref.actor.policy_loss.loss_mode`), the critic's numbers and rollout correction.

advantages.py: the estimator registry and the trainer's one call (`compute_advantage`); the estimators
register into it from critic.py (gae, and the critic's value loss), group_estimators.py (a response's
score against its prompt's group: grpo, rloo, ...) and token_estimators.py (each token's reward-to-go:
reinforce_plus_plus, remax, the optimal token baselines), imported here in that order so that any import
of the package registers every estimator. policy_losses.py: the policy losses' input type, their
registry and every loss. rollout_correction.py: algorithm.rollout_correction. The shared numbers under
them (masked statistics, agg_loss, KL) are in trainer/core_algos.py. verl's names that verl_lite cannot
feed are refused, each with what is missing, in config/choices.py (REFUSED_ADV_ESTIMATORS,
REFUSED_POLICY_LOSSES), which the preflight reads without torch. Importing this package imports torch.
"""

from verl_lite.trainer.algos import critic, group_estimators, token_estimators  # noqa: F401  (register, in this order)
