"""torch_npu.npu of the double: mstx and memory only."""

from torch_npu.npu import memory, mstx  # noqa: F401
