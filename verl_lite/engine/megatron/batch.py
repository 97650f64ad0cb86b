"""Batches through the Megatron model: the micro-batch contract, the causal + padding mask, packed
(THD) micro-batches for remove-padding, the vocab-parallel log-softmax, and one pass of megatron's
pipeline schedule over the micro-batches.

Used by `verl_lite.engine.megatron.engine`. Like the engine, nothing here imports megatron at module
import time (MindSpeed must patch it first on Ascend): the functions import it when called.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.base import LossFn
from verl_lite.engine.logits import log_probs_and_entropy, sum_pi_squared

BATCH_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")

# postprocess(model output, micro-batch, with_entropy) -> the engine's outputs (log_probs | values)
Postprocess = Callable[[torch.Tensor, Dict[str, Any], bool], Dict[str, torch.Tensor]]


def vocab_parallel_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, with_entropy: bool, compiled: bool = False,
    chunk_size: Optional[int] = None, checkpoint: bool = False
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log p(target) and entropy from logits split over the vocabulary across TP ranks
    (`verl_lite.engine.logits`, torch.compile'd with `compiled`: the role's use_torch_compile).

    `logits` (B, R, V/tp) is this rank's slice; padded vocabulary entries (index >= vocab_size)
    are excluded. Sums cross ranks with an all-reduce whose backward is the identity, which is
    right because everything after it is replicated on every TP rank. `chunk_size` and `checkpoint`: the
    role's entropy_from_logits_with_chunking and entropy_checkpointing (every TP rank walks the same chunks,
    so the reductions pair up, in backward's recompute too).
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as reduce

    start = mpu.get_tensor_model_parallel_rank() * logits.shape[-1]
    return log_probs_and_entropy(logits, targets, with_entropy, compiled, vocab_start=start, vocab_size=vocab_size,
                                 reduce_max=_tp_reduce_max, reduce_sum=reduce, chunk_size=chunk_size,
                                 checkpoint=checkpoint)


def _tp_reduce_max(peak: torch.Tensor) -> None:
    """The max over the TP group, in place (the vocabulary-parallel softmaxes' peak)."""
    from megatron.core import parallel_state as mpu

    if mpu.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX,
                                     group=mpu.get_tensor_model_parallel_group())


def vocab_parallel_sum_pi_squared(logits: torch.Tensor, vocab_size: int,
                                  chunk_size: Optional[int] = None) -> torch.Tensor:
    """sum over the vocabulary of softmax(logits)^2 from logits split over the vocabulary across TP
    ranks (verl's vocab_parallel_sum_pi_squared): each rank's sums of exp(z - max) and of its square,
    all-reduced over the TP group (the max too). (B, R, V/tp) -> (B, R), detached."""
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as reduce

    start = mpu.get_tensor_model_parallel_rank() * logits.shape[-1]
    return sum_pi_squared(logits, vocab_start=start, vocab_size=vocab_size, reduce_max=_tp_reduce_max,
                          reduce_sum=reduce, chunk_size=chunk_size)


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
    return {"batch": batch, "input_ids": ids, "position_ids": pos, "mask4d": attention_mask_4d(mask)}


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
            "tokens": int(lengths.sum()), "packed_tokens": total}


def unpack_window(output: torch.Tensor, item: Dict[str, Any]) -> torch.Tensor:
    """(1, N, ...) outputs of a packed forward at the padded layout's last R + 1 columns, (B, R + 1, ...),
    zeros where the padded layout has padding (differentiable: a gather)."""
    index, valid = item["index"], item["valid"]
    picked = output[0][index]
    return torch.where(valid.reshape(valid.shape + (1,) * (picked.dim() - 2)), picked, torch.zeros_like(picked))


@contextlib.contextmanager
def variable_seq_lengths(model: List[Any]):
    """megatron's `variable_seq_lengths` on for one schedule run: pipeline stages exchange each
    activation's shape before the activation, so micro-batches may differ in rows and columns."""
    from megatron.core.utils import get_model_config

    config = get_model_config(model[0])
    before = getattr(config, "variable_seq_lengths", False)
    config.variable_seq_lengths = True
    try:
        yield
    finally:
        config.variable_seq_lengths = before


def run_schedule(model: List[Any], prepared: List[Dict[str, Any]], postprocess: Postprocess,
                 loss_fn: Optional[LossFn], forward_only: bool, calculate_entropy: bool,
                 variable_shapes: bool = False) -> List[Dict[str, Any]]:
    """Forward (and backward) of the prepared micro-batches through megatron's pipeline schedule.

    The loss function sees the outputs on the last pipeline stage and its loss is back-propagated as
    is (the schedule's division by the number of micro-batches is undone: the caller scales each
    loss). Returns one record per micro-batch (outputs detached on CPU, "metrics"), on every stage.
    `variable_shapes`: the micro-batches differ in shape (see `variable_seq_lengths`).
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.pipeline_parallel import get_forward_backward_func

    n = len(prepared)
    outputs: List[Dict[str, Any]] = []

    def loss_step(item: Dict[str, Any], output: torch.Tensor):
        if item.get("packed_seq_params") is not None:
            output = unpack_window(output, item)  # postprocess reads the last R + 1 columns of the padded layout
        result = postprocess(output, item["batch"], calculate_entropy)
        if forward_only:
            loss, metrics = output.sum() * 0.0, {}
        else:
            loss, metrics = loss_fn(result, item["batch"])
        record = {k: v.detach().float().cpu() for k, v in result.items()}
        record["metrics"] = {k: float(v) for k, v in (metrics or {}).items()}
        outputs.append(record)
        # The schedule divides by the number of micro-batches; the caller already scaled.
        return loss * n, {"loss": loss.detach()}

    def forward_step(data_iterator, chunk):
        item = next(data_iterator)
        target = getattr(chunk, "module", chunk)  # DDP-wrapped when it trains
        if hasattr(target, "visual_inputs"):  # a vision-language chunk: this micro-batch's images (or None)
            target.visual_inputs = item.get("visual")
        if item.get("packed_seq_params") is not None:
            output = chunk(item["input_ids"], item["position_ids"], None, packed_seq_params=item["packed_seq_params"])
        else:
            output = chunk(item["input_ids"], item["position_ids"], item["mask4d"])
        return output, functools.partial(loss_step, item)

    chunks = len(model)
    iterator = iter(prepared) if chunks == 1 else [iter(prepared) for _ in range(chunks)]
    grad_ctx = torch.no_grad() if forward_only else contextlib.nullcontext()
    shapes_ctx = variable_seq_lengths(model) if variable_shapes else contextlib.nullcontext()
    with grad_ctx, shapes_ctx:
        get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iterator,
            model=model if chunks > 1 else model[0],
            num_microbatches=n,
            seq_length=max(item["input_ids"].shape[1] for item in prepared),
            micro_batch_size=max(item["input_ids"].shape[0] for item in prepared),
            forward_only=forward_only,
        )
    if mpu.get_pipeline_model_parallel_world_size() > 1:
        holder = [outputs]
        torch.distributed.broadcast_object_list(
            holder, src=mpu.get_pipeline_model_parallel_last_rank(), group=mpu.get_pipeline_model_parallel_group()
        )
        outputs = holder[0]
    return outputs
