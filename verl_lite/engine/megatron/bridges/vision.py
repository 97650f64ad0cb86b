"""The vision tower on a megatron-core GPT chunk, shared by the vision-language bridges (Qwen3-VL
dense and MoE in qwen3_vl.py, Qwen3.5 dense and MoE in qwen3_5_vl.py).

What megatron-core 0.16 lacks, and what is added here (on every device, not a CPU adaptation):
- its `MultimodalRotaryEmbedding` lays the mrope sections out contiguously (Qwen2-VL's
  T..T H..H W..W), not the interleaved T H W T H W ... layout of Qwen3-VL and Qwen3.5, and asks for
  CUDA when built: `InterleavedMRoPE` takes its place on every chunk (megatron's rotary application
  is unchanged; with partial rotary it rotates the first channels of each head and passes the rest);
- GPTModel has no vision tower: the tower is transformers' own module (`Qwen3VLVisionModel`,
  `Qwen3_5VisionModel`, ...), held by the chunk of the first pipeline stage, REPLICATED on every
  tensor-parallel rank (not tensor-parallel); a forward hook on the embedding puts its merged patch
  embeddings at the image placeholder tokens (`image_token_id`), sequence-parallel aware. With
  sequence parallelism each TP rank back-propagates only its part of the sequence into the tower, so
  its weights are marked `sequence_parallel` and megatron's finalize_model_grads sums their grads
  over TP;
- DeepStack (Qwen3-VL; Qwen3.5's tower has none): the tower's DeepStack features are added to the
  hidden states at the image positions after decoder layers 0, 1, ... by forward hooks; with full
  recompute under a pipeline schedule each re-run reads its own micro-batch's features
  (`DeepStackFeatures`). The DeepStack layers must sit on the first pipeline stage (refused otherwise).

Weights: the tower's `model.visual.*` as they are (megatron names `vision.*`), replicated over TP.
"""

from __future__ import annotations

import collections
import importlib
from typing import Any, Callable, Deque, Dict, List, Optional

import torch

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges.base import HFShard, ModelShard, hf_field

VISION_PREFIX = "vision."  # the tower's parameters in a megatron chunk
HF_VISION_PREFIX = "model.visual."


class InterleavedMRoPE(torch.nn.Module):
    """Qwen3-VL's and Qwen3.5's rotary frequencies for 3-D positions, as megatron's rotary embedding
    returns them: [seq, batch, 1, dim] (dim: the rotated part of the head, all of it for Qwen3-VL,
    `partial_rotary_factor` of it for Qwen3.5; megatron rotates the first dim channels and passes the rest). Channel j takes the T position, or H where j % 3 == 1 and
    j < 3 * mrope_section[1], or W where j % 3 == 2 and j < 3 * mrope_section[2]
    (transformers' Qwen3VLTextRotaryEmbedding). Positions come as (B, 3, L) (the batch contract),
    (3, B, L), or (B, L) for text-only rows (all three the same)."""

    def __init__(self, dim: int, base: float, mrope_section: List[int]):
        super().__init__()
        if 2 * sum(mrope_section) != dim:
            raise UnsupportedModelError(f"mrope_section {mrope_section} does not cover the rotary dim {dim} "
                                        f"(its sum must be {dim // 2})")
        self.mrope_section = [int(s) for s in mrope_section]
        inv_freq = 1.0 / (float(base) ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor, mrope_section: Any = None, cp_group: Any = None,
                **kwargs: Any) -> torch.Tensor:
        if cp_group is not None and cp_group.size() > 1:
            raise NotImplementedError("context parallelism with 3-D (mrope) rotary positions")
        pos = position_ids
        if pos.dim() == 2:
            pos = pos.unsqueeze(0).expand(3, -1, -1)
        elif pos.dim() == 3 and pos.shape[1] == 3:
            pos = pos.transpose(0, 1)  # the batch's (B, 3, L) -> (3, B, L)
        else:
            raise ValueError(f"3-D rotary positions must be (B, 3, L) (the batch's position_ids), got {tuple(pos.shape)}")
        freqs = pos[..., None].float() * self.inv_freq.to(pos.device)  # (3, B, L, dim / 2)
        out = freqs[0].clone()
        for axis in (1, 2):
            stop = self.mrope_section[axis] * 3
            out[..., axis:stop:3] = freqs[axis, ..., axis:stop:3]
        emb = torch.cat((out, out), dim=-1)  # (B, L, dim)
        return emb.transpose(0, 1)[:, :, None, :].contiguous()


