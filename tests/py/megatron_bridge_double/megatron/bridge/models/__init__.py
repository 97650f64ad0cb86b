"""Registers the built-in bridges at import, as the real `megatron.bridge.models` does
(src/megatron/bridge/models/__init__.py imports every model family; the double has the Qwen ones)."""

from megatron.bridge.models import qwen as _qwen  # registers Qwen3, Qwen3-MoE, Qwen3-Next
from megatron.bridge.models import qwen_vl as _qwen_vl  # registers Qwen3-VL (dense, MoE), Qwen3.5 (dense, MoE)
from megatron.bridge.models.conversion.auto_bridge import AutoBridge
from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
from megatron.bridge.models.gpt_provider import GPTModelProvider

__all__ = ["AutoBridge", "GPTModelProvider", "MegatronModelBridge"]
del _qwen, _qwen_vl
