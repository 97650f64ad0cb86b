"""torch_npu profiler contract double (see ../README.md): only torch_npu.profiler, torch_npu.npu.mstx and
torch_npu.npu.memory's allocation history."""

__version__ = "2.6.0"

from torch_npu import npu, profiler  # noqa: E402,F401