def _local_part(seq_first: torch.Tensor, sequence_parallel: bool) -> torch.Tensor:
    """This TP rank's part of a [seq, ...] tensor under sequence parallelism (all of it otherwise)."""
    if not sequence_parallel:
        return seq_first
    from megatron.core import parallel_state as mpu

    tp = mpu.get_tensor_model_parallel_world_size()
    if tp == 1:
        return seq_first
    return seq_first.chunk(tp, dim=0)[mpu.get_tensor_model_parallel_rank()]


def visual_inputs(micro_batch: Dict[str, Any], device: torch.device) -> Optional[Dict[str, torch.Tensor]]:
    """The micro-batch's image inputs for the vision tower: the per-sample `multi_modal_inputs`
    (dicts from the HF processor, None for text-only rows) concatenated in row order, which is the
    order of the image tokens in the batch. None without any."""
    rows = micro_batch.get("multi_modal_inputs")
    if rows is None:
        return None
    pixels, grids = [], []
    for row in rows:
        if not row:
            continue
        if row.get("pixel_values_videos") is not None:
            raise NotImplementedError("video inputs (pixel_values_videos) are not supported by verl_lite's "
                                      "Megatron vision-language bridges yet: images only; run videos on the torch "
                                      "engine (strategy=fsdp)")
        if row.get("pixel_values") is None:
            continue
        pixels.append(torch.as_tensor(row["pixel_values"]))
        grids.append(torch.as_tensor(row["image_grid_thw"]).reshape(-1, 3))
    if not pixels:
        return None
    return {"pixel_values": torch.cat(pixels).to(device), "image_grid_thw": torch.cat(grids).to(device)}


class _LeafGradsIntoFeatures(torch.autograd.Function):
    """Identity on the embedding output whose backward hands the grads that the re-run DeepStack
    layers left on `leaves` (detached copies of the features) to the features themselves, and so to
    the vision tower: the re-runs' own backward must not reach into the tower's graph, which the main
    backward walks once, after the decoder layers."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, leaves: List[torch.Tensor], *features: torch.Tensor) -> torch.Tensor:
        ctx.leaves = leaves
        return hidden.clone()  # not a view: megatron may write into the embedding output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        grads = [leaf.grad for leaf in ctx.leaves]
        ctx.leaves = None
        return (grad, None, *grads)


class DeepStackFeatures:
    """The DeepStack features of the micro-batches in flight on a first-stage chunk.

    The layer hooks read the features of the micro-batch whose forward runs now (`current`). With
    full activation recompute megatron re-runs the layers, hooks included, inside the backward, and
    under a pipeline schedule (1F1B) the first stage has by then run the forwards of later
    micro-batches. Backwards come in the order of the forwards, so with recompute each training
    forward's features are also queued as detached leaves; a re-run inside the backward adds the
    oldest micro-batch's leaves, which is released once the `rerun_layers` DeepStack layers megatron
    re-runs have all read it, and `_LeafGradsIntoFeatures` carries the leaves' grads to the tower."""

    def __init__(self, rerun_layers: int):
        self.rerun_layers = rerun_layers
        self.current: Optional[List[torch.Tensor]] = None
        self.pending: Deque[List[torch.Tensor]] = collections.deque()
        self._read: set = set()

    @classmethod
    def for_config(cls, tf_config: Any, deepstack: int) -> "DeepStackFeatures":
        """megatron re-runs every layer (recompute_method uniform) or the first recompute_num_layers of
        the chunk (block) under recompute_granularity full; none otherwise."""
        if getattr(tf_config, "recompute_granularity", None) != "full":
            return cls(0)
        if getattr(tf_config, "recompute_method", None) == "block":
            return cls(min(deepstack, int(getattr(tf_config, "recompute_num_layers", 0) or 0)))
        return cls(deepstack)

    def put(self, features: Optional[List[torch.Tensor]], output: torch.Tensor) -> torch.Tensor:
        """Hold this forward's features; returns the embedding output (wrapped when re-runs will read leaves)."""
        self.current = features
        if not (self.rerun_layers and features and torch.is_grad_enabled()):
            return output
        leaves = [f.detach().requires_grad_(f.requires_grad) for f in features]
        self.pending.append(leaves)
        return _LeafGradsIntoFeatures.apply(output, leaves, *features)

    def get(self, index: int) -> Optional[List[torch.Tensor]]:
        if self.rerun_layers and self.pending and torch._C._current_graph_task_id() != -1:  # a re-run in backward
            features = self.pending[0]
            self._read.add(index)
            if len(self._read) >= self.rerun_layers:
                self.pending.popleft()
                self._read = set()
            return features
        return self.current

    def reset(self) -> None:
        self.current = None
        self.pending.clear()
        self._read = set()


