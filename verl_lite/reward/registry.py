"""Reward managers by name (`reward_model.reward_manager`; verl: `reward.reward_manager.name`): how
a batch of responses becomes one reward each. Names map to "module:Class" strings imported on
lookup; verl's managers verl_lite lacks are refused by name with the reason.

    naive  one call of the score function per response (verl's NaiveRewardManager)
    dapo   naive plus DAPO's overlong penalty and `acc` (verl's DAPORewardManager; reward_kwargs)
    gdpo   naive plus `acc` for a score that is a number (verl's GDPORewardManager); the keys of a
           returned dict are the reward components algorithm.adv_estimator=gdpo reads
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

REWARD_MANAGERS: Dict[str, str] = {
    "naive": "verl_lite.reward.manager:RewardManager",
    "dapo": "verl_lite.reward.dapo:DAPORewardManager",
    "gdpo": "verl_lite.reward.dapo:GDPORewardManager",
}
# verl's other managers (verl/workers/reward_manager, verl/experimental/reward_loop/reward_manager)
REFUSED: Dict[str, str] = {
    "prime": "PRIME's manager scores in a process pool with a per-sample timeout; use naive (with "
             "custom_reward_function.path for a scorer of your own)",
    "batch": "the batch manager calls the score function once with lists of the whole batch; use naive with a "
             "per-response custom_reward_function",
    "remote": "the remote manager sends each response to a reward service; use naive with a "
              "custom_reward_function that calls it (an async def is awaited, 64 at a time)",
    "rate_limited": "the rate-limited manager throttles calls to a reward API; use naive with a "
                    "custom_reward_function that throttles itself",
}


def reward_manager_problems(cfg: Any) -> List[str]:
    """Why the reward settings cannot run (empty when they can)."""
    from verl_lite.reward.dapo import overlong_problems

    rm = cfg.reward_model
    name = rm.reward_manager
    if name in REFUSED:
        return [f"reward_model.reward_manager={name!r}: verl's {name} reward manager is not supported by verl_lite "
                f"({REFUSED[name]}); supported: {', '.join(REWARD_MANAGERS)}"]
    if name not in REWARD_MANAGERS:
        return [f"reward_model.reward_manager={name!r} is not a reward manager; choose one of "
                f"{', '.join(REWARD_MANAGERS)}"]
    kwargs = rm.reward_kwargs
    if name != "dapo":
        changed = [k for k, v in (("max_resp_len", kwargs.max_resp_len is not None),
                                  ("overlong_buffer_cfg.enable", kwargs.overlong_buffer_cfg.enable)) if v]
        if changed:
            return [f"reward_model.reward_kwargs.{changed[0]} is set with reward_model.reward_manager={name!r}: the "
                    "reward kwargs are read by the dapo manager only (as in verl); set "
                    "reward_model.reward_manager=dapo, or remove them"]
        return []
    return overlong_problems(kwargs)


def build_reward_manager(cfg: Any) -> Any:
    """The reward manager of `cfg`: the one reward_model.reward_manager names, scoring with
    custom_reward_function.path/name (or the default rule rewards)."""
    from verl_lite.reward.custom import load_custom_reward_fn

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
