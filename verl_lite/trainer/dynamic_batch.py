"""Micro-batches for the engines: fixed-size, or packed by a token budget (verl's dynamic batch size).

verl's `use_dynamic_bsz` with `ppo_max_token_len_per_gpu` (training) and `log_prob_use_dynamic_bsz`
with `log_prob_max_token_len_per_gpu` (log-prob passes) size micro-batches by tokens instead of
sequences. Here a dynamic micro-batch is padded, not packed: its rows are cut to the columns any of
them uses (the prompts' common left padding and the responses' common right padding go), so a
micro-batch of short sequences computes only its own width. What the budget counts is that padded
shape, rows x width, which bounds the real tokens too (verl counts the real tokens of packed
sequences; a padded micro-batch computes every cell of its shape, so its shape is what must fit).

Packing: sequences sorted by length, longest first, filled into micro-batches while rows x width
stays within the budget (so sequences of similar length share a micro-batch and little padding is
computed). A sequence longer than the budget on its own is refused, as verl asserts
(`max_token_len must be greater than the sequence length`). Every data-parallel rank runs the
same number of micro-batches (FSDP's collectives run per forward): the count is the largest over
the ranks, reached by halving the largest micro-batches; `multiple_of` rounds it up for megatron's
interleaved pipeline schedule (verl's `num_batches_divided_by`).

Losses stay equal to the fixed-size run's: the engines' loss functions normalise by the mini-batch's
global token and sequence counts, not by the micro-batch, so any split adds up to the same loss;
the loss function sees each micro-batch at the batch's full response width (the model's outputs
padded back with zeros in the cut columns, which no mask selects) so a width-dependent mode
(`seq-mean-token-sum-norm` divides by the response width) is not changed by the cut either.
Outputs come back in the batch's original order at the full width.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from verl_lite import batch as batches
from verl_lite.batch import Batch, batch_size, select
from verl_lite.device import device_of_backend

# The model's inputs (T columns) and the response-wide fields (R columns) a trimmed micro-batch carries;
# every other field reaches the loss function from the untrimmed micro-batch.
SEQUENCE_KEYS = ("input_ids", "attention_mask", "position_ids")
RESPONSE_KEYS = ("responses", "response_mask")
# per-sample fields a trimmed micro-batch keeps: the pixel inputs of its rows (vision-language models)
SAMPLE_KEYS = ("multi_modal_inputs",)
MICRO_BATCH_ID = "micro_batch_id"


def row_extents(batch: Batch) -> tuple:
    """Per row: (prompt columns in use, response columns in use), from the attention and response masks.

    The layout is the engine's batch contract: left-padded prompts, then R right-padded response columns."""
    mask = batch["attention_mask"]
    r = batch["responses"].shape[1]
    used = mask.bool()
    if "response_mask" in batch:
        used = used.clone()
        used[:, -r:] |= batch["response_mask"].bool()
    prompt, response = used[:, :-r], used[:, -r:]
    cols_p = torch.arange(prompt.shape[1])
    cols_r = torch.arange(1, r + 1)
    # prompt width: from the first used column to the end of the prompt; response: up to the last used
    first = torch.where(prompt, cols_p, torch.full_like(cols_p, prompt.shape[1])).min(dim=1).values
    p_len = prompt.shape[1] - first
    r_len = torch.where(response, cols_r, torch.zeros_like(cols_r)).max(dim=1).values
    return p_len.tolist(), r_len.tolist()


