"""Registers the built-in bridges at import, as the real `megatron.bridge.models` does."""

from megatron.bridge.models import builtin as _builtin  # registers the built-in bridges
from megatron.bridge.models.conversion.auto_bridge import AutoBridge
from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["AutoBridge", "GPTModelProvider", "MegatronModelBridge"]
del _builtin
