"""Reward managers by name (`reward_model.reward_manager`; verl: `reward.reward_manager.name`): how
a batch of responses becomes one reward each. Names map to "module:Class" strings imported on
lookup. Which settings can run (verl's managers verl_lite lacks, refused by name with the reason; the
reward kwargs) is the preflight's (`preflight/reward.py`), which a run applies before it builds one.

    naive  one call of the score function per response (verl's NaiveRewardManager)
    dapo   naive plus DAPO's overlong penalty and `acc` (verl's DAPORewardManager; reward_kwargs)
    gdpo   naive plus `acc` for a score that is a number (verl's GDPORewardManager); the keys of a
           returned dict are the reward components algorithm.adv_estimator=gdpo reads
"""

from __future__ import annotations

import importlib
from typing import Any, Dict

REWARD_MANAGERS: Dict[str, str] = {
    "naive": "verl_lite.reward.manager:RewardManager",
    "dapo": "verl_lite.reward.dapo:DAPORewardManager",
    "gdpo": "verl_lite.reward.dapo:GDPORewardManager",
}


def build_reward_manager(cfg: Any) -> Any:
    """The reward manager of `cfg`: the one reward_model.reward_manager names, scoring with
    custom_reward_function.path/name (or the default rule rewards). ValueError for a name that is not
    one (its settings are checked by the preflight, `preflight/reward.py`, before a run builds it)."""
    from verl_lite.reward.custom import load_custom_reward_fn

    name = cfg.reward_model.reward_manager
    if name not in REWARD_MANAGERS:
        raise ValueError(f"reward_model.reward_manager={name!r} is not a reward manager; choose one of "
                         f"{', '.join(REWARD_MANAGERS)}")
    module_name, _, cls_name = REWARD_MANAGERS[name].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    custom = cfg.custom_reward_function
    score_fn = load_custom_reward_fn(custom.path, custom.name) if custom.path else None
    if cfg.reward_model.reward_manager == "dapo":
        return cls(score_fn, cfg.reward_model.reward_kwargs)
    if cfg.reward_model.reward_manager == "gdpo":
        return cls(score_fn, str(cfg.trainer.experiment_name))
    return cls(score_fn)
