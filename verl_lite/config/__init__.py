"""verl_lite's config: verl key names as typed dataclasses (`schema`), composed from Hydra-grammar
overrides (`compose`), with the role helpers the check, registry and trainer share (`roles`).

    from verl_lite.config import load_config, ConfigError
    cfg = load_config(["trainer.device=npu", "actor_rollout_ref.actor.strategy=megatron"])

The names below load on first use, so `from verl_lite.config import roles` stays free of omegaconf.
"""

import importlib
from typing import Any

_LAZY = {
    "ConfigError": "verl_lite.config.compose",
    "compose_config": "verl_lite.config.compose",
    "load_config": "verl_lite.config.compose",
    "to_dataclass": "verl_lite.config.compose",
    "VerlLiteConfig": "verl_lite.config.schema",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'verl_lite.config' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
