"""What Ulysses sequence parallelism (`<role>.ulysses_sequence_parallel_size`, engine/torch/ulysses.py) needs: the
rules the torch engine enforces when it builds and the preflight reports before a run (no torch import)."""

from __future__ import annotations

from typing import Any, List, Optional

from verl_lite.models import is_gdn_model


def problems(key: str, sp: Any, world_size: Optional[int], hf_config: Any, use_remove_padding: Any,
             strategy: str = "fsdp") -> List[str]:
    """What makes `key=sp` (`decisions/layout.ulysses_setting`'s) impossible (empty: fine); `world_size`: the role's ranks."""
    if isinstance(sp, str) and sp.startswith("${"):
        return [f"{key}={sp!r}: a section built on its own cannot follow another section's value: set it, or "
                "convert the whole config (verl_lite.config.to_dataclass)"]
    if isinstance(sp, bool) or not isinstance(sp, int) or sp < 1:
        return [f"{key}={sp!r}: must be a positive integer (1 = no sequence parallelism)"]
    if sp == 1:
        return []
    if strategy == "megatron":
        return [f"{key}={sp} is not supported on the megatron strategy: Ulysses is the torch (fsdp) engine's "
                f"sequence parallelism; use megatron.context_parallel_size={sp} instead"]
    out = []
    if world_size is not None and world_size % sp:
        out.append(f"{key}={sp} does not divide the {world_size} training ranks: choose a divisor of {world_size}")
    if use_remove_padding is False:
        out.append(f"{key}={sp} is not supported with model.use_remove_padding=False: sequence parallelism splits "
                   "the packed sequence (as verl requires); set model.use_remove_padding=True or null")
    if hf_config is not None:
        whole = hf_config.to_dict() if hasattr(hf_config, "to_dict") else dict(hf_config)
        text = whole.get("text_config") or whole
        if is_gdn_model(whole):
            out.append(f"{key}={sp} is not supported for {whole.get('model_type')!r}: its Gated DeltaNet "
                       "(linear_attention) layers need whole sequences, which verl gets from "
                       "flash-linear-attention's context-parallel kernels; the torch engine has none. Set "
                       f"{key}=1, or use the megatron strategy with megatron.context_parallel_size")
        heads = text.get("num_attention_heads")
        if isinstance(heads, int) and heads % sp:
            out.append(f"{key}={sp} does not divide num_attention_heads={heads} (each rank attends with "
                       f"heads/sp heads): choose a divisor of {heads}")
    return out
