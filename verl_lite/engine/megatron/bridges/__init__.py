"""Model bridges: the HF <-> Megatron conversion of each model family the Megatron engines build,
looked up by the HF config's `architectures` name in `verl_lite.registry.BRIDGES`.

    bridge = bridge_for(hf_config)          # e.g. Qwen3Bridge for ["Qwen3ForCausalLM"]
    spec, kwargs = bridge.layer_spec(), bridge.transformer_config_kwargs()

A new family is a `ModelBridge` subclass in a module of this package, registered in
`verl_lite/registry.py` under its HF architecture names. `ModelBridge` in `base` says what a
bridge provides; `qwen3` (Qwen3 dense), `qwen3_5` (Qwen3.5 dense and MoE),
`qwen3_5_vl` (their conditional-generation checkpoints with Qwen3.5's vision tower) and `qwen3_vl`
(Qwen3-VL dense and MoE with the vision tower) are the built-in ones; `vision` holds what the
vision-language bridges share (the tower on the first stage, its hooks, the interleaved mrope).
"""

from __future__ import annotations

from typing import Any

from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges.base import ModelShard, ModelBridge, hf_field
from verl_lite.registry import BRIDGES

__all__ = ["ModelShard", "ModelBridge", "bridge_for"]

# Families with no bridge yet, and why: said when one is asked for.
_WHY_NOT_YET = {
    "qwen3_next": "Qwen3-Next's checkpoints lay out the GDN projections differently (in_proj_qkvz / in_proj_ba, "
                  "grouped per key head) and verl_lite ships no mapping for them yet",
}


def bridge_for(hf_config: Any) -> ModelBridge:
    """The bridge of the first of `hf_config.architectures` that has one, built for this config.

    Raises UnsupportedModelError listing the registered architectures (and, for a family known
    to be missing, why) when none has a bridge, or when the bridge does not cover the config."""
    architectures = [str(a) for a in (hf_field(hf_config, "architectures") or [])]
    for name in architectures:
        if name in BRIDGES:
            return BRIDGES.load(name)(hf_config)
    model_type = str(hf_field(hf_config, "model_type", ""))
    registered = ", ".join(sorted(key[0] for key in BRIDGES.keys()))
    asked = f"architectures {architectures}" if architectures else "no 'architectures' in its config.json"
    why = next((text for family, text in _WHY_NOT_YET.items() if family in model_type), None)
    reason = f": {why}" if why else ""
    raise UnsupportedModelError(
        f"model_type {model_type!r} ({asked}) cannot be built by verl_lite's Megatron engines{reason}. "
        f"Model bridges are registered for: {registered}. For a CPU run use "
        f"actor_rollout_ref.model.path=tiny-qwen3 or tiny-qwen3_5, or strategy=fsdp."
    )
