"""The `vllm` rollout slot. verl_lite does not ship a vLLM integration yet: selecting it fails
with a message saying what works instead, before any worker starts generating."""

from __future__ import annotations

import importlib.util
from typing import Any


class VLLMRollout:
    def __init__(self, *args: Any, **kwargs: Any):
        if importlib.util.find_spec("vllm") is None:
            raise ImportError(
                "actor_rollout_ref.rollout.name=vllm needs the vllm package (vllm on CUDA, vllm-ascend on NPU), "
                "which is not installed; use actor_rollout_ref.rollout.name=hf to sample with transformers"
            )
        raise NotImplementedError(
            "actor_rollout_ref.rollout.name=vllm: the vLLM rollout is not implemented in verl_lite yet; "
            "use actor_rollout_ref.rollout.name=hf"
        )
