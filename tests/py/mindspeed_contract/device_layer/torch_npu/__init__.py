"""Device-layer double of torch_npu, for importing MindSpeed's real Python source on CPU
(tests/py/mindspeed_contract). It holds what MindSpeed's import and the engines' path touch, each
written from torch_npu's documented API; kernels compute on CPU (`_ops`). `torch.npu` is this
module's `npu`. Nothing else in verl_lite sees it."""

import types

import torch

from . import npu  # noqa: F401

if not hasattr(torch, "npu"):
    torch.npu = npu
__version__ = "2.7.1"  # the torch_npu of verl's Ascend image (torch 2.7.1 line); MindSpeed only prints it


class _Options:
    """ProcessGroupHCCL.Options, HCCL's process-group options: no `hccl_config` attribute (older torch_npu),
    so MindSpeed's get_nccl_options wrapper leaves the options alone (functional/profiler/profiler_info.py)."""


_C = types.SimpleNamespace(_distributed_c10d=types.SimpleNamespace(
    ProcessGroupHCCL=types.SimpleNamespace(Options=_Options)))

# dtypes torch_npu has no kernels for (the quantized ones); MindSpeed's dist-train sync tool skips them
unsupported_dtype = [torch.quint8, torch.quint4x2, torch.quint2x4, torch.qint32, torch.qint8]

from torch_npu._ops import npu_fusion_attention  # noqa: E402,F401
