"""Rewards: rule rewards (GSM8K, MATH, DAPO, PRIME math, Geometry3K, Search-R1, synthetic tasks),
custom reward functions from files, and the reward managers that score a batch (naive, dapo:
`build_reward_manager`). Importing it imports no torch (nor sympy: the scorers that need it run it
in a helper process)."""

from verl_lite.reward.custom import load_custom_reward_fn
from verl_lite.reward.registry import build_reward_manager
from verl_lite.reward.settings import REWARD_MANAGERS
from verl_lite.reward.manager import (
    SUPPORTED_SOURCES,
    RewardFunctionError,
    RewardManager,
    default_compute_score,
    has_default_scorer,
    no_default_scorer_reason,
)

__all__ = [
    "REWARD_MANAGERS",
    "SUPPORTED_SOURCES",
    "RewardFunctionError",
    "RewardManager",
    "build_reward_manager",
    "default_compute_score",
    "has_default_scorer",
    "load_custom_reward_fn",
    "no_default_scorer_reason",
]
