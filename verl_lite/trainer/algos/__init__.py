"""verl's advantage estimators (`algorithm.adv_estimator`) and policy losses
(`actor_rollout_ref.actor.policy_loss.loss_mode`), each registered by verl's name.

advantages.py: the estimator registry and the trainer's one call (`compute_advantage`).
policy_losses.py: the losses beyond PPO's, GSPO's and GMPO's (those live in trainer/core_algos.py,
whose registry this package extends). verl's names that verl_lite cannot feed are refused, each with
what is missing, in config/choices.py (REFUSED_ADV_ESTIMATORS, REFUSED_POLICY_LOSSES), which the
preflight reads without torch. Importing this package imports torch.
"""
