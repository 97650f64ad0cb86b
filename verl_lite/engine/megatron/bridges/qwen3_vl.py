"""Qwen3-VL bridges: HF `Qwen3VLForConditionalGeneration` (model_type qwen3_vl, dense text model)
and `Qwen3VLMoeForConditionalGeneration` (qwen3_vl_moe, MoE text model) on megatron-core 0.16's
GPT model, with the vision tower.

The model (read from transformers' modeling_qwen3_vl / modeling_qwen3_vl_moe):
- the vision tower (`model.visual`: patch embedding, learned position grid, vision blocks, the
  patch merger and the DeepStack mergers) turns `pixel_values` / `image_grid_thw` into one
  embedding per merged patch; those replace the embeddings of the image placeholder tokens
  (`image_token_id`), and the DeepStack features (one per `deepstack_visual_indexes` entry) are
  added to the hidden states at the same positions after decoder layers 0, 1, ...;
- the text model is Qwen3's (GQA with q/k RMSNorm, no bias, SwiGLU; MoE on every layer for
  qwen3_vl_moe: softmax, top-k, renormalise; no shared expert) with 3-D rotary positions
  (mrope) whose frequency channels are interleaved T H W T H W ... (`mrope_section` channels each,
  the rest T).

What megatron-core 0.16 lacks, and what is added here (on every device, not a CPU adaptation):
- its `MultimodalRotaryEmbedding` lays the mrope sections out contiguously (Qwen2-VL's
  T..T H..H W..W), not Qwen3-VL's interleaved layout, and asks for CUDA when built:
  `InterleavedMRoPE` takes its place on every chunk (megatron's rotary application is unchanged);
- GPTModel has no vision tower and no DeepStack: the vision tower is transformers' own module
  (`Qwen3VL(Moe)VisionModel`), held by the chunk of the first pipeline stage, REPLICATED on every
  tensor-parallel rank (not tensor-parallel); forward hooks put its outputs into the embedding
  output and the DeepStack layers' outputs (sequence-parallel aware; with full recompute under a
  pipeline schedule each re-run reads its own micro-batch's features: `DeepStackFeatures`). The
  DeepStack layers must sit on the first pipeline stage (refused otherwise). With sequence parallelism each TP rank
  back-propagates only its part of the sequence into the tower, so its weights are marked
  `sequence_parallel` and megatron's finalize_model_grads sums their grads over TP.

Weights: `model.visual.*` as they are (megatron names `vision.*`), the text model under
`model.language_model.*` (Qwen3 q/k/v, fused experts as in transformers' state dict:
`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]), `lm_head.weight`.
"""

from __future__ import annotations

import collections
import importlib
import logging
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import torch

from verl_lite.engine.megatron import norm as megatron_norm
from verl_lite.engine.megatron.bridges.base import (HFShard, Layout, ModelBridge, UnsupportedModelError,
                                                    gpt_config_kwargs, hf_field, moe_config_kwargs)
from verl_lite.engine.megatron.bridges.qwen3_5_weights import Qwen3_5Weights

logger = logging.getLogger(__name__)

# config.json spellings of one field: Qwen's checkpoints write num_experts, transformers 5 writes
# num_local_experts (its attribute_map)
_ALIASES = {"num_experts": ("num_experts", "num_local_experts")}


def _text_field(text: Any, name: str, default: Any = None) -> Any:
    for spelling in _ALIASES.get(name, (name,)):
        value = hf_field(text, spelling, None)
        if value is not None:
            return value
    return default

VISION_PREFIX = "vision."  # the tower's parameters in a megatron chunk
HF_VISION_PREFIX = "model.visual."


