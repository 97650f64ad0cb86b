"""`preprocess_packed_seqs` of Megatron-Bridge de93536e
src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/utils.py:657-745 (context parallel size 1; the double
refuses CP > 1): each row's tokens where the [b, s] keep mask is True, packed one after the other into
[1, T], every sequence padded at its end to a multiple of TP (`align_size = tp_size`, l.680), and the
PackedSeqParams describing that packing: cu_seqlens_q = cu_seqlens_kv = the *_padded ones = the padded
cumsum, max_seqlen = the longest padded sequence (l.730-738). It indexes with the mask
(`input_ids[i, attention_mask[i]]`, l.710), so a non-bool mask would index by position."""

from typing import Any, Tuple

import torch


def preprocess_packed_seqs(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                           pre_process: bool = True) -> Tuple[torch.Tensor, Any]:
    from megatron.core import parallel_state as mpu
    from megatron.core.packed_seq_params import PackedSeqParams

    if mpu.get_context_parallel_world_size() > 1:
        raise NotImplementedError("the Qwen3VLModel double packs with context parallel size 1 only")
    batch_size = input_ids.shape[0]
    align = mpu.get_tensor_model_parallel_world_size()
    seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    padded = seqlens + (align - seqlens % align) % align
    cu_padded = torch.zeros(batch_size + 1, dtype=torch.int32, device=input_ids.device)
    cu_padded[1:] = torch.cumsum(padded, dim=0)
    starts = cu_padded.tolist()
    shape = list(input_ids.shape[1:])
    shape[0] = int(padded.sum())
    packed = None
    if pre_process:
        packed = torch.zeros(shape, dtype=input_ids.dtype, device=input_ids.device)
        for i, n in enumerate(seqlens.tolist()):
            packed[starts[i]: starts[i] + n] = input_ids[i, attention_mask[i]]
    longest = int(padded.max())
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu_padded, max_seqlen_q=longest, cu_seqlens_kv=cu_padded,
                             max_seqlen_kv=longest, cu_seqlens_q_padded=cu_padded, cu_seqlens_kv_padded=cu_padded)
    return (packed.unsqueeze(0) if pre_process else input_ids), params
