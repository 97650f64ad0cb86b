"""How the Megatron engines call a model chunk: the forward convention of each kind of chunk, and a
prepared micro-batch turned into the call an external bridge's model takes, its outputs mapped back.

Forward conventions (`forward_convention`; the engine marks the chunks an external bridge built with
`mark_forward_convention`, `CONVENTION_ATTR`):

- verl_lite's own chunks (`OWN`, no mark): `chunk(ids, position_ids, mask4d)` on the left-padded layout
  (`batch.prepare_batch`), or `chunk(ids_thd, position_ids, None, packed_seq_params=)`
  (`batch.prepare_packed_batch`); images through the chunk's `visual_inputs`. Unchanged.
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

Used by the engine (`mark_forward_convention` after an external build) and the schedule (`external_item`).
Nothing here imports megatron at module import time (MindSpeed must patch it first on Ascend).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Dict, List, Optional

import torch

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron import batch as megatron_batch
from verl_lite.engine.megatron.gdn import megatron_gdn_packed_refusal

logger = logging.getLogger(__name__)

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
    from its class (`forward_convention`, which cites the classes' sources), and with the engine's
    device (verl builds the masks for npu differently: `external_item`); a model of unknown forward
    is refused here, before anything calls it."""

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
    return megatron_batch.zero_invalid(output[rows, index], valid)


def external_item(item: Dict[str, Any], convention: str, model: Any) -> Dict[str, Any]:
    """A prepared micro-batch (`batch.prepare_batch` / `batch.prepare_packed_batch`) as the call an external bridge's
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
        out["unpack"] = functools.partial(megatron_batch.unpack_window, item=item)
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
        # the model's own alignment: TP (CP = 1)
        params = megatron_batch.prepare_packed_batch(batch, device, pad, align=tp)
        out["call"] = ((), dict(input_ids=right["input_ids"], attention_mask=right["keep"], position_ids=None,
                                packed_seq_params=params["packed_seq_params"], **mm))
        out["unpack"] = functools.partial(megatron_batch.unpack_window, item=params)
        out["shape"] = (params["input_ids"].shape[1], 1)
        return out
    right = _right_padded(batch, pad, tp)  # verl's build_vlm_attn_mask_bshd: aligned to TP; no mask on npu
    keep = right["keep"]
    out["call"] = ((), dict(input_ids=right["input_ids"], attention_mask=None if on == "npu" else keep,
                            position_ids=None, **mm))
    out["unpack"] = functools.partial(_pick_rows, index=right["index"], valid=right["valid"])
    out["shape"] = (keep.shape[1], keep.shape[0])
    return out
