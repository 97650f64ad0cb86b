"""Preflight rules of the actor's loss (`actor_rollout_ref.actor.*`): the settings the chosen policy
loss (`policy_loss.loss_mode`) does not read, its clip ratios, and the KL loss's settings while it is off.
Each is valid and said as a warning, as verl ignores them too.
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config import schema
from verl_lite.preflight.defaults import dotted, plain

# settings each policy loss does not read (as in verl), and the loss's own settings -> the losses reading them
_LOSS_IGNORES = {
    "gspo": ("loss_agg_mode", "clip_ratio_c"), "geo_mean": ("loss_agg_mode", "clip_ratio_c"),
    "sapo": ("loss_agg_mode", "clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "gpg": ("clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "clip_cov": ("clip_ratio_c",), "cispo": ("clip_ratio_c",),
    "kl_cov": ("clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "dro": ("clip_ratio_c", "clip_ratio", "clip_ratio_low", "clip_ratio_high"),
}
_LOSS_OWN = {"tau_pos": ("sapo",), "tau_neg": ("sapo",), "policy_loss.clip_cov_ratio": ("clip_cov",),
             "policy_loss.clip_cov_lb": ("clip_cov",), "policy_loss.clip_cov_ub": ("clip_cov",),
             "policy_loss.kl_cov_ratio": ("kl_cov",), "policy_loss.ppo_kl_coef": ("kl_cov",),
             "policy_loss.dro_beta": ("dro",)}


def loss_warnings(actor: Any) -> List[str]:
    """The policy loss's unread settings, then the KL loss's settings while use_kl_loss is off."""
    warnings = loss_setting_warnings(actor)
    if not actor.use_kl_loss:
        default = schema.ActorConfig()
        changed = [f"actor_rollout_ref.actor.{k}" for k in ("kl_loss_coef", "kl_loss_type")
                   if getattr(actor, k) != getattr(default, k)]
        if changed:
            warnings.append(f"{', '.join(changed)} {'has' if len(changed) == 1 else 'have'} no effect: the KL loss is "
                            "off (actor_rollout_ref.actor.use_kl_loss=False)")
    return warnings


def loss_setting_warnings(actor: Any) -> List[str]:
    """A changed actor setting that the chosen policy loss does not read (verl ignores it too)."""
    mode = actor.policy_loss.loss_mode
    values, default = plain(actor), plain(schema.ActorConfig())
    unread = [k for k in _LOSS_IGNORES.get(mode, ()) if dotted(values, k) != dotted(default, k)]
    unread += [k for k, modes in _LOSS_OWN.items() if mode not in modes and dotted(values, k) != dotted(default, k)]
    if not unread:
        return []
    keys = ", ".join(f"actor_rollout_ref.actor.{k}" for k in unread)
    return [f"{keys} {'has' if len(unread) == 1 else 'have'} no effect with policy_loss.loss_mode={mode} (as in "
            "verl: the loss does not read it)"]


def clip_ratio_warnings(actor: Any) -> List[str]:
    """clip_ratio is only the default of clip_ratio_low and clip_ratio_high."""
    if actor.clip_ratio_low is not None and actor.clip_ratio_high is not None and \
            actor.clip_ratio != schema.ActorConfig().clip_ratio:
        return [f"actor_rollout_ref.actor.clip_ratio={actor.clip_ratio} has no effect: clip_ratio_low and "
                "clip_ratio_high are both set (clip_ratio is only their default)"]
    return []
