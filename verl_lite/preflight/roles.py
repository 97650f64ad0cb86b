"""Each role of a run, resolved once: where its settings live, its backend, its parallel layout over
the training devices and the model it loads. The orchestrator (`preflight/run.py`) builds one
`RoleView` per active role and the rules and the summary read it, instead of each re-deriving the
role's section, strategy and layout from the raw config. The layout is `decisions/layout.Layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from verl_lite.config import roles
from verl_lite.config.shapes import ModelShape, model_shape
from verl_lite.decisions.layout import Layout, role_layout


@dataclass(frozen=True)
class RoleView:
    """One role of a run, as the rules read it."""

    role: str
    prefix: str  # dotted path of the role's engine section, e.g. actor_rollout_ref.actor
    section: Any  # that section (strategy, megatron, fsdp_config, optim, ...)
    strategy: str  # its backend: its own, or the actor's when null
    layout: Layout
    model_path: str
    model: Any  # the model section it loads with (the critic's own, else actor_rollout_ref.model)
    shape: Optional[ModelShape]  # the model's config.json, or a shipped shape of the same name
    device: Optional[str]  # the target device; None when it does not resolve
    # the actor's engine section: what the ref follows where its own setting is null, and what a rule
    # compares the ref's with to say a problem they share once, for the actor
    actor_section: Any

    @property
    def hf(self) -> Optional[Dict[str, Any]]:
        return self.shape.hf if self.shape is not None else None

    @property
    def megatron(self) -> bool:
        return self.strategy == "megatron"

    @property
    def model_key(self) -> str:
        """Where the role's model section lives: critic.model, else actor_rollout_ref.model."""
        return "critic.model" if self.role == "critic" else "actor_rollout_ref.model"

    @property
    def overrides(self) -> Dict[str, Any]:
        """The role's megatron.override_transformer_config as a plain dict."""
        return override_config(self.section)


def override_config(section: Any) -> Dict[str, Any]:
    """A role section's megatron.override_transformer_config as a plain dict."""
    node = section.megatron.override_transformer_config
    return dict(node.items()) if hasattr(node, "items") else dict(node)


def role_view(cfg: Any, role: str, device: Optional[str]) -> RoleView:
    path = roles.model_path(cfg, role)
    return RoleView(role, roles.SECTION[role], roles.section(cfg, role), roles.strategy(cfg, role),
                    role_layout(cfg, role), path, roles.model_section(cfg, role), model_shape(path), device,
                    roles.section(cfg, "actor"))


def role_views(cfg: Any, device: Optional[str]) -> List[RoleView]:
    """A view of each role the run builds engines for, in order: actor, then ref, then critic."""
    return [role_view(cfg, role, device) for role in roles.active_roles(cfg)]


def view_of(views: Sequence[RoleView], role: str) -> Optional[RoleView]:
    """The view of `role` among a run's views; None when the role does not run."""
    return next((view for view in views if view.role == role), None)
