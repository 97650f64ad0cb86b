"""Building the run's reward manager (how a batch of responses becomes one reward each): the class
`reward_model.reward_manager` names (`settings.REWARD_MANAGERS`), scoring with the custom reward function or
the default rule rewards; settings it cannot run are refused first (`settings.reward_manager_problems`)."""

from __future__ import annotations

import importlib
from typing import Any

from verl_lite.reward.custom import load_custom_reward_fn
from verl_lite.reward.settings import REWARD_MANAGERS, reward_manager_problems


def build_reward_manager(cfg: Any) -> Any:
    """The reward manager of `cfg`: the one reward_model.reward_manager names, scoring with
    custom_reward_function.path/name (or the default rule rewards). ValueError naming what its settings
    cannot run (settings.reward_manager_problems, the preflight's rule)."""
    problems = reward_manager_problems(cfg)
    if problems:
        raise ValueError("; ".join(problems))
    module_name, _, cls_name = REWARD_MANAGERS[cfg.reward_model.reward_manager].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    custom = cfg.custom_reward_function
    score_fn = load_custom_reward_fn(custom.path, custom.name) if custom.path else None
    if cfg.reward_model.reward_manager == "dapo":
        return cls(score_fn, cfg.reward_model.reward_kwargs)
    if cfg.reward_model.reward_manager == "gdpo":
        return cls(score_fn, str(cfg.trainer.experiment_name))
    return cls(score_fn)
