"""The `hf` rollout: batched sampling with transformers' generate (KV cache), on CPU or GPU.

It holds its own copy of the policy and receives the trained weights as (HF name, tensor) pairs
from the engine's export, the same path a vLLM rollout takes. With rollout.calculate_log_probs=True
it returns the sampled tokens' log-probs as `rollout_log_probs` (B x response_length, 0 after the
response), taken from generate's processed scores (after temperature, top-k and top-p, as the vllm
rollout's `processed_logprobs`) by transformers' compute_transition_scores.

Finished rows stop costing decode steps: a response longer than `decode_chunk` tokens is generated
`decode_chunk` tokens at a time, and after each chunk the rows that have emitted EOS leave the
batch; the others continue from their prompt plus the tokens so far, with generate's cache (KV and
linear-attention states) narrowed to their rows, so nothing is computed twice. transformers'
generate keeps every row of its batch until the longest ends, so without this a batch at max
response 128 whose mean length is 45 computes 128 decode positions for each row. Each token is sampled from the same processed distribution as in one generate call
(temperature, top-k, top-p); only the random draws differ. `tokens_computed` counts the positions
the model ran (rows x tokens), for benchmarks.

Images: rows with `multi_modal_inputs` (the processor's pixel_values and image_grid_thw per sample)
generate from them (a vision-language model's generate); the rows then carry Qwen-VL's 3-D rotary
positions (B, 3, L) over prompt + response by the model's own get_rope_index (models/hf.py). A
vision-language model generates in one call (no decode chunks): its cached rotary offsets and
token types cover the whole batch of that call.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Optional, Tuple

import torch
from transformers import GenerationConfig

from verl_lite.batch import Batch, concat, split_by_size
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.config.sections import as_section
from verl_lite.models import is_vision_language
from verl_lite.models.hf import build_causal_lm, image_inputs, mm_token_type_ids, vision_special_ids, vl_position_ids

logger = logging.getLogger(__name__)

# Tokens per generate call before finished rows are dropped (0: one call for the whole response).
# Responses up to this length (the main job's 3 tokens) take a single call, with no extra prefill.
DECODE_CHUNK = 16


def response_mask_from(responses: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 for every generated token up to and including the first EOS, 0 after it."""
    is_eos = (responses == eos_token_id).long()
    seen_before = torch.cumsum(is_eos, dim=1) - is_eos
    return (seen_before == 0).long()


def position_ids_from(attention_mask: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.cumsum(attention_mask, dim=1) - 1, min=0)


