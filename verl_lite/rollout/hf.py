"""The `hf` rollout: batched sampling with transformers' generate (KV cache), on CPU or GPU.

It holds its own copy of the policy and receives the trained weights as (HF name, tensor) pairs
from the engine's export, the same path a vLLM rollout takes. With rollout.calculate_log_probs=True
it returns the sampled tokens' log-probs as `rollout_log_probs` (B x response_length, 0 after the
response), taken from generate's processed scores (after temperature, top-k and top-p, as the vllm
rollout's `processed_logprobs`) by transformers' compute_transition_scores.

Images: rows with `multi_modal_inputs` (the processor's pixel_values and image_grid_thw per sample)
generate from them (a vision-language model's generate); the rows then carry Qwen-VL's 3-D rotary
positions (B, 3, L) over prompt + response by the model's own get_rope_index (models/hf.py).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Optional, Tuple

import torch
import torch.nn.functional as F

from verl_lite.batch import Batch, concat, split_by_size
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.config.sections import as_section
from verl_lite.models import is_vision_language
from verl_lite.models.hf import build_causal_lm, image_inputs, mm_token_type_ids, vision_special_ids, vl_position_ids

logger = logging.getLogger(__name__)


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

    def position_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     multi_modal_inputs: Any = None, prompt_length: Optional[int] = None) -> torch.Tensor:
        """The rows' positions as the model computes them: 3-D (B, 3, L) for a vision-language model,
        else the count of real tokens before each (B, L)."""
        if self.vision_language:
            return vl_position_ids(self.model.config, input_ids, attention_mask, multi_modal_inputs, prompt_length)
        return position_ids_from(attention_mask)

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]], version: int) -> int:
        """Copy exported weights into the rollout model as they arrive (an engine's `export_hf_weights()`
        stream, or the items of a dict that crossed Ray); every rollout tensor must be covered."""
        state = self.model.state_dict()
        seen = set()
        for name, tensor in named_tensors:
            if name not in state:
                raise KeyError(f"exported weight {name!r} has no counterpart in the rollout model")
            state[name].copy_(tensor.to(state[name].dtype))
            seen.add(name)
        tied = {n for n in state if n.endswith("lm_head.weight")} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = set(state) - seen - tied
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
        kwargs: Dict[str, Any] = {"max_new_tokens": response_length, "do_sample": do_sample,
                                  "pad_token_id": self.tokenizer.pad_token_id,
                                  "eos_token_id": self.tokenizer.eos_token_id}
        if do_sample:
            top_k = int(sampling.get("top_k", -1))
            kwargs.update(temperature=float(sampling.get("temperature", 1.0)),
                          top_p=float(sampling.get("top_p", 1.0)), top_k=top_k if top_k > 0 else 0)
        mm = prompts.get("multi_modal_inputs")
        if self.vision_language:
            # a sampled placeholder in a response would not match the pixel inputs in the actor's forward
            kwargs["suppress_tokens"] = vision_special_ids(self.model.config)
            pixels = image_inputs(mm, self.device)
            if pixels:  # the processor's token types, as generate needs them for the 3-D positions
                kwargs.update(pixels, mm_token_type_ids=mm_token_type_ids(input_ids, self.model.config))
        elif mm is not None and any(mm):
            raise ValueError(f"the rollout model {type(self.model).__name__} is not a vision-language model but the "
                             "prompts have images (multi_modal_inputs): use a vision-language model.path")
        log_probs_on = self.config.calculate_log_probs is True
        out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs,
                                  **({"output_scores": True, "return_dict_in_generate": True} if log_probs_on else {}))
        token_log_probs = None
        if log_probs_on:
            token_log_probs = self.model.compute_transition_scores(out.sequences, out.scores,
                                                                   normalize_logits=True).float().cpu()
            out = out.sequences
        responses = out[:, input_ids.shape[1]:].cpu()
        if responses.shape[1] < response_length:
            responses = F.pad(responses, (0, response_length - responses.shape[1]), value=self.tokenizer.pad_token_id)
        response_mask = response_mask_from(responses, self.tokenizer.eos_token_id)
        responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, self.tokenizer.pad_token_id))
        full_mask = torch.cat([prompts["attention_mask"], response_mask], dim=1)
        result = dict(prompts)
        if token_log_probs is not None:
            token_log_probs = F.pad(token_log_probs, (0, response_length - token_log_probs.shape[1]))
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
