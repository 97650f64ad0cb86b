"""`import mindspeed.megatron_adaptor` patches megatron; `repatch(args)` re-applies with overrides
(mindspeed/megatron_adaptor.py at core_r0.16.0 :25-66 and core_r0.18.0 :20-63: the same but for
core_r0.16.0's `from torch_npu.contrib import transfer_to_npu`, recorded here, not imported).

Import: parse MindSpeed's arguments once, apply the pre patches, then the feature patches (which
imports megatron.core). The double refuses to import when megatron is already imported (rule 10).

repatch(args): remove_patches(); full = get_full_args(); setattr(full, k, v) for k, v in
args.items() (no validation, no renaming, no conversion; keys persist); pre patches; patches.
"""

import sys

from mindspeed import _stack
from mindspeed._double import STATE, megatron_parallel_initialized, record
from mindspeed.args_utils import get_full_args, get_mindspeed_args
from mindspeed.features import apply_features_patches, apply_features_pre_patches
from mindspeed.patch_utils import MindSpeedPatchesManager

_IS_FEATURES_PATCHED = False

_early = sorted(m for m in sys.modules if m == "megatron" or m.startswith("megatron."))
if _early:
    record("megatron_imported_before_mindspeed", modules=_early[:5])
    raise RuntimeError(
        "megatron was imported before mindspeed.megatron_adaptor "
        f"({', '.join(_early[:3])}, ...): bindings made at import (e.g. jit_fuser) escape MindSpeed's "
        "patches. Import mindspeed.megatron_adaptor first."
    )


if _stack.FACTS["import"]["adaptor_imports_transfer_to_npu"]:
    record("transfer_to_npu")  # the real import maps torch.cuda / nccl to npu / hccl


def patch_features() -> None:
    global _IS_FEATURES_PATCHED
    if _IS_FEATURES_PATCHED:
        return
    args = get_mindspeed_args()
    apply_features_pre_patches(args)
    apply_features_patches(args)
    _IS_FEATURES_PATCHED = True
    record("adaptor_imported")


def repatch(args) -> None:
    after_init = megatron_parallel_initialized()
    MindSpeedPatchesManager.remove_patches()
    full = get_full_args()
    for key, value in args.items():
        setattr(full, key, value)
    apply_features_pre_patches(full)
    apply_features_patches(full)
    record("repatch", args=dict(args), after_parallel_init=after_init)
    ring = _stack.FACTS["context_parallel"]["wraps_initialize_model_parallel"]  # core_r0.16.0 only
    if ring and after_init and int(getattr(full, "context_parallel_size", 1) or 1) > 1 and not STATE["cp_ring_groups"]:
        raise RuntimeError(
            "Context parallel ranks for ring intra window not initialized "
            "(repatch ran after initialize_model_parallel, so the CP wrapper came too late)"
        )


patch_features()
