"""The vllm rollout's weight sync: how the actor's exported tensors reach the engine's model in place.

The engine starts with `load_format` (dummy: random) and takes the actor's weights with the rollout's
`update_weights`: the engine's `export_hf_weights()` stream, checked against the model's tensors
(`expected_hf_weights`, `check_sync`), grouped into buckets of at most
`checkpoint_engine.update_weights_bucket_megabytes` MiB (`buckets`), each bucket one call of the model's
`load_weights` inside vLLM's layerwise reload (`begin_sync`, `load_bucket`, `finish_sync`, run in each
vLLM worker; no file, no new engine). A tensor the model does not have, a shape that differs, or one
left out is an error naming it (`WeightSyncError`).

Names stay transformers' checkpoint names (`model.visual.*`, `model.language_model.*`, `lm_head.*` for
Qwen3-VL), which vLLM's Qwen3-VL `load_weights` maps with its own `hf_to_vllm_mapper`; for Qwen3-VL-MoE
the fused experts (`mlp.experts.gate_up_proj`, `down_proj`), which transformers holds transposed from
the checkpoint's layout, are sent in the checkpoint's layout vLLM reads, and Qwen3-MoE's, which
transformers fuses from the checkpoint's per-expert tensors, per expert (vLLM 0.23's Qwen3-MoE loader
skips the fused names). A conditional-generation class in vLLM (Qwen3-VL, Qwen3.5's checkpoints) gets
the checkpoint's names, a causal-LM class the causal LM's (`to_rollout_names`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterable, Iterator, List, Tuple

import torch

from verl_lite.config.schema import ModelConfig
from verl_lite.models.hf import load_hf_config
from verl_lite.preflight.rollout import BUCKET_KEY
from verl_lite.rollout.vllm_requests import is_vision_language


class WeightSyncError(KeyError):
    """A weight sync named a tensor the rollout model lacks, left one out, gave one a wrong shape, or
    sent one larger than a bucket where verl refuses that (cpu, npu)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# The fused expert tensors of Qwen3-VL-MoE: transformers' conversion mapping for qwen3_vl_moe transposes
