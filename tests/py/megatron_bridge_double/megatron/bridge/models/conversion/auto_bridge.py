"""AutoBridge, as src/megatron/bridge/models/conversion/auto_bridge.py: `from_hf_pretrained(path)`
reads the config (here config.json as a dict, no transformers) and validates it: an architecture
ending in one of SUPPORTED_HF_ARCHITECTURES that has a registered bridge, else ValueError
("Model architecture '<a>' is not yet supported"). `to_megatron_provider(load_weights)` asks the
registered bridge's `provider_bridge`; `load_hf_weights(model, hf_path, allowed_mismatched_params)`
and `export_hf_weights(model, cpu=...)` go through the same bridge."""

import json
import os
from typing import Any, Dict, Iterable, List, Optional

from megatron.bridge._double import record
from megatron.bridge.models.conversion import model_bridge

SUPPORTED_HF_ARCHITECTURES = ("ForCausalLM", "ForConditionalGeneration", "ForMaskedLM", "ForTokenClassification")


def _read_config(path: str) -> Dict[str, Any]:
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["_path"] = path
    return config


class AutoBridge:
    def __init__(self, hf_pretrained: Dict[str, Any]):
        self.hf_pretrained = hf_pretrained

    @classmethod
    def list_supported_models(cls) -> List[str]:
        return sorted(str(k) for k in model_bridge.get_model_bridge._exact_types)

    @classmethod
    def _validate_config(cls, config: Dict[str, Any], path: str) -> str:
        architectures = config.get("architectures") or []
        supported = [a for a in architectures if a.endswith(SUPPORTED_HF_ARCHITECTURES)]
        if not supported:
            raise ValueError(f"Model architecture not supported by AutoBridge: {path}: {architectures}")
        architecture = supported[0]
        if architecture not in model_bridge.get_model_bridge._exact_types:
            raise ValueError(f"Model architecture '{architecture}' is not yet supported. Currently supported "
                             f"architectures: {', '.join(cls.list_supported_models())}")
        return architecture

    @classmethod
    def from_hf_pretrained(cls, path: str, **kwargs: Any) -> "AutoBridge":
        config = _read_config(str(path))
        architecture = cls._validate_config(config, str(path))
        record("from_hf_pretrained", path=str(path), architecture=architecture, kwargs=dict(kwargs))
        bridge = cls(config)
        bridge._architecture = architecture
        return bridge

    @property
    def _model_bridge(self) -> Any:
        return model_bridge.get_model_bridge(self._architecture, hf_config=self.hf_pretrained)

    def to_megatron_provider(self, load_weights: bool = True, hf_path: Optional[str] = None) -> Any:
        bridge = self._model_bridge
        provider = bridge.provider_bridge(self.hf_pretrained)
        record("to_megatron_provider", load_weights=load_weights, bridge=type(bridge).__name__,
               provider=type(provider).__name__)
        return provider

    def load_hf_weights(self, model: List[Any], hf_path: Optional[str] = None,
                        allowed_mismatched_params: Optional[List[str]] = None) -> List[Any]:
        pretrained = self.hf_pretrained if hf_path is None else _read_config(str(hf_path))
        self._model_bridge.load_weights_hf_to_megatron(pretrained, model, allowed_mismatched_params)
        return model

    def export_hf_weights(self, model: List[Any], cpu: bool = False, **kwargs: Any) -> Iterable[Any]:
        return self._model_bridge.stream_weights_megatron_to_hf(model, self.hf_pretrained, cpu=cpu)
