"""The per-step metrics both drivers log, under verl's names (verl/trainer/ppo/metric_utils.py): the
batch's scores, rewards and advantages, response and prompt lengths, the old log-prob pass's
entropy, throughput, and the step's timings. Each function takes the step's tensors and returns the
metrics in the order the drivers log them."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from verl_lite.trainer import core_algos


def batch_metrics(token_level_scores: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  generated_mask: torch.Tensor, rewards: Optional[torch.Tensor] = None,
                  prompt_mask: Optional[torch.Tensor] = None) -> Dict[str, float]:
    """critic/score/* (the scores before any KL penalty), critic/rewards/mean (with `rewards`, after it),
    critic/advantages/mean (over `mask`, the tokens trained on), response_length/* (the generated
    lengths: `generated_mask`) and prompt_length/mean (with `prompt_mask`, the prompts' attention mask)."""
    scores = token_level_scores.sum(-1)
    out = {"critic/score/mean": scores.mean().item(), "critic/score/max": scores.max().item(),
           "critic/score/min": scores.min().item()}
    if rewards is not None:
        out["critic/rewards/mean"] = rewards.sum(-1).mean().item()
    resp_len = generated_mask.sum(-1)
    out.update({"critic/advantages/mean": core_algos.masked_mean(advantages, mask).item(),
                "response_length/mean": resp_len.mean().item(),
                "response_length/clip_ratio": (resp_len == mask.shape[1]).float().mean().item()})
    if prompt_mask is not None:
        out["prompt_length/mean"] = prompt_mask.sum(-1).float().mean().item()
    return out


def entropy_mean(entropy: torch.Tensor, mask: torch.Tensor) -> float:
    """actor/entropy of the old log-prob pass: its per-token entropy over the generated tokens."""
    return core_algos.masked_mean(entropy, mask).item()


def throughput_metrics(generated_mask: torch.Tensor, attention_mask: torch.Tensor, timing: Dict[str, float],
                       n_devices: int) -> Dict[str, Any]:
    """perf/tokens_per_s (generated tokens over the generate call alone, not the step: see
    perf/throughput), perf/num_sequences, and verl's perf/total_num_tokens and perf/throughput (prompt +
    response tokens of the step, per second of step per device)."""
    total_tokens = int(attention_mask.sum())
    return {"perf/tokens_per_s": generated_mask.sum(-1).sum().item() / max(timing["gen"], 1e-9),
            "perf/num_sequences": generated_mask.shape[0],
            "perf/total_num_tokens": total_tokens,
            "perf/throughput": total_tokens / max(timing["step"], 1e-9) / n_devices}


def timing_metrics(timing: Dict[str, float]) -> Dict[str, float]:
    """timing_s/<phase> for each timed phase; a `cpu/<phase>` entry (the generating thread's CPU
    seconds: wall time on a shared machine includes waiting for a core) as perf/cpu_s/<phase>."""
    return {f"perf/cpu_s/{k[4:]}" if k.startswith("cpu/") else f"timing_s/{k}": v for k, v in timing.items()}
