"""Build transformers models from a local directory or a shipped config (random init when the
directory holds no weights). Imports torch and transformers: only workers import this module.

The functions take the model section as the schema's `verl_lite.config.schema.ModelConfig` (read
by attribute). This layer sits below `verl_lite.config`, so it does not convert: callers with a
DictConfig or a dict pass `verl_lite.config.sections.as_section(ModelConfig, ...)`."""

from __future__ import annotations

import functools
import glob
import logging
import os
import sys
from typing import Any, Mapping, Optional

import torch

from verl_lite.models import is_vision_language, resolve_model_dir

logger = logging.getLogger(__name__)

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")


def has_weights(path: str) -> bool:
    d = resolve_model_dir(path)
    return any(glob.glob(os.path.join(d, p)) for p in WEIGHT_PATTERNS)


def _require_section(model_config: Any) -> None:
    if isinstance(model_config, Mapping):
        raise TypeError("the model section must be a verl_lite.config.schema.ModelConfig, got a "
                        f"{type(model_config).__name__} ({sorted(model_config)[:4]}...): convert it with "
                        "verl_lite.config.sections.as_section(ModelConfig, value)")


def load_hf_config(model_config: Any):
    """The HF config of `model_config.path` with `model_config.override_config` applied."""
    from transformers import AutoConfig

    _require_section(model_config)

    cfg = AutoConfig.from_pretrained(resolve_model_dir(model_config.path), local_files_only=True,
                                     trust_remote_code=bool(model_config.trust_remote_code))
    for k, v in dict(model_config.override_config or {}).items():
        setattr(cfg, k, v)
    return cfg


# transformers' pure-torch gated delta rule (GDN "linear_attention" layers of Qwen3.5 / Qwen3-Next)
# pads every sequence to a multiple of its chunk (64) and does O(chunk^2) work per chunk, so short
# sequences pay for 64 positions. It is the path taken wherever flash-linear-attention is absent (CPU).
CHUNK_RULE = "torch_chunk_gated_delta_rule"


def auto_chunk_size(seq_len: int) -> int:
    """Chunk for the torch gated delta rule by sequence length (CPU, 1 thread, fwd+bwd: 16 is
    2.6-6x faster than 64 up to ~128 tokens, 32 leads around 512, 64 from ~2k; bench/gdn_chunk_bench.py)."""
    if seq_len <= 128:
        return 16
    return 32 if seq_len <= 1024 else 64


def set_linear_attention_chunk_size(model: Any, chunk_size: Optional[int]) -> bool:
    """Make the model's GDN layers call the torch gated delta rule with `chunk_size` (None: by
    sequence length, `auto_chunk_size`). The result is the same up to float rounding (~1e-7); only
    the speed changes. The rule is a function of the model's transformers module, so this applies
    to every model of that class in the process. Returns False when the model has no such layers.

    flash-linear-attention, when installed, replaces the torch rule and ignores the chunk size.
    """
    module = sys.modules.get(type(model).__module__)
    rule = getattr(module, CHUNK_RULE, None)
    if rule is None:
        return False
    original = getattr(rule, "__verl_lite_original__", rule)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"linear_attention_chunk_size={chunk_size!r} must be a positive integer or null (auto)")

    @functools.wraps(original)
    def chunked_rule(*args, **kwargs):
        if "chunk_size" not in kwargs:
            key = args[1] if len(args) > 1 else kwargs["key"]  # [batch, seq, heads, dim]
            kwargs["chunk_size"] = chunk_size or auto_chunk_size(key.shape[1])
        return original(*args, **kwargs)

    chunked_rule.__verl_lite_original__ = original
    setattr(module, CHUNK_RULE, chunked_rule)
    return True


