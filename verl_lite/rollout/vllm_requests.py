"""The vllm rollout's rows in and out: prompt rows as vLLM requests, and vLLM's outputs as response rows.

- Prompts go in as token ids (the engine has no tokenizer); rows that repeat the same prompt one
  after another (the trainer repeats each prompt `n` times) are one request with `n` samples.
- Images (Qwen3-VL dense and MoE): a row's `multi_modal_data` (`{"image": [PIL images]}`) goes into
  its request's `multi_modal_data` as it is, with the prompt's runs of image-pad tokens (the HF
  processor expands one per patch group) folded back to one per image, which vLLM expands again
  from the images (verl sends the unexpanded ids the same way). Rows with 3-D positions (B, 3, L:
  mrope) get them extended over the response as the model extends them when generating: each
  response token one past the prompt's largest position, in all three rows.
- A TP group's ranks generate the group's rows once and each keeps its own (`gather_group_rows`,
  `rows_of`).
- Outputs: `response_length` tokens at most, stopped by EOS (kept in the response, as the hf rollout
  does), and the sampled tokens' log-probs.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Tuple

import torch

from verl_lite.models import VLLM_IMAGE_MODEL_TYPES

# Vision-language models the rollout gives images to (HF model_type).
VISION_LANGUAGE_TYPES = VLLM_IMAGE_MODEL_TYPES

Row = Tuple[List[int], Any]  # a prompt's token ids (no padding) and its multi_modal_data


def is_vision_language(hf_config: Any) -> bool:
    """Whether the rollout gives the model images: a Qwen3-VL config (dense or MoE). Other configs
    with a vision tower (Qwen3.5's checkpoints) generate from text only."""
    return getattr(hf_config, "model_type", None) in VISION_LANGUAGE_TYPES


def is_greedy(sampling: Dict[str, Any]) -> bool:
    """Whether the sampling settings ask for greedy decoding: do_sample off or temperature <= 0."""
    return not bool(sampling.get("do_sample", True)) or float(sampling.get("temperature", 1.0) or 0.0) <= 0


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


def same_images(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> bool:
    """Whether two rows' multi_modal_data hold the same images (the same objects, or equal pixels)."""
    if a is b:
        return True
    ia, ib = list((a or {}).get("image") or []), list((b or {}).get("image") or [])
    return len(ia) == len(ib) and all(x is y or x == y for x, y in zip(ia, ib))


def request_groups(rows: List[Row], greedy: bool) -> List[Tuple[Row, int, int]]:
    """(prompt row, its first row, consecutive rows with it) per request: consecutive rows with the same
    prompt and images are one request of that many samples, except when greedy (vLLM takes n=1 only then)."""
    groups: List[Tuple[Row, int, int]] = []
    for i, row in enumerate(rows):
        last = groups[-1][0] if groups else None
        if last is not None and last[0] == row[0] and same_images(last[1], row[1]) and not greedy:
            groups[-1] = (last, groups[-1][1], groups[-1][2] + 1)
        else:
            groups.append((row, i, 1))
    return groups


def gather_group_rows(rows: List[Row], tp: int, tp_group: Any) -> Tuple[slice, List[Row]]:
    """(this rank's rows among the group's, the group's rows): every rank of a TP group generates the
    group's rows and keeps its own. Ranks that hold the same rows (one data-parallel shard of a Megatron
    actor split by TP/PP/CP) are one shard: generated once, the same samples for each of them."""
    import torch.distributed as dist

    parts: List[Any] = [None] * tp
    dist.all_gather_object(parts, rows, group=tp_group)
    shards: List[Any] = []
    for part in parts:
        if part not in shards:
            shards.append(part)
    index = shards.index(rows)
    start = sum(len(p) for p in shards[:index])
    return slice(start, start + len(rows)), [r for p in shards for r in p]


def rows_of(outputs: List[Any], rows: slice) -> List[Any]:
    """The request outputs cut to the sample rows `rows` (a request holds n consecutive rows)."""
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


def response_rows(outputs: List[Any], rows: int, response_length: int, pad: int,
                  eos: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's request outputs as (responses, response_mask, log_probs), each rows x response_length:
    the samples in request and sample order, cut after EOS, `pad` and 0 after the response. Raises
    when the outputs hold another number of samples than `rows`."""
    responses = torch.full((rows, response_length), pad, dtype=torch.long)
    response_mask = torch.zeros((rows, response_length), dtype=torch.long)
    log_probs = torch.zeros((rows, response_length), dtype=torch.float32)
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
    if i != rows:
        raise RuntimeError(f"vLLM returned {i} samples for {rows} prompt rows")
    return responses, response_mask, log_probs


def extend_mrope_positions(prompt_positions: torch.Tensor, response_length: int) -> torch.Tensor:
    """(B, 3, Lp) prompt positions -> (B, 3, Lp + R): each response token one past the prompt's
    largest position, the same in the three rows (Qwen-VL's generation: cache position + rope delta)."""
    start = prompt_positions.amax(dim=(1, 2)) + 1  # (B,)
    steps = torch.arange(response_length, dtype=prompt_positions.dtype, device=prompt_positions.device)
    response = (start[:, None] + steps[None, :])[:, None, :].expand(-1, prompt_positions.shape[1], -1)
    return torch.cat([prompt_positions, response], dim=2)
