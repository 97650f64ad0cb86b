#!/usr/bin/env python3
"""Peak memory of the log-prob + entropy forward and backward on the torch engine's path, plain vs each
of verl's memory settings, at Qwen3.5's vocabulary (248320, verl_lite/assets/shapes).

    python bench/fsdp_memory_bench.py                     # cpu: 1 x 1024 tokens, hidden 256, 256-token chunks
    python bench/fsdp_memory_bench.py --device cuda --tokens 4096 --hidden 2048 --chunk 2048
                                                          # verl's scale (bench/device/fsdp_memory_gpu.py runs it)

The cpu default is scaled to fit a 24 GiB box in a few minutes: plain holds about 6 (T, V) float32
tensors at once, 6 GB at 1024 tokens (24 GB at 4096); the chunk is scaled with it (4 chunks per batch,
as verl's 2048-token chunks over an 8192-token micro-batch).

From the final hidden states (1, T, H) and the LM head weight (V, H), each variant computes the
log-prob of T targets and the entropy (temperature 0.7), then backward of -(mean log-prob + 0.01 mean
entropy) to the hidden states and the weight:
  plain                    logits = h @ W^T, engine/logits.py over the whole (T, V) at once
  chunking                 + entropy_from_logits_with_chunking (--chunk tokens, verl's 2048)
  checkpointing            + entropy_checkpointing (recomputed in backward)
  chunking+checkpointing   both
  fused                    model.use_fused_kernels (engine/torch/fused.py: 512-token chunks, no (T, V) logits)
and, for the ref's and the old log-prob's pass, the same forward under no_grad.

Peak = the most memory allocated at once during the variant, above what its inputs (h, W, targets)
already hold. cuda: torch.cuda.max_memory_allocated (the caching allocator's exact count). cpu: the
torch profiler's memory events (profile_memory=True: every allocation and free of torch's CPU
allocator, with its size), summed in time order; tracemalloc cannot see these (torch allocates
outside Python's allocator) and the process RSS keeps freed pages, so neither measures the peak. The
profiler's bookkeeping adds time, not bytes. Each variant's log-probs are compared with plain's (when run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verl_lite.engine.torch.fused import fused_log_probs_and_entropy  # noqa: E402
from verl_lite.engine.logits import log_probs_and_entropy  # noqa: E402

QWEN3_5_VOCAB = 248320
TEMPERATURE = 0.7
MIB = 1 << 20


def variants(chunk: int) -> Dict[str, Callable]:
    def plain(**kw):
        def fn(h, w, t):
            return log_probs_and_entropy((h @ w.t()) / TEMPERATURE, t, True, **kw)
        return fn

    return {
        "plain": plain(),
        "chunking": plain(chunk_size=chunk),
        "checkpointing": plain(checkpoint=True),
        "chunking+checkpointing": plain(chunk_size=chunk, checkpoint=True),
        "fused": lambda h, w, t: fused_log_probs_and_entropy(h, w, t, TEMPERATURE, True),
    }


def cpu_peak(step: Callable) -> Tuple[int, float]:
    """(peak bytes above the start, seconds) of `step()` on cpu, from the profiler's memory events."""
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    seconds = time.perf_counter() - start
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    now = top = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        now += e.nbytes()
        top = max(top, now)
    return top, seconds


def cuda_peak(step: Callable) -> Tuple[int, float]:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=QWEN3_5_VOCAB)
    ap.add_argument("--chunk", type=int, default=256, help="entropy_from_logits_chunk_size (verl's default: 2048)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", nargs="*", help="variants to run (default: all)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    peak = cuda_peak if dev.type == "cuda" else cpu_peak
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, args.tokens, args.hidden, generator=g).to(dev)
    weight = (torch.randn(args.vocab, args.hidden, generator=g) / args.hidden ** 0.5).to(dev)
    targets = torch.randint(0, args.vocab, (1, args.tokens), generator=g).to(dev)
    logits_mib = args.tokens * args.vocab * 4 / MIB
    print(f"device={dev.type} tokens={args.tokens} hidden={args.hidden} vocab={args.vocab} float32; one (T, V) "
          f"float32 tensor = {logits_mib:.0f} MiB; the weight's gradient = {args.vocab * args.hidden * 4 / MIB:.0f} MiB")
    print(f"{'variant':<24} {'fwd+bwd peak MiB':>17} {'x logits':>9} {'s':>6} {'no_grad peak MiB':>17} {'s':>6}"
          f" {'max |dlogp|':>12}")
    reference = None
    for name, fn in variants(args.chunk).items():
        if args.only and name not in args.only:
            continue
        h = hidden.clone().requires_grad_(True)
        w = weight.clone().requires_grad_(True)
        out = {}

        def train_step():
            lp, ent = fn(h, w, targets)
            (-(lp.mean() + 0.01 * ent.mean())).backward()
            out["lp"] = lp.detach()

        def eval_step():
            with torch.no_grad():
                fn(h, w, targets)

        train_bytes, train_s = peak(train_step)
        h.grad = w.grad = None
        eval_bytes, eval_s = peak(eval_step)
        if name == "plain":
            reference = out["lp"]
        diff = f"{(out['lp'] - reference).abs().max().item():.1e}" if reference is not None else "n/a"
        print(f"{name:<24} {train_bytes / MIB:>17.0f} {train_bytes / MIB / logits_mib:>9.2f} {train_s:>6.1f} "
              f"{eval_bytes / MIB:>17.0f} {eval_s:>6.1f} {diff:>12}", flush=True)
        del h, w, out
    return 0


if __name__ == "__main__":
    sys.exit(main())
