"""Qwen35VLModelProvider / Qwen35VLMoEModelProvider (de93536e models/qwen_vl/qwen35_vl_provider.py:87, 235):
`experimental_attention_variant = "gated_delta_net"` (l.113, 264), `position_embedding_type = "mrope"`,
`provide` returns `Qwen3VLModel` with the hybrid GDN / attention block spec (l.200-227, 379-437). No
`use_triton_gdn` / `use_ascend_gdn` fields (MindSpeed-Bridge's providers have them): setting them is
refused by name, as the real dataclass refuses an unknown attribute."""

from megatron.bridge.models.qwen_vl.qwen3_vl_provider import Qwen3VLModelProvider


class Qwen35VLModelProvider(Qwen3VLModelProvider):
    pass


class Qwen35VLMoEModelProvider(Qwen35VLModelProvider):
    pass
