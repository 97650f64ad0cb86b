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

from verl_lite.models import resolve_model_dir

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
    """AutoModelForCausalLM from the model path: its weights if present, else seeded random init.
    GDN layers get the chunk size of `linear_attention_chunk_size` (see set_linear_attention_chunk_size)."""
    from transformers import AutoModelForCausalLM

    _require_section(model_config)
    path = model_config.path
    hf_config = load_hf_config(model_config)
    if has_weights(path):
        model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(path), config=hf_config, dtype=dtype,
                                                     local_files_only=True)
    else:
        # Same seed on every rank and role, so actor, ref and rollout start from identical weights.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(model_config.init_seed))
            model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    set_linear_attention_chunk_size(model, model_config.linear_attention_chunk_size)
    return model
