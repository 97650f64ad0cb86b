#!/usr/bin/env python3
"""The vllm rollout on one Ascend NPU with vllm-ascend (verl's pin: vLLM 0.23.0 + vllm-ascend v0.23.0):
engine start, sleep / wake, weight sync, generation, and the rollout's log-probs against the actor's.

Run from the repository root on an NPU machine with torch-npu, vLLM and vllm-ascend installed (no Ray, no
network; a tiny random model written to a temp dir, nothing downloaded):

  python bench/device/vllm_ascend_check.py            # tiny Qwen3 dense, about 1 minute
  python bench/device/vllm_ascend_check.py --moe      # tiny Qwen3-MoE: vllm-ascend's fused-MoE views (F2)

(one engine per process: vllm-ascend's sleep-mode allocator takes one, so the two models are two runs).
What each step checks (the findings of the vllm-ascend audit, tests/py/test_vllm_ascend.py runs them on CPU
against a fake worker):
1. the engine starts with additional_config weight_nz_mode=0 (F1) and every worker's sampler reads
   processed_logprobs (F3), the rollout sleeps (free_cache_engine) and reports the device memory it freed;
2. a weight sync from a transformers model (the "actor", same config, seeded random weights) wakes the
   weights (vllm-ascend raises there without weight_nz_mode=0; with an MoE model its wake turns the fused
   experts into transposed views, which the rollout turns back before vLLM's layerwise reload, F2) and
   loads them in place (F4: no reset_lora_state on vLLM 0.23; F5: under the worker's device);
3. generation at temperature `--temperature` (default 0.7): rollout_log_probs against the actor's
   log_softmax(logits / T) and against the raw log_softmax(logits): the processed reference must be the
   close one (mean |diff| within `--tol`, and below a third of the raw one's);
4. the same after the rollout slept and woke with no sync between (the wake-without-sync path of
   validation: the experts must be back in the kernel layout);
5. the actor's weights perturbed: before a sync the rollout's log-probs miss the new actor's (the check can
   fail), after one they match.
The last line is one JSON summary; the exit status is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

EOS, PAD, VOCAB = 2, 0, 1024
DENSE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": VOCAB, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 128, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "rope_theta": 10000.0, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": EOS, "pad_token_id": PAD,
}
# hidden 256, expert width 64: w13 is (E, 128, 256), so a view left in place fails loudly rather than fitting
MOE = dict(DENSE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=8,
           num_experts_per_tok=2, moe_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[],
           norm_topk_prob=True)


def write_model(moe: bool) -> str:
    path = tempfile.mkdtemp(prefix="vllm_ascend_check_")
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(MOE if moe else DENSE, f)
    return path


def actor_model(path: str, dtype, seed: int):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)
    return model.to("npu").eval()


def actor_log_probs(model, out, temperature: float):
    """(processed, raw): the actor's log_softmax(logits / T) and log_softmax(logits) of the sampled tokens."""
    import torch

    ids, mask = out["input_ids"].to("npu"), out["attention_mask"].to("npu")
    r = out["responses"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=out["position_ids"].to("npu")).logits.float()
    logits = logits[:, -r - 1:-1]
    tokens = out["responses"].to("npu")[..., None]
    processed = (logits / temperature).log_softmax(-1).gather(-1, tokens)[..., 0]
    raw = logits.log_softmax(-1).gather(-1, tokens)[..., 0]
    return processed.cpu(), raw.cpu()


