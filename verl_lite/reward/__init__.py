"""Rewards: rule rewards (GSM8K, MATH, synthetic tasks), custom reward functions from files, and the
manager that scores a batch. Importing it imports no torch."""

from verl_lite.reward.custom import load_custom_reward_fn
from verl_lite.reward.manager import (
    SUPPORTED_SOURCES,
    RewardFunctionError,
    RewardManager,
    default_compute_score,
    has_default_scorer,
)

__all__ = [
    "SUPPORTED_SOURCES",
    "RewardFunctionError",
    "RewardManager",
    "default_compute_score",
    "has_default_scorer",
    "load_custom_reward_fn",
]
