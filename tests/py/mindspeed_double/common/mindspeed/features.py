"""The MindSpeed features verl_lite's engines meet, as patch registrations.

Names and conditions follow MindSpeed core_r0.16.0:
- basic (level 0, always): TransformerConfig.__init__ / __post_init__ wrappers; the double adds a
  recording wrapper on initialize_model_parallel.
- GenerateMaskFeature (on by default): wrapper on DotProductAttention.forward when CP < 2.
- FusionAttentionFeature (`use_flash_attn`): replaces DotProductAttention.forward when CP < 2.
- BatchInvariantFeature (`use_flash_attn_npu_batch_invariant`): replaces it too, no CP gate.
- ContextParallelFeature (CP > 1): wraps initialize_model_parallel to build the ring groups.
- FP8 reuse validation (`fp8_reuse_quantized_weight` needs fp8) runs in the __post_init__ wrapper.
"""

import dataclasses
import functools
from typing import Any

from mindspeed._double import STATE, record
from mindspeed.args_utils import get_full_args
from mindspeed.patch_utils import MindSpeedPatchesManager as pm

DPA_FORWARD = "megatron.core.transformer.dot_product_attention.DotProductAttention.forward"
INIT_MP = "megatron.core.parallel_state.initialize_model_parallel"
TC = "megatron.core.transformer.transformer_config.TransformerConfig"


def _count(kind: str) -> None:
    STATE["attention_calls"][kind] = STATE["attention_calls"].get(kind, 0) + 1


def _cp(args: Any) -> int:
    return int(getattr(args, "context_parallel_size", 1) or 1)


# ---------------------------------------------------------------------------- basic


def transformer_config_init_wrapper(init):
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        full = get_full_args()
        fields = {f.name for f in dataclasses.fields(type(self))}
        for key, value in vars(full).items():
            if key in fields and key not in kwargs:
                kwargs[key] = value
        init(self, *args, **kwargs)
        for key, value in vars(full).items():
            if key not in fields:
                setattr(self, key, value)

    return wrapper


def transformer_config_post_init_wrapper(post_init):
    @functools.wraps(post_init)
    def wrapper(self):
        post_init(self)
        full = get_full_args()
        if getattr(full, "fp8_reuse_quantized_weight", False) and not getattr(self, "fp8", None):
            raise ValueError("fp8_reuse_quantized_weight is only valid when FP8 training is enabled")
        if getattr(full, "use_flash_attn_npu_batch_invariant", False) and int(self.context_parallel_size) != 1:
            raise AssertionError("--use-flash-attn-npu-batch-invariant does not support context parallelism yet.")

    return wrapper


def initialize_model_parallel_record_wrapper(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        record("initialize_model_parallel", context_parallel_size=kwargs.get("context_parallel_size", 1))
        return fn(*args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------- attention


def dot_product_attention_forward_wrapper(forward):
    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        _count("generate_mask")
        return forward(self, *args, **kwargs)

    return wrapper


def _delegate(kind: str, name: str):
    def forward(self, *args, **kwargs):
        _count(kind)  # the NPU kernel's stand-in: megatron's own CPU attention
        original = pm.patches_info[DPA_FORWARD].original
        return original(self, *args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    return forward


dot_product_attention_forward_impl = _delegate("fusion_attention", "dot_product_attention_forward_impl")
dot_product_attention_flash_attn_npu_forward = _delegate(
    "batch_invariant", "dot_product_attention_flash_attn_npu_forward"
)


# ---------------------------------------------------------------------------- context parallel


def initialize_model_parallel_cp_wrapper(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        STATE["cp_ring_groups"] = True  # the real wrapper creates ring-window / send-recv groups here
        record("cp_ring_groups_created")
        return out

    return wrapper


# ---------------------------------------------------------------------------- entry points


def apply_features_pre_patches(args: Any) -> None:
    record("pre_patches")


def apply_features_patches(args: Any) -> None:
    level = args.optimization_level  # AttributeError without it, as in MindSpeed
    _ = args.optimizer_selection
    pm.register_patch(TC + ".__init__", transformer_config_init_wrapper)
    pm.register_patch(TC + ".__post_init__", transformer_config_post_init_wrapper)
    pm.register_patch(INIT_MP, initialize_model_parallel_record_wrapper)
    cp = _cp(args)
    if cp < 2:
        pm.register_patch(DPA_FORWARD, dot_product_attention_forward_wrapper)
    if level >= 2 and getattr(args, "use_flash_attn", False) and cp < 2:
        pm.register_patch(DPA_FORWARD, dot_product_attention_forward_impl)
    if getattr(args, "use_flash_attn_npu_batch_invariant", False):
        pm.register_patch(DPA_FORWARD, dot_product_attention_flash_attn_npu_forward)
    if cp > 1:
        pm.register_patch(INIT_MP, initialize_model_parallel_cp_wrapper)
    pm.apply_patches()
