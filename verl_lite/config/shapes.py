"""Model shapes for the preflight: the model path's own config.json, or, when that is not readable
here, a shipped public shape matched by the path's last component (`verl_lite/assets/shapes/`,
sources in its README). No torch; a few small JSON files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from verl_lite.models import ASSETS_DIR, read_hf_config, resolve_model_dir

SHAPES_DIR = os.path.join(ASSETS_DIR, "shapes")
# Where each shipped shape's numbers come from (details in verl_lite/assets/shapes/README.md).
SOURCES = {
    "Qwen3.5-35B-A3B": "transformers 5.24 Qwen3_5MoeTextConfig defaults (checkpoint Qwen/Qwen3.5-35B-A3B) and "
                       "THUDM/slime scripts/models/qwen3.5-35B-A3B.sh",
    "Qwen3.5-122B-A10B": "a public Ascend inference test script's 122B config, layers and experts cross-checked "
                         "with public model cards",
    "Qwen3.5-397B-A17B": "THUDM/slime scripts/models/qwen3.5-397B-A17B.sh and Megatron-Bridge "
                         "tests/unit_tests/models/qwen/test_qwen35_bridge.py",
    "Qwen3-VL-30B-A3B-Instruct": "THUDM/slime scripts/models/qwen3-vl-30b-a3b.sh and Ascend/MindSpeed-MM "
                                 "examples/mindspore/qwen3vl/model_30B.json (vision tower: the latter and "
                                 "transformers' Qwen3VLMoeVisionConfig defaults)",
}


@dataclass(frozen=True)
class ModelShape:
    hf: Dict[str, Any]
    origin: str  # "config" (the path's config.json) or "shipped"
    name: str  # the config.json path, or the shipped shape's name

    def describe(self) -> str:
        if self.origin == "config":
            return f"{self.name} (the model's config.json)"
        return (f"shipped {self.name} (source: {SOURCES.get(self.name, 'see verl_lite/assets/shapes/README.md')}; "
                "the model path is not readable here)")


def shipped_shapes() -> List[str]:
    if not os.path.isdir(SHAPES_DIR):
        return []
    return sorted(f[: -len(".json")] for f in os.listdir(SHAPES_DIR) if f.endswith(".json"))


def shipped_shape(path: str) -> Optional[ModelShape]:
    """The shipped shape whose name is the last component of `path` (case-insensitive)."""
    base = os.path.basename(os.path.normpath(path or "")).lower()
    for name in shipped_shapes():
        if name.lower() == base:
            with open(os.path.join(SHAPES_DIR, f"{name}.json"), encoding="utf-8") as f:
                return ModelShape(json.load(f), "shipped", name)
    return None


def model_shape(path: str) -> Optional[ModelShape]:
    """The path's config.json when readable, else a shipped shape of the same name, else None."""
    hf = read_hf_config(path)
    if hf is not None:
        return ModelShape(hf, "config", os.path.join(resolve_model_dir(path), "config.json"))
    return shipped_shape(path)


def text_config(hf: Dict[str, Any]) -> Dict[str, Any]:
    """The language model's part of an HF config (a multimodal config nests it under text_config)."""
    return hf.get("text_config") or hf


def expert_count(hf: Optional[Dict[str, Any]]) -> Optional[int]:
    """Routed experts of a model config (Qwen3.5 MoE: num_experts, possibly under text_config)."""
    if not hf:
        return None
    for source in (text_config(hf), hf):
        for key in ("num_experts", "num_local_experts", "n_routed_experts"):
            if source.get(key):
                return int(source[key])
    return 0
