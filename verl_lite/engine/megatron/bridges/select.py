"""The engine side of the bridge choice made by `verl_lite.decisions.bridge_choice.choose_bridge` (the
same function the preflight calls): verl_lite's own registry, Megatron-Bridge's AutoBridge, or the
legacy mbridge package, and MindSpeed-Bridge's registration on npu.

    selection = select_bridge(megatron_config, hf_config, device, model_dir, model_type)
    selection.bridge     # a verl_lite ModelBridge (registry.BRIDGES), or None
    selection.external   # MegatronBridgeBuild / MBridgeBuild, or None

Order on npu with MindSpeed-Bridge (override_transformer_config.use_ascend_gdn=True and Megatron-Bridge
in use): the MindSpeed engine has already imported `mindspeed.megatron_adaptor` and applied the
repatch in device-mesh init; `select_bridge` then runs `import mindspeed_bridge.models`, which
registers its Qwen3.5 bridges into Megatron-Bridge's registry, before anything builds the model
(`MegatronBridgeBuild` resolves the architecture through that registry).

The external builds follow verl's Megatron engine (verl/workers/engine/megatron/transformer_impl.py,
verl/utils/megatron_utils.py): AutoBridge.from_hf_pretrained(path) -> to_megatron_provider(load_weights=False)
-> parallel sizes and overrides on the provider -> provide_distributed_model(wrap_with_ddp=False) ->
load_hf_weights(model, path) (`build_external`); the rollout sync and HF export stream
export_hf_weights(model). The engine then sets the chunks up as it does its own bridges' (DDP wrap,
optimizer, freeze: `MegatronLMEngine._set_up_chunks`).

The engine marks each built model with its forward convention (`conventions.mark_forward_convention`, from
its class: megatron-core's GPTModel, or Megatron-Bridge's Qwen3VLModel and its MindSpeed-Bridge /
mbridge namesakes), which `schedule.run_schedule` follows: verl's calls, not verl_lite's own GPT-style one.
"""

from __future__ import annotations

import glob
import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

from verl_lite.decisions import bridge_choice
from verl_lite.decisions.layout import sequence_parallel_on
from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges import bridge_for
from verl_lite.engine.megatron.bridges.base import ModelShard, ModelBridge
from verl_lite.engine.megatron.gdn import fla_installed, megatron_gdn_packed_refusal
from verl_lite.models import is_gdn_model
from verl_lite.registry import BRIDGES

logger = logging.getLogger(__name__)


def vision_config_of(hf_config: Any) -> bool:
    """Whether an HF config (object or config.json dict) has a vision_config."""
    if isinstance(hf_config, dict):
        return hf_config.get("vision_config") is not None
    return getattr(hf_config, "vision_config", None) is not None


