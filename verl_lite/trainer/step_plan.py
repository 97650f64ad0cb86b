"""What every step of the synchronous driver asks of its workers, read once from the config (the
same each step; reading an OmegaConf config costs the driver ~1 ms a step, during which a worker
would wait): the sampling settings, the actor's mini-batches, whether the update is on-policy, and
which log-prob passes the generate call runs itself."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple

from verl_lite.decisions.rollout_correction import active as rollout_active
from verl_lite.trainer.data_parallel import num_mini_batches


class StepPlan(NamedTuple):
    sampling: Dict[str, Any]
    num_mini: int
    kl_in_reward: bool
    correction: Any
    bypass: bool
    on_policy: bool
    score_old: bool  # the actor scores the old log-probs inside the generate call
    score_ref: bool  # the ref scores its log-probs there too
    correction_active: bool  # algorithm.rollout_correction asks for weights or rejection


def read_plan(cfg: Any, kl_in_reward: bool) -> StepPlan:
    """The plan of `cfg`; `kl_in_reward`: the driver holds a KL controller (algorithm.use_kl_in_reward)."""
    actor_rollout_ref = cfg.actor_rollout_ref
    rollout = actor_rollout_ref.rollout
    sampling = {"temperature": rollout.temperature, "top_k": rollout.top_k, "top_p": rollout.top_p,
                "do_sample": rollout.do_sample}
    num_mini = num_mini_batches(cfg.data.train_batch_size, actor_rollout_ref.actor.ppo_mini_batch_size)
    # One mini-batch trained once: the update's own forward gives the old log-probs (verl's dp_actor
    # does the same), so no scoring pass. Otherwise the actor (and ref) score inside the generate call.
    # The KL in the reward needs the old log-probs before the update, so it always scores them.
    # Rollout correction weighs / rejects by old vs rollout log-probs, so it scores the old ones too;
    # its bypass mode takes the rollout's log-probs as the old ones and scores none.
    correction = cfg.algorithm.rollout_correction
    bypass = bool(correction.bypass_mode)
    # sum_pi_squared (the optimal token baselines' input) comes from the old log-prob pass, so it scores them too
    sum_pi_squared = bool(actor_rollout_ref.actor.calculate_sum_pi_squared)
    on_policy = (num_mini == 1 and int(actor_rollout_ref.actor.ppo_epochs) == 1 and not kl_in_reward
                 and not rollout_active(correction) and not bypass and not sum_pi_squared)
    use_kl = bool(actor_rollout_ref.actor.use_kl_loss)
    return StepPlan(sampling, num_mini, kl_in_reward, correction, bypass, on_policy,
                    score_old=not on_policy and not bypass, score_ref=use_kl or kl_in_reward,
                    correction_active=rollout_active(correction))