class InterleavedMRoPE(torch.nn.Module):
    """Qwen3-VL's rotary frequencies for 3-D positions, as megatron's rotary embedding returns them:
    [seq, batch, 1, dim]. Channel j takes the T position, or H where j % 3 == 1 and
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
            raise NotImplementedError("context parallelism with Qwen3-VL's 3-D rotary positions")
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
            raise NotImplementedError("video inputs (pixel_values_videos) are not supported by the Megatron "
                                      "Qwen3-VL bridge; images only")
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


class Qwen3VLBridge(Qwen3_5Weights, ModelBridge):
    """Qwen3-VL dense (`Qwen3VLForConditionalGeneration`): vision tower + Qwen3 text model."""

    model_types: Tuple[str, ...] = ("qwen3_vl",)
    moe = False
    has_vision = True
    hf_prefix = "model.language_model."
    vision_class = "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLVisionModel"
    hf_class = "transformers:Qwen3VLForConditionalGeneration"

    def __init__(self, hf_config: Any):
        super().__init__(hf_config)
        self.text = hf_field(hf_config, "text_config")
        self.vision = hf_field(hf_config, "vision_config")
        self._expert_cache: Dict[str, Optional[torch.Tensor]] = {}

    def finish_load(self) -> None:
        self._expert_cache = {}

    # -- what is covered ---------------------------------------------------------------------

    @classmethod
    def check_supported(cls, hf_config: Any) -> None:
        model_type = str(hf_field(hf_config, "model_type", ""))
        text, vision = hf_field(hf_config, "text_config"), hf_field(hf_config, "vision_config")
        problems = []
        if model_type not in cls.model_types:
            problems.append(f"model_type={model_type!r} (expected {' or '.join(cls.model_types)})")
        if text is None or vision is None:
            problems.append("no text_config / vision_config")
        else:
            if hf_field(text, "attention_bias", False):
                problems.append("attention_bias=True")
            if str(hf_field(text, "hidden_act", "silu")) != "silu":
                problems.append(f"hidden_act={hf_field(text, 'hidden_act')!r}")
            rope = cls._rope(text)
            if str(rope.get("rope_type", "default")) != "default":
                problems.append(f"rope_type={rope.get('rope_type')!r}")
            if rope.get("mrope_interleaved") is False:
                problems.append("mrope_interleaved=False")
            if cls.moe:
                if hf_field(text, "mlp_only_layers", None):
                    problems.append(f"mlp_only_layers={hf_field(text, 'mlp_only_layers')!r}")
                if int(hf_field(text, "decoder_sparse_step", 1) or 1) != 1:
                    problems.append(f"decoder_sparse_step={hf_field(text, 'decoder_sparse_step')!r}")
                missing = [k for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
                           if not _text_field(text, k)]
                problems += [f"no {k}" for k in missing]
        if problems:
            raise UnsupportedModelError(
                f"model_type {model_type!r} with {'; '.join(problems)} is not covered by verl_lite's {cls.__name__} "
                f"(it maps Qwen3-VL {'MoE' if cls.moe else 'dense'}: vision tower + Qwen3 text model, default "
                f"interleaved mrope, SiLU{', MoE on every layer' if cls.moe else ''})")

    @staticmethod
    def _rope(text: Any) -> Dict[str, Any]:
        params = hf_field(text, "rope_parameters", None) or hf_field(text, "rope_scaling", None) or {}
        return dict(params) if isinstance(params, dict) else {}

    def _int(self, name: str, default: Any = None) -> int:
        value = _text_field(self.text, name, default)
        if value is None:
            raise UnsupportedModelError(f"the HF config's text_config has no {name!r}")
        return int(value)

    @property
    def deepstack_layers(self) -> int:
        return len(hf_field(self.vision, "deepstack_visual_indexes", None) or [])

    @property
    def image_token_id(self) -> int:
        return int(hf_field(self.hf_config, "image_token_id"))

    def visual_inputs(self, micro_batch: Dict[str, Any], device: torch.device) -> Optional[Dict[str, torch.Tensor]]:
        return visual_inputs(micro_batch, device)

    def hf_model_class(self) -> Any:
        """transformers' class whose state dict this bridge maps (the seeded random init uses it)."""
        module, name = self.hf_class.split(":")
        return getattr(importlib.import_module(module), name)

    # -- the megatron model --------------------------------------------------------------------

    def transformer_config_kwargs(self) -> Dict[str, Any]:
        kwargs = gpt_config_kwargs(self.text, self._ffn_hidden_size())
        kwargs.update(self._moe_kwargs())
        return kwargs

    def _ffn_hidden_size(self) -> int:
        return self._int("intermediate_size")

    def _moe_kwargs(self) -> Dict[str, Any]:
        return {}

    def model_spec(self, config: Any, vp_stage: Optional[int] = None) -> Any:
        """The local layer spec with verl_lite's RMSNorm (as the Qwen3 bridge), dense or MoE MLP."""
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

        if self.moe:
            from megatron.core.transformer.moe import moe_utils

            if not hasattr(moe_utils, "te_general_gemm"):  # as the Qwen3.5 MoE bridge: None selects torch.mm
                moe_utils.te_general_gemm = None
        spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, moe_grouped_gemm=False,
                                        qk_layernorm=True, normalization="RMSNorm")
        spec.submodules.input_layernorm = megatron_norm.RMSNorm
        spec.submodules.pre_mlp_layernorm = megatron_norm.RMSNorm
        spec.submodules.self_attention.submodules.q_layernorm = megatron_norm.HeadRMSNorm
        spec.submodules.self_attention.submodules.k_layernorm = megatron_norm.HeadRMSNorm
        count = get_num_layers_to_build(config, vp_stage=vp_stage)
        return TransformerBlockSubmodules(layer_specs=[spec] * count, layer_norm=megatron_norm.RMSNorm)

    def gpt_model_kwargs(self) -> Dict[str, Any]:
        # built with plain rope; finish_chunk swaps in the interleaved mrope (megatron's own asks for CUDA)
        return dict(max_sequence_length=self._int("max_position_embeddings", 4096), position_embedding_type="rope",
                    rotary_base=float(self._rope(self.text).get("rope_theta", 10000.0) or 10000.0))

    def mrope_section(self) -> List[int]:
        return [int(s) for s in self._rope(self.text).get("mrope_section", [24, 20, 20])]

    def finish_chunk(self, module: Any, tf_config: Any) -> None:
        """Interleaved mrope on every chunk; the vision tower and its hooks on the first stage's chunk."""
        head_dim = int(tf_config.kv_channels)
        module.rotary_pos_emb = InterleavedMRoPE(head_dim, self._rope(self.text).get("rope_theta", 10000.0),
                                                 self.mrope_section())
        module.position_embedding_type = "mrope"
        module.mrope_section = self.mrope_section()
        module.visual_inputs = None  # set per micro-batch (batch.run_schedule)
        layers = [int(layer.layer_number) - 1 for layer in module.decoder.layers]
        deep = self.deepstack_layers
        if not module.pre_process:
            if any(i < deep for i in layers):
                raise UnsupportedModelError(
                    f"Qwen3-VL adds DeepStack visual features after decoder layers 0..{deep - 1}, which must sit on "
                    f"the first pipeline stage with the vision tower, but this stage holds layers {layers}: choose a "
                    f"pipeline layout whose first stage has at least {deep} layers")
            return
        missing = [i for i in range(deep) if i not in layers]
        if missing:
            raise UnsupportedModelError(
                f"Qwen3-VL's DeepStack layers {missing} are not on the first pipeline stage (it holds layers {layers}): "
                f"choose a pipeline layout whose first stage has at least {deep} layers")
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
            return module.deepstack.put([seq_first(f) for f in result.deepstack_features], output)

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

    def layout(self, tp_size: int, tp_rank: int) -> Layout:
        fields = {k: hf_field(self.text, k) for k in (
            "num_attention_heads", "hidden_size", "num_key_value_heads", "head_dim", "vocab_size")}
        fields["intermediate_size"] = self._ffn_hidden_size()
        # transformers ties the LM head to the top-level config's tie_word_embeddings
        fields["tie_word_embeddings"] = bool(hf_field(self.hf_config, "tie_word_embeddings", False))
        return Layout.from_hf(fields, tp_size, tp_rank)

    # -- weights -------------------------------------------------------------------------------

    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: Layout, layer_offset: int = 0) -> List[HFShard]:
        if name.startswith(VISION_PREFIX):
            return [(HF_VISION_PREFIX + name[len(VISION_PREFIX):], shard, None)]  # replicated over TP
        kind, hf, _ = self._split(name, layer_offset)
        if kind == "qkv":
            n = layout.heads // layout.groups
            cols = shard.shape[-1]
            grouped = shard.reshape(-1, n + 2, layout.head_dim, cols)
            return [(hf + "q_proj.weight", grouped[:, :n].reshape(-1, cols), 0),
                    (hf + "k_proj.weight", grouped[:, n].reshape(-1, cols), 0),
                    (hf + "v_proj.weight", grouped[:, n + 1].reshape(-1, cols), 0)]
        return super().megatron_to_hf(name, shard, layout, layer_offset)

    def finish_hf_tensor(self, hf_name: str, full: torch.Tensor, layout: Layout) -> torch.Tensor:
        if hf_name in (self.hf_prefix + "embed_tokens.weight", "lm_head.weight") and full.shape[0] != layout.vocab:
            full = full[: layout.vocab]
        if hf_name.endswith("mlp.experts.gate_up_proj") and full.dim() == 4:
            full = full.reshape(full.shape[0], -1, full.shape[-1])  # [E, 2, I, H] -> [E, 2I, H]
        return full

    def hf_to_megatron(self, name: str, layout: Layout, get_hf: Callable[[str], torch.Tensor],
                       layer_offset: int = 0) -> torch.Tensor:
        if name.startswith(VISION_PREFIX):
            return get_hf(HF_VISION_PREFIX + name[len(VISION_PREFIX):])
        kind, hf, _ = self._split(name, layer_offset)
        if kind == "qkv":
            per_group = layout.heads // layout.groups
            parts = []
            for proj, heads in (("q_proj", per_group), ("k_proj", 1), ("v_proj", 1)):
                full = get_hf(hf + f"{proj}.weight")
                part = full.chunk(layout.tp_size, dim=0)[layout.tp_rank]
                parts.append(part.reshape(-1, heads, layout.head_dim, part.shape[-1]))
            return torch.cat(parts, dim=1).reshape(-1, parts[0].shape[-1])
        return super().hf_to_megatron(name, layout, get_hf, layer_offset)


class Qwen3VLMoeBridge(Qwen3VLBridge):
    """Qwen3-VL MoE (`Qwen3VLMoeForConditionalGeneration`): vision tower + Qwen3-MoE text model."""

    model_types = ("qwen3_vl_moe",)
    moe = True
    vision_class = "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe:Qwen3VLMoeVisionModel"
    hf_class = "transformers:Qwen3VLMoeForConditionalGeneration"

    def _ffn_hidden_size(self) -> int:
        return self._int("moe_intermediate_size")

    def _moe_kwargs(self) -> Dict[str, Any]:
        return moe_config_kwargs(self.text, self._int)


__all__ = ["InterleavedMRoPE", "Qwen3VLBridge", "Qwen3VLMoeBridge", "visual_inputs"]
