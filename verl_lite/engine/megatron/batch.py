"""Batches through the Megatron model: the micro-batch contract, the causal + padding mask, packed
(THD) micro-batches for remove-padding, the vocab-parallel log-softmax, one pass of megatron's
pipeline schedule over the micro-batches, and the forward convention of each kind of model chunk.

Forward conventions (`forward_convention`; the engine marks the chunks an external bridge built with
`mark_forward_convention`, `CONVENTION_ATTR`):

- verl_lite's own chunks (`OWN`, no mark): `chunk(ids, position_ids, mask4d)` on the left-padded layout
  (`prepare_batch`), or `chunk(ids_thd, position_ids, None, packed_seq_params=)` (`prepare_packed_batch`);
  images through the chunk's `visual_inputs`. Unchanged.
- megatron-core `GPTModel` built by Megatron-Bridge / mbridge (`GPT`: Qwen3, Qwen3-MoE, Qwen3-Next), called
  as verl's `gptmodel_forward_model_engine` calls it (verl 1dda039b `verl/models/mcore/model_forward.py`
  l.355-361, 453-458): THD `model(input_ids=[1, T], attention_mask=None, position_ids=None,
  packed_seq_params=)` (RoPE restarts per sequence from cu_seqlens, core_v0.16.1 `gpt_model.py` `_preprocess`);
  BSHD right-padded `[b, s]` (aligned to TP, `preprocess_bshd_engine` `util.py:658-772`) with a
  `[b, 1, s, s]` True=masked causal + padding mask (verl's `_build_npu_attn_mask`, `util.py:649-655`; the
  form megatron's local attention (cpu) and MindSpeed's (npu) read; on cuda verl's `[b, s]` keep mask) and
  `position_ids` arange. Output `[b, s, V/TP]` (THD `[1, T, V/TP]`, core_v0.16.1 `gpt_model.py:710-712`).
- Megatron-Bridge's `Qwen3VLModel` (`QWEN3_VL`: Qwen3-VL dense/MoE, Qwen3.5 / Qwen3.5-MoE conditional
  generation; de93536e `models/qwen_vl/modelling_qwen3_vl/model.py:236-500`), MindSpeed-Bridge's and
  mbridge's classes of the same name and forward: keywords only (the 4th positional parameter is `labels`,
  model.py:241), right-padded `[b, s]` `input_ids` and a `[b, s]` bool keep mask on EVERY pipeline stage
  (it computes the 3-D rotary positions itself from them, model.py:454-465, and ignores `position_ids`,
  l.289), the images as `pixel_values` / `image_grid_thw` keywords, and for THD `packed_seq_params`
  describing its own packing (each sequence aligned to TP, `utils.py:657-745` `preprocess_packed_seqs`:
  it packs the embeddings and positions itself, l.379-421, 466-479), as verl's `build_vlm_attn_mask_thd`
  / `_bshd` (`util.py:851-891`; BSHD on npu: mask None). Output `[1, T, V/TP]` (THD) or `[b, s, V/TP]`.

The outputs of an external chunk come back in the engine's layout: the last R + 1 columns of the padded
micro-batch (what `postprocess` reads), zeros where it has padding. A model whose Gated DeltaNet layers
refuse packed input (megatron-core < 0.18: core_v0.16.1 `ssm/gated_delta_net.py:295-297`; verl runs
Qwen3.5 BSHD on every bridge, `examples/grpo_trainer/run_qwen3_5_122b_a10b_megatron.sh:36-44`) runs
padded even when the engine packed the micro-batch.

Used by `verl_lite.engine.megatron.engine`. Like the engine, nothing here imports megatron at module
import time (MindSpeed must patch it first on Ascend): the functions import it when called.
"""

from __future__ import annotations

import contextlib
import logging
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.base import LossFn
from verl_lite.engine.logits import log_probs_and_entropy, sum_pi_squared

logger = logging.getLogger(__name__)

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
    return _zero_invalid(output[0][item["index"]], item["valid"])


