"""Rewards: rule rewards (GSM8K, synthetic tasks), custom reward functions from files, and the
manager that scores a batch. Importing it imports no torch."""

from verl_lite.reward.custom import load_custom_reward_fn
from verl_lite.reward.manager import RewardFunctionError, RewardManager, default_compute_score

__all__ = ["RewardFunctionError", "RewardManager", "default_compute_score", "load_custom_reward_fn"]
