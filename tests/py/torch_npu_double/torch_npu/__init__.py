"""torch_npu profiler contract double (see ../README.md): only torch_npu.profiler and torch_npu.npu.mstx."""

__version__ = "2.6.0"

from torch_npu import npu, profiler  # noqa: E402,F401
