#!/usr/bin/env python3
"""Training step time of the Megatron engine on CPU (TP=1, TP=2, and EP=2 for MoE) next to the
torch engine, for tiny Qwen3, Qwen3.5 dense and Qwen3.5 MoE, and the import cost of the megatron path.

Usage:
  python bench/megatron_step_bench.py                  # all three tiny models, 8 sequences x 48 tokens, 2 micro-batches
  python bench/megatron_step_bench.py --models tiny-qwen3_5,tiny-qwen3_5-moe --steps 20 --batch 16 --seq 96
  python bench/megatron_step_bench.py --only import    # just the import figures

A step is what the worker does per mini-batch: zero_grad, forward_backward over the micro-batches
with a token-mean NLL loss, optimizer_step, lr_scheduler_step. Each layout runs in fresh processes
(TP=2, with sequence parallelism as by default, and EP=2: two gloo processes; with EP=2 the two
ranks are also two data-parallel ranks, each stepping the whole batch); the first `--warmup` steps are dropped and the median is printed.
Qwen3.5's GDN layers run megatron-core's torch gated delta rule on CPU.
The import figures come from fresh interpreters, each measured `--import-runs` times.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

IMPORT_PROBES = {
    "verl_lite.engine.megatron.engine (module only)": "import verl_lite.engine.megatron.engine, verl_lite.engine.megatron.mindspeed",
    "megatron-core as the engine uses it": (
        "import megatron.core.parallel_state, megatron.core.models.gpt, megatron.core.pipeline_parallel, "
        "megatron.core.distributed, megatron.core.optimizer"
    ),
    "torch engine path (transformers model)": "import verl_lite.engine.torch.engine, transformers.models.qwen3.modeling_qwen3",
}


def import_cost(runs: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONWARNINGS="ignore")
    base = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], env=env, check=True, capture_output=True)
        base.append(time.perf_counter() - t)
    print(f"{'interpreter + import torch':45s} {statistics.median(base):6.2f} s")
    for name, code in IMPORT_PROBES.items():
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch\n" + code], env=env, check=True, capture_output=True)
            times.append(time.perf_counter() - t)
        print(f"{name:45s} {statistics.median(times) - statistics.median(base):+6.2f} s over torch")


def make_batch(batch: int, seq: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    resp = seq // 2
    return dict(input_ids=ids, attention_mask=mask, position_ids=torch.arange(seq).expand(batch, seq),
                responses=ids[:, -resp:], response_mask=mask[:, -resp:])


def nll(outputs, batch):
    mask = batch["response_mask"].float()
    loss = -(outputs["log_probs"] * mask).sum() / mask.sum()
    return loss, {"loss": loss.item()}


def time_steps(engine, args) -> list:
    micro = [make_batch(args.batch // 2, args.seq, s) for s in range(2)]
    engine.train_mode()
    times = []
    for _ in range(args.warmup + args.steps):
        t = time.perf_counter()
        engine.optimizer_zero_grad()
        engine.forward_backward(micro, nll)
        engine.optimizer_step()
        engine.lr_scheduler_step()
        times.append(time.perf_counter() - t)
    return times[args.warmup:]


def sections(strategy: str, path: str, tp: int = 1, ep: int = 1):
    from omegaconf import OmegaConf

    from verl_lite.config.schema import ActorConfig, ModelConfig

    model = OmegaConf.structured(ModelConfig(path=path))
    actor = OmegaConf.structured(ActorConfig(strategy=strategy))
    actor.megatron.tensor_model_parallel_size = tp
    actor.megatron.expert_model_parallel_size = ep
    actor.optim.lr = 1e-3
    return model, actor


def megatron_worker(rank: int, world: int, port: int, args, out: str, path: str, tp: int, ep: int) -> None:
    import torch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor = sections("megatron", path, tp, ep)
    engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    t = time.perf_counter()
    engine.initialize()
    init_s = time.perf_counter() - t
    times = time_steps(engine, args)
    if rank == 0:
        torch.save({"init": init_s, "steps": times}, out)
    torch.distributed.destroy_process_group()


def torch_engine(args, path: str) -> dict:
    from verl_lite.engine.torch.engine import TorchLMEngine

    model, actor = sections("fsdp", path)
    engine = TorchLMEngine(model, actor, actor.optim, "cpu", "actor")
    t = time.perf_counter()
    engine.initialize()
    return {"init": time.perf_counter() - t, "steps": time_steps(engine, args)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def steps(args) -> None:
    import tempfile

    import torch

    rows = []
    for path in args.models.split(","):
        if not args.skip_torch:
            rows.append((path, "torch engine (fsdp, 1 process)", torch_engine(args, path)))
        layouts = [(1, 1), (2, 1)] + ([(1, 2)] if "moe" in path else [])
        for tp, ep in layouts:
            world = tp * ep
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "r.pt")
                torch.multiprocessing.spawn(megatron_worker, args=(world, free_port(), args, out, path, tp, ep),
                                            nprocs=world, join=True)
                # TP > 1 runs with sequence parallelism (megatron.sequence_parallel, verl's default True)
                what = 'EP=2' if ep > 1 else f'TP={tp}' + (' SP' if tp > 1 else '')
                name = f"megatron engine {what} ({world} gloo process{'es' if world > 1 else ''})"
                rows.append((path, name, torch.load(out)))
    print(f"{args.batch} sequences x {args.seq} tokens in 2 micro-batches, {args.steps} steps, "
          f"{os.cpu_count()} CPU cores")
    print(f"{'model':18s} {'engine':45s} {'init s':>7s} {'median step ms':>15s} {'min ms':>8s}")
    for path, name, r in rows:
        if r is None:
            print(f"{path:18s} {name}")
            continue
        print(f"{path:18s} {name:45s} {r['init']:7.2f} {1000 * statistics.median(r['steps']):15.1f} "
              f"{1000 * min(r['steps']):8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=48)
    parser.add_argument("--import-runs", type=int, default=3)
    parser.add_argument("--only", choices=("steps", "import"))
    parser.add_argument("--models", default="tiny-qwen3,tiny-qwen3_5,tiny-qwen3_5-moe",
                        help="comma-separated shipped models (MoE models also run EP=2)")
    parser.add_argument("--skip-torch", action="store_true", help="leave out the torch engine row")
    args = parser.parse_args()
    if args.only != "import":
        steps(args)
    if args.only != "steps":
        import_cost(args.import_runs)


if __name__ == "__main__":
    main()