def gaps(model, out, temperature: float):
    mask = out["response_mask"].bool()
    processed, raw = actor_log_probs(model, out, temperature)
    rollout = out["rollout_log_probs"]
    dp, dr = (processed - rollout)[mask].abs(), (raw - rollout)[mask].abs()
    return {"mean_vs_processed": dp.mean().item(), "max_vs_processed": dp.max().item(),
            "mean_vs_raw": dr.mean().item(), "tokens": int(mask.sum())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moe", action="store_true", help="tiny Qwen3-MoE instead of Qwen3 dense")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--tol", type=float, default=None,
                        help="mean |rollout - actor| log-prob allowed (default 0.05 in 16-bit, 0.005 in float32)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response", type=int, default=16)
    parser.add_argument("--memory", type=float, default=0.3, help="gpu_memory_utilization")
    args = parser.parse_args()
    tol = args.tol if args.tol is not None else (0.005 if args.dtype == "float32" else 0.05)

    import torch
    import torch_npu  # noqa: F401  (before vLLM: its vllm-ascend plugin loads with it)

    from verl_lite.batch import left_pad
    from verl_lite.config.schema import ModelConfig, RolloutConfig
    from verl_lite.rollout.vllm import VLLMRollout
    from verl_lite.rollout.vllm_ascend import set_processed_logprobs

    t0 = time.perf_counter()
    results = {"model": "qwen3_moe" if args.moe else "qwen3", "dtype": args.dtype, "temperature": args.temperature}
    failures = []

    def check(ok: bool, what: str) -> None:
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    path = write_model(args.moe)
    dtype = getattr(torch, args.dtype)
    actor = actor_model(path, dtype, seed=0)

    # 1. engine start (F1, F3), sleep
    config = RolloutConfig(name="vllm", dtype=args.dtype, enforce_eager=True, max_num_seqs=64,
                           max_num_batched_tokens=2048, gpu_memory_utilization=args.memory, max_model_len=256,
                           free_cache_engine=True, load_format="dummy")
    free_before = torch.npu.mem_get_info()[0]
    t = time.perf_counter()
    rollout = VLLMRollout(ModelConfig(path=path), config, SimpleNamespace(eos_token_id=EOS, pad_token_id=PAD), "npu")
    results["engine_start_s"] = round(time.perf_counter() - t, 2)
    kwargs = rollout.engine_kwargs()
    check(kwargs.get("additional_config", {}).get("weight_nz_mode") == 0, "engine additional_config weight_nz_mode=0")
    modes = rollout.llm.collective_rpc(set_processed_logprobs)
    check(all(m[0] is None and m[1] == ["processed_logprobs"] * 2 for m in modes),
          f"every worker's sampler reads processed_logprobs ({modes})")
    check(rollout.asleep == {"weights", "kv_cache"}, "asleep after start (free_cache_engine)")
    results["free_gib_before_engine"] = round(free_before / 2 ** 30, 2)
    results["free_gib_asleep"] = round(torch.npu.mem_get_info()[0] / 2 ** 30, 2)

    # 2. weight sync (wake of the weights; F2, F4, F5)
    t = time.perf_counter()
    n = rollout.update_weights(iter(actor.state_dict().items()), 1)
    results["sync_s"] = round(time.perf_counter() - t, 3)
    check(n > 0 and rollout.weight_version == 1, f"weight sync of {n} tensors")

    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(args.prompts):
        rows += [torch.randint(3, VOCAB, (12,), generator=g).tolist()] * args.n
    batch = left_pad(rows, PAD)
    sampling = {"temperature": args.temperature, "top_k": -1, "top_p": 1.0, "do_sample": True}

    def compare(label: str):
        t = time.perf_counter()
        out = rollout.generate(batch, args.response, sampling)
        found = gaps(actor, out, args.temperature)
        found["generate_s"] = round(time.perf_counter() - t, 3)
        results[label] = found
        print(label, json.dumps(found), flush=True)
        return found

    # 3. generation: processed log-probs, the actor's
    found = compare("after_sync")
    check(found["mean_vs_processed"] <= tol and found["mean_vs_processed"] < found["mean_vs_raw"] / 3,
          f"rollout log-probs are the actor's log_softmax(logits / T) (mean |diff| {found['mean_vs_processed']:.4g} "
          f"<= {tol}; vs raw {found['mean_vs_raw']:.4g})")
    # 4. asleep again after that generation: wake with no sync between
    found = compare("wake_without_sync")
    check(found["mean_vs_processed"] <= tol, f"after a wake with no sync (mean |diff| {found['mean_vs_processed']:.4g})")
    # 5. the actor moves: missed before a sync, matched after
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    stale = compare("stale_weights")
    check(stale["mean_vs_processed"] > 3 * tol, f"before the sync the new actor is missed ({stale['mean_vs_processed']:.4g})")
    rollout.update_weights(iter(actor.state_dict().items()), 2)
    found = compare("after_second_sync")
    check(found["mean_vs_processed"] <= tol, f"after the second sync (mean |diff| {found['mean_vs_processed']:.4g})")

    results["total_s"] = round(time.perf_counter() - t0, 1)
    results["failures"] = failures
    print(json.dumps(results))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
