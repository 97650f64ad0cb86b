#!/usr/bin/env python3
"""Remove-padding on the torch engine: padded against packed micro-batches of one ragged batch (left-
padded prompts, right-padded responses, most short and a few long, as dynamic_bsz_bench.py draws them).

    python bench/torch_packing_bench.py                              # tiny Qwen3.5, 64 rows, micro-batches of 16
    python bench/torch_packing_bench.py --model tiny-qwen3_5-moe --rows 32 --repeat 5
    python bench/torch_packing_bench.py --hidden 256 --layers 4      # a wider model (3 GDN : 1 attention layer)
    OMP_NUM_THREADS=1 python bench/torch_packing_bench.py             # on a shared box: threads fighting
                                                                       # for cores swamp the difference

Packed, attention / MLP layers run over the real tokens only and the GDN layers over one row per
sequence (verl_lite/models/packed_gdn.py), so the bench prints three position counts: the padded
micro-batches' cells (rows x width), the packed tokens, and the GDN rows' cells (sequences x longest
sequence in each group of similar lengths); then the best of --repeat times of an update pass (forward + backward of a
policy loss) and a log-prob pass, and the largest log-prob gap between the two. The runs alternate, so
a busy machine slows both alike. CPU float32 unless --device says otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# bench/ is the script's own folder, so its sibling imports as a module
from dynamic_bsz_bench import log_prob_pass, policy_loss, ragged_batch, size_override, update_pass  # noqa: E402


def engine_for(args, packed: bool):
    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch.engine import TorchLMEngine

    override = size_override(args.model, args.hidden, args.layers)
    engine = TorchLMEngine(ModelConfig(path=args.model, override_config=override, use_remove_padding=packed),
                           ActorConfig(), OptimConfig(), args.device, "actor")
    engine.initialize()
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-qwen3_5")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--mean", type=float, default=44.0)
    parser.add_argument("--micro", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=None, help="override the model's hidden size (and MLP x3)")
    parser.add_argument("--layers", type=int, default=None, help="override the model's layer count")
    args = parser.parse_args()

    from verl_lite.models.packed_gdn import length_groups
    from verl_lite.trainer.dynamic_batch import MicroBatches

    torch.manual_seed(0)
    engines = {"padded": engine_for(args, False), "packed": engine_for(args, True)}
    batch = ragged_batch(args.rows, args.prompt, args.response, args.mean)
    parts = MicroBatches(batch, micro_batch_size=args.micro)
    mask, gtok = batch["response_mask"], int(batch["response_mask"].sum())
    real = [p["attention_mask"].sum(1) for p in parts.parts]
    cells = sum(p["attention_mask"].numel() for p in parts.parts)
    gdn_cells = sum(len(g) * max(n[i] for i in g) for n in (r.tolist() for r in real) for g in length_groups(n))

    loss_fn = policy_loss(gtok)

    def update(engine):
        return update_pass(engine, parts, loss_fn)

    def log_probs(engine):
        return log_prob_pass(engine, parts)

    best = {(name, kind): float("inf") for name in engines for kind in ("update", "log_probs")}
    values = {}
    for round_ in range(args.repeat + 1):  # the first round warms up (allocator, lazy imports) and is not timed
        for name, engine in engines.items():
            for kind, fn in (("update", update), ("log_probs", log_probs)):
                t = time.perf_counter()
                values[(name, kind)] = fn(engine)
                if round_:
                    best[(name, kind)] = min(best[(name, kind)], time.perf_counter() - t)

    print(f"model {args.model} on {args.device}: {args.rows} sequences in micro-batches of {args.micro}, prompts <= "
          f"{args.prompt}, responses <= {args.response} (mean {float(mask.sum(1).float().mean()):.1f})")
    print(f"positions: padded cells {cells}, packed tokens {int(sum(n.sum() for n in real))}, "
          f"GDN rows' cells {gdn_cells}")
    print(f"{'run':8} {'update pass s':>14} {'log-prob pass s':>16} {'pg_loss':>12}")
    for name in engines:
        print(f"{name:8} {best[(name, 'update')]:>14.3f} {best[(name, 'log_probs')]:>16.3f} "
              f"{values[(name, 'update')]:>12.7f}")
    gap = (values[("padded", "log_probs")] - values[("packed", "log_probs")])[mask.bool()].abs().max().item()
    print(f"packed / padded time: update {best[('packed', 'update')] / best[('padded', 'update')]:.2f}x, log-prob "
          f"{best[('packed', 'log_probs')] / best[('padded', 'log_probs')]:.2f}x; largest log-prob gap {gap:.2e}")


if __name__ == "__main__":
    main()
