"""A batch is a plain dict: tensors with the batch on dim 0, and lists of per-sample Python values.

Helpers split it over data-parallel ranks and micro-batches and put it back together. Plain dicts
travel through Ray's object store as-is.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import torch

Batch = Dict[str, Any]


def batch_size(batch: Batch) -> int:
    for v in batch.values():
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return int(v.shape[0])
        if isinstance(v, list):
            return len(v)
    raise ValueError(f"batch has no per-sample field (keys: {sorted(batch)})")


def select(batch: Batch, index: Sequence[int]) -> Batch:
    idx = torch.as_tensor(list(index), dtype=torch.long)
    out: Batch = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            out[k] = v.index_select(0, idx)
        elif isinstance(v, list):
            out[k] = [v[i] for i in idx.tolist()]
        else:
            out[k] = v  # scalars / metadata are shared
    return out


def split(batch: Batch, sizes: Sequence[int]) -> List[Batch]:
    parts, start = [], 0
    for s in sizes:
        parts.append(select(batch, range(start, start + s)))
        start += s
    if start != batch_size(batch):
        raise ValueError(f"split sizes {list(sizes)} do not add up to the batch size {batch_size(batch)}")
    return parts


def chunk(batch: Batch, chunks: int) -> List[Batch]:
    """Split into `chunks` equal contiguous parts (the size must divide evenly)."""
    n = batch_size(batch)
    if chunks <= 0 or n % chunks:
        raise ValueError(f"cannot split a batch of {n} into {chunks} equal parts")
    return split(batch, [n // chunks] * chunks)


def split_by_size(batch: Batch, part_size: int) -> List[Batch]:
    """Contiguous parts of at most part_size samples."""
    n = batch_size(batch)
    if part_size <= 0:
        raise ValueError(f"micro/mini batch size must be positive, got {part_size}")
    sizes = [min(part_size, n - s) for s in range(0, n, part_size)]
    return split(batch, sizes)


def concat(batches: Sequence[Batch]) -> Batch:
    if not batches:
        return {}
    out: Batch = {}
    for k, v in batches[0].items():
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            out[k] = torch.cat([b[k] for b in batches], dim=0)
        elif isinstance(v, list):
            out[k] = [x for b in batches for x in b[k]]
        else:
            out[k] = v
    return out


def union(a: Batch, b: Batch) -> Batch:
    out = dict(a)
    out.update(b)
    return out


def left_pad(seqs: List[List[int]], pad_id: int) -> Dict[str, torch.Tensor]:
    """Token id lists as one left-padded (input_ids, attention_mask) pair: the generation input."""
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[pad_id] * (width - len(s)) + list(s) for s in seqs], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], dtype=torch.long)
    return {"input_ids": ids, "attention_mask": mask}
