"""The double's `get_rope_index`: the 3-D rotary positions Megatron-Bridge de93536e computes in
src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/rope.py:140-286, taken from transformers' own Qwen3-VL
(`Qwen3VLModel.get_rope_index`: text positions count on, each image or video frame (videos split one grid per
frame, as both do) gets its (t, h, w) grid after the text before it, and the text after it starts past the
grid's largest extent), with Megatron-Bridge's reading of `attention_mask`: a [b, s] keep mask (1/True = a
real token), and a mask of more than 2 dims collapsed with `.any(-1)` (l.179-184, 263-268), which turns a
causal True=masked [b, 1, s, s] mask into "every row but the last is valid" (why the Qwen3VLModel double
refuses such a mask). Without images or videos, positions count the real tokens (padding 1, l.260-272)."""

import functools
import types
from typing import Optional, Tuple

import torch


def _keep_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    if attention_mask.dim() > 2:  # Megatron-Bridge's collapse (rope.py:179-184)
        attention_mask = attention_mask.any(dim=-1)
        if attention_mask.dim() == 3:
            attention_mask = attention_mask.squeeze(1)
    return attention_mask.long()


def get_rope_index(spatial_merge_size: int, image_token_id: int, video_token_id: int, vision_start_token_id: int,
                   input_ids: Optional[torch.Tensor] = None, image_grid_thw: Optional[torch.Tensor] = None,
                   video_grid_thw: Optional[torch.Tensor] = None,
                   attention_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """[3, b, s] positions (T, H, W) and the per-row mrope deltas [b, 1]."""
    keep = torch.ones_like(input_ids) if attention_mask is None else _keep_mask(attention_mask).to(input_ids.device)
    if image_grid_thw is not None or video_grid_thw is not None:
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

        kind = torch.zeros_like(input_ids)  # transformers' modality ids: text 0, image 1, video 2
        kind[input_ids == image_token_id] = 1
        kind[input_ids == video_token_id] = 2
        config = types.SimpleNamespace(vision_config=types.SimpleNamespace(spatial_merge_size=spatial_merge_size))
        model = types.SimpleNamespace(config=config)
        model.get_vision_position_ids = functools.partial(Qwen3VLModel.get_vision_position_ids, model)
        positions, deltas = Qwen3VLModel.get_rope_index(
            model, input_ids, kind, image_grid_thw=None if image_grid_thw is None else image_grid_thw.clone(),
            video_grid_thw=None if video_grid_thw is None else video_grid_thw.clone(), attention_mask=keep)
        positions[:, keep == 0] = 1  # Megatron-Bridge starts from ones where transformers starts from zeros
        return positions, deltas
    positions = (keep.cumsum(-1) - 1).masked_fill(keep == 0, 1)
    positions = positions.unsqueeze(0).expand(3, -1, -1)
    return positions, positions.amax(dim=(0, 2)).unsqueeze(-1) + 1 - keep.shape[-1]