class HFRollout:
    """`model_config` / `rollout_config`: the ModelConfig and RolloutConfig sections (dataclass,
    DictConfig or dict; converted with `as_section`)."""

    def __init__(self, model_config: Any, rollout_config: Any, tokenizer: Any, device: str):
        self.config: RolloutConfig = as_section(RolloutConfig, rollout_config)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.model = build_causal_lm(as_section(ModelConfig, model_config)).to(self.device).eval()
        self.vision_language = is_vision_language(self.model.config.to_dict())
        self.weight_version = 0
        self.tower_synced = True  # False after a weight sync that carried no vision tower (update_weights)
        self.decode_chunk = DECODE_CHUNK
        self.tokens_computed = 0
        self.model.register_forward_pre_hook(self._count_tokens, with_kwargs=True)

    def _count_tokens(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if ids is not None:
            self.tokens_computed += int(ids.shape[0]) * int(ids.shape[1])

    def position_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     multi_modal_inputs: Any = None, prompt_length: Optional[int] = None) -> torch.Tensor:
        """The rows' positions as the model computes them: 3-D (B, 3, L) for a vision-language model,
        else the count of real tokens before each (B, L)."""
        if self.vision_language:
            return vl_position_ids(self.model.config, input_ids, attention_mask, multi_modal_inputs, prompt_length)
        return position_ids_from(attention_mask)

    # -- where the rollout's own profiler traces go (trainer/profiling.py) ------------------------------

    @staticmethod
    def replica_world_size() -> int:
        """The ranks one replica spans: each rank generates on its own."""
        return 1

    @staticmethod
    def trace_worker_name() -> str:
        """The name of this rank's profiler traces, as vLLM names the worker of a one-rank engine of a dense model."""
        return "rank0"

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]], version: int) -> int:
        """Copy exported weights into the rollout model as they arrive (an engine's `export_hf_weights()`
        stream, or the items of a dict that crossed Ray); every rollout tensor must be covered.

        A vision-language rollout also takes a text-only export (the text model's names `model.*`, e.g.
        a causal-LM checkpoint's): the tensors go to `model.language_model.*`, the vision tower keeps its
        weights and prompts with images are refused."""
        state = self.model.state_dict()
        seen = set()
        for name, tensor in named_tensors:
            if name not in state and self.vision_language and name.startswith("model."):
                name = "model.language_model." + name[len("model."):]
            if name not in state:
                raise KeyError(f"exported weight {name!r} has no counterpart in the rollout model")
            state[name].copy_(tensor.to(state[name].dtype))
            seen.add(name)
        tied = {n for n in state if n.endswith("lm_head.weight")} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = set(state) - seen - tied
        tower = {n for n in state if n.startswith("model.visual.")}
        self.tower_synced = not (self.vision_language and tower and tower.isdisjoint(seen))
        if not self.tower_synced:
            missing -= tower
        if missing:
            raise KeyError(f"weight sync left rollout tensors unset: {sorted(missing)[:5]}")
        self.weight_version = version
        return len(seen)

    @torch.no_grad()
    def generate(self, prompts: Batch, response_length: int, sampling: Dict[str, Any]) -> Batch:
        """Sample one response per prompt row; returns prompt+response tensors (see engine/base.py)."""
        parts = [self._generate(p, response_length, sampling)
                 for p in split_by_size(prompts, int(self.config.micro_batch_size))]
        return concat(parts)

    def _generate(self, prompts: Batch, response_length: int, sampling: Dict[str, Any]) -> Batch:
        input_ids = prompts["input_ids"].to(self.device)
        attention_mask = prompts["attention_mask"].to(self.device)
        do_sample = bool(sampling.get("do_sample", True)) and float(sampling.get("temperature", 1.0)) > 0
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        # Sampling settings go in a GenerationConfig, the model's inputs as keyword arguments: given
        # settings as keywords, generate() first checks the model config for legacy generation
        # parameters by copying and re-validating the whole config, on every call (16% of the hf
        # rollout's generate time for the tiny model; docs/benchmarks.md).
        settings: Dict[str, Any] = {"do_sample": do_sample, "pad_token_id": pad, "eos_token_id": eos}
        kwargs: Dict[str, Any] = {}
        if do_sample:
            top_k = int(sampling.get("top_k", -1))
            settings.update(temperature=float(sampling.get("temperature", 1.0)),
                            top_p=float(sampling.get("top_p", 1.0)), top_k=top_k if top_k > 0 else 0)
        mm = prompts.get("multi_modal_inputs")
        if self.vision_language:
            # a sampled placeholder in a response would not match the pixel inputs in the actor's forward
            settings["suppress_tokens"] = vision_special_ids(self.model.config)
            pixels = image_inputs(mm, self.device)
            if pixels and not self.tower_synced:
                raise ValueError("the prompts have images (multi_modal_inputs) but the last weight sync carried no "
                                 "vision tower (a text-only export, the text model's names only); "
                                 "sync from an engine that builds the tower (strategy=fsdp, or Megatron's "
                                 "vision-language bridges)")
            if pixels:  # the processor's token types, as generate needs them for the 3-D positions
                kwargs.update(pixels, mm_token_type_ids=mm_token_type_ids(input_ids, self.model.config))
        elif mm is not None and any(mm):
            raise ValueError(f"the rollout model {type(self.model).__name__} is not a vision-language model but the "
                             "prompts have images (multi_modal_inputs): use a vision-language model.path")
        log_probs_on = self.config.calculate_log_probs is True
        settings.update(return_dict_in_generate=True, output_scores=log_probs_on)
        generation_config = GenerationConfig(**settings)
        B = input_ids.shape[0]
        responses = torch.full((B, response_length), pad, dtype=input_ids.dtype)
        token_log_probs = torch.zeros((B, response_length)) if log_probs_on else None
        # a vision-language model in one call: generate keeps its 3-D rotary offsets per row of the first call
        chunked = int(self.decode_chunk) > 0 and not self.vision_language
        chunk = int(self.decode_chunk) if chunked else response_length
        rows = torch.arange(B)  # rows still generating, indices into the batch
        done = 0  # response tokens generated so far by every row in `rows`
        cache = None  # the KV / linear-attention cache of `rows`, over all but their last token
        while done < response_length and len(rows):
            step = min(chunk, response_length - done)
            ids = torch.cat([input_ids[rows], responses[rows, :done].to(self.device)], dim=1)
            mask = torch.cat([attention_mask[rows], torch.ones((len(rows), done), dtype=attention_mask.dtype,
                                                               device=self.device)], dim=1)
            generation_config.max_new_tokens = step  # generate() works on its own copy
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config,
                                      **({"past_key_values": cache} if cache is not None else {}), **kwargs)
            new = out.sequences[:, ids.shape[1]:].cpu()
            responses[rows, done:done + new.shape[1]] = new
            if log_probs_on:
                scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
                token_log_probs[rows, done:done + new.shape[1]] = scores.float().cpu()
            done += step
            going = ~(new == eos).any(dim=1)
            rows = rows[going]
            if done < response_length and len(rows):
                cache = out.past_key_values
                cache.reorder_cache(torch.nonzero(going)[:, 0].to(self.device))  # keep the rows still going
        response_mask = response_mask_from(responses, self.tokenizer.eos_token_id)
        responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, self.tokenizer.pad_token_id))
        full_mask = torch.cat([prompts["attention_mask"], response_mask], dim=1)
        result = dict(prompts)
        if token_log_probs is not None:
            result["rollout_log_probs"] = torch.where(response_mask.bool(), token_log_probs,
                                                      torch.zeros_like(token_log_probs))
        result.update(
            prompts=prompts["input_ids"],
            responses=responses,
            response_mask=response_mask,
            input_ids=torch.cat([prompts["input_ids"], responses], dim=1),
            attention_mask=full_mask,
            position_ids=self.position_ids(torch.cat([prompts["input_ids"], responses], dim=1), full_mask, mm,
                                           prompts["input_ids"].shape[1]),
        )
        return result
