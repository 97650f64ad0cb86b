"""The MindSpeed features verl_lite's engines meet, as patch registrations, per stack (`mindspeed._stack`
reads which the stack has from the facts table; file:line below at core_r0.16.0 e4772499 unless noted):

- basic (level 0, always): TransformerConfig.__init__ / __post_init__ wrappers (arguments_basic.py); the
  double adds a recording wrapper on initialize_model_parallel.
- pre-patches (core_r0.16.0 only, requirements_basic.py:29-71): the stand-in fla functions, each with the
  replacement the table names (with or without fla_npu). core_r0.18.0 has none: MegatronAdaptor does it.
- the GatedDeltaNet swap: the stack's own feature module (core_r0.16.0:
  features_manager/context_parallel/gated_delta_net.py, conditional; core_r0.18.0:
  features_manager/npu_enhancement/npu_enhancement.py, always).
- GenerateMaskFeature (on by default): wrapper on DotProductAttention.forward when CP < 2.
- FusionAttentionFeature (`use_flash_attn`): replaces DotProductAttention.forward when CP < 2 (both stacks).
- BatchInvariantFeature (core_r0.16.0 only): `use_flash_attn_npu_batch_invariant` replaces it too, no CP
  gate, and needs flash_attn_npu.
- ContextParallelFeature (CP > 1): on core_r0.16.0 wraps initialize_model_parallel to build the ring
  groups (context_parallel_feature.py:128); core_r0.18.0 creates no groups.
"""

import dataclasses
import functools
import importlib
from typing import Any

from mindspeed import _stack
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


def resolve(replacement: str) -> Any:
    """'module:name' of the table -> the double's object at that path."""
    module, _, name = replacement.partition(":")
    return getattr(importlib.import_module(module), name)


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
    """core_r0.16.0's level-0 pre-patch (requirements_basic.py:29-71): the fla names MindSpeed stands in,
    created (create_dummy) where fla is not installed, each with the table's replacement for whether
    fla_npu imports (the real code tries `import fla_npu` and falls back)."""
    try:
        import fla_npu  # noqa: F401  (the device layer: present where flash-linear-attention-npu is installed)

        have_fla_npu = True
    except ImportError:
        have_fla_npu = False
    for target, choices in _stack.FACTS["fla_stand_ins"].items():
        entry = choices.get("always") or choices.get("with fla_npu" if have_fla_npu else "without fla_npu")
        if entry is None:
            continue  # causal_conv1d: only with fla_npu
        pm.register_patch(target, resolve(entry["replacement"]), create_dummy=entry["create_dummy"])
    record("pre_patches", fla_npu=have_fla_npu)
    pm.apply_patches()


def apply_features_patches(args: Any) -> None:
    level = args.optimization_level  # AttributeError without it, as in MindSpeed
    _ = args.optimizer_selection
    pm.register_patch(TC + ".__init__", transformer_config_init_wrapper)
    pm.register_patch(TC + ".__post_init__", transformer_config_post_init_wrapper)
    pm.register_patch(INIT_MP, initialize_model_parallel_record_wrapper)
    _gdn_feature().register_patches(pm, args)
    cp = _cp(args)
    if cp < 2:
        pm.register_patch(DPA_FORWARD, dot_product_attention_forward_wrapper)
    if level >= 2 and getattr(args, "use_flash_attn", False) and cp < 2:
        pm.register_patch(DPA_FORWARD, dot_product_attention_forward_impl)
    if _stack.FACTS["batch_invariant"] and getattr(args, "use_flash_attn_npu_batch_invariant", False):
        try:
            importlib.import_module("flash_attn_npu")  # validate_args (batch_invariant.py:71-72)
        except ImportError:
            raise ImportError("--use-flash-attn-npu-batch-invariant requires flash-attention-npu to be installed.")
        pm.register_patch(DPA_FORWARD, dot_product_attention_flash_attn_npu_forward)
    if cp > 1 and _stack.FACTS["context_parallel"]["wraps_initialize_model_parallel"]:
        pm.register_patch(INIT_MP, initialize_model_parallel_cp_wrapper)
    pm.apply_patches()


def _gdn_feature() -> Any:
    """The stack's GatedDeltaNet-swap feature: the module at the path the table's swap was read from."""
    path = _stack.FACTS["gdn_swap"]["source"].split(":", 1)[1].rsplit(":", 1)[0]
    return importlib.import_module(path[: -len(".py")].replace("/", "."))
