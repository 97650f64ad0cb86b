"""The reward managers by name (`reward_model.reward_manager`; verl: `reward.reward_manager.name`) and what
they need of their settings: verl's managers verl_lite lacks, refused by name with the reason, reward kwargs
set for a manager that does not read them, and what verl's DAPORewardManager asserts of its overlong
buffer. One home for both callers: the preflight lists these problems (`preflight/reward.py`) and the
managers raise them when built (`registry.build_reward_manager`, `dapo.DAPORewardManager`), so a manager
built from Python cannot ignore them either.

    naive  one call of the score function per response (verl's NaiveRewardManager)
    dapo   naive plus DAPO's overlong penalty and `acc` (verl's DAPORewardManager; reward_kwargs)
    gdpo   naive plus `acc` for a score that is a number (verl's GDPORewardManager); the keys of a
           returned dict are the reward components algorithm.adv_estimator=gdpo reads
"""

from __future__ import annotations

from typing import Any, Dict, List

# name -> "module:Class", imported on lookup (registry.build_reward_manager)
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
    """Why the reward manager settings cannot run (empty when they can)."""
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


def overlong_problems(reward_kwargs: Any) -> List[str]:
    """What verl's DAPORewardManager asserts of its settings, as errors that name the key."""
    buf = reward_kwargs.overlong_buffer_cfg
    if not buf.enable:
        return []
    prefix = "reward_model.reward_kwargs"
    problems = []
    if reward_kwargs.max_resp_len is None:
        problems.append(f"{prefix}.max_resp_len=null with {prefix}.overlong_buffer_cfg.enable=True: the penalty is "
                        f"measured from it; set it (usually to data.max_response_length)")
    if buf.len is None or buf.len <= 0:
        problems.append(f"{prefix}.overlong_buffer_cfg.len={buf.len}: must be positive when the overlong penalty is "
                        f"enabled (or set {prefix}.overlong_buffer_cfg.enable=False)")
    elif reward_kwargs.max_resp_len is not None and reward_kwargs.max_resp_len < buf.len:
        problems.append(f"{prefix}.max_resp_len={reward_kwargs.max_resp_len} is shorter than "
                        f"{prefix}.overlong_buffer_cfg.len={buf.len}: the buffer lies inside max_resp_len")
    if buf.penalty_factor is None:
        problems.append(f"{prefix}.overlong_buffer_cfg.penalty_factor=null: set the penalty at max_resp_len "
                        "(verl's DAPO scripts use 1.0)")
    return problems
