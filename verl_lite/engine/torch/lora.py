"""LoRA on the torch engine (strategy fsdp), with PEFT, as verl's FSDP engine does it.

- On when `model.lora_rank > 0` or `model.lora_adapter_path` is set (verl's trainer reads the two the
  same way to put the ref in the actor). The HF model is wrapped with PEFT's `get_peft_model`
  (`LoraConfig(r=lora_rank, lora_alpha, target_modules, exclude_modules, bias="none")`), or with
  `PeftModel.from_pretrained(..., is_trainable=True)` for a saved adapter, before FSDP2 shards it.
  Only the adapter (and a value model's head) is trainable; the optimizer holds just those.
- The ref is the actor with its adapters disabled (`disabled`): no second model is built.
- Rollouts receive the merged weights, base + scaling * B @ A, under the HF model's own names
  (`merged_weights`), so the `hf` rollout and vLLM load them like any model's.
- Checkpoints: model.pt holds the trainable tensors only (the base is model.path, unchanged), and
  `lora_adapter/` the adapter in PEFT's format (adapter_config.json, adapter_model.safetensors), which
  `lora_adapter_path`, PEFT's `PeftModel.from_pretrained` and vLLM's LoRA load.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from verl_lite.checkpoint_files import CheckpointError

logger = logging.getLogger(__name__)

ADAPTER_DIR = "lora_adapter"
ADAPTER = "default"  # PEFT's name of the one adapter
PEFT_PREFIX = "base_model.model."


def enabled(model_config: Any) -> bool:
    """LoRA is on: a positive rank, or an adapter to continue training from."""
    return int(model_config.lora_rank or 0) > 0 or bool(model_config.lora_adapter_path)


def _plain(value: Any) -> Any:
    """OmegaConf lists (ListConfig) as plain lists: PEFT checks for str / list."""
    if value is None or isinstance(value, str):
        return value
    return [str(v) for v in value]


def lora_config(model_config: Any, model_type: str, module: nn.Module):
    """PEFT's LoraConfig from the model section (verl's keys and defaults)."""
    from peft import LoraConfig, TaskType

    head = model_type == "value_model"
    target = _plain(model_config.target_modules)
    if head and target == "all-linear":
        target = _all_linear(module)  # PEFT resolves "all-linear" only on transformers models
    return LoraConfig(
        task_type=None if head else TaskType.CAUSAL_LM, r=int(model_config.lora_rank),
        lora_alpha=int(model_config.lora_alpha), target_modules=target,
        exclude_modules=_plain(model_config.exclude_modules), bias="none",
        # the value head is new, so it trains whole (PEFT's modules_to_save)
        modules_to_save=["value_head"] if head else None)


def _all_linear(module: nn.Module) -> List[str]:
    """The names of the backbone's nn.Linear layers (what PEFT's "all-linear" picks on a causal LM,
    which has its head left out): for the value model, which is not a transformers model."""
    names = {name.split(".")[-1] for name, m in module.named_modules()
             if isinstance(m, nn.Linear) and not name.startswith("value_head")}
    return sorted(names)


def wrap(module: nn.Module, model_config: Any, model_type: str, role: str) -> nn.Module:
    """The model with LoRA adapters (PEFT), before sharding: a fresh adapter, or the one at
    `lora_adapter_path` (trainable)."""
    from peft import PeftModel, get_peft_model

    path = model_config.lora_adapter_path
    if path:
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise FileNotFoundError(f"{role}: model.lora_adapter_path={path!r} holds no adapter_config.json (a PEFT "
                                    f"adapter dir, e.g. a checkpoint's {role}/{ADAPTER_DIR}); nothing is downloaded")
        peft_model = PeftModel.from_pretrained(module, path, is_trainable=True)
        cfg = peft_model.peft_config[ADAPTER]
        logger.info("%s: LoRA adapter loaded from %s (r=%s, alpha=%s)", role, path, cfg.r, cfg.lora_alpha)
    else:
        # A's random init from the model's seed, not the rank's: every data-parallel rank must hold the same
        # adapter before FSDP2 keeps each rank's own shard of it
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(model_config.init_seed) + 2)
            peft_model = get_peft_model(module, lora_config(model_config, model_type, module))
    _check_layers(peft_model, role)
    if model_type == "language_model" and model_config.enable_gradient_checkpointing:
        # with a frozen embedding the checkpointed blocks' inputs need grads (as verl: enable_input_require_grads)
        peft_model.enable_input_require_grads()
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    logger.info("%s: LoRA trains %d of %d parameters (%.2f%%)", role, trainable, total, 100.0 * trainable / total)
    return peft_model


def _check_layers(module: nn.Module, role: str) -> None:
    """Adapters on nn.Linear layers only: the merged export (`merged_weights`) computes base + scaling * B @ A,
    which is PEFT's merge for a Linear; an embedding or convolution adapter merges differently."""
    from peft.tuners.lora import Linear

    layers = _lora_layers(module)
    other = sorted(name for name, m in layers.items() if not isinstance(m, Linear))
    if other:
        raise ValueError(f"{role}: LoRA adapters on layers other than nn.Linear are not supported by verl_lite "
                         f"(the rollout gets merged Linear weights): {other[:4]}; leave them out of "
                         f"model.target_modules or add them to model.exclude_modules")
    variant = sorted(name for name, m in layers.items()
                     if m.use_dora.get(ADAPTER) or getattr(m, "lora_bias", {}).get(ADAPTER))
    if variant:  # only a saved adapter (lora_adapter_path) can ask for these
        raise ValueError(f"{role}: the adapter uses DoRA or LoRA biases ({variant[:2]}), which verl_lite does not "
                         "support (its merged sync is plain LoRA's); give a plain LoRA adapter")


