"""The Megatron engines' micro-batches: the batch contract, the left-padded micro-batch with its causal +
padding mask, the packed (THD) micro-batch for remove-padding, and a packed output mapped back to the
padded layout's last R + 1 columns (where the engines read their outputs).

Used by the engine's step (`schedule`) and the external-bridge forward (`conventions`). Like the engine,
nothing here imports megatron at module import time (MindSpeed must patch it first on Ascend): the
functions import it when called.
"""

from __future__ import annotations

from typing import Any, Dict

import torch

BATCH_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


def attention_mask_4d(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) 1=token -> (B, 1, T, T) bool, True where attention is masked (future or padding)."""
    t = attention_mask.shape[1]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=attention_mask.device), diagonal=1)
    return causal[None, None] | (attention_mask == 0)[:, None, None, :]


def prepare_batch(micro_batch: Dict[str, Any], device: torch.device, pad_to: int, pad_token_id: int,
                  multiple: int = 1) -> Dict[str, Any]:
    """The micro-batch on `device` with the model's inputs, left-padded to `pad_to` columns, rounded
    up to a multiple of `multiple` (sequence parallelism splits the sequence over TP ranks). Left
    padding keeps the responses in the last R columns, where the engines read their outputs, so the
    pad needs no stripping."""
    missing = [k for k in BATCH_KEYS if k not in micro_batch]
    if missing:
        raise KeyError(f"micro-batch lacks {missing} (engine batch contract: {', '.join(BATCH_KEYS)})")
    batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in micro_batch.items()}
    ids, mask, pos = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    width = max(pad_to, ids.shape[1])
    extra = -(-width // multiple) * multiple - ids.shape[1]
    if extra > 0:
        ids = torch.nn.functional.pad(ids, (extra, 0), value=pad_token_id)
        mask = torch.nn.functional.pad(mask, (extra, 0), value=0)
        pos = torch.nn.functional.pad(pos, (extra, 0), value=0)
    return {"batch": batch, "input_ids": ids, "position_ids": pos, "mask4d": attention_mask_4d(mask),
            "pad_token_id": int(pad_token_id)}


def prepare_packed_batch(micro_batch: Dict[str, Any], device: torch.device, pad_token_id: int,
                         align: int = 1) -> Dict[str, Any]:
    """The micro-batch packed (remove-padding, as verl's `preprocess_packed_seqs`): the real tokens of
    each row one after the other in one row of shape (1, N), each sequence padded at its end to a
    multiple of `align` (verl aligns to TP: sequence parallelism splits the packed length over TP),
    and megatron's `PackedSeqParams` (qkv_format "thd", cu_seqlens over the aligned sequences, as
    verl gives them). Each sequence's own padding follows its tokens, so causal attention and the GDN
    recurrence never carry it into them. Position ids restart at 0 in each sequence; megatron's
    rotary embedding does the same for thd input with cu_seqlens.

    "index"/"valid" map the outputs back: `unpack_window` takes the packed output at the padded
    layout's last R + 1 columns (where the engines read their outputs)."""
    from megatron.core.packed_seq_params import PackedSeqParams

    missing = [k for k in BATCH_KEYS if k not in micro_batch]
    if missing:
        raise KeyError(f"micro-batch lacks {missing} (engine batch contract: {', '.join(BATCH_KEYS)})")
    if align < 1:
        raise ValueError(f"packed alignment must be a positive integer, got {align!r}")
    batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in micro_batch.items()}
    mask = batch["attention_mask"].bool()
    lengths = mask.sum(dim=1)
    padded = (lengths + align - 1) // align * align
    if bool((lengths == 0).any()):
        raise ValueError(f"packed micro-batch: rows {torch.nonzero(lengths == 0).flatten().tolist()} have no tokens")
    starts = torch.cumsum(padded, 0) - padded
    total = int(padded.sum())
    rank = mask.long().cumsum(dim=1) - 1  # a real token's place in its sequence
    where = starts[:, None] + rank  # its place in the pack
    ids = torch.full((total,), int(pad_token_id), dtype=batch["input_ids"].dtype, device=device)
    ids[where[mask]] = batch["input_ids"][mask]
    seq_of = torch.repeat_interleave(torch.arange(len(padded), device=device), padded)
    pos = torch.arange(total, device=device) - starts[seq_of]
    cu = torch.zeros(len(padded) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.cumsum(padded, 0).to(torch.int32)
    longest = int(padded.max())
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu,
                             cu_seqlens_kv_padded=cu, max_seqlen_q=longest, max_seqlen_kv=longest)
    window = batch["responses"].shape[1] + 1
    return {"batch": batch, "input_ids": ids.unsqueeze(0), "position_ids": pos.unsqueeze(0), "mask4d": None,
            "packed_seq_params": params, "index": where[:, -window:].clamp(min=0), "valid": mask[:, -window:],
            "tokens": int(lengths.sum()), "packed_tokens": total, "pad_token_id": int(pad_token_id)}


def unpack_window(output: torch.Tensor, item: Dict[str, Any]) -> torch.Tensor:
    """(1, N, ...) outputs of a packed forward at the padded layout's last R + 1 columns, (B, R + 1, ...),
    zeros where the padded layout has padding (differentiable: a gather)."""
    return zero_invalid(output[0][item["index"]], item["valid"])


def zero_invalid(picked: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[b, R + 1, ...] picked outputs with zeros where `valid` [b, R + 1] is False."""
    return torch.where(valid.reshape(valid.shape + (1,) * (picked.dim() - 2)), picked, torch.zeros_like(picked))