def _as_dict(hf_config: Any) -> Optional[Dict[str, Any]]:
    if hf_config is None:
        return None
    if isinstance(hf_config, dict):
        return hf_config
    to_dict = getattr(hf_config, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return dict(vars(hf_config))


def import_mindspeed_bridge() -> None:
    """`import mindspeed_bridge.models`: registers MindSpeed-Bridge's Qwen3.5 bridges into
    Megatron-Bridge's registry. Must run after MindSpeed's repatch and before the model build."""
    try:
        importlib.import_module("mindspeed_bridge.models")
    except ImportError as e:
        raise UnsupportedModelError(
            f"MindSpeed-Bridge could not be imported ({type(e).__name__}: {e}): override_transformer_config."
            f"use_ascend_gdn=True on npu with Megatron-Bridge needs it (install MindSpeed-Bridge, or set "
            f"USE_MINDSPEED_BRIDGE=False)") from e
    logger.info("MindSpeed-Bridge: mindspeed_bridge.models imported (Qwen3.5 bridges registered)")


class MegatronBridgeBuild:
    """Megatron-Bridge's AutoBridge: model build from the provider, HF weights in and out."""

    kind = bridge_choice.MEGATRON_BRIDGE

    def __init__(self, model_dir: str, trust_remote_code: bool = False, hf_config: Any = None,
                 device: Optional[str] = None):
        from megatron.bridge import AutoBridge

        self.model_dir = model_dir
        self.device = device  # the engine's (npu for the MindSpeed engines, wherever their tensors live)
        self.bridge = AutoBridge.from_hf_pretrained(model_dir, trust_remote_code=trust_remote_code)
        self.provider: Any = None
        self.hf_config = hf_config

    @property
    def has_vision(self) -> bool:
        """Whether the model takes images: verl's own test, `hasattr(hf_config, "vision_config")`
        (verl 1dda039b verl/workers/engine/megatron/transformer_impl.py:1384-1398)."""
        return vision_config_of(self.hf_config)

    def configure(self, parallel_sizes: Dict[str, Any], overrides: Dict[str, Any], dtype: Any,
                  value_model: bool = False) -> Any:
        """The provider with the run's parallel layout and override_transformer_config (verl's order:
        its fixed settings, then the user's overrides, which win)."""
        import torch

        provider = self.bridge.to_megatron_provider(load_weights=False)
        settings: Dict[str, Any] = dict(parallel_sizes)
        settings.update(variable_seq_lengths=True, batch_p2p_comm=False)  # sequence_parallel: in overrides
        settings.update(overrides)
        if value_model and hasattr(provider, "share_embeddings_and_output_weights"):
            settings["share_embeddings_and_output_weights"] = False
        if hasattr(provider, "apply_overrides_and_finalize"):  # Megatron-Bridge >= 0.5
            provider.apply_overrides_and_finalize(dtype=dtype, overrides=settings)
        else:
            provider.params_dtype = dtype
            provider.fp16 = dtype == torch.float16
            provider.bf16 = dtype == torch.bfloat16
            for name, value in settings.items():
                setattr(provider, name, value)
            if hasattr(provider, "finalize"):
                provider.finalize()
        self.provider = provider
        return provider

    def build(self) -> List[Any]:
        """The model chunks (one per virtual pipeline stage), not DDP-wrapped."""
        if self.provider is None:
            raise RuntimeError("MegatronBridgeBuild.build() before configure()")
        model = self.provider.provide_distributed_model(
            wrap_with_ddp=False, fp16=self.provider.fp16, bf16=self.provider.bf16)
        return model if isinstance(model, list) else [model]

    def load(self, chunks: List[Any], value_model: bool = False) -> None:
        allowed = ["output_layer.weight"] if value_model else []
        self.bridge.load_hf_weights(chunks, self.model_dir, allowed_mismatched_params=allowed)

    def export(self, chunks: List[Any]) -> Iterator[Tuple[str, Any]]:
        return iter(self.bridge.export_hf_weights(chunks, cpu=True))


class MBridgeBuild:
    """The legacy mbridge package (verl's vanilla_mbridge=True path)."""

    kind = bridge_choice.MBRIDGE

    def __init__(self, model_dir: str, hf_config: Any, device: Optional[str] = None):
        from mbridge import AutoBridge

        self.model_dir = model_dir
        self.device = device
        self.bridge = AutoBridge.from_config(hf_config)
        self.fp16, self.bf16 = False, True
        self.hf_config = hf_config

    @property
    def has_vision(self) -> bool:
        return vision_config_of(self.hf_config)

    def configure(self, parallel_sizes: Dict[str, Any], overrides: Dict[str, Any], dtype: Any,
                  value_model: bool = False) -> Any:
        """mbridge reads the parallel layout from megatron's initialized groups; the overrides go to
        its TransformerConfig (set_extra_args), as in verl."""
        import torch

        self.fp16, self.bf16 = dtype == torch.float16, dtype == torch.bfloat16
        self.bridge.set_extra_args(**overrides)
        return self.bridge.config

    def build(self) -> List[Any]:
        model = self.bridge.get_model(wrap_with_ddp=False, fp16=self.fp16, bf16=self.bf16)
        return model if isinstance(model, list) else [model]

    def load(self, chunks: List[Any], value_model: bool = False) -> None:
        self.bridge.load_weights(chunks, self.model_dir)

    def export(self, chunks: List[Any]) -> Iterator[Tuple[str, Any]]:
        return iter(self.bridge.export_weights(chunks))


@dataclass
class Selection:
    choice: bridge_choice.BridgeChoice
    bridge: Optional[ModelBridge] = None
    external: Any = None  # MegatronBridgeBuild | MBridgeBuild


def select_bridge(megatron_config: Any, hf_config: Any, device: str, model_dir: str,
                  model_type: str = "language_model", trust_remote_code: bool = False,
                  installed: Optional[Dict[str, bool]] = None, own_refused: Optional[str] = None) -> Selection:
    """Choose as the preflight does, then load: for verl_lite's registry the ModelBridge; for
    Megatron-Bridge (after MindSpeed-Bridge's registration when asked) or mbridge, the build object.
    A refusal raises UnsupportedModelError with the preflight's message. `own_refused`: why verl_lite's
    own bridges cannot build this model here (the MindSpeed engines' stack: ascend_stack.own_bridge_refusal)."""
    hf = _as_dict(hf_config)
    try:
        choice = bridge_choice.choose_bridge(
            "megatron", megatron_config, hf, device,
            bridge_choice.installed_here() if installed is None else installed, [k[0] for k in BRIDGES.keys()],
            value_model=model_type == "value_model", own_refused=own_refused)
    except bridge_choice.BridgeRefusal as e:
        raise UnsupportedModelError(str(e)) from e
    if choice.kind == bridge_choice.VERL_LITE:
        return Selection(choice, bridge=bridge_for(hf_config))
    if choice.mindspeed_bridge:
        import_mindspeed_bridge()
    if choice.kind == bridge_choice.MEGATRON_BRIDGE:
        return Selection(choice, external=MegatronBridgeBuild(model_dir, trust_remote_code, hf_config, device))
    return Selection(choice, external=MBridgeBuild(model_dir, hf_config, device))


def build_external(build: Any, parallel_sizes: Dict[str, Any], sequence_parallel: bool, overrides: Dict[str, Any],
                   dtype: Any, value_model: bool) -> List[Any]:
    """The model chunks of an external bridge (one per virtual stage, not DDP-wrapped), configured with
    the run's layout and overrides and loaded with the model directory's safetensors (random init is
    verl_lite's own bridges only). The engine wraps, freezes and builds the optimizer itself."""
    model_dir = build.model_dir
    if not glob.glob(os.path.join(model_dir, "*.safetensors")):
        raise UnsupportedModelError(
            f"{build.kind}: {model_dir} has no *.safetensors; Megatron-Bridge and mbridge load HF weights from the "
            f"model directory (a random-init model runs only through verl_lite's own bridges: without "
            f"Megatron-Bridge installed, or with vanilla_mbridge=False and no mbridge)")
    # megatron.sequence_parallel as verl passes it (on with TP > 1 only, as for verl_lite's own bridges);
    # override_transformer_config wins, as in verl
    sp = sequence_parallel_on(sequence_parallel, parallel_sizes)
    build.configure(parallel_sizes, {"sequence_parallel": sp, **overrides}, dtype, value_model)
    chunks = build.build()
    build.load(chunks, value_model)
    return chunks


def external_layout(hf_config: Any, tp_size: int, tp_rank: int) -> ModelShard:
    """The sizes the engine reads of a model an external bridge built (its text model's)."""
    hf = _as_dict(hf_config) or {}
    text = hf.get("text_config") or hf
    heads = int(text.get("num_attention_heads") or 1)
    hidden = int(text.get("hidden_size") or 0)
    return ModelShard(
        hidden=hidden, ffn=int(text.get("intermediate_size") or 0), heads=heads,
        groups=int(text.get("num_key_value_heads") or heads), head_dim=int(text.get("head_dim") or hidden // heads),
        vocab=int(text.get("vocab_size") or hf.get("vocab_size")), tp_size=tp_size, tp_rank=tp_rank,
        tied=bool(text.get("tie_word_embeddings", hf.get("tie_word_embeddings", False))))


def external_gdn_kernel(hf_config: Any, device: str, overrides: Dict[str, Any]) -> Optional[str]:
    """The GDN kernel of a Megatron-Bridge / mbridge build of a Gated DeltaNet model (None otherwise),
    as the real stack picks it (decisions/bridge_choice.gdn_kernel; the fla name always imports on npu,
    where MindSpeed stands it in). On megatron-core < 0.18 its GatedDeltaNet takes no packed input
    (batch.packed_input_refusal): the torch rule's "no cu_seqlens", which keeps an external build padded."""
    if not is_gdn_model(_as_dict(hf_config) or {}):
        return None
    if megatron_gdn_packed_refusal():
        return bridge_choice.TORCH
    return bridge_choice.gdn_kernel(device, overrides, bridge_choice.fla_importable(device, fla_installed()))
