"""MegatronModelBridge.register_bridge and the dispatch registry (`get_model_bridge._exact_types`),
as in src/megatron/bridge/models/conversion/model_bridge.py (create_bridge_decorator,
register_bridge_implementation) and models/decorators/dispatch.py: the decorator sets SOURCE_NAME,
MODEL_TYPE and PROVIDER_CLASS on the class and registers it under the source (a class or its name);
a second registration of the same source replaces the first (the dispatcher's dict assignment).

Weights: `load_weights_hf_to_megatron` and `stream_weights_megatron_to_hf` map the model's tensors through
verl_lite's own bridge (`megatron.bridge._build`: the checkpoint's safetensors in, every HF tensor out,
gathered over TP and streamed over PP), where Megatron-Bridge uses the bridge's mapping_registry."""

from typing import Any, Callable, Dict, Optional, Type

from megatron.bridge._double import record


class _Dispatch:
    def __init__(self, name: str):
        self.name = name
        self._exact_types: Dict[Any, Callable] = {}

    def impl(self, source: Any) -> Callable[[Callable], Callable]:
        def register(func: Callable) -> Callable:
            self._exact_types[source] = func
            return func

        return register

    def __call__(self, architecture: Any, hf_config: Any = None) -> Any:
        key = architecture if isinstance(architecture, str) else getattr(architecture, "__name__", architecture)
        impl = self._exact_types.get(key)
        if impl is None:
            raise NotImplementedError(
                f"{self.name}: no implementation registered for {key!r}; registered: {sorted(map(str, self._exact_types))}")
        return impl(architecture, hf_config=hf_config)


get_model_bridge = _Dispatch("get_model_bridge")


def register_bridge_implementation(*, source: Any, target: Any, bridge_class: Type["MegatronModelBridge"]) -> None:
    key = source if isinstance(source, str) else source.__name__

    @get_model_bridge.impl(key)
    def _get_model_bridge_impl(_: Any, hf_config: Any = None) -> "MegatronModelBridge":
        bridge = bridge_class()
        if hf_config is not None:
            bridge.hf_pretrained = hf_config
            bridge.hf_config = hf_config
        return bridge

    record("register_bridge", source=key, bridge=bridge_class.__name__, module=bridge_class.__module__)


def create_bridge_decorator(*, source: Any, target: Any, provider: Optional[type] = None,
                            model_type: Optional[str] = None) -> Callable[[type], type]:
    def decorator(bridge_class: type) -> type:
        bridge_class.SOURCE_NAME = source if isinstance(source, str) else source.__name__
        if model_type is not None:
            bridge_class.MODEL_TYPE = model_type
        if provider is not None:
            bridge_class.PROVIDER_CLASS = provider
        register_bridge_implementation(source=source, target=target, bridge_class=bridge_class)
        return bridge_class

    return decorator


class MegatronModelBridge:
    SOURCE_NAME: str = ""
    MODEL_TYPE: Optional[str] = None
    PROVIDER_CLASS: Optional[type] = None

    def __init__(self) -> None:
        self.hf_pretrained: Any = None
        self.hf_config: Any = None

    @classmethod
    def register_bridge(cls, *, source: Any, target: Any, provider: Optional[type] = None,
                        model_type: Optional[str] = None) -> Callable[[type], type]:
        return create_bridge_decorator(source=source, target=target, provider=provider, model_type=model_type)

    def provider_bridge(self, hf_pretrained: Any) -> Any:
        """The provider with the HF config's architecture fields (subclasses map more)."""
        from megatron.bridge.models.gpt_provider import GPTModelProvider

        text = hf_pretrained.get("text_config") or hf_pretrained
        provider_cls = self.PROVIDER_CLASS or GPTModelProvider
        return provider_cls(
            num_layers=text.get("num_hidden_layers"), hidden_size=text.get("hidden_size"),
            num_attention_heads=text.get("num_attention_heads"),
            num_query_groups=text.get("num_key_value_heads"), vocab_size=text.get("vocab_size"),
            num_moe_experts=text.get("num_experts") or text.get("num_local_experts"), bridge=type(self).__name__,
            hf_config=hf_pretrained)

    def load_weights_hf_to_megatron(self, hf_pretrained: Any, model: Any, allowed_mismatched_params: Any = None) -> Any:
        from megatron.bridge import _build

        record("load_weights_hf_to_megatron", bridge=type(self).__name__, path=hf_pretrained.get("_path"),
               chunks=len(model), allowed_mismatched_params=list(allowed_mismatched_params or []))
        _build.load(model, hf_pretrained["_path"])
        return model

    def stream_weights_megatron_to_hf(self, model: Any, hf_pretrained: Any, cpu: bool = True) -> Any:
        from megatron.bridge import _build

        record("stream_weights_megatron_to_hf", bridge=type(self).__name__, cpu=cpu, chunks=len(model))
        yield from _build.export(model)