# them (dims 1 and 2) on load, vLLM's Qwen3-VL-MoE layers read them untransposed
# (is_fused_checkpoint_transposed=True).
_CHECKPOINT_TRANSPOSED = {"qwen3_vl_moe": ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")}


def takes_checkpoint_names(hf_config: Any) -> bool:
    """Whether vLLM builds the model as a conditional-generation class (the config's architecture, as vLLM
    resolves it: Qwen3-VL, Qwen3_5(Moe)ForConditionalGeneration) whose `load_weights` takes the checkpoint's
    names `model.language_model.*`, `model.visual.*`, `lm_head.*` and maps them itself (the Qwen3-VL
    `hf_to_vllm_mapper`, vllm 0.23.0 `model_executor/models/qwen3_vl.py:1629-1635`, applied by
    `qwen3_5.py:670-675`); the text path's `model.layers.*` names fail there (`There is no module or parameter
    named 'model'`). A causal-LM architecture (`Qwen3_5ForCausalLM`, vLLM >= 0.32) takes the text path's."""
    if is_vision_language(hf_config):
        return True
    archs = list(getattr(hf_config, "architectures", None) or [])
    return bool(archs) and str(archs[0]).endswith("ForConditionalGeneration") \
        and getattr(hf_config, "vision_config", None) is not None


def to_vllm_checkpoint(model_type: str, name: str, tensor: torch.Tensor) -> Tuple[str, torch.Tensor]:
    """An exported tensor (transformers' state-dict name and layout) as vLLM's `load_weights` takes
    it from a checkpoint: same name (the model maps it with its `hf_to_vllm_mapper`), the layout the
    checkpoint stores (Qwen3-VL-MoE's fused experts transposed back)."""
    if name.endswith(_CHECKPOINT_TRANSPOSED.get(model_type, ())):
        return name, tensor.transpose(1, 2).contiguous()
    return name, tensor


# Qwen3-MoE's fused experts as its checkpoints store them, one tensor per expert: transformers' conversion
# mapping for qwen3_moe merges `mlp.experts.{e}.gate_proj.weight` and `up_proj.weight` (I, H) into
# `mlp.experts.gate_up_proj` (E, 2I, H), gate rows first, and `down_proj.weight` (H, I) into
# `mlp.experts.down_proj` (E, H, I). vLLM 0.23's Qwen3-MoE `load_weights` maps only the per-expert names
# and skips a name it does not know without a word (vllm 0.23.0 `model_executor/models/qwen3_moe.py:531-658`:
# the fused experts would keep their start-up weights); the per-expert names load in every release.
_CHECKPOINT_PER_EXPERT = ("qwen3_moe",)


def to_vllm_checkpoint_tensors(model_type: str, name: str, tensor: torch.Tensor) -> Iterator[Tuple[str, torch.Tensor]]:
    """`to_vllm_checkpoint`, with Qwen3-MoE's fused experts split into the checkpoint's per-expert tensors
    (views of the exported tensor, expert by expert)."""
    if model_type in _CHECKPOINT_PER_EXPERT and name.endswith("mlp.experts.gate_up_proj"):
        prefix, half = name[:-len("gate_up_proj")], tensor.shape[1] // 2
        for e in range(tensor.shape[0]):
            yield f"{prefix}{e}.gate_proj.weight", tensor[e, :half]
            yield f"{prefix}{e}.up_proj.weight", tensor[e, half:]
    elif model_type in _CHECKPOINT_PER_EXPERT and name.endswith("mlp.experts.down_proj"):
        prefix = name[:-len("down_proj")]
        for e in range(tensor.shape[0]):
            yield f"{prefix}{e}.down_proj.weight", tensor[e]
    else:
        yield to_vllm_checkpoint(model_type, name, tensor)


_TEXT, _CONDITIONAL = "model.", "model.language_model."


def to_rollout_names(named_tensors: Iterable[Tuple[str, torch.Tensor]],
                     expected: Dict[str, Any]) -> Iterator[Tuple[str, torch.Tensor]]:
    """An export under the rollout's names (`expected`), whichever of the two namings of a text model it
    comes in: a conditional-generation export (`model.language_model.*`, `model.visual.*`: the torch
    engine's and the Megatron Qwen3.5 vision-language bridges') into a causal-LM rollout gets the causal
    LM's names `model.*`, the vision tower's tensors left out; a text-only export (`model.*`) into a
    conditional-generation rollout gets `model.language_model.*`. Names the rollout expects, and names
    neither form explains, pass as they are (the sync's check then names them)."""
    tower = any(n.startswith("model.visual.") for n in expected)
    for name, tensor in named_tensors:
        if name not in expected:
            if name.startswith("model.visual."):
                if not tower:  # a causal-LM rollout: no vision tower to load
                    continue
            elif name.startswith(_CONDITIONAL):
                if _TEXT + name[len(_CONDITIONAL):] in expected:
                    name = _TEXT + name[len(_CONDITIONAL):]
            elif name.startswith(_TEXT) and _CONDITIONAL + name[len(_TEXT):] in expected:
                name = _CONDITIONAL + name[len(_TEXT):]
        yield name, tensor


def hf_model_class(hf_config: Any) -> Any:
    """transformers' auto class whose state dict has the names the rollout's vLLM class takes:
    image-text-to-text for a conditional-generation architecture (Qwen3-VL, Qwen3.5's checkpoints),
    causal LM otherwise."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if takes_checkpoint_names(hf_config) and type(hf_config) in AutoModelForImageTextToText._model_mapping:
        return AutoModelForImageTextToText
    return AutoModelForCausalLM


def expected_hf_weights(model_config: ModelConfig) -> Tuple[Dict[str, torch.Size], set]:
    """HF name -> shape of every tensor the model's state dict holds (built on the meta device: no
    memory), and the names a sync may leave out: a tied lm_head, and the vision tower of a model the
    rollout gives no images (Qwen3.5: its vLLM class has the tower, which text prompts never run)."""
    hf_config = load_hf_config(model_config)
    with torch.device("meta"):
        model = hf_model_class(hf_config).from_config(hf_config)
    shapes = {name: t.shape for name, t in model.state_dict().items()}
    tied = getattr(hf_config, "tie_word_embeddings", False) or getattr(
        getattr(hf_config, "text_config", None), "tie_word_embeddings", False)
    optional = {n for n in shapes if n.endswith("lm_head.weight")} if tied else set()
    if not is_vision_language(hf_config):
        optional |= {n for n in shapes if n.startswith("model.visual.")}
    return shapes, optional


def check_sync(named_tensors: Iterable[Tuple[str, torch.Tensor]], expected: Dict[str, Any], seen: set,
               model: str) -> Iterator[Tuple[str, torch.Tensor]]:
    """The stream as it is, each tensor checked against the rollout model's (`expected`, of `model`): a
    name it lacks, another shape, or a name twice in one sync is a WeightSyncError; `seen` collects the names."""
    for name, tensor in named_tensors:
        shape = expected.get(name)
        if shape is None:
            raise WeightSyncError(f"exported weight {name!r} has no counterpart in the rollout model "
                                  f"({model}); a renamed or extra tensor")
        if tuple(tensor.shape) != tuple(shape):
            raise WeightSyncError(f"exported weight {name!r} has shape {tuple(tensor.shape)}, the rollout model's "
                                  f"is {tuple(shape)}")
        if name in seen:
            raise WeightSyncError(f"exported weight {name!r} arrived twice in one sync")
        seen.add(name)
        yield name, tensor


def buckets(named_tensors: Iterable[Tuple[str, torch.Tensor]], budget: int, device: str,
            mib: Any) -> Iterator[List[Tuple[str, torch.Tensor]]]:
    """Consecutive tensors grouped into lists of at most `budget` bytes, in stream order (verl's
    bucketed transfer). A tensor larger than a bucket goes alone on cuda (verl sends it by CUDA IPC
    by itself) and is an error elsewhere (verl's shared-memory path on npu refuses it)."""
    bucket: List[Tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > budget:
            yield bucket
            bucket, size = [], 0
        if nbytes > budget:
            if device != "cuda":
                raise WeightSyncError(
                    f"exported weight {name!r} ({tuple(tensor.shape)}, {tensor.dtype}) is {nbytes / 2 ** 20:.4g} MiB, "
                    f"more than a weight-sync bucket of {float(mib):g} MiB: raise {BUCKET_KEY} to at least "
                    f"{-(-nbytes // 2 ** 20)}")
            yield [(name, tensor)]
            continue
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


# Worker-side steps of a weight sync (run by collective_rpc in each vLLM worker, `worker` first): vLLM's
# layerwise reload, as its in-place `reload_weights` and its weight-transfer engines run it, with the
# model's `load_weights` called once per bucket in between. Each step runs under the worker's device, as
# vLLM's GPU worker (vllm 0.23.0 `v1/worker/gpu_worker.py:1038,1069,1133`) and vllm-ascend's NPU worker
# (v0.23.0 `vllm_ascend/worker/worker.py:318,336,370`) run theirs: a weight loader or a layer's processing
# that allocates on the default device allocates there. A worker without a device (none set) runs as it is.
def _on_device(worker: Any) -> Any:
    device = getattr(worker, "device", None)
    return torch.device(device) if device is not None else contextlib.nullcontext()


def begin_sync(worker: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config), _on_device(worker):
        initialize_layerwise_reload(worker.model_runner.get_model())


def load_bucket(worker: Any, bucket: List[Tuple[str, torch.Tensor]]) -> None:
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(worker.vllm_config), _on_device(worker):
        worker.model_runner.get_model().load_weights(bucket)


def finish_sync(worker: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

    runner = worker.model_runner
    with set_current_vllm_config(worker.vllm_config), _on_device(worker):
        finalize_layerwise_reload(runner.get_model(), worker.vllm_config.model_config)
    # what vLLM's reload_weights resets after a reload; reset_lora_state is vLLM >= 0.32's
    # (v1/worker/lora_model_runner_mixin.py), absent from vLLM 0.23 and vllm-ascend v0.23.0's runner
    reset_lora_state = getattr(runner, "reset_lora_state", None)
    if reset_lora_state is not None:
        reset_lora_state()
    runner.reset_encoder_cache()
    runner.reset_mm_cache()
