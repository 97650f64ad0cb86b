"""Preflight rules of checkpoints: verl's `<role>.checkpoint` sections (save_contents, load_contents and
strict are honoured by the engines' save/load, trainer/checkpoint.py the parts' layout; what cannot be
honoured yet is refused), how many to keep, and the checkpoint to resume from.

The checkpoint dir and a resume path on the machine that trains are `machine.py`'s.
"""

from __future__ import annotations

from typing import Any, List, Sequence

from verl_lite.config.verl_names import YET
from verl_lite.preflight.roles import RoleView, view_of


def checkpoint_problems(view: RoleView) -> List[str]:
    """The role's checkpoint section: asynchronous saving is refused."""
    if view.section.checkpoint.async_save:
        return [f"{view.prefix}.checkpoint.async_save=True: asynchronous saving is {YET}: checkpoints are written "
                "synchronously (and atomically); set it to False"]
    return []


def resume_warnings(cfg: Any) -> List[str]:
    """A resume_from_path that the resume mode does not read."""
    if cfg.trainer.resume_from_path and cfg.trainer.resume_mode != "resume_path":
        return [f"trainer.resume_from_path has no effect with trainer.resume_mode={cfg.trainer.resume_mode} "
                "(set trainer.resume_mode=resume_path to resume from it)"]
    return []


def checkpoint_warnings(cfg: Any, views: Sequence[RoleView]) -> List[str]:
    """checkpoint.strict acts on the hf_model export only (as in verl, where it goes to mbridge's
    save_hf_weights); max_critic_ckpt_to_keep only where a critic runs."""
    warnings = []
    for view in views:
        if view.role == "ref":
            continue
        section = view.section.checkpoint
        if not section.strict and "hf_model" not in list(section.save_contents):
            warnings.append(f"{view.prefix}.checkpoint.strict=False has no effect: it checks the names of "
                            "the hf_model export, and save_contents has no hf_model")
        if cfg.trainer.resume_mode == "disable" and section.load_contents is not None:
            warnings.append(f"{view.prefix}.checkpoint.load_contents has no effect: trainer.resume_mode=disable "
                            "loads no checkpoint")
    t = cfg.trainer
    if view_of(views, "critic") is None and t.max_critic_ckpt_to_keep != t.max_actor_ckpt_to_keep:
        warnings.append(f"trainer.max_critic_ckpt_to_keep={t.max_critic_ckpt_to_keep} has no effect: this run has no "
                        "critic (critic.enable, algorithm.adv_estimator)")
    return warnings
