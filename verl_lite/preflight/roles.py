"""Each role of a run, resolved once: where its settings live, its backend, its parallel layout over
the training devices and the model it loads. The orchestrator (`preflight/run.py`) builds one
`RoleView` per active role and the rules and the summary read it, instead of each re-deriving the
role's section, strategy and layout from the raw config.

Layouts follow Megatron and verl: DP = devices / (TP*PP*CP) (fsdp: all devices), expert groups
EP*ETP*PP (ETP defaults to TP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from verl_lite.config import roles
from verl_lite.config.shapes import ModelShape, model_shape
from verl_lite.decisions import ulysses
from verl_lite.decisions.layout import train_world as world_size


@dataclass(frozen=True)
class Layout:
    """One role's parallel layout over the training devices."""

    role: str
    strategy: str
    prefix: str  # where the role's megatron settings live
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: Optional[int] = None
    dp: Optional[int] = None  # None when the devices do not divide
    sp: int = 1  # fsdp: Ulysses sequence parallelism (ranks sharing one data-parallel shard)

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp * self.sp


def role_layout(cfg: Any, role: str) -> Layout:
    strategy = roles.strategy(cfg, role)
    sizes: Dict[str, Any] = {}
    if strategy == "megatron":
        m = roles.section(cfg, role).megatron
        tp = m.tensor_model_parallel_size
        sizes = dict(tp=tp, pp=m.pipeline_model_parallel_size, cp=m.context_parallel_size,
                     ep=m.expert_model_parallel_size, vpp=m.virtual_pipeline_model_parallel_size,
                     etp=m.expert_tensor_parallel_size if m.expert_tensor_parallel_size is not None else tp)
    else:
        sp = ulysses.setting(roles.section(cfg, role), roles.SECTION[role])[1]
        sizes = dict(sp=sp) if isinstance(sp, int) and not isinstance(sp, bool) and sp > 1 else {}
    layout = Layout(role, strategy, f"{roles.SECTION[role]}.megatron", **sizes)
    world = world_size(cfg)
    if world > 0 and layout.model_parallel > 0 and world % layout.model_parallel == 0:
        layout = Layout(**{**layout.__dict__, "dp": world // layout.model_parallel})
    return layout


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
