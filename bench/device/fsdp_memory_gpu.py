#!/usr/bin/env python3
"""verl's log-prob memory settings on one CUDA GPU: the peak memory of the log-prob + entropy forward
and backward at Qwen3.5's vocabulary and verl's scale, and activation offload on a real device.

Run from the repository root on the GPU machine (no Ray, no network; torch with CUDA, transformers):

  python bench/device/fsdp_memory_gpu.py               # well under a minute on an H100/H200
  python bench/device/fsdp_memory_gpu.py --tokens 4096 8192 16384

Parts (each prints its figures):
1. bench/fsdp_memory_bench.py on cuda for each --tokens, hidden 2048, vocab 248320, verl's 2048-token
   entropy chunk: torch.cuda.max_memory_allocated above the inputs per variant (plain, chunking,
   checkpointing, both, fused), forward+backward and no_grad.
2. The torch engine (tiny-qwen3, float32) on cuda, one update with model.enable_activation_offload on
   and off: the bytes the saved-tensor hooks moved to the host, the largest gradient difference and
   the peak allocated memory of each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))


def memory_bench(tokens: int, hidden: int) -> None:
    cmd = [sys.executable, str(REPO_ROOT / "bench" / "fsdp_memory_bench.py"), "--device", "cuda",
           "--tokens", str(tokens), "--hidden", str(hidden), "--chunk", "2048"]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def offload_check() -> None:
    import torch

    from verl_lite.config import compose, load_config
    from verl_lite.engine.torch.engine import TorchLMEngine

    g = torch.Generator().manual_seed(0)
    rows, width, r = 4, 96, 32
    ids = torch.randint(3, 48, (rows, width), generator=g)
    mask = torch.ones(rows, width, dtype=torch.long)
    batch = dict(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1), responses=ids[:, -r:],
                 response_mask=mask[:, -r:])

    def loss_fn(out, mb):
        m = mb["response_mask"].float().to(out["log_probs"].device)
        return -(out["log_probs"] * m).sum() / m.sum(), {}

    results = {}
    for offload in (False, True):
        cfg = load_config(["actor_rollout_ref.model.path=tiny-qwen3", "trainer.device=cuda",
                           f"actor_rollout_ref.model.enable_activation_offload={offload}"])
        arr = compose.to_dataclass(cfg).actor_rollout_ref
        engine = TorchLMEngine(arr.model, arr.actor, arr.actor.optim, "cuda", "actor")
        engine.initialize()
        engine.train_mode()
        engine.optimizer_zero_grad()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        engine.forward_backward([batch], loss_fn)
        torch.cuda.synchronize()
        grads = {n: p.grad.detach().clone() for n, p in engine.module.named_parameters() if p.grad is not None}
        moved = engine.activation_offload.moved_bytes if engine.activation_offload else 0
        results[offload] = (grads, moved, torch.cuda.max_memory_allocated() - base)
    worst = max((results[True][0][n] - results[False][0][n]).abs().max().item() for n in results[False][0])
    print(f"activation offload: moved {results[True][1] / 2**20:.1f} MiB to the host; peak above start "
          f"{results[False][2] / 2**20:.1f} MiB off, {results[True][2] / 2**20:.1f} MiB on; "
          f"largest gradient difference {worst:.1e}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--hidden", type=int, default=2048)
    args = ap.parse_args()
    for tokens in args.tokens:
        memory_bench(tokens, args.hidden)
    offload_check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
