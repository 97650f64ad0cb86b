"""Which roles a run has (actor, ref, critic) and where each role's settings live.

Shared by the preflight check, the engine registry lookup, the Ray runtime env and the trainer,
so all of them agree on the rules:
- ref runs when the actor uses a KL loss or the reward has a KL penalty; with LoRA it is the actor
  with its adapters disabled, not a model of its own;
- critic runs when `critic.enable` is true, or when it is null and the estimator is gae;
- ref and critic with a null strategy use the actor's strategy;
- a critic with an empty model path uses the actor's model.

Works on a composed DictConfig or on the plain dataclass object (attribute access only).
"""

from __future__ import annotations

from typing import Any, List

ROLES = ("actor", "ref", "critic")
MODEL_TYPE = {"actor": "language_model", "ref": "language_model", "critic": "value_model"}
# Dotted prefix of each role's engine section (strategy, megatron, fsdp_config).
SECTION = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}


def _role_check(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: choose one of {', '.join(ROLES)}")


def ref_enabled(cfg: Any) -> bool:
    return bool(cfg.actor_rollout_ref.actor.use_kl_loss) or bool(cfg.algorithm.use_kl_in_reward)


def ref_in_actor(cfg: Any) -> bool:
    """The ref policy is the actor with its LoRA adapters disabled, as verl does with LoRA on (a positive
    lora_rank or a lora_adapter_path): no ref model of its own is built."""
    model = cfg.actor_rollout_ref.model
    return int(model.lora_rank or 0) > 0 or bool(model.lora_adapter_path)


def critic_enabled(cfg: Any) -> bool:
    enable = cfg.critic.enable
    if enable is None:
        return cfg.algorithm.adv_estimator == "gae"
    return bool(enable)


def active_roles(cfg: Any) -> List[str]:
    """The roles this run builds engines for, in order: actor, then ref, then critic."""
    roles = ["actor"]
    if ref_enabled(cfg):
        roles.append("ref")
    if critic_enabled(cfg):
        roles.append("critic")
    return roles


def section(cfg: Any, role: str) -> Any:
    _role_check(role)
    if role == "critic":
        return cfg.critic
    return getattr(cfg.actor_rollout_ref, role)


def strategy(cfg: Any, role: str) -> str:
    """The role's backend: its own strategy, or the actor's when null."""
    own = section(cfg, role).strategy
    return own if own is not None else cfg.actor_rollout_ref.actor.strategy


def model_path(cfg: Any, role: str) -> str:
    """The model the role loads: the critic's own path when set, else the actor's."""
    _role_check(role)
    if role == "critic" and cfg.critic.model.path:
        return cfg.critic.model.path
    return cfg.actor_rollout_ref.model.path


def model_section(cfg: Any, role: str) -> Any:
    _role_check(role)
    return cfg.critic.model if role == "critic" else cfg.actor_rollout_ref.model
