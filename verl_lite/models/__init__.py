"""Model locations: shipped tiny configs by name, or local directories. Nothing is downloaded.

`actor_rollout_ref.model.path` is either a directory with an HF `config.json` (weights optional:
without them the model is randomly initialised) or the name of a config shipped in
`verl_lite/assets/` (for example `tiny-qwen3_5`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

ASSETS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")


def shipped_models() -> List[str]:
    """Names of the model configs shipped with verl_lite."""
    if not os.path.isdir(ASSETS_DIR):
        return []
    return sorted(d for d in os.listdir(ASSETS_DIR) if os.path.isfile(os.path.join(ASSETS_DIR, d, "config.json")))


def resolve_model_dir(path: str) -> str:
    """Map a shipped model name or a user path (with ~ and env vars) to a directory path.

    The returned path may not exist; `model_dir_problem` says why a path is unusable.
    """
    if path and not os.sep in path and path in shipped_models():
        return os.path.join(ASSETS_DIR, path)
    return os.path.abspath(os.path.expanduser(os.path.expandvars(path or "")))


def model_dir_problem(path: str) -> Optional[str]:
    """None if `path` names a usable model directory, else a one-line reason with the fix."""
    if not path:
        return "model path is empty (set actor_rollout_ref.model.path to a local HF model directory)"
    resolved = resolve_model_dir(path)
    if not os.path.isdir(resolved):
        return (
            f"model path {path!r} does not exist (point actor_rollout_ref.model.path at a local HF model "
            f"directory with config.json, or use a shipped config: {', '.join(shipped_models())})"
        )
    if not os.path.isfile(os.path.join(resolved, "config.json")):
        return f"model path {path!r} has no config.json (expected an HF model directory)"
    return None


def read_hf_config(path: str) -> Optional[Dict[str, Any]]:
    """The parsed config.json of a model path, or None when it is not readable."""
    try:
        with open(os.path.join(resolve_model_dir(path), "config.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_gdn_model(hf_config: Optional[Dict[str, Any]]) -> bool:
    """True for models with Gated DeltaNet layers (Qwen3.5, Qwen3-Next); False for anything that is
    not a config dict (an unreadable or malformed config.json is reported by the preflight)."""
    if not isinstance(hf_config, dict):
        return False
    text = hf_config.get("text_config") or {}
    model_type = str(hf_config.get("model_type", "")) + " " + str(text.get("model_type", ""))
    layer_types = list(hf_config.get("layer_types") or []) + list(text.get("layer_types") or [])
    return "qwen3_5" in model_type or "qwen3_next" in model_type or "linear_attention" in layer_types


def is_vision_language(hf_config: Optional[Dict[str, Any]]) -> bool:
    """True for a vision-language checkpoint's config (a `vision_config` beside the text model: Qwen3-VL,
    Qwen3-VL-MoE, Qwen3.5's ...ForConditionalGeneration), which the torch engine builds with its vision tower."""
    return isinstance(hf_config, dict) and isinstance(hf_config.get("vision_config"), dict)


# HF model types the vllm rollout gives images to (rollout/vllm_requests.py); other configs with a vision
# tower (Qwen3.5's checkpoints) generate from text there. Here, below the rollout, so the preflight reads it
# without importing torch.
VLLM_IMAGE_MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe")


# transformers model types whose GDN layers run per packed sequence on the torch engine
# (`verl_lite.models.packed_gdn`: layers named *GatedDeltaNet, as `linear_attn` of a decoder layer).
SPLIT_GDN_MODEL_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")


def torch_packing_problem(hf_config: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why the torch engine cannot run `hf_config`'s model packed (remove-padding), or None if it can:
    attention-only models and the GDN models of `SPLIT_GDN_MODEL_TYPES` can; other linear-attention
    layers would carry their state from one packed sequence into the next."""
    if is_vision_language(hf_config):
        return ("vision-language models run padded on the torch engine (their pixel inputs and 3-D rotary "
                "positions are not packed into one row)")
    if not is_gdn_model(hf_config):
        return None
    text = hf_config.get("text_config") or {}
    types = [t for t in (hf_config.get("model_type"), text.get("model_type")) if t]
    if any(t in SPLIT_GDN_MODEL_TYPES for t in types):
        return None
    return (f"model_type {'/'.join(map(str, types)) or '(none)'} has linear-attention layers that the torch engine "
            f"does not split per packed sequence (it does for {', '.join(SPLIT_GDN_MODEL_TYPES)}): packed, their "
            f"recurrent state would flow from one sequence into the next, so this model runs padded")
