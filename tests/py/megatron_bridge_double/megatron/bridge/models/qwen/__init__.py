"""Megatron-Bridge's Qwen text bridges (de93536e src/megatron/bridge/models/qwen/): each registers with
target megatron-core GPTModel and the GPTModelProvider (Qwen3-Next: its own provider with the GDN hybrid
spec, qwen_provider.py:434)."""

from megatron.bridge.models.qwen.qwen3_bridge import Qwen3Bridge, Qwen3MoEBridge, Qwen3NextBridge

__all__ = ["Qwen3Bridge", "Qwen3MoEBridge", "Qwen3NextBridge"]
