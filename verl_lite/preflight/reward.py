"""Preflight rules of the reward settings: reward models (`reward_model.enable`), the reward manager
by name (`reward_model.reward_manager`, verl: `reward.reward_manager.name`) and its `reward_kwargs`
(DAPO's overlong buffer, as verl's DAPORewardManager asserts it): reward/settings.py's rules, which the
managers raise too when built; and a custom_reward_function.name without a path.

The custom reward file itself is loaded and checked by `reward_file.py`; the data sources the default
scorers take by `data.py`.
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config import schema
from verl_lite.config.verl_names import YET
from verl_lite.reward.settings import reward_manager_problems


def reward_problems(cfg: Any) -> List[str]:
    """Reward models, then the reward manager and its kwargs."""
    problems = []
    if cfg.reward_model.enable:
        problems.append(f"reward_model.enable=True: reward models are {YET}: use a rule-based or "
                        "custom_reward_function.path reward")
    return problems + reward_manager_problems(cfg)


def custom_reward_warnings(cfg: Any) -> List[str]:
    """custom_reward_function.name names a function of custom_reward_function.path only."""
    if cfg.custom_reward_function.path is None and \
            cfg.custom_reward_function.name != schema.CustomRewardFunctionConfig().name:
        return [f"custom_reward_function.name={cfg.custom_reward_function.name!r} has no effect without "
                "custom_reward_function.path (the default rule rewards are used)"]
    return []
