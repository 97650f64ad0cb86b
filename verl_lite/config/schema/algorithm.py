"""The schema's algorithm and reward sections: the advantage estimator and its settings, the in-reward
KL control, DAPO's dynamic sampling, rollout correction, and how responses are scored (the reward
manager, DAPO's overlong penalty, a custom reward function)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional


# ---------------------------------------------------------------------------- in-reward KL control


@dataclass
class KLControlConfig:
    # Controller of the in-reward KL coefficient (algorithm.use_kl_in_reward): fixed, or adaptive
    # (coef *= 1 + clip(KL / target_kl - 1, -0.2, 0.2) * sequences / horizon after each step), as verl.
    type: str = "fixed"
    # (Initial) coefficient beta of the in-reward KL penalty.
    kl_coef: float = 0.001
    # Horizon of the adaptive controller (> 0).
    horizon: int = 10000
    # Target KL of the adaptive controller.
    target_kl: float = 0.1


# ---------------------------------------------------------------------------- dynamic sampling


@dataclass
class FilterGroupsConfig:
    # DAPO's dynamic sampling (synchronous trainer): drop the prompt groups whose `metric` is the same
    # for all rollout.n responses (no learning signal) and generate further batches of
    # data.gen_batch_size prompts until data.train_batch_size groups are kept; the surplus is cut.
    # Logs train/num_gen_batches and train/filter_groups/{kept,dropped}_groups per step.
    enable: bool = False
    # What must vary within a group: acc or score (keys the reward function returns; the dapo reward
    # manager records acc = the score of a numeric result), seq_reward (the summed score) or
    # seq_final_reward (the summed reward after the in-reward KL penalty). Required with enable.
    metric: Optional[str] = None
    # Generation batches per step before the run stops with an error (too few varied groups); <= 0 =
    # no limit.
    max_num_gen_batches: int = 0


# ---------------------------------------------------------------------------- algorithm, reward


@dataclass
class RolloutCorrectionConfig:
    # verl's rollout correction (synchronous and fully-async trainers), for the gap between the policy
    # that sampled (the rollout's own log-probs: rollout.calculate_log_probs=True) and the actor's old
    # log-probs. Importance weights old/rollout multiply the per-token policy loss: null = none, token
    # (one weight per token), sequence (the product over the response). Metrics rollout_corr/*.
    rollout_is: Optional[str] = None
    # A number U truncates the weights at U (TIS); a "L_U" string (e.g. "0.5_5.0") zeroes weights
    # outside [L, U] (IcePop).
    rollout_is_threshold: Any = 2.0
    # Divide the weights by their batch mean (per token, or per sequence with rollout_is=sequence);
    # in bypass mode the mean of the micro-batch over every data-parallel rank, as verl.
    rollout_is_batch_normalize: bool = False
    # Rejection: comma-separated criteria on k1 = -log r, k2 = (log r)^2/2 or k3 = r - 1 - log r
    # (r = old/rollout), per token (token_k1/k2/k3) or per response (seq_sum_k1/k2/k3,
    # seq_mean_k1/k2/k3, seq_max_k2/k3); a failing token, or all tokens of a failing response, leave
    # the response mask. null = no rejection.
    rollout_rs: Optional[str] = None
    # The rejection bounds, one for all criteria or one per criterion (comma-separated): "L_U" ratio
    # bounds for *_k1 (one number U means 1/U_U), one upper bound for k2/k3. Required with rollout_rs.
    rollout_rs_threshold: Any = None
    # verl's bypass mode: the rollout's log-probs are the old ones (no old log-prob pass), and the actor
    # measures the weights and the rejection per micro-batch between the current policy and the
    # rollout's, training loss_type in place of policy_loss.loss_mode (which must be vanilla). False =
    # decoupled mode: the actor recomputes the old log-probs and the correction is made against them.
    bypass_mode: bool = False
    # The bypass-mode loss: ppo_clip (PPO's clipped loss against the rollout log-probs on the kept
    # tokens; the ratio is the correction, no weights) or reinforce (-A * w * log-prob).
    loss_type: str = "ppo_clip"


@dataclass
class AlgorithmConfig:
    # Advantage estimator, by verl's registered name: gae uses a critic (built when critic.enable is null;
    # verl's default); the others need none: grpo (and grpo_vectorized) normalise each score within its
    # prompt's group of rollout.n responses, grpo_passk rewards only each group's best (best - second),
    # rloo / rloo_vectorized subtract the mean of the other responses, opo a length-weighted group mean,
    # reinforce_plus_plus whitens discounted returns (gamma), reinforce_plus_plus_baseline whitens
    # score - group mean, gpg scales score - group mean by batch / non-zero scores, remax subtracts the
    # reward of a greedy response to the prompt (one more generation per step). optimal_token_baseline
    # gives each token position of a group its own baseline, weighted by the path-variance proxy
    # 1 - 2 pi_t + sum_pi_squared (needs actor.calculate_sum_pi_squared=True); tir_optimal_token_baseline
    # the same over each response's trained tokens packed together (masks with holes); gdpo normalises
    # each reward component of gdpo_reward_keys within the group, sums them with gdpo_reward_weights and
    # whitens the sum over the batch.
    adv_estimator: str = "gae"
    # grpo, grpo_vectorized, grpo_passk: divide by the group's reward std; False = only subtract the group
    # mean (Dr. GRPO).
    norm_adv_by_std_in_grpo: bool = True
    # Discount factor of gae and reinforce_plus_plus.
    gamma: float = 1.0
    # GAE lambda, the bias/variance trade-off (adv_estimator=gae).
    lam: float = 1.0
    # Subtract beta * KL(old policy || ref) per token from the rewards before the advantages, as verl's
    # apply_kl_penalty (builds the ref model; the old log-probs are always scored). Synchronous
    # trainer only (refused with async_training.enable).
    use_kl_in_reward: bool = False
    # KL estimator of the in-reward penalty: kl (k1), abs, mse (k2), low_var_kl (k3); verl's "full"
    # (needs the whole distribution) is refused.
    kl_penalty: str = "kl"
    # gdpo: the reward components, by the keys of the dict the score function returns (e.g.
    # ["accuracy_reward", "format_reward"]); each response's value of each key must be a number.
    gdpo_reward_keys: Optional[List[str]] = None
    # gdpo: one weight per gdpo_reward_keys entry for the sum of the normalised components; null = 1 each.
    gdpo_reward_weights: Optional[List[float]] = None
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


@dataclass
class OverlongBufferConfig:
    # DAPO's overlong reward shaping (reward_manager=dapo): responses longer than max_resp_len - len
    # tokens get min(-(L - (max_resp_len - len)) / len * penalty_factor, 0) added to their score.
    enable: bool = False
    # Tokens before max_resp_len over which the penalty grows from 0 to penalty_factor (> 0 when
    # enabled; verl has no default and requires it).
    len: Optional[int] = None
    # The penalty at max_resp_len (verl has no default and requires it; its DAPO scripts use 1.0).
    penalty_factor: Optional[float] = None
    # Log the per-response penalty: metrics reward_extra/overlong_reward/mean and
    # reward_extra/overlong/mean (the share penalised).
    log: bool = False


@dataclass
class RewardKwargsConfig:
    # The length the DAPO overlong penalty is measured to (usually data.max_response_length); required
    # with overlong_buffer_cfg.enable. This section is verl's reward.reward_kwargs (legacy spelling
    # reward_model.reward_kwargs), read by the dapo reward manager only.
    max_resp_len: Optional[int] = None
    overlong_buffer_cfg: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)


@dataclass
class RewardModelConfig:
    # verl: score with a reward model. Not supported by verl_lite yet: True is refused (rule or custom
    # reward functions only).
    enable: bool = False
    # How responses are scored (verl: reward.reward_manager.name): naive (one score per response, on
    # its last token) or dapo (naive plus DAPO's overlong penalty, see reward_kwargs, and `acc` = the
    # score for filter_groups) or gdpo (verl's GDPORewardManager: naive's scores and `acc` = the score of
    # a number; every key of a returned dict is kept, the reward components adv_estimator=gdpo reads).
    # verl's prime, batch, remote and rate_limited are refused by name.
    reward_manager: str = "naive"
    reward_kwargs: RewardKwargsConfig = field(default_factory=RewardKwargsConfig)


@dataclass
class CustomRewardFunctionConfig:
    # A Python file whose function `name(data_source, solution_str, ground_truth, extra_info)`
    # returns a float. The file is executed as code: only point at files you trust.
    path: Optional[str] = None
    # Name of the function in that file.
    name: str = "compute_score"
