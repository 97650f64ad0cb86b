#!/usr/bin/env python3
"""Device memory the offload flags free: one short GRPO run (actor + ref, hf rollout) with and
without offload, on one accelerator, printing the memory allocated when the rollout starts
generating and after each offload move (verl_lite/trainer/offload.py), and the peak.

Usage (on a machine with a GPU; megatron needs megatron-core):
  python bench/device/offload_memory.py --device cuda --strategy fsdp
  python bench/device/offload_memory.py --device cuda --strategy megatron --hidden 2048 --layers 12
  python bench/device/offload_memory.py --device cpu --hidden 64 --layers 2   # code paths only: cpu moves nothing

The model is a Qwen3 of the given width and depth with random weights (no download), built from
the shipped tiny Qwen3's config and character tokenizer. Figures are MiB of
`torch.<device>.memory_allocated()`; on cpu they are reported as n/a.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))


def make_model(root: Path, hidden: int, layers: int) -> Path:
    tiny = REPO_ROOT / "verl_lite" / "assets" / "tiny-qwen3"
    out = root / "model"
    out.mkdir()
    cfg = json.loads((tiny / "config.json").read_text())
    heads = max(4, hidden // 128)
    cfg.update(hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
               num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), head_dim=hidden // heads)
    (out / "config.json").write_text(json.dumps(cfg))
    shutil.copy(tiny / "char_tokenizer.json", out / "char_tokenizer.json")
    return out


def one_run(args, root: Path, model: Path, offload: bool):
    import torch

    from verl_lite.config import load_config
    from verl_lite.data.synthetic import generate
    from verl_lite.trainer import offload as offload_mod
    from verl_lite.rollout.hf import HFRollout
    from verl_lite.trainer.run import run

    data = root / "data"
    if not data.exists():
        generate(str(data), task="copy", digits=3, n_train=64, n_val=4, seed=0)
    accel = getattr(torch, args.device, None) if args.device != "cpu" else None

    def allocated() -> float:
        return accel.memory_allocated() / 2**20 if accel is not None else float("nan")

    flags = []
    if args.strategy == "megatron":
        flags = [f"actor_rollout_ref.actor.megatron.{k}={offload}" for k in ("param_offload", "grad_offload",
                                                                              "optimizer_offload")]
        flags += ["model_engine=megatron", "actor_rollout_ref.actor.megatron.sequence_parallel=False"]
    else:
        flags = [f"actor_rollout_ref.actor.fsdp_config.param_offload={offload}",
                 f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={offload}",
                 f"actor_rollout_ref.ref.fsdp_config.param_offload={offload}"]
    cfg = load_config([
        f"data.train_files={data}/train.parquet", f"data.val_files={data}/val.parquet", "data.train_batch_size=8",
        "data.max_prompt_length=8", "data.max_response_length=8", f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.rollout.name=hf",
        f"trainer.device={args.device}", "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={args.steps}",
        "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=False", "trainer.ray=false",
        "trainer.logger=[jsonl]", "trainer.plot_rewards=false", f"trainer.default_local_dir={root}/out{int(offload)}",
        *flags,
    ])
    rows = []
    original = HFRollout.generate

    def generate_measured(self, *a, **k):
        rows.append(("rollout generates", "", allocated()))
        return original(self, *a, **k)

    def after_move(m):
        rows.append((f"{m.role} {m.phase}: {'+'.join(m.parts)} -> {m.to}", "", allocated()))

    HFRollout.generate = generate_measured
    offload_mod._listeners.append(after_move)
    if accel is not None:
        accel.reset_peak_memory_stats()
    try:
        assert run(cfg) == 0
    finally:
        HFRollout.generate = original
        offload_mod._listeners.remove(after_move)
    peak = accel.max_memory_allocated() / 2**20 if accel is not None else float("nan")
    return rows, peak


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda", "npu"])
    p.add_argument("--strategy", default="fsdp", choices=["fsdp", "megatron"])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_model(root, args.hidden, args.layers)
        results = {flag: one_run(args, root, model, flag) for flag in (False, True)}
    print(f"device={args.device} strategy={args.strategy} hidden={args.hidden} layers={args.layers} "
          f"(MiB allocated; n/a on cpu)")
    for flag, (rows, peak) in results.items():
        print(f"\n offload={flag}: peak {peak:.1f}")
        for what, _, mib in rows:
            print(f"  {mib:10.1f}  {what}")
    gen = {flag: [m for w, _, m in rows if w == "rollout generates"] for flag, (rows, _) in results.items()}
    if gen[False] and gen[True]:
        print(f"\nat the last generation: {gen[False][-1]:.1f} without offload, {gen[True][-1]:.1f} with")
    return 0


if __name__ == "__main__":
    sys.exit(main())