def pack_by_tokens(prompt_lens: Sequence[int], response_lens: Sequence[int], max_token_len: int,
                   min_count: int = 1, multiple_of: int = 1) -> List[List[int]]:
    """Row indices per micro-batch: each micro-batch's rows x (longest prompt + longest response) stays
    within `max_token_len`; at least `min_count` micro-batches, a multiple of `multiple_of`."""
    n = len(prompt_lens)
    if max_token_len < 1:
        raise ValueError(f"max_token_len={max_token_len}: the token budget must be a positive number of tokens")
    widths = [p + r for p, r in zip(prompt_lens, response_lens)]
    too_long = [(i, w) for i, w in enumerate(widths) if w > max_token_len]
    if too_long:
        i, w = max(too_long, key=lambda item: item[1])
        raise ValueError(f"sequence {i} has {w} tokens, more than the token budget max_token_len={max_token_len} "
                         f"({len(too_long)} of {n} sequences do): raise the *_max_token_len_per_gpu setting to at "
                         f"least the prompt + response length ({w}), as verl requires")
    order = sorted(range(n), key=lambda i: (widths[i], response_lens[i]), reverse=True)
    groups: List[List[int]] = []
    group: List[int] = []
    max_p = max_r = 0
    for i in order:
        p, r = max(max_p, prompt_lens[i]), max(max_r, response_lens[i])
        if group and (len(group) + 1) * (p + r) > max_token_len:
            groups.append(group)
            group, p, r = [], prompt_lens[i], response_lens[i]
        group.append(i)
        max_p, max_r = p, r
    if group:
        groups.append(group)
    target = max(len(groups), int(min_count))
    target = int(math.ceil(target / multiple_of) * multiple_of)
    if target > n:
        raise ValueError(f"{target} micro-batches are needed (the most any data-parallel rank has, rounded up to a "
                         f"multiple of {multiple_of}) but this rank holds only {n} sequences")

    def cost(g: List[int]) -> int:
        return len(g) * (max(prompt_lens[i] for i in g) + max(response_lens[i] for i in g))

    while len(groups) < target:  # halve the largest splittable micro-batch (it stays sorted by length)
        k = max((j for j in range(len(groups)) if len(groups[j]) > 1), key=lambda j: cost(groups[j]))
        g = groups[k]
        groups[k:k + 1] = [g[:len(g) // 2], g[len(g) // 2:]]
    return groups


def trim(batch: Batch, prompt_lens: Sequence[int], response_lens: Sequence[int]) -> Batch:
    """The model's inputs cut to the columns some row uses: the common left padding of the prompts and
    the common right padding of the responses go. Only SEQUENCE_KEYS (the last dim: 3-D positions are
    (B, 3, T)), RESPONSE_KEYS, SAMPLE_KEYS and scalars stay."""
    t = batch["input_ids"].shape[1]
    r = batch["responses"].shape[1]
    left = (t - r) - max(prompt_lens)
    keep_r = max(max(response_lens), 1)  # at least one response column: the engines slice the last R
    right = r - keep_r
    out: Batch = {}
    for key, value in batch.items():
        if key in SEQUENCE_KEYS:
            out[key] = value[..., left:t - right]
        elif key in SAMPLE_KEYS:
            out[key] = value
        elif key in RESPONSE_KEYS:
            out[key] = value[:, :keep_r]
        elif not isinstance(value, (torch.Tensor, list)) or (isinstance(value, torch.Tensor) and value.dim() == 0):
            out[key] = value
    return out


def _pad_right(value: torch.Tensor, width: int) -> torch.Tensor:
    extra = width - value.shape[1]
    if extra <= 0:
        return value
    pad = [0, 0] * (value.dim() - 2) + [0, extra]
    return F.pad(value, pad, value=0.0)


class MicroBatches:
    """One pass's micro-batches: `parts` go to `engine.forward_backward`; `loss()` wraps the loss
    function, `gather()` puts outputs back in the batch's order.

    Fixed size (`max_token_len` None): contiguous parts of `micro_batch_size` rows, untouched.
    Token budget: `pack_by_tokens`, each part trimmed (`trim`); `count_sync(n)` returns the number of
    micro-batches every data-parallel rank must run (the maximum over them; identity by default).
    """

    def __init__(self, batch: Batch, micro_batch_size: Optional[int] = None, max_token_len: Optional[int] = None,
                 count_sync: Optional[Callable[[int], int]] = None, multiple_of: int = 1):
        self.width = batch["responses"].shape[1] if "responses" in batch else None
        self.dynamic = max_token_len is not None
        if not self.dynamic:
            if micro_batch_size is None:
                raise ValueError("micro-batches need micro_batch_size or max_token_len")
            self.full = batches.split_by_size(batch, int(micro_batch_size))
            self.parts = self.full
            n = batch_size(batch)
            self.indices = [list(range(s, min(s + int(micro_batch_size), n))) for s in range(0, n, int(micro_batch_size))]
            return
        p_len, r_len = row_extents(batch)
        groups = pack_by_tokens(p_len, r_len, int(max_token_len), multiple_of=multiple_of)
        if count_sync is not None:
            wanted = int(count_sync(len(groups)))
            if wanted != len(groups):
                groups = pack_by_tokens(p_len, r_len, int(max_token_len), min_count=wanted, multiple_of=multiple_of)
        self.indices = groups
        self.full = [select(batch, g) for g in groups]
        self.parts = []
        for k, (g, mb) in enumerate(zip(groups, self.full)):
            part = trim(mb, [p_len[i] for i in g], [r_len[i] for i in g])
            part[MICRO_BATCH_ID] = k
            self.parts.append(part)

    def padded_tokens(self) -> int:
        """Cells the model computes over all micro-batches (rows x columns of each)."""
        return sum(int(p["input_ids"].numel()) for p in self.parts)

    def loss(self, loss_fn: Optional[Callable]) -> Optional[Callable]:
        """The loss function as the engine calls it: it gets the micro-batch's tensors on the outputs'
        device (the torch engine hands the loss its CPU micro-batch), and for a trimmed part the outputs
        padded back to the full response width and the untrimmed micro-batch."""
        if loss_fn is None:
            return None

        def wrapped(outputs: Dict[str, Any], part: Batch):
            device = next(iter(outputs.values())).device
            full = self.full[int(part[MICRO_BATCH_ID])] if self.dynamic else part
            full = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in full.items()}
            if self.dynamic:
                outputs = {k: (_pad_right(v, self.width) if isinstance(v, torch.Tensor) and v.dim() >= 2 else v)
                           for k, v in outputs.items()}
            return loss_fn(outputs, full)

        return wrapped

    def gather(self, outputs: List[Dict[str, Any]], key: str) -> torch.Tensor:
        """`key` of every micro-batch's outputs, at the full response width, in the batch's order."""
        values = [_pad_right(o[key], self.width) if self.dynamic else o[key] for o in outputs]
        merged = torch.cat(values)
        if not self.dynamic:
            return merged
        order = torch.tensor([i for g in self.indices for i in g], dtype=torch.long)
        restored = torch.empty_like(merged)
        restored[order] = merged
        return restored


def engine_micro_batches(engine: Any, batch: Batch, micro_batch_size: int, max_token_len: Optional[int]) -> MicroBatches:
    """A pass's micro-batches on `engine`: fixed ones of `micro_batch_size` rows, or packed by the token
    budget `max_token_len` when it is set. The budget is per rank: a sequence-parallel group shares each
    micro-batch, so its budget is the role's times the SP size (as verl counts it); every DP rank runs
    the same count (max_over_ranks), a multiple of the engine's `micro_batch_multiple()`."""
    if max_token_len is not None:
        max_token_len *= engine.sequence_parallel_size()
    return MicroBatches(batch, micro_batch_size=int(micro_batch_size), max_token_len=max_token_len,
                        count_sync=max_over_ranks, multiple_of=engine.micro_batch_multiple())


def max_over_ranks(count: int) -> int:
    """The largest `count` over all ranks of the default process group (itself without one).

    Every rank of a worker group calls this for the same pass; ranks that hold the same data (TP/PP
    peers on megatron) give the same count, so the maximum over the world is the data-parallel one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return count
    device = device_of_backend(dist.get_backend())
    if device != "cpu":
        device = f"{device}:{getattr(torch, device).current_device()}"
    value = torch.tensor([count], dtype=torch.long, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())
