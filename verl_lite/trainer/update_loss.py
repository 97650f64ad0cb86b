"""What the loss function of an update sees, assembled in one place: the actor's policy loss and the
critic's value loss, and how the engine calls them.

An update runs each mini-batch as micro-batches (`dynamic_batch.MicroBatches`: fixed rows, or packed
by a token budget and cut to their rows' width) and the engine calls the loss once per micro-batch
(`mini_batch_loss`). A loss function (`policy_loss`, `value_loss`) sees:
- `out`, the model's outputs for the micro-batch: `log_probs` (and `entropy` when asked) for the actor,
  `values` for the critic, at the batch's full response width (the outputs of a cut micro-batch are
  padded back with zeros in columns no mask selects: `MicroBatches.loss`);
- `mb`, the micro-batch as the driver dealt it (uncut), its tensors on the outputs' device:
  `response_mask` (without the tokens rollout correction rejected), `advantages`, `old_log_probs`
  (none on-policy: the forward's own, detached), `ref_log_prob` (the KL loss), `rollout_is_weights`,
  `rollout_log_probs`; the critic's `values` (the old ones) and `returns`;
- the mini-batch's global token and sequence counts (`data_parallel.update_meta`), by which every
  loss part is normalised, so each rank's loss is its share of the global one; it is multiplied by
  the DP size because FSDP averages the gradients over the ranks;
- the settings: the actor section (clip ratios, loss_agg_mode, the loss mode and its options, the
  entropy and KL terms) and rollout correction (its bypass mode's loss), or the critic section.
An on-policy actor update records the forward's log-probs beside the rollout's here, for the rollout
gap metrics (`rollout/metrics.RolloutGap`), as the loss sees them.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch

from verl_lite.rollout.metrics import RolloutGap
from verl_lite.trainer import core_algos
from verl_lite.trainer.algos import critic as critic_algos
from verl_lite.trainer.algos import policy_losses, rollout_correction

LossFn = Callable[[Dict[str, Any], Dict[str, Any]], Tuple[torch.Tensor, Dict[str, float]]]
MakeLoss = Callable[[int, int], LossFn]  # (global tokens, global sequences) of a mini-batch -> its loss


def mini_batch_loss(make_loss: MakeLoss, meta: Dict[str, Any], j: int, micro: Any) -> Callable:
    """The loss the engine calls for mini-batch `j` of an update (`meta`: update_meta's counts): the
    loss of its global counts, seeing each of its micro-batches as `micro` (MicroBatches) hands them."""
    return micro.loss(make_loss(meta["mini_tokens"][j], meta["mini_seqs"][j]))


def policy_loss(actor: Any, correction: Any, on_policy: bool, dp: int, dp_group: Any = None,
                gap: Optional[RolloutGap] = None) -> MakeLoss:
    """The actor's loss: actor.policy_loss.loss_mode's policy loss (in rollout correction's bypass mode
    verl's bypass-mode loss against the rollout's log-probs, its weights normalised over `dp_group`),
    minus entropy_coeff x the entropy, plus kl_loss_coef x the KL to the ref; the metrics under verl's
    actor/* names (and rollout_corr/* in bypass mode; actor/entropy on-policy)."""
    low = actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio
    high = actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio
    mode = actor.loss_agg_mode
    options = policy_losses.policy_loss_options(actor)
    taps = gap is not None and gap.taps

    def make_loss(gtok: int, gseq: int) -> LossFn:
        def loss_fn(out, mb):
            if taps:
                gap.record(out, mb)
            mask = mb["response_mask"].float()
            old = out["log_probs"].detach() if on_policy else mb["old_log_probs"]
            correction_metrics = {}
            x = policy_losses.PolicyLossInput(
                old, out["log_probs"], mb["advantages"], mask, low, high, actor.clip_ratio_c, mode,
                global_batch_size=gseq, global_token_num=gtok, options=options,
                rollout_is_weights=mb.get("rollout_is_weights"))
            if correction.bypass_mode:  # old = the rollout's log-probs; verl's bypass-mode loss
                pg, correction_metrics = rollout_correction.bypass_policy_loss(correction, x, group=dp_group)
            else:
                pg = policy_losses.compute_policy_loss(actor.policy_loss.loss_mode, x)
            loss = pg["pg_loss"]
            # the loss's own metrics, verl's names (gpg reports none, kl_cov only ppo_kl)
            metrics = {f"actor/{k}": v.item() for k, v in pg.items()}
            metrics.update(correction_metrics)
            if on_policy:
                metrics["actor/entropy"] = core_algos.masked_mean(out["entropy"].detach(), mask).item()
            if actor.entropy_coeff != 0:
                ent = core_algos.agg_loss(out["entropy"], mask, mode, global_batch_size=gseq, global_token_num=gtok)
                loss = loss - actor.entropy_coeff * ent
                metrics["actor/entropy_loss"] = ent.item()
            if actor.use_kl_loss:
                kl = core_algos.kl_penalty(out["log_probs"], mb["ref_log_prob"], actor.kl_loss_type)
                kl_loss = core_algos.agg_loss(kl, mask, mode, global_batch_size=gseq, global_token_num=gtok)
                loss = loss + actor.kl_loss_coef * kl_loss
                metrics["actor/kl_loss"] = kl_loss.item()
            # FSDP averages gradients over ranks; the loss parts are normalised by global counts.
            return loss * dp, metrics
        return loss_fn
    return make_loss


def value_loss(critic: Any, dp: int) -> MakeLoss:
    """The critic's loss: verl's clipped value loss (critic.cliprange_value, critic.loss_agg_mode) of the
    new values against the returns, around the old values; critic/vf_loss and critic/vf_clipfrac."""
    def make_loss(gtok: int, gseq: int) -> LossFn:
        def loss_fn(out, mb):
            vf_loss, clipfrac = critic_algos.compute_value_loss(
                out["values"], mb["returns"], mb["values"], mb["response_mask"].float(), critic.cliprange_value,
                critic.loss_agg_mode, global_batch_size=gseq, global_token_num=gtok)
            return vf_loss * dp, {"critic/vf_loss": vf_loss.item(), "critic/vf_clipfrac": clipfrac.item()}
        return loss_fn
    return make_loss
