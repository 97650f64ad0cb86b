"""Preflight rules of how a role's sequences reach its forward: packed or padded
(`<model>.use_remove_padding`, decided in decisions/packing_mode.py: null = auto packs where the engine
can, True is refused only where it cannot) and split over Ulysses sequence-parallel ranks
(`ulysses_sequence_parallel_size`, decisions/ulysses.py). The ref runs with the actor's model section:
a problem they share is said once, for the actor.
"""

from __future__ import annotations

from typing import Any, List, Optional

from verl_lite.config import roles
from verl_lite.decisions import packing_mode, ulysses
from verl_lite.decisions.layout import ulysses_setting
from verl_lite.preflight.roles import RoleView


def ulysses_problems(view: RoleView, world: int) -> List[str]:
    """Ulysses SP against the devices (`world`), the model's heads, packing and the strategy."""
    key, sp = ulysses_setting(view.section, view.prefix)
    if view.role == "ref" and sp == ulysses_setting(view.actor_section, roles.SECTION["actor"])[1]:
        return []  # the ref follows the actor with the actor's model: said once, for the actor
    found = ulysses.problems(key, sp, world or None, view.hf, view.model.use_remove_padding, view.strategy)
    return [f"{view.role}: {p}" for p in found]


def remove_padding_problems(cfg: Any, view: RoleView) -> List[str]:
    """An explicit use_remove_padding=True where the role's engine cannot pack."""
    why = _remove_padding_blocker(cfg, view.role, view.device)
    # the ref runs with the actor's model section: said once, unless the ref's engine has its own reason
    if why and not (view.role == "ref" and why == _remove_padding_blocker(cfg, "actor", view.device)):
        return [f"{view.role}: {view.model_key}.use_remove_padding=True: {why}"]
    return []


def _remove_padding_blocker(cfg: Any, role: str, device: Optional[str]) -> Optional[str]:
    """Why an explicit use_remove_padding=True cannot run for the role, or None."""
    return packing_mode.role_decision(cfg, role, device).refusal
