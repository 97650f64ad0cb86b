"""Build transformers models from a local directory or a shipped config (random init when the
directory holds no weights). Imports torch and transformers: only workers import this module."""

from __future__ import annotations

import glob
import logging
import os
from typing import Any

import torch

from verl_lite.models import resolve_model_dir

logger = logging.getLogger(__name__)

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model.safetensors.index.json")


def has_weights(path: str) -> bool:
    d = resolve_model_dir(path)
    return any(glob.glob(os.path.join(d, p)) for p in WEIGHT_PATTERNS)


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    getter = getattr(cfg, "get", None)
    return getter(key, default) if callable(getter) else getattr(cfg, key, default)


def load_hf_config(model_config: Any):
    from transformers import AutoConfig

    overrides = dict(_get(model_config, "override_config", None) or {})
    cfg = AutoConfig.from_pretrained(resolve_model_dir(_get(model_config, "path")), local_files_only=True,
                                     trust_remote_code=bool(_get(model_config, "trust_remote_code", False)))
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def build_causal_lm(model_config: Any, dtype: torch.dtype = torch.float32):
    """AutoModelForCausalLM from the model path: its weights if present, else seeded random init."""
    from transformers import AutoModelForCausalLM

    path = _get(model_config, "path")
    hf_config = load_hf_config(model_config)
    if has_weights(path):
        model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(path), config=hf_config, dtype=dtype,
                                                     local_files_only=True)
    else:
        # Same seed on every rank and role, so actor, ref and rollout start from identical weights.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(_get(model_config, "init_seed", 0)))
            model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    return model
