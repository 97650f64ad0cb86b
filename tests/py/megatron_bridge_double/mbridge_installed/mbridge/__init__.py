"""Presence double of the legacy `mbridge` package (ISEEKYAN/mbridge, mbridge/core/auto_bridge.py):
put this folder on sys.path to make `import mbridge` succeed. AutoBridge.from_config(hf_config),
set_extra_args(**kwargs), get_model(wrap_with_ddp=...), load_weights(models, path),
export_weights(models) record their calls in EVENTS."""

from typing import Any, Dict, List, Tuple

EVENTS: List[Tuple[str, Dict[str, Any]]] = []


class AutoBridge:
    def __init__(self, hf_config: Any):
        self.hf_config = hf_config
        self.config: Dict[str, Any] = {}

    @classmethod
    def from_config(cls, hf_config: Any, **kwargs: Any) -> "AutoBridge":
        EVENTS.append(("from_config", {"kwargs": kwargs}))
        return cls(hf_config)

    def set_extra_args(self, **kwargs: Any) -> None:
        EVENTS.append(("set_extra_args", dict(kwargs)))
        self.config.update(kwargs)

    def get_model(self, weight_path: Any = None, wrap_with_ddp: bool = False, **kwargs: Any) -> List[Any]:
        EVENTS.append(("get_model", {"wrap_with_ddp": wrap_with_ddp}))
        return [object()]

    def load_weights(self, models: List[Any], weights_path: str, **kwargs: Any) -> None:
        EVENTS.append(("load_weights", {"path": weights_path}))

    def export_weights(self, models: List[Any], **kwargs: Any) -> Any:
        EVENTS.append(("export_weights", {}))
        return iter([("model.embed_tokens.weight", None)])