def is_peft(module: nn.Module) -> bool:
    """A PEFT model (checked by class, so a run without LoRA never imports peft; FSDP2's fully_shard
    swaps in a subclass of its own, so the whole MRO is looked at)."""
    return any(cls.__module__.startswith("peft.") for cls in type(module).__mro__)


def unwrapped(module: nn.Module) -> nn.Module:
    """The transformers model (or value model) inside a PEFT model; the module itself otherwise."""
    return module.get_base_model() if is_peft(module) else module


def disabled(module: nn.Module):
    """A context in which the model runs without its adapters (the base model: the ref policy)."""
    if not is_peft(module):
        raise RuntimeError("the model has no LoRA adapters to disable (model.lora_rank is 0)")
    return module.disable_adapter()


def _full(value: torch.Tensor) -> torch.Tensor:
    return value.full_tensor() if hasattr(value, "full_tensor") else value


def _lora_layers(module: nn.Module) -> Dict[str, Any]:
    """{state-dict prefix of a LoRA layer (".base_layer" stripped): the layer}."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in module.named_modules() if isinstance(m, LoraLayer)}


def hf_name(name: str) -> Optional[str]:
    """The HF model's name of a PEFT state-dict entry, None for an adapter tensor or the frozen
    original of a module trained whole (modules_to_save)."""
    if name.startswith(PEFT_PREFIX):
        name = name[len(PEFT_PREFIX):]
    if ".lora_" in name or ".original_module." in name:
        return None
    return name.replace(".base_layer.", ".").replace(f".modules_to_save.{ADAPTER}.", ".")


def merged_weights(module: nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """(HF name, base + scaling * B @ A) for every tensor of the model, one at a time on CPU (under FSDP2
    each tensor is all-gathered in turn: a collective). The same result as PEFT's merge_and_unload,
    without changing the model."""
    from peft.utils.other import transpose

    layers = _lora_layers(module)
    state = module.state_dict()
    for name, value in state.items():
        out = hf_name(name)
        if out is None:
            continue
        tensor = _full(value).detach()
        prefix, _, leaf = name.rpartition(".base_layer.")
        layer = layers.get(prefix)
        if layer is not None and leaf == "weight" and ADAPTER in layer.lora_A and not layer.merged:
            a = _full(state[f"{prefix}.lora_A.{ADAPTER}.weight"]).detach().float()
            b = _full(state[f"{prefix}.lora_B.{ADAPTER}.weight"]).detach().float()
            delta = transpose(b @ a, layer.fan_in_fan_out) * layer.scaling[ADAPTER]
            tensor = (tensor.float() + delta.to(tensor.device)).to(tensor.dtype)
        yield out, tensor.cpu()


def trainable_state(module: nn.Module) -> Dict[str, torch.Tensor]:
    """The trainable tensors (adapters, a value head), full, on CPU, under the model's own names (a
    collective under FSDP2)."""
    names = {n for n, p in module.named_parameters() if p.requires_grad}
    return {n: _full(v).detach().cpu() for n, v in module.state_dict().items() if n in names}


def check_trainable_state(module: nn.Module, state: Dict[str, torch.Tensor], source: str) -> None:
    """A checkpoint's adapter tensors must be exactly the model's trainable ones."""

    names = {n for n, p in module.named_parameters() if p.requires_grad}
    missing, extra = sorted(names - set(state)), sorted(set(state) - names)
    if missing or extra:
        raise CheckpointError(f"checkpoint {source} does not hold this model's LoRA adapters (missing "
                              f"{missing[:3]}, extra {extra[:3]}): it was saved with other lora_rank / target_modules "
                              f"or without LoRA; resume with the settings it was saved with, or set "
                              f"trainer.resume_mode=disable")


def save_adapter(module: nn.Module, path: str, state: Dict[str, torch.Tensor], writer: bool) -> None:
    """PEFT's adapter dir (adapter_config.json, adapter_model.safetensors) at `path` from the full
    trainable tensors `state`; only the writer rank writes."""
    if writer:
        module.save_pretrained(path, state_dict=state, is_main_process=True)