class VisionTower:
    """The vision half of a vision-language bridge, mixed in before its text bridge: the tower and its
    hooks on the first stage's chunk, the interleaved mrope on every chunk, the tower's weights, the
    micro-batch's image inputs. The bridge provides `vision_class` and `hf_class` ("module:Name"),
    `family` (for messages), `mrope_section()`, `rope_theta()` and `rotary_dim(head_dim)`."""

    has_vision = True
    vision_class: str
    hf_class: str
    family: str

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)  # type: ignore[call-arg]
        self.vision = hf_field(hf_config, "vision_config")

    @property
    def deepstack_layers(self) -> int:
        return len(hf_field(self.vision, "deepstack_visual_indexes", None) or [])

    @property
    def image_token_id(self) -> int:
        return int(hf_field(self.hf_config, "image_token_id"))  # type: ignore[attr-defined]

    def visual_inputs(self, micro_batch: Dict[str, Any], device: torch.device) -> Optional[Dict[str, torch.Tensor]]:
        return visual_inputs(micro_batch, device)

    def hf_model_class(self) -> Any:
        """transformers' class whose state dict this bridge maps (the seeded random init uses it)."""
        module, name = self.hf_class.split(":")
        return getattr(importlib.import_module(module), name)

    def mrope_section(self) -> List[int]:
        raise NotImplementedError

    def rope_theta(self) -> float:
        raise NotImplementedError

    def rotary_dim(self, head_dim: int) -> int:
        return head_dim

    # -- the chunk -------------------------------------------------------------------------------

    def finish_chunk(self, module: Any, tf_config: Any) -> None:
        """Interleaved mrope on every chunk; the vision tower and its hooks on the first stage's chunk."""
        module.rotary_pos_emb = InterleavedMRoPE(self.rotary_dim(int(tf_config.kv_channels)), self.rope_theta(),
                                                 self.mrope_section())
        module.position_embedding_type = "mrope"
        module.mrope_section = self.mrope_section()
        module.visual_inputs = None  # set per micro-batch (schedule.run_schedule)
        layers = [int(layer.layer_number) - 1 for layer in module.decoder.layers]
        deep = self.deepstack_layers
        if not module.pre_process:
            if any(i < deep for i in layers):
                raise UnsupportedModelError(
                    f"{self.family} adds DeepStack visual features after decoder layers 0..{deep - 1}, which must sit "
                    f"on the first pipeline stage with the vision tower, but this stage holds layers {layers}: choose "
                    f"a pipeline layout whose first stage has at least {deep} layers")
            return
        missing = [i for i in range(deep) if i not in layers]
        if missing:
            raise UnsupportedModelError(
                f"{self.family}'s DeepStack layers {missing} are not on the first pipeline stage (it holds layers "
                f"{layers}): choose a pipeline layout whose first stage has at least {deep} layers")
        module_name, name = self.vision_class.split(":")
        vision_cls = getattr(importlib.import_module(module_name), name)
        vision = vision_cls._from_config(self.vision, dtype=tf_config.params_dtype)
        if tf_config.sequence_parallel:
            for param in vision.parameters():
                param.sequence_parallel = True  # grads summed over TP by finalize_model_grads
        module.vision = vision
        module.deepstack = DeepStackFeatures.for_config(tf_config, deep)
        module.embedding.register_forward_hook(self._embedding_hook(module), with_kwargs=True)
        for layer in module.decoder.layers:
            index = int(layer.layer_number) - 1
            if index < deep:
                layer.register_forward_hook(self._deepstack_hook(module, index))

    def _embedding_hook(self, module: Any) -> Callable[..., Any]:
        image_token = self.image_token_id
        sp = bool(module.config.sequence_parallel)

        def hook(embedding: Any, args: Any, kwargs: Dict[str, Any], output: torch.Tensor) -> torch.Tensor:
            ids = kwargs.get("input_ids", args[0] if args else None)
            mask = ids == image_token  # [b, s]
            count = int(mask.sum())
            inputs = module.visual_inputs
            if inputs is None:
                module.deepstack.put(None, output)
                if count:
                    raise ValueError(
                        f"the micro-batch has {count} image tokens (image_token_id={image_token}) but no pixel inputs: "
                        f"its multi_modal_inputs (pixel_values, image_grid_thw) were dropped on the way to the engine")
                return output
            vision = module.vision
            result = vision(inputs["pixel_values"].to(next(vision.parameters()).dtype),
                            grid_thw=inputs["image_grid_thw"], return_dict=True)
            embeds = result.pooler_output
            if embeds.shape[0] != count:
                raise ValueError(f"image features and image tokens do not match: {embeds.shape[0]} features from "
                                 f"image_grid_thw, {count} image tokens (image_token_id={image_token}) in input_ids")
            b, s = ids.shape
            where = mask.reshape(-1).nonzero().squeeze(1)

            def seq_first(features: torch.Tensor) -> torch.Tensor:
                full = features.new_zeros(b * s, features.shape[-1]).index_copy(0, where, features.to(output.dtype))
                return _local_part(full.view(b, s, -1).transpose(0, 1), sp)

            local_mask = _local_part(mask.t(), sp).unsqueeze(-1)
            output = torch.where(local_mask, seq_first(embeds), output).contiguous()  # megatron's router views it
            deepstack = getattr(result, "deepstack_features", None) or []  # Qwen3.5's tower has none
            return module.deepstack.put([seq_first(f) for f in deepstack], output)

        return hook

    @staticmethod
    def _deepstack_hook(module: Any, index: int) -> Callable[..., Any]:
        def hook(layer: Any, args: Any, output: Any) -> Any:
            features = module.deepstack.get(index)
            if not features:
                return output
            hidden = output[0] if isinstance(output, tuple) else output
            hidden = (hidden + features[index]).contiguous()  # zeros away from the image tokens
            return (hidden,) + tuple(output[1:]) if isinstance(output, tuple) else hidden

        return hook

    # -- the tower's weights ---------------------------------------------------------------------

    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: ModelShard, layer_offset: int = 0) -> List[HFShard]:
        if name.startswith(VISION_PREFIX):
            return [(HF_VISION_PREFIX + name[len(VISION_PREFIX):], shard, None)]  # replicated over TP
        return super().megatron_to_hf(name, shard, layout, layer_offset)  # type: ignore[misc]

    def hf_to_megatron(self, name: str, layout: ModelShard, get_hf: Callable[[str], torch.Tensor],
                       layer_offset: int = 0) -> torch.Tensor:
        if name.startswith(VISION_PREFIX):
            return get_hf(HF_VISION_PREFIX + name[len(VISION_PREFIX):])
        return super().hf_to_megatron(name, layout, get_hf, layer_offset)  # type: ignore[misc]


__all__ = ["DeepStackFeatures", "HF_VISION_PREFIX", "InterleavedMRoPE", "VISION_PREFIX", "VisionTower", "visual_inputs"]
