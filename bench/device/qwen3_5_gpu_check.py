#!/usr/bin/env python3
"""Qwen3.5 on the Megatron engine on one CUDA GPU: the fla GDN kernel, logits against
transformers, and the training step time and MFU of a ~1B Qwen3.5 dense config in bf16.

Run from the repository root on the GPU machine (no Ray, no network; needs torch with CUDA,
megatron-core 0.16.x, transformers >= 5.19, and flash-linear-attention for the fla kernel):

  python bench/device/qwen3_5_gpu_check.py                 # about 2-3 minutes on an H100/H200
  python bench/device/qwen3_5_gpu_check.py --steps 5 --seq 2048

Parts (each prints its figures; the last line is a one-line summary for docs/benchmarks.md):
1. tiny-qwen3_5 (shipped config, seeded random init) built by MegatronLMEngine on cuda (bf16):
   the GDN kernel the engine chose ("fla" when flash-linear-attention imports), its logits against
   transformers' model with the same weights (bf16, so the bound is loose), and the same engine
   with use_triton_gdn=False (the torch rule) against the fla one.
2. a ~1B Qwen3.5 dense config (12 layers, 3 GDN : 1 gated attention, hidden 2048, vocab 151936,
   tied embeddings; written to a temp dir, random init): median step time of zero_grad +
   forward_backward + optimizer_step on `--batch` x `--seq` tokens, tokens/s, and MFU =
   6 * (matmul parameters) * tokens / step time / peak bf16 FLOP/s (`--peak-tflops`, default 989
   for H100/H200 SXM dense bf16). Attention-score and GDN-recurrence FLOPs are left out, so the
   MFU is a lower bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network on the device machine: never reach for hub kernels

BIG = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "vocab_size": 151936,
    "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 12, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 256,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 3,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
}


def sections(path: str, overrides=None, lr: float = 1e-4):
    from omegaconf import OmegaConf

    from verl_lite.config.schema import ActorConfig, ModelConfig

    model = OmegaConf.structured(ModelConfig(path=path))
    actor = OmegaConf.structured(ActorConfig(strategy="megatron"))
    actor.megatron.override_transformer_config = dict(overrides or {})
    actor.megatron.use_distributed_optimizer = False
    actor.optim.lr = lr
    return model, actor


def batch_of(batch: int, seq: int, vocab: int, seed: int, left_pad: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    if left_pad:
        mask[0, :left_pad] = 0
        ids[0, :left_pad] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    resp = seq // 2
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -resp:],
                response_mask=mask[:, -resp:])


def engine_logits(engine, batch):
    import torch
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    from verl_lite.engine.megatron import batch as megatron_batch
    from verl_lite.engine.megatron import schedule as megatron_schedule

    def logits_of(output, item, with_entropy):
        return {"logits": gather_from_tensor_model_parallel_region(output)[..., : engine.layout.vocab]}

    prepared = [megatron_batch.prepare_batch(batch, engine.torch_device(), batch["input_ids"].shape[1], 0)]
    with torch.no_grad():
        return megatron_schedule.run_schedule(engine.model, prepared, logits_of, None, True, False)[0]["logits"]


def gdn_kernels(engine):
    return sorted({layer.self_attention.gdn_kernel for chunk in engine.model
                   for layer in getattr(chunk, "module", chunk).decoder.layers
                   if hasattr(layer.self_attention, "gdn_kernel")})


def part_logits(device: str = "cuda") -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor = sections("tiny-qwen3_5")
    fla = MegatronLMEngine(model, actor, None, device, "actor")
    fla.initialize()
    batch = batch_of(4, 96, 48, 0, left_pad=20)
    valid = batch["attention_mask"].bool()
    logits = engine_logits(fla, batch).float()
    dtype = fla.dtype
    hf = AutoModelForCausalLM.from_config(fla.hf_config, dtype=dtype)
    hf.load_state_dict({k: v.to(dtype) for k, v in fla.export_hf_weights()}, strict=True)
    hf = hf.to(device).eval()
    with torch.no_grad():
        ref = hf(**{k: batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}).logits.float().cpu()
    model, actor = sections("tiny-qwen3_5", {"use_triton_gdn": False})
    plain = MegatronLMEngine(model, actor, None, device, "actor")  # no optimizer: forward only
    plain.initialize()
    torch_logits = engine_logits(plain, batch).float()
    out = {
        "kernel": gdn_kernels(fla), "torch_kernel": gdn_kernels(plain),
        "vs_transformers_bf16": (logits[valid] - ref[valid]).abs().max().item(),
        "fla_vs_torch_rule_bf16": (logits[valid] - torch_logits[valid]).abs().max().item(),
        "logit_scale": ref[valid].abs().max().item(),
    }
    print(f"[1] tiny-qwen3_5 on {device}: GDN kernel {out['kernel']} (use_triton_gdn=False: {out['torch_kernel']}); "
          f"max |logit diff| vs transformers {out['vs_transformers_bf16']:.4f}, fla vs torch rule "
          f"{out['fla_vs_torch_rule_bf16']:.4f} (logits up to {out['logit_scale']:.2f}, {str(dtype).replace('torch.', '')})",
          flush=True)
    return out


def matmul_params(cfg: dict) -> int:
    h, layers = cfg["hidden_size"], cfg["layer_types"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    kd, vd = cfg["linear_key_head_dim"] * cfg["linear_num_key_heads"], cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"]
    attn = h * (2 * heads * hd + 2 * kv * hd) + heads * hd * h
    gdn = h * (2 * kd + 2 * vd + 2 * cfg["linear_num_value_heads"]) + vd * h
    mlp = 3 * h * cfg["intermediate_size"]
    total = sum((gdn if k == "linear_attention" else attn) + mlp for k in layers)
    return total + h * cfg["vocab_size"]  # the LM head (tied: the embedding lookup is no matmul)


def part_step(args, cfg: dict = BIG, device: str = "cuda") -> dict:
    import torch

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    tmp = tempfile.mkdtemp(prefix="qwen3_5_1b_")
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    model, actor = sections(tmp)
    engine = MegatronLMEngine(model, actor, actor.optim, device, "actor")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t = time.perf_counter()
    engine.initialize()
    init_s = time.perf_counter() - t
    n_params = sum(p.numel() for chunk in engine.model for p in chunk.parameters())
    micro = [batch_of(args.batch, args.seq, cfg["vocab_size"], s) for s in range(args.micro)]

    def nll(outputs, batch):
        mask = batch["response_mask"].float()
        loss = -(outputs["log_probs"] * mask).sum() / mask.sum()
        return loss, {"loss": loss.item()}

    engine.train_mode()
    times = []
    for _ in range(args.warmup + args.steps):
        sync()
        t = time.perf_counter()
        engine.optimizer_zero_grad()
        engine.forward_backward(micro, nll)
        engine.optimizer_step()
        sync()
        times.append(time.perf_counter() - t)
    step = statistics.median(times[args.warmup:])
    tokens = args.batch * args.seq * args.micro
    flops = 6 * matmul_params(cfg) * tokens
    out = {"params": n_params, "init_s": init_s, "step_s": step, "tokens_per_s": tokens / step,
           "mfu": flops / step / (args.peak_tflops * 1e12), "kernel": gdn_kernels(engine),
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0}
    print(f"[2] Qwen3.5 dense ({n_params / 1e9:.2f} B parameters, GDN kernel {out['kernel']}), "
          f"{str(engine.dtype).replace('torch.', '')}, "
          f"{args.micro} x {args.batch} x {args.seq} tokens: init {init_s:.1f} s, median step {1000 * step:.0f} ms, "
          f"{out['tokens_per_s']:.0f} tokens/s, MFU {100 * out['mfu']:.1f}% of {args.peak_tflops:.0f} TFLOP/s "
          f"(6 * matmul params * tokens), peak memory {out['peak_mem_gib']:.1f} GiB", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="run the script's code paths on CPU (torch kernel, fp32, a shrunken config): no figures")
    args = parser.parse_args()
    import torch

    if args.cpu_smoke:
        small = dict(BIG, hidden_size=128, intermediate_size=256, num_hidden_layers=4, vocab_size=512,
                     layer_types=BIG["layer_types"][:4], head_dim=32, linear_key_head_dim=16,
                     linear_value_head_dim=16, linear_num_key_heads=4, linear_num_value_heads=8)
        args.batch, args.seq, args.micro, args.steps, args.warmup = 2, 64, 2, 2, 1
        part_logits("cpu")
        part_step(args, small, "cpu")
        return 0

    if not torch.cuda.is_available():
        print("qwen3_5_gpu_check: no CUDA device here (this check needs one GPU)", file=sys.stderr)
        return 1
    try:
        import megatron.core
        import transformers
    except ImportError as e:
        print(f"qwen3_5_gpu_check: {e} (install megatron-core==0.16.1 and transformers>=5.19)", file=sys.stderr)
        return 1
    from verl_lite.engine.megatron.gdn import fla_installed

    print(f"torch {torch.__version__}, megatron-core {megatron.core.__version__}, transformers "
          f"{transformers.__version__}, fla {'installed' if fla_installed() else 'NOT installed (torch rule)'}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    start = time.perf_counter()
    logits = part_logits()
    step = part_step(args)
    ok = logits["kernel"] == ["fla"] and logits["vs_transformers_bf16"] < 0.05 * max(1.0, logits["logit_scale"])
    print(f"SUMMARY {'OK' if ok else 'CHECK'}: kernel {logits['kernel']}, logits vs transformers "
          f"{logits['vs_transformers_bf16']:.4f} (bf16), ~1B dense step {1000 * step['step_s']:.0f} ms, "
          f"MFU {100 * step['mfu']:.1f}%, {time.perf_counter() - start:.0f} s in all", flush=True)
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
