"""torch_npu.npu.mstx range markers (MindSpeed maps torch.cuda.nvtx to them: requirements_basic.py:35-36)."""


def range_start(message, stream=None, domain="default"):
    return 0


def range_end(range_id, domain="default"):
    pass
