"""One pass of a call's micro-batches through the Megatron model: the engine's step (`forward_backward`:
the images check, padded or packed (THD) micro-batches, the vision inputs) and megatron's pipeline schedule
over them (`run_schedule`: the loss on the last stage, the outputs on every stage).

Used by `verl_lite.engine.megatron.engine`. Like the engine, nothing here imports megatron at module
import time (MindSpeed must patch it first on Ascend): the functions import it when called.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from verl_lite.decisions import packing_mode
from verl_lite.engine.base import LossFn
from verl_lite.engine.megatron import batch as megatron_batch
from verl_lite.engine.megatron import conventions
from verl_lite.engine.megatron import model as megatron_model

# postprocess(model output, micro-batch, with_entropy) -> the engine's outputs (log_probs | values)
Postprocess = Callable[[torch.Tensor, Dict[str, Any], bool], Dict[str, torch.Tensor]]


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
    external bridge built is called in its own convention (`conventions.external_item`), its outputs mapped back.
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.pipeline_parallel import get_forward_backward_func

    n = len(prepared)
    outputs: List[Dict[str, Any]] = []
    convention = conventions.convention_of(model[0])
    pipelined = mpu.get_pipeline_model_parallel_world_size() > 1
    if convention != conventions.OWN:
        prepared = [conventions.external_item(item, convention, model[0]) for item in prepared]
        variable_shapes = variable_shapes or (pipelined and len({item["shape"] for item in prepared}) > 1)

    def loss_step(item: Dict[str, Any], output: torch.Tensor):
        if "unpack" in item:  # an external model's output in its own layout
            output = item["unpack"](output)
        elif item.get("packed_seq_params") is not None:
            output = megatron_batch.unpack_window(output, item)  # postprocess reads the last R + 1 columns of the padded layout
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


def refuse_images_without_tower(role: str, bridge: Any, micro_batches: List[Dict[str, Any]]) -> None:
    """A micro-batch with images (multi_modal_inputs) needs a bridge that builds the vision tower
    (Qwen3-VL, Qwen3.5's ...ForConditionalGeneration): a text model's bridge would drop them."""
    if bridge is not None and getattr(bridge, "has_vision", False):
        return
    if any(m for mb in micro_batches for m in (mb.get("multi_modal_inputs") or [])):
        raise ValueError(f"{role}: the batch has images (multi_modal_inputs) but {type(bridge).__name__} builds no "
                         "vision tower on the Megatron engine (a text model); use the vision-language checkpoint "
                         "(Qwen3-VL, Qwen3.5 ...ForConditionalGeneration), or the torch engine (strategy=fsdp)")


def forward_backward(engine: Any, micro_batches: List[Dict[str, Any]], loss_fn: Optional[LossFn],
                     forward_only: bool, calculate_entropy: bool) -> List[Dict[str, Any]]:
    """`MegatronLMEngine.forward_backward`'s pass: the micro-batches checked (optimizer, loss, CP, images),
    prepared padded or packed (THD, each sequence aligned to TP) as the engine decided, with the vision
    inputs of a vision-language bridge, then run through `run_schedule` with the engine's postprocess."""
    from megatron.core import parallel_state as mpu

    if not micro_batches:
        return []
    if not forward_only:
        engine.need_optimizer("forward_backward(forward_only=False)")
        if loss_fn is None:
            raise ValueError("forward_backward(forward_only=False) needs a loss_fn")
    if mpu.get_context_parallel_world_size() > 1:
        raise NotImplementedError("context_parallel_size > 1 is not supported by verl_lite's Megatron forward yet")
    refuse_images_without_tower(engine.role, engine.bridge if engine.external is None else engine.external, micro_batches)
    pipelined = mpu.get_pipeline_model_parallel_world_size() > 1
    # Micro-batches of different shapes (dynamic batch size) cross pipeline stages with their shapes
    # sent first (megatron's variable_seq_lengths); equal shapes keep one fixed p2p shape.
    variable = pipelined and len({tuple(mb["input_ids"].shape) for mb in micro_batches}) > 1
    pad_id = int(getattr(engine.hf_config, "pad_token_id", 0) or 0)
    packed = engine.remove_padding
    if packed and engine.bridge is not None and engine.bridge.has_vision and any(
            m for mb in micro_batches for m in (mb.get("multi_modal_inputs") or [])):
        if packing_mode.tri_state(engine.model_config.use_remove_padding) is True:
            raise ValueError(f"{engine.role}: model.use_remove_padding=True: {packing_mode.VISION_PACKED_REFUSAL}")
        packed = False  # auto: a call with images runs padded (the packed-capable model takes both layouts)
    if packed:
        # each sequence aligned to TP, as verl's preprocess_packed_seqs; packed shapes differ per micro-batch
        align = mpu.get_tensor_model_parallel_world_size()
        prepared = [megatron_batch.prepare_packed_batch(mb, engine.torch_device(), pad_id, align=align)
                    for mb in micro_batches]
        variable = pipelined and len({tuple(p["input_ids"].shape) for p in prepared}) > 1
    else:
        # sequence parallelism splits the sequence over TP: its length must divide by TP (left padding)
        multiple = mpu.get_tensor_model_parallel_world_size() if getattr(engine.tf_config, "sequence_parallel", False) else 1
        prepared = [megatron_batch.prepare_batch(mb, engine.torch_device(), 0, pad_id, multiple=multiple)
                    for mb in micro_batches]
        if engine.bridge is not None and engine.bridge.has_vision:
            for chunk in engine.model:  # nothing of an earlier (failed) run stays queued
                store = getattr(megatron_model.unwrap(chunk), "deepstack", None)
                if store is not None:
                    store.reset()
            for item, mb in zip(prepared, micro_batches):
                item["visual"] = engine.bridge.visual_inputs(mb, engine.torch_device())
    return run_schedule(engine.model, prepared, engine.postprocess, loss_fn, forward_only,
                        calculate_entropy, variable_shapes=variable)
