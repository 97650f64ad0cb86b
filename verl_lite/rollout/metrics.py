"""How far the rollout's probabilities are from the trainer's, under verl's metric names
(`verl/utils/debug/metrics.py:calculate_debug_metrics`): the absolute difference of the sampled
tokens' probabilities, exp(rollout log-prob) vs exp(actor log-prob), over the response tokens,
and their Pearson correlation. A gap that grows means the rollout samples from another policy than
the one trained (precision, kernels, or stale weights)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch


def rollout_probs_diff(actor_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                       response_mask: torch.Tensor) -> Dict[str, float]:
    mask = response_mask.bool()
    if not mask.any():
        nan = float("nan")
        return {"training/rollout_probs_diff_valid": 0, "training/rollout_probs_diff_max": nan,
                "training/rollout_probs_diff_mean": nan, "training/rollout_probs_diff_std": nan,
                "training/rollout_actor_probs_pearson_corr": nan}
    actor = torch.masked_select(actor_log_probs.detach().float().exp(), mask)
    rollout = torch.masked_select(rollout_log_probs.detach().float().to(actor.device).exp(), mask.to(actor.device))
    diff = (actor - rollout).abs()
    corr = torch.corrcoef(torch.stack([actor, rollout]))[0, 1].item() if actor.numel() > 1 else float("nan")
    return {"training/rollout_probs_diff_valid": 1, "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_probs_diff_mean": diff.mean().item(),
            "training/rollout_probs_diff_std": diff.std().item() if diff.numel() > 1 else 0.0,
            "training/rollout_actor_probs_pearson_corr": corr}


class RolloutGap:
    """Collects `rollout_probs_diff` over an actor update's batch, when the rollout sent its
    log-probs (`rollout_log_probs`). Off-policy batches carry the actor's `old_log_probs`; in an
    on-policy update (one mini-batch, one epoch) the update's own forward, before any step of this
    batch, gives them: the loss `record`s them as it sees them (`taps`; trainer/update_loss.py)."""

    def __init__(self, batch: Dict[str, Any], on_policy: bool):
        self.batch, self.on_policy = batch, on_policy
        self.active = "rollout_log_probs" in batch and (on_policy or "old_log_probs" in batch)
        self.parts: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    @property
    def taps(self) -> bool:
        """Whether the loss must record its forward's log-probs (an on-policy update with the rollout's)."""
        return self.active and self.on_policy

    def record(self, out: Dict[str, Any], mb: Dict[str, Any]) -> None:
        """One micro-batch's forward log-probs, the rollout's and the response mask, as the loss sees them."""
        self.parts.append((out["log_probs"].detach().float().cpu(), mb["rollout_log_probs"].cpu(),
                           mb["response_mask"].cpu()))

    def metrics(self) -> Dict[str, List[float]]:
        if not self.active:
            return {}
        if self.on_policy:
            if not self.parts:
                return {}
            actor, rollout, mask = (torch.cat(t) for t in zip(*self.parts))
        else:
            actor, rollout, mask = self.batch["old_log_probs"], self.batch["rollout_log_probs"], self.batch["response_mask"]
        return {k: [float(v)] for k, v in rollout_probs_diff(actor, rollout, mask).items()}
