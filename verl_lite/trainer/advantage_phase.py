"""The advantage phase of a step, written once for both drivers (`ppo_trainer`, `async_run`): from
the scored batch to its advantages and returns.

In order, as verl's trainers run it:
1. rollout correction where verl applies it, before the advantages (`algorithm.rollout_correction`,
   not in bypass mode, when the batch holds the rollout's and the old log-probs): rejected tokens
   leave `response_mask`, the IS weights join the batch as `rollout_is_weights`;
2. the inputs the estimator declared (`register_adv_est(name, needs=...)`, read with
   `algos.advantages.estimator_needs`), gathered for it and only for it:
   - `values`: the critic's values, the batch's `values` (the synchronous driver's critic pass);
   - `reward_baselines`: the reward of a greedy response per prompt (remax), which the driver
     makes when asked (`greedy_baselines`);
   - `sum_pi_squared`: with the old log-probs and the rollout IS weights, from the batch (the actor's
     old log-prob pass with actor.calculate_sum_pi_squared; the optimal token baselines);
   - `reward_components`: the score function's per-response dict values (the batch's reward extra
     info) and the generated response lengths (gdpo), logged per component as verl's gdpo/<key>/*;
3. `algorithm.adv_estimator`'s advantages and returns on the corrected mask.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from verl_lite.batch import Batch
from verl_lite.trainer.algos import advantages, rollout_correction
from verl_lite.trainer.dynamic_sampling import EXTRA_PREFIX


class AdvantagePhase(NamedTuple):
    """What the phase gives the driver: the advantages and returns (B, R), the float response masks
    before (`generated_mask`, the response lengths) and after the correction's rejection (`mask`, what
    the advantages were computed on), and the metrics of the correction and of the estimator's inputs."""
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor
    generated_mask: torch.Tensor
    correction_metrics: Dict[str, float]
    input_metrics: Dict[str, float]


def advantage_phase(algorithm: Any, batch: Batch, rewards: torch.Tensor,
                    greedy_baselines: Optional[Callable[[], torch.Tensor]] = None) -> AdvantagePhase:
    """The advantages of `batch` (response_mask, uid and what the correction and the estimator read)
    from the token-level `rewards`; the correction rewrites the batch's response_mask and adds its
    rollout_is_weights in place, as verl's does."""
    correction = algorithm.rollout_correction
    generated_mask = batch["response_mask"].float()
    correction_metrics: Dict[str, float] = {}
    if not correction.bypass_mode and "rollout_log_probs" in batch and "old_log_probs" in batch:
        correction_metrics = rollout_correction.apply_to_batch(correction, batch)
    mask = batch["response_mask"].float()
    inputs, input_metrics = estimator_inputs(algorithm, batch, generated_mask, greedy_baselines)
    adv, ret = advantages.compute_advantage(algorithm, rewards, mask, batch["uid"], **inputs)
    return AdvantagePhase(adv, ret, mask, generated_mask, correction_metrics, input_metrics)


def estimator_inputs(algorithm: Any, batch: Batch, generated_mask: torch.Tensor,
                     greedy_baselines: Optional[Callable[[], torch.Tensor]] = None
                     ) -> Tuple[Dict[str, Any], Dict[str, float]]:
    """(compute_advantage's keywords, their metrics) for what algorithm.adv_estimator declared it needs."""
    name = str(algorithm.adv_estimator)
    needs = advantages.estimator_needs(name)
    inputs: Dict[str, Any] = {}
    metrics: Dict[str, float] = {}
    if "values" in needs:
        inputs["values"] = batch.get("values")
    if "reward_baselines" in needs:
        if greedy_baselines is None:
            raise ValueError(f"algorithm.adv_estimator={name!r} needs the reward of a greedy response per prompt, "
                             "which only the synchronous trainer generates: set async_training.enable=False or "
                             "choose an estimator without reward_baselines (e.g. grpo, rloo)")
        inputs["reward_baselines"] = greedy_baselines()
    if "sum_pi_squared" in needs:
        inputs.update(old_log_probs=batch.get("old_log_probs"), sum_pi_squared=batch.get("sum_pi_squared"),
                      rollout_is_weights=batch.get("rollout_is_weights"))
    if "reward_components" in needs:
        components = {k[len(EXTRA_PREFIX):]: v for k, v in batch.items() if k.startswith(EXTRA_PREFIX)}
        inputs.update(reward_components=components, response_lengths=generated_mask.sum(-1))
        metrics.update(reward_component_metrics(algorithm.gdpo_reward_keys, components))
    return inputs, metrics


def reward_component_metrics(keys: Optional[Sequence[str]], components: Dict[str, List[Any]]) -> Dict[str, float]:
    """verl's gdpo/<key>/{mean,std,max,min} of each reward component over the batch."""
    out = {}
    for key in keys or ():
        values = np.asarray([float(v) for v in components.get(key, []) if v is not None], dtype=np.float64)
        if values.size:
            out.update({f"gdpo/{key}/mean": float(values.mean()), f"gdpo/{key}/std": float(values.std()),
                        f"gdpo/{key}/max": float(values.max()), f"gdpo/{key}/min": float(values.min())})
    return out
