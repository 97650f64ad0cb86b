"""verl_lite: launcher and core for RL post-training (GRPO, PPO) on Ascend NPUs and NVIDIA GPUs.

Importing this package is cheap on purpose: it imports no torch, megatron, mindspeed, torch_npu,
ray or transformers. Heavy imports live inside the modules that need them.
"""

__version__ = "0.1.0"
