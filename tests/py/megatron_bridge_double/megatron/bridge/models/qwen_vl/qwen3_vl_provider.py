"""Qwen3VLModelProvider / Qwen3VLMoEModelProvider (de93536e models/qwen_vl/qwen3_vl_provider.py:36, 147):
`provide(pre_process, post_process, vp_stage)` returns `Qwen3VLModel` (l.108-130, l.258). The double's
provide_distributed_model wraps verl_lite's language-model chunk (tower included, on the first stage) in
the Qwen3VLModel double."""

from megatron.bridge.models.gpt_provider import GPTModelProvider
from megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model import Qwen3VLModel


class Qwen3VLModelProvider(GPTModelProvider):
    MODEL_CLASS = Qwen3VLModel


class Qwen3VLMoEModelProvider(Qwen3VLModelProvider):
    pass