def _zero_invalid(picked: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[b, R + 1, ...] picked outputs with zeros where `valid` [b, R + 1] is False."""
    return torch.where(valid.reshape(valid.shape + (1,) * (picked.dim() - 2)), picked, torch.zeros_like(picked))


# ---------------------------------------------------------------------------- forward conventions

OWN = "verl_lite"  # verl_lite's own GPTModel chunks (no mark)
GPT = "gpt"  # megatron-core GPTModel built by an external bridge
QWEN3_VL = "qwen3_vl"  # Megatron-Bridge's (MindSpeed-Bridge's, mbridge's) Qwen3VLModel
CONVENTION_ATTR = "verl_lite_forward_convention"  # set on the model an external bridge built
DEVICE_ATTR = "verl_lite_device"  # and the engine's device (npu: verl's masks for Ascend)

# (module, class) of the models whose forward is Megatron-Bridge's Qwen3VLModel.forward:
_QWEN3_VL_CLASSES = (
    # NVIDIA-NeMo/Megatron-Bridge de93536e (and v0.5.0): src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/
    # model.py:50 `class Qwen3VLModel`, forward l.236-500; the target of qwen3_vl_bridge.py:40-45, 206-211 and
    # qwen35_vl_bridge.py:68-73, 403-408
    ("megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model", "Qwen3VLModel"),
    # MindSpeed-Bridge: mindspeed_bridge/models/qwen_vl/__init__.py imports its Qwen3VLModel from
    # .modelling_qwen3_vl.model, the target its qwen35_vl_bridge.py registers for the Qwen3.5 checkpoints
    # (its forward was not read: it is documented as Megatron-Bridge's Qwen3-VL model adapted to Ascend)
    ("mindspeed_bridge.models.qwen_vl.modelling_qwen3_vl.model", "Qwen3VLModel"),
    # ISEEKYAN/mbridge 10cb17f5 mbridge/models/qwen3_vl/model.py `class Qwen3VLModel` (the same forward:
    # labels 4th, padded ids + mask, self-packing with preprocess_packed_seqs)
    ("mbridge.models.qwen3_vl.model", "Qwen3VLModel"),
)
# megatron-core's GPTModel (core_v0.16.1 megatron/core/models/gpt/gpt_model.py, forward l.470-485)
_GPT_CLASSES = (("megatron.core.models.gpt.gpt_model", "GPTModel"),)

_MM_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")


def innermost(chunk: Any) -> Any:
    """The model inside its wrappers (megatron's DDP, Float16Module: each holds it as `.module`)."""
    while isinstance(getattr(chunk, "module", None), torch.nn.Module):
        chunk = chunk.module
    return chunk


def forward_convention(model: Any) -> str:
    """GPT or QWEN3_VL for a model an external bridge built, from its class (its own or a base class);
    a class of unknown forward is refused rather than called in a guessed convention."""
    model = innermost(model)
    names = [(c.__module__, c.__name__) for c in type(model).__mro__]
    if any(n in _QWEN3_VL_CLASSES for n in names):
        return QWEN3_VL
    if any(n in _GPT_CLASSES for n in names):
        return GPT
    cls = type(model)
    raise ValueError(f"the external bridge built a {cls.__module__}.{cls.__qualname__}, whose forward convention "
                     f"verl_lite does not know (it calls megatron-core GPTModel and Megatron-Bridge's Qwen3VLModel "
                     f"as verl does); build this model with verl_lite's own bridges (use_mbridge=True, "
                     f"vanilla_mbridge=False, without Megatron-Bridge installed)")


def convention_of(chunk: Any) -> str:
    """The chunk's forward convention: the mark an external build left on it (or a wrapper), else OWN."""
    while chunk is not None:
        mark = getattr(chunk, CONVENTION_ATTR, None)
        if isinstance(mark, str):
            return mark
        inner = getattr(chunk, "module", None)
        chunk = inner if isinstance(inner, torch.nn.Module) else None
    return OWN


def mark_forward_convention(chunks: List[Any], device: Optional[str] = None) -> str:
    """Mark each built model (inside its Float16Module wrapper, if any) with its forward convention, decided
    from its class (`batch.forward_convention`, which cites the classes' sources), and with the engine's
    device (verl builds the masks for npu differently: `batch.external_item`); a model of unknown forward
    is refused here, before anything calls it."""
    from verl_lite.engine.base import UnsupportedModelError

    try:
        conventions = {forward_convention(chunk) for chunk in chunks}
    except ValueError as e:
        raise UnsupportedModelError(str(e)) from e
    if len(conventions) != 1:
        raise UnsupportedModelError(f"the external bridge built model chunks of different forward conventions: "
                                    f"{sorted(conventions)}")
    convention = conventions.pop()
    for chunk in chunks:
        setattr(innermost(chunk), CONVENTION_ATTR, convention)
        if device is not None:
            setattr(innermost(chunk), DEVICE_ATTR, device)
    logger.info("external bridge: %d model chunk(s) of %s, called in the %s convention", len(chunks),
                type(innermost(chunks[0])).__name__, convention)
    return convention


def packed_input_refusal(model: Any) -> Optional[str]:
    """Why a model takes no packed (THD) input, or None: Gated DeltaNet layers (the provider's
    experimental_attention_variant, Megatron-Bridge de93536e qwen35_vl_provider.py:113, 264) on a
    megatron-core whose GatedDeltaNet refuses it (`gdn.megatron_gdn_packed_refusal`)."""
    config = getattr(innermost(model), "config", None)
    if getattr(config, "experimental_attention_variant", None) != "gated_delta_net":
        return None
    from verl_lite.engine.megatron.gdn import megatron_gdn_packed_refusal

    return megatron_gdn_packed_refusal()


def multi_modal_kwargs(micro_batch: Dict[str, Any], device: torch.device) -> Dict[str, torch.Tensor]:
    """The micro-batch's per-row `multi_modal_inputs` (HF processor dicts, None for text-only rows) as the
    forward keywords verl passes (model_forward.py:291-299): each key concatenated in row order."""
    rows = [r for r in (micro_batch.get("multi_modal_inputs") or []) if r]
    out: Dict[str, torch.Tensor] = {}
    for key in _MM_KEYS:
        parts = [torch.as_tensor(r[key]) for r in rows if r.get(key) is not None]
        if parts:
            if key.endswith("grid_thw"):
                parts = [p.reshape(-1, 3) for p in parts]
            out[key] = torch.cat(parts).to(device)
    return out


def _right_padded(batch: Dict[str, Any], pad_token_id: int, align: int) -> Dict[str, torch.Tensor]:
    """The rows' real tokens from column 0 ([b, s], s = the longest rounded up to `align`), the [b, s] bool keep
    mask, and where the padded layout's last R + 1 columns sit in it (`index`, `valid`)."""
    ids, mask = batch["input_ids"], batch["attention_mask"].bool()
    b = ids.shape[0]
    lengths = mask.sum(dim=1)
    width = max(int(lengths.max()) if b else 0, 1)
    width = -(-width // align) * align
    rank = mask.long().cumsum(dim=1) - 1  # a real token's column in the right-padded row
    rows = torch.arange(b, device=ids.device)[:, None].expand_as(mask)
    right = torch.full((b, width), int(pad_token_id), dtype=ids.dtype, device=ids.device)
    right[rows[mask], rank[mask]] = ids[mask]
    keep = torch.arange(width, device=ids.device)[None, :] < lengths[:, None]
    window = batch["responses"].shape[1] + 1
    return {"input_ids": right, "keep": keep, "index": rank[:, -window:].clamp(min=0), "valid": mask[:, -window:]}


def _npu_style_mask(keep: torch.Tensor) -> torch.Tensor:
    """[b, 1, s, s] True where attention is masked: not (query and key real and causal) (verl's
    `_build_npu_attn_mask`, util.py:649-655)."""
    s = keep.shape[1]
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device=keep.device))
    return (~(keep[:, :, None] & keep[:, None, :] & causal)).unsqueeze(1).contiguous()


def _pick_rows(output: torch.Tensor, index: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[b, s, ...] outputs at `index` per row -> [b, R + 1, ...], zeros where not `valid` (a gather)."""
    rows = torch.arange(index.shape[0], device=index.device)[:, None].expand_as(index)
    return _zero_invalid(output[rows, index], valid)


def external_item(item: Dict[str, Any], convention: str, model: Any) -> Dict[str, Any]:
    """A prepared micro-batch (`prepare_batch` / `prepare_packed_batch`) as the call an external bridge's
    model takes (`forward_convention`): "call" (args, kwargs), "unpack" (model output -> the padded
    layout's last R + 1 columns), "shape" (sequence, micro-batch size of the activations between stages)."""
    from megatron.core import parallel_state as mpu

    batch = item["batch"]
    device = batch["input_ids"].device
    # verl picks the Ascend masks by the machine (is_npu_available); here by the engine's device, which the
    # external build marked (the MindSpeed engines keep "npu" when tests run their tensors on CPU); elsewhere
    # by where the tensors are: cuda takes verl's GPU masks, cpu megatron's local attention's (the npu form)
    on = "npu" if getattr(innermost(model), DEVICE_ATTR, None) == "npu" else device.type
    tp = mpu.get_tensor_model_parallel_world_size()
    pad = int(item.get("pad_token_id", 0))
    packed = item.get("packed_seq_params") is not None and packed_input_refusal(model) is None
    out = {"batch": batch}
    if convention == GPT and packed:  # verl: model(input_ids=[1, T], attention_mask=None, position_ids=None, ...)
        out["call"] = ((), dict(input_ids=item["input_ids"], attention_mask=None, position_ids=None,
                                packed_seq_params=item["packed_seq_params"]))
        out["unpack"] = functools.partial(unpack_window, item=item)
        out["shape"] = (item["input_ids"].shape[1], 1)
        return out
    if convention == GPT:  # BSHD, right-padded as verl's preprocess_bshd_engine
        right = _right_padded(batch, pad, tp)
        keep = right["keep"]
        b, s = keep.shape
        mask = keep if on == "cuda" else _npu_style_mask(keep)
        position_ids = torch.arange(s, device=device)[None, :].expand(b, s)
        out["call"] = ((), dict(input_ids=right["input_ids"], attention_mask=mask, position_ids=position_ids))
        out["unpack"] = functools.partial(_pick_rows, index=right["index"], valid=right["valid"])
        out["shape"] = (s, b)
        return out
    if convention != QWEN3_VL:
        raise ValueError(f"unknown forward convention {convention!r}")
    mm = multi_modal_kwargs(batch, device)
    image_token = getattr(innermost(model), "image_token_id", None)
    if image_token is not None and "pixel_values" not in mm and bool((batch["input_ids"] == int(image_token)).any()):
        count = int((batch["input_ids"] == int(image_token)).sum())
        raise ValueError(f"the micro-batch has {count} image tokens (image_token_id={int(image_token)}) but no "
                         f"pixel inputs: its multi_modal_inputs (pixel_values, image_grid_thw) were dropped on the way "
                         f"to the engine")
    if packed:  # verl's build_vlm_attn_mask_thd: padded ids to the longest row and the keep mask
        right = _right_padded(batch, pad, 1)
        params = prepare_packed_batch(batch, device, pad, align=tp)  # the model's own alignment: TP (CP = 1)
        out["call"] = ((), dict(input_ids=right["input_ids"], attention_mask=right["keep"], position_ids=None,
                                packed_seq_params=params["packed_seq_params"], **mm))
        out["unpack"] = functools.partial(unpack_window, item=params)
        out["shape"] = (params["input_ids"].shape[1], 1)
        return out
    right = _right_padded(batch, pad, tp)  # verl's build_vlm_attn_mask_bshd: aligned to TP; no mask on npu
    keep = right["keep"]
    out["call"] = ((), dict(input_ids=right["input_ids"], attention_mask=None if on == "npu" else keep,
                            position_ids=None, **mm))
    out["unpack"] = functools.partial(_pick_rows, index=right["index"], valid=right["valid"])
    out["shape"] = (keep.shape[1], keep.shape[0])
    return out


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
    `variable_shapes`: the micro-batches differ in shape (see `variable_seq_lengths`). A model an
    external bridge built is called in its own convention (`external_item`), its outputs mapped back.
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.pipeline_parallel import get_forward_backward_func

    n = len(prepared)
    outputs: List[Dict[str, Any]] = []
    convention = convention_of(model[0])
    pipelined = mpu.get_pipeline_model_parallel_world_size() > 1
    if convention != OWN:
        prepared = [external_item(item, convention, model[0]) for item in prepared]
        variable_shapes = variable_shapes or (pipelined and len({item["shape"] for item in prepared}) > 1)

    def loss_step(item: Dict[str, Any], output: torch.Tensor):
        if "unpack" in item:  # an external model's output in its own layout
            output = item["unpack"](output)
        elif item.get("packed_seq_params") is not None:
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
        if "call" in item:  # an external bridge's model, in its own convention
            args, kwargs = item["call"]
            return chunk(*args, **kwargs), functools.partial(loss_step, item)
        target = getattr(chunk, "module", chunk)  # DDP-wrapped when it trains
        if hasattr(target, "visual_inputs"):  # a vision-language chunk: this micro-batch's images (or None)
            target.visual_inputs = item.get("visual")
        if item.get("packed_seq_params") is not None:
            output = chunk(item["input_ids"], item["position_ids"], None, packed_seq_params=item["packed_seq_params"])
        else:
            output = chunk(item["input_ids"], item["position_ids"], item["mask4d"])
        return output, functools.partial(loss_step, item)

    def shape(item: Dict[str, Any]) -> Tuple[int, int]:
        return item["shape"] if "shape" in item else (item["input_ids"].shape[1], item["input_ids"].shape[0])

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
            seq_length=max(shape(item)[0] for item in prepared),
            micro_batch_size=max(shape(item)[1] for item in prepared),
            forward_only=forward_only,
        )
    if pipelined:
        holder = [outputs]
        torch.distributed.broadcast_object_list(
            holder, src=mpu.get_pipeline_model_parallel_last_rank(), group=mpu.get_pipeline_model_parallel_group()
        )
        outputs = holder[0]
    return outputs
