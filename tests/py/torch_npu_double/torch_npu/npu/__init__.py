"""torch_npu.npu of the double: mstx only."""

from torch_npu.npu import mstx  # noqa: F401
