"""Checkpoints of the torch engine: what `checkpoint.save_contents` / `load_contents` list.

- model, optimizer, extra: `model.pt` holds the full, unsharded model state dict (with LoRA the
  trainable tensors alone, and `lora_adapter/` the adapter in PEFT's format), the optimizer's state
  dict (gathered to full under FSDP2) and the LR schedule; `rng_rank<N>.pt` each data-parallel rank's
  RNG state ("extra"). Data-parallel rank 0 writes all but the RNG files; the full state dicts load at
  any data-parallel size (`contents.json` records the engine, and only the engine is compared).
- hf_model: `huggingface/`, the HF model from the engine's export stream (engine/hf_export.py; with
  LoRA the merged model). A resume whose load_contents has hf_model and not model loads the weights
  from it, whatever layout wrote it.

The engine's save_hf_model / save_checkpoint / load_checkpoint call these with itself.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

import torch

from verl_lite.checkpoint_files import CheckpointError, load_tensors
from verl_lite.decisions.layout import Layout
from verl_lite.engine.hf_export import (HF_DIR, Contents, check_loadable, hf_files, save_hf_model as write_hf_model,
                                        write_contents)
from verl_lite.engine.torch import lora
from verl_lite.models import resolve_model_dir

logger = logging.getLogger(__name__)


def contents(engine: Any) -> Contents:
    return Contents(getattr(engine.engine_config, "checkpoint", None), engine.role)


def layout(engine: Any) -> Dict[str, Any]:
    """Recorded in contents.json; only the engine is compared on load: the full state dicts load at
    any data-parallel size."""
    return Layout("fsdp", engine.dp_size).checkpoint_sizes(engine.dp_size)


def save_hf_model(engine: Any, path: str, strict: bool = True, state: Optional[Dict[str, torch.Tensor]] = None
                  ) -> Optional[str]:
    """Write the model as an HF model dir at `path` (config, safetensors, tokenizer; see
    engine/hf_export.py). A collective: every rank calls it, rank 0 writes. `state`: the full
    state dict when the caller holds it already (then nothing is gathered again)."""
    mc = engine.model_config
    tensors = iter(state.items()) if state is not None else engine.export_hf_weights()
    return write_hf_model(path, tensors, engine.module.config, engine.model_type,
                          mc.tokenizer_path or mc.path, bool(mc.trust_remote_code), strict, engine.role,
                          model_dir=resolve_model_dir(mc.path), rename=engine.HF_RENAME)


def save(engine: Any, path: str) -> None:
    """What checkpoint.save_contents lists: model (the full, unsharded state dict), optimizer and
    extra (LR schedule, RNG) in model.pt and rng_rank*.pt, hf_model in huggingface/; rank 0
    writes all but each rank's RNG file."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    listed = contents(engine)
    os.makedirs(path, exist_ok=True)
    peft = lora.is_peft(engine.module)
    model_sd = None
    if "model" in listed.save:  # the whole model; with LoRA the adapters alone (the base is model.path)
        model_sd = lora.trainable_state(engine.module) if peft else dict(engine.export_hf_weights())
        if peft:
            lora.save_adapter(engine.module, os.path.join(path, lora.ADAPTER_DIR), model_sd, engine.dp_rank == 0)
    if "hf_model" in listed.save:  # with LoRA the merged model
        engine.save_hf_model(os.path.join(path, HF_DIR), listed.strict, state=None if peft else model_sd)
    optim_sd = None
    if engine.optimizer is not None and "optimizer" in listed.save:
        if engine.sharded:
            optim_sd = get_optimizer_state_dict(engine.module, engine.optimizer,
                                                options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        else:
            optim_sd = engine.optimizer.state_dict()
    extra = "extra" in listed.save
    if engine.dp_rank == 0:
        if listed.save & {"model", "optimizer", "extra"}:
            payload = {"model": model_sd, "optimizer": optim_sd,
                       "lr_scheduler": engine.lr_scheduler.state_dict() if engine.lr_scheduler and extra else None}
            torch.save(payload, os.path.join(path, "model.pt"))
        write_contents(path, listed.save, layout(engine))
    if extra:
        rng = {"cpu": torch.get_rng_state()}
        if engine.device in ("cuda", "npu"):  # sampling in the rollout draws from the device generator too
            rng[engine.device] = getattr(torch, engine.device).get_rng_state()
        torch.save(rng, os.path.join(path, f"rng_rank{engine.dp_rank}.pt"))


def load_hf_weights(engine: Any, path: str) -> None:
    """The weights of the part's HF copy (huggingface/*.safetensors), whatever layout wrote them."""
    from safetensors.torch import load_file

    state: Dict[str, torch.Tensor] = {}
    for file in hf_files(path):
        state.update(load_file(file))
    for own_prefix, hf_prefix in engine.HF_RENAME.items():
        state = {(own_prefix + k[len(hf_prefix):] if k.startswith(hf_prefix) else k): v for k, v in state.items()}
    own = engine.module.state_dict()
    if "lm_head.weight" in own and "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied: written once, as HF does
    set_model_state(engine, state, os.path.join(path, "huggingface"))


def set_model_state(engine: Any, state: Dict[str, Any], source: str, strict: bool = True) -> None:
    """`strict=False`: `state` covers part of the model (the LoRA adapters, checked by the caller)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    try:
        if engine.sharded:
            set_model_state_dict(engine.module, state, options=StateDictOptions(full_state_dict=True,
                                                                                cpu_offload=True, strict=strict))
        else:
            engine.module.load_state_dict(state, strict=strict)
    except RuntimeError as e:  # missing/unexpected keys or shape mismatch: another model's checkpoint
        raise CheckpointError(f"checkpoint {source} does not fit the {engine.role} model "
                              f"({' '.join(str(e).split())[:240]}); resume with the model it was "
                              f"saved from, or set trainer.resume_mode=disable") from e


def load(engine: Any, path: str) -> None:
    """What checkpoint.load_contents lists (a listed part the checkpoint lacks is a CheckpointError);
    the weights from model.pt, or with hf_model alone from the HF copy."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    listed = contents(engine)
    check_loadable(path, listed, engine.role, {"engine": "fsdp"})
    weights = listed.weights_from()
    payload: Dict[str, Any] = {}
    model_file = os.path.join(path, "model.pt")
    if weights == "model" or listed.load & {"optimizer", "extra"}:
        payload = load_tensors(model_file)  # weights_only=True: pickled objects are refused, never run
        if not isinstance(payload, dict) or "model" not in payload:
            raise CheckpointError(f"checkpoint file {model_file} is not a {engine.role} checkpoint of this engine "
                                  f"(expected a dict with 'model', 'optimizer', 'lr_scheduler')")
    if weights == "model":
        if not isinstance(payload.get("model"), dict):
            raise CheckpointError(f"checkpoint file {model_file} holds no model weights")
        if lora.is_peft(engine.module):  # the adapters alone; the base stays as model.path gave it
            lora.check_trainable_state(engine.module, payload["model"], model_file)
            set_model_state(engine, payload["model"], model_file, strict=False)
        else:
            set_model_state(engine, payload["model"], model_file)
    elif weights == "hf_model" and lora.is_peft(engine.module):
        raise CheckpointError(f"{path}: with LoRA the weights resume from the adapters in model.pt; "
                              f"{contents(engine).prefix}.load_contents has hf_model but not model (the merged "
                              "HF copy cannot be split back into base and adapter): add model to load_contents")
    elif weights == "hf_model":
        load_hf_weights(engine, path)
    if "optimizer" in listed.load and engine.optimizer is not None and payload.get("optimizer") is not None:
        if engine.sharded:
            set_optimizer_state_dict(engine.module, engine.optimizer, payload["optimizer"],
                                     options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        else:
            engine.optimizer.load_state_dict(payload["optimizer"])
    if "extra" not in listed.load:
        return
    if engine.lr_scheduler is not None and payload.get("lr_scheduler") is not None:
        engine.lr_scheduler.load_state_dict(payload["lr_scheduler"])
    rng_file = os.path.join(path, f"rng_rank{engine.dp_rank}.pt")
    if not os.path.isfile(rng_file):  # saved by fewer data-parallel ranks: the full state dicts load alike
        logger.warning("%s: %s holds no RNG state for data-parallel rank %d (saved with another data-parallel "
                       "size); this rank's sampling continues from its own seed", engine.role, path, engine.dp_rank)
        return
    rng = load_tensors(rng_file)
    torch.set_rng_state(rng["cpu"])
    if engine.device in ("cuda", "npu") and engine.device in rng:
        getattr(torch, engine.device).set_rng_state(rng[engine.device])
