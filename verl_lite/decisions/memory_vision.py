"""The vision tower's parameters, for the memory prediction (`decisions/memory.py`): Qwen3-VL and
Qwen3.5 vision-language checkpoints carry a ViT (`vision_config`) that verl_lite's engines build and
train with the text model (engine/megatron/bridges/vision.py: on the first pipeline stage, replicated
on every TP rank). Counted module by module as transformers 5.x builds it
(`Qwen3VLMoeVisionModel`, `Qwen3_5MoeVisionModel`: patch embedding, learned position embedding,
`depth` blocks, the patch merger and one more merger per DeepStack layer); tests/py/test_memory_vision.py
checks the count against transformers' own module. The tower's activations are not counted: they
grow with each image's patches, which the preflight does not read (docs/memory.md).
"""

from __future__ import annotations

from typing import Any, Dict, Optional


def vision_config(hf: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The config's vision tower (None: a text model, or a config.json without `vision_config`)."""
    vision = (hf or {}).get("vision_config")
    return vision if isinstance(vision, dict) and vision.get("depth") else None


def vision_params(vision: Optional[Dict[str, Any]]) -> int:
    """Parameters of the vision tower described by `vision` (0 for None)."""
    if not vision:
        return 0
    h, ffn = int(vision["hidden_size"]), int(vision["intermediate_size"])
    out = int(vision.get("out_hidden_size") or h)
    merge = int(vision.get("spatial_merge_size") or 2)
    patch = int(vision.get("patch_size") or 16)
    frames = int(vision.get("temporal_patch_size") or 2)
    patch_embed = int(vision.get("in_channels") or 3) * frames * patch * patch * h + h  # Conv3d with its bias
    positions = int(vision.get("num_position_embeddings") or 0) * h
    # two LayerNorms (weight and bias), qkv and proj with biases, the two-layer GELU MLP with biases
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * ffn + ffn) + (ffn * h + h)
    merged = h * merge * merge  # a merger's input: merge x merge patches concatenated

    def merger(postshuffle: bool) -> int:
        norm = 2 * (merged if postshuffle else h)
        return norm + merged * merged + merged + merged * out + out

    deepstack = len(vision.get("deepstack_visual_indexes") or [])
    return patch_embed + positions + int(vision["depth"]) * block + merger(False) + deepstack * merger(True)