def build_causal_lm(model_config: Any, dtype: torch.dtype = torch.float32):
    """AutoModelForCausalLM from the model path (AutoModelForImageTextToText for a vision-language
    config: Qwen3-VL, Qwen3-VL-MoE, Qwen3.5's ...ForConditionalGeneration, vision tower included, with
    the checkpoint's names `model.visual.*`, `model.language_model.*`, `lm_head.*`): its weights if
    present, else seeded random init. GDN layers get the chunk size of `linear_attention_chunk_size`
    (see set_linear_attention_chunk_size)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    _require_section(model_config)
    path = model_config.path
    hf_config = load_hf_config(model_config)
    auto = AutoModelForImageTextToText if is_vision_language(hf_config.to_dict()) else AutoModelForCausalLM
    if has_weights(path):
        model = auto.from_pretrained(resolve_model_dir(path), config=hf_config, dtype=dtype,
                                                     local_files_only=True)
    else:
        # Same seed on every rank and role, so actor, ref and rollout start from identical weights.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(model_config.init_seed))
            model = auto.from_config(hf_config, dtype=dtype)
    set_linear_attention_chunk_size(model, model_config.linear_attention_chunk_size)
    return model


# -- vision-language inputs ------------------------------------------------------------------------

# the per-sample tensors of the processor that the model's forward takes, concatenated over a batch's
# samples in order (verl's dp_actor concatenates multi_modal_inputs the same way)
IMAGE_INPUT_KEYS = ("pixel_values", "image_grid_thw")


def vision_token_ids(hf_config: Any) -> dict:
    """The image / video placeholder token ids of a vision-language config (HF's names)."""
    return {"image": getattr(hf_config, "image_token_id", None), "video": getattr(hf_config, "video_token_id", None)}


def vision_special_ids(hf_config: Any) -> list:
    """The vision tokens a response must not hold (placeholders, vision start / end): the pixel inputs
    match the prompt's placeholders only."""
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return [int(getattr(hf_config, n)) for n in names if getattr(hf_config, n, None) is not None]


def mm_token_type_ids(input_ids: torch.Tensor, hf_config: Any, prompt_length: Optional[int] = None) -> torch.Tensor:
    """What the processor returns as mm_token_type_ids: 1 at image placeholders, 2 at video ones, else 0;
    with `prompt_length`, the columns after it (the response) are text."""
    ids = vision_token_ids(hf_config)
    out = torch.zeros_like(input_ids)
    if ids["image"] is not None:
        out = out.masked_fill(input_ids == ids["image"], 1)
    if ids["video"] is not None:
        out = out.masked_fill(input_ids == ids["video"], 2)
    if prompt_length is not None:
        out[:, prompt_length:] = 0
    return out


def image_inputs(multi_modal_inputs: Optional[list], device: Any = None) -> dict:
    """The model's keyword arguments for a batch's per-sample `multi_modal_inputs` (dicts or None for a
    text-only row): each key of IMAGE_INPUT_KEYS concatenated over the samples that have it. {} when no
    sample has images."""
    rows = [m for m in (multi_modal_inputs or []) if m]
    out = {}
    for key in IMAGE_INPUT_KEYS:
        parts = [m[key] for m in rows if m.get(key) is not None]
        if parts:
            out[key] = torch.cat([torch.as_tensor(p) for p in parts], dim=0)
            if device is not None:
                out[key] = out[key].to(device)
    unknown = sorted({k for m in rows for k in m} - set(IMAGE_INPUT_KEYS))
    if unknown:
        raise ValueError(f"multi_modal_inputs holds {unknown} (the torch engine and the hf rollout take "
                         f"{', '.join(IMAGE_INPUT_KEYS)}: images; videos are not supported)")
    return out


def _rope_host(hf_config: Any):
    """The text+vision model class of `hf_config` (transformers' Qwen3VLModel, Qwen3VLMoeModel, ...) and
    a light stand-in `self` for its get_rope_index: the method reads only `self.config` and
    `self.get_vision_position_ids`, so no weights are built."""
    import types

    from transformers import AutoModel

    cls = AutoModel._model_mapping[type(hf_config)]
    if not hasattr(cls, "get_rope_index"):
        raise ValueError(f"{cls.__name__} has no get_rope_index: {type(hf_config).__name__} is not a model with "
                         "3-D rotary positions")
    host = types.SimpleNamespace(config=hf_config)
    for name in ("get_vision_position_ids",):
        if hasattr(cls, name):
            setattr(host, name, types.MethodType(getattr(cls, name), host))
    return types.MethodType(cls.get_rope_index, host)


def vl_position_ids(hf_config: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    multi_modal_inputs: Optional[list] = None, prompt_length: Optional[int] = None) -> torch.Tensor:
    """Qwen-VL's 3-D rotary positions (B, 3, L) of prompt + response rows, by the model's own
    get_rope_index over the whole row (text after the last image continues one position per token,
    which is how generation extends them); padding gets 0. The images are the prompt's placeholders
    (the first `prompt_length` columns, when given)."""
    rope_index = _rope_host(hf_config)
    grid = image_inputs(multi_modal_inputs).get("image_grid_thw")
    positions, _ = rope_index(input_ids, mm_token_type_ids=mm_token_type_ids(input_ids, hf_config, prompt_length),
                              image_grid_thw=grid, attention_mask=attention_mask)
    return positions.permute(1, 0, 2).contiguous()


def model_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Positions as a transformers model takes them: a batch's (B, 3, L) rows as (3, B, L)."""
    return position_ids.permute(1, 0, 2) if position_ids.dim() == 3 else position_ids
