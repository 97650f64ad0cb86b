#!/usr/bin/env python3
"""Forward+backward time of transformers' pure-torch gated delta rule (the GDN "linear_attention"
layers of Qwen3.5) by chunk size, and of the whole tiny Qwen3.5 model with and without
verl_lite's chunk choice (`actor_rollout_ref.model.linear_attention_chunk_size`, null = auto).

Usage:
  python bench/gdn_chunk_bench.py                 # rule alone at 5 shapes + the tiny model at 11 and 24 tokens
  python bench/gdn_chunk_bench.py --reps 10 --threads 1

Each figure is the median of `--reps` timed calls after 2 warm-up calls, in this one process, so
the ratios between chunk sizes are what to read (the box may be shared). The max abs difference
of each output against chunk 8 shows the chunk only changes rounding.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CHUNKS = (8, 16, 32, 64)
RULE_SHAPES = ((128, 11), (128, 24), (32, 128), (8, 512), (2, 2048))  # (batch, tokens)


def median_ms(fn, reps: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def bench_rule(reps: int) -> None:
    import torch
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5

    rule = getattr(qwen3_5.torch_chunk_gated_delta_rule, "__verl_lite_original__",
                   qwen3_5.torch_chunk_gated_delta_rule)
    heads, dim = 4, 16
    print(f"torch gated delta rule, {heads} heads x {dim}, fwd+bwd ms (max |diff| vs chunk {CHUNKS[0]})")
    print(f"{'batch x tokens':>15} " + " ".join(f"{'chunk ' + str(c):>20}" for c in CHUNKS) + "   auto")
    gen = torch.Generator().manual_seed(0)
    for batch, tokens in RULE_SHAPES:
        q, k, v = (torch.randn(batch, tokens, heads, dim, generator=gen).requires_grad_() for _ in range(3))
        g = -torch.rand(batch, tokens, heads, generator=gen)
        beta = torch.rand(batch, tokens, heads, generator=gen)
        ref = None
        cells = []
        for c in CHUNKS:
            def run(c=c):
                out, _ = rule(q, k, v, g=g, beta=beta, chunk_size=c, use_qk_l2norm_in_kernel=True)
                out.sum().backward()
                return out
            with torch.no_grad():
                out, _ = rule(q, k, v, g=g, beta=beta, chunk_size=c, use_qk_l2norm_in_kernel=True)
            ref = out if ref is None else ref
            cells.append(f"{median_ms(run, reps):8.1f} ({(out - ref).abs().max().item():.0e})")
        from verl_lite.models.hf import auto_chunk_size

        print(f"{batch:>7} x {tokens:<5} " + " ".join(f"{c:>20}" for c in cells) + f"   {auto_chunk_size(tokens)}")


def bench_model(reps: int) -> None:
    import torch

    from verl_lite.config.schema import ModelConfig
    from verl_lite.models.hf import build_causal_lm

    print("\ntiny Qwen3.5 (verl_lite/assets/tiny-qwen3_5), 128 sequences, ms")
    print(f"{'tokens':>6} {'chunk':>6} {'fwd+bwd':>9} {'fwd (no grad)':>14}")
    for tokens in (11, 24):
        ids = torch.randint(3, 48, (128, tokens), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        for chunk in (64, None):
            model = build_causal_lm(ModelConfig(path="tiny-qwen3_5", init_seed=0, linear_attention_chunk_size=chunk))

            def train():
                model(input_ids=ids, attention_mask=mask).logits.logsumexp(-1).mean().backward()

            def infer():
                with torch.no_grad():
                    model(input_ids=ids, attention_mask=mask)

            label = "64" if chunk else "auto"
            print(f"{tokens:>6} {label:>6} {median_ms(train, reps):9.1f} {median_ms(infer, reps):14.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1, the main job's CPU default)")
    args = ap.parse_args(argv)
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s)")
    bench_rule(args.reps)
    bench_model(args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
