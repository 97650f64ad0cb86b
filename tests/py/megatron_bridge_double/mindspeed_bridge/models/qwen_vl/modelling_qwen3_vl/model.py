"""MindSpeed-Bridge's Qwen3VLModel (mindspeed_bridge/models/qwen_vl/modelling_qwen3_vl/model.py, the class its
qwen_vl/__init__.py exports and its Qwen3.5 bridges build): its source was not read; it is documented as
Megatron-Bridge's Qwen3-VL model (language model, vision model, mRoPE, attention, GDN) adapted to Ascend,
so the double gives it Megatron-Bridge's forward contract (the Megatron-Bridge double's Qwen3VLModel)."""

from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model import Qwen3VLModel as _MegatronBridgeQwen3VLModel


class Qwen3VLModel(_MegatronBridgeQwen3VLModel):
    pass
