#!/usr/bin/env python3
"""Remove-padding on the Megatron engine (CPU, one gloo process, TP=1): packed (THD) against padded
micro-batches of one ragged batch, per tiny model. Prints, per model: the tokens each forward
computes (padded rows x columns, packed incl. TP alignment, real), the largest log-prob gap packed
vs padded at the response tokens (fp32), and the median training step time (zero_grad,
forward_backward with a token-mean NLL, optimizer_step) of each.

Usage:
  python bench/megatron_packing_bench.py                        # 3 tiny models, 16 rows, prompts <= 32, responses <= 96
  python bench/megatron_packing_bench.py --models tiny-qwen3 --rows 32 --steps 10

Qwen3.5's GDN layers run megatron-core's torch gated delta rule on CPU: padded it is one call over the
batch, packed one call per sequence (use_remove_padding=True; auto keeps it padded). Attention
packed runs megatron's attention once per sequence (engine/megatron/cpu.py). CPU figures only say
what packing saves in tokens and what the CPU paths cost; devices use other kernels.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def ragged_batch(rows: int, prompt: int, response: int, seed: int):
    """Left-padded prompts of 1..`prompt` tokens, right-padded responses of 1..`response` tokens (uniform)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (rows, prompt + response), generator=g)
    mask = torch.zeros(rows, prompt + response, dtype=torch.long)
    p_len = torch.randint(1, prompt + 1, (rows,), generator=g)
    r_len = torch.randint(1, response + 1, (rows,), generator=g)
    p_len[0], r_len[0] = prompt, response
    for i in range(rows):
        mask[i, prompt - p_len[i]:prompt + r_len[i]] = 1
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -response:],
                response_mask=mask[:, -response:])


def build(path: str, remove_padding):
    from omegaconf import OmegaConf

    from verl_lite.config.schema import VerlLiteConfig
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    cfg = OmegaConf.structured(VerlLiteConfig)
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    model.path, model.init_seed, model.use_remove_padding = path, 3, remove_padding
    actor.strategy = "megatron"
    actor.optim.lr = 1e-6
    engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    engine.initialize()
    return engine


def nll(outputs, mb):
    mask = mb["response_mask"].float()
    loss = -(outputs["log_probs"] * mask).sum() / mask.sum()
    return loss, {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny-qwen3,tiny-qwen3_5,tiny-qwen3_5-moe")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--response", type=int, default=96)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from verl_lite.device import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron import batch as megatron_batch

    batch = ragged_batch(args.rows, args.prompt, args.response, seed=0)
    mask = batch["response_mask"].bool()
    real = int(batch["attention_mask"].sum())
    padded_tokens = batch["attention_mask"].numel()
    packed_tokens = megatron_batch.prepare_packed_batch(batch, torch.device("cpu"), 0, align=1)["packed_tokens"]
    print(f"batch: {args.rows} rows, prompts <= {args.prompt}, responses <= {args.response} tokens (ragged)")
    print(f"tokens per forward: padded {padded_tokens}, packed {packed_tokens} (TP=1), real {real}: packing computes "
          f"{100 * (1 - packed_tokens / padded_tokens):.0f}% fewer token positions")
    for tp in (2, 4, 8):
        aligned = megatron_batch.prepare_packed_batch(batch, torch.device("cpu"), 0, align=tp)["packed_tokens"]
        print(f"  packed with each sequence aligned to TP={tp}: {aligned} tokens")
    print(f"{'model':18s} {'max |dlogp|':>12s} {'padded s/step':>14s} {'packed s/step':>14s}")
    for path in args.models.split(","):
        results = {}
        for remove_padding in (False, True):
            engine = build(path, remove_padding)
            log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
            engine.train_mode()
            times = []
            for step in range(args.warmup + args.steps):
                t = time.perf_counter()
                engine.optimizer_zero_grad()
                engine.forward_backward([batch], nll)
                engine.optimizer_step()
                if step >= args.warmup:
                    times.append(time.perf_counter() - t)
            results[remove_padding] = (log_probs, statistics.median(times))
            mpu.destroy_model_parallel()
        gap = (results[False][0] - results[True][0])[mask].abs().max().item()
        print(f"{path:18s} {gap:12.2e} {results[False][1]:14.3f} {results[True][1]:14.3f}")


if __name__ == "__main__":
    main()
