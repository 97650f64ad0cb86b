"""The MindSpeed repatch plan: a pure function from an engine's megatron config to the dict that
`mindspeed.megatron_adaptor.repatch` receives.

The preflight check prints this dict on a laptop (no megatron installed) and the MindSpeed engines
pass it to `repatch()` in device-mesh init, before `initialize_model_parallel`. One function
serves both, so what the check shows is what the engine applies.

Rules (see shared notes on MindSpeed):
1. `attention_backend` given as a string becomes Megatron's `AttnBackend` enum member; a string
   fails Megatron's own TransformerConfig check ("Batch invariant mode only supports
   FlashAttention") because repatched values flow into every later TransformerConfig.
2. `use_flash_attn_npu_batch_invariant=True` forces `use_flash_attn=False`: both replace
   `DotProductAttention.forward` and MindSpeed raises "the patch of forward exist !".
   Otherwise `use_flash_attn` defaults to True.
3. `context_parallel_size` is added when > 1, so the CP ring wrapper is registered at patch time.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

from verl_lite.config.sections import field_of
from verl_lite.decisions.layout import mindspeed_parallel_args
from verl_lite.decisions.switches import switch

logger = logging.getLogger(__name__)

# Members of megatron.core.transformer.enums.AttnBackend (core 0.12 - 0.18).
ATTN_BACKENDS = ("flash", "fused", "unfused", "local", "auto")


class RepatchError(ValueError):
    """A megatron override that cannot become a valid MindSpeed repatch dict."""


class AttnBackendRef:
    """Stands for `AttnBackend[name]` where megatron is not importable (the preflight check)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"AttnBackend.{self.name}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AttnBackendRef) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("AttnBackend", self.name))


def _as_plain_dict(node: Any) -> Dict[str, Any]:
    if node is None:
        return {}
    if isinstance(node, dict):
        return dict(node)
    try:  # OmegaConf DictConfig without importing omegaconf at module import
        from omegaconf import DictConfig, OmegaConf

        if isinstance(node, DictConfig):
            return dict(OmegaConf.to_container(node, resolve=True))
    except ImportError:  # pragma: no cover - omegaconf is a hard dependency
        pass
    return dict(vars(node))


def build_repatch_dict(
    megatron_cfg: Any,
    resolve_attn_backend: Optional[Callable[[str], Any]] = None,
) -> Dict[str, Any]:
    """Return the dict to pass to MindSpeed's `repatch()` for this engine's megatron config.

    `megatron_cfg` is the `megatron` section (dataclass or OmegaConf node). `resolve_attn_backend`
    maps a backend name to Megatron's enum (the engines pass `lambda n: AttnBackend[n]`); without
    it the value is an `AttnBackendRef` that prints as `AttnBackend.<name>`.
    """
    overrides = _as_plain_dict(field_of(megatron_cfg, "override_transformer_config"))
    plan: Dict[str, Any] = dict(overrides)

    backend = plan.get("attention_backend")
    if isinstance(backend, str):
        name = backend.split(".")[-1].strip().lower()
        if name not in ATTN_BACKENDS:
            raise RepatchError(
                f"override_transformer_config.attention_backend={backend!r} is not a Megatron "
                f"attention backend (choose one of {', '.join(ATTN_BACKENDS)})"
            )
        plan["attention_backend"] = resolve_attn_backend(name) if resolve_attn_backend else AttnBackendRef(name)
    elif isinstance(backend, AttnBackendRef) and resolve_attn_backend is not None:
        plan["attention_backend"] = resolve_attn_backend(backend.name)

    if switch(plan.get("use_flash_attn_npu_batch_invariant", False)):
        if switch(plan.get("use_flash_attn", False)):
            logger.warning(
                "use_flash_attn_npu_batch_invariant=True replaces DotProductAttention.forward; "
                "forcing use_flash_attn=False (both on raises 'the patch of forward exist !')"
            )
        plan["use_flash_attn"] = False
    else:
        plan.setdefault("use_flash_attn", True)

    plan.update(mindspeed_parallel_args(megatron_cfg))
    return plan
