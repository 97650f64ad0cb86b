#!/usr/bin/env python3
"""The memory prediction (decisions/memory.py) against a real step on one GPU: a ~1B Qwen3.5 (GDN +
attention, Qwen3.5's 248k vocabulary, random init from a config written here) on verl_lite's torch
engine with verl's FSDP defaults (fp32 stored weights, bf16 compute), per phase:
torch.cuda.max_memory_allocated in the phase (weights included), against the sum of the predicted terms.

Run from the repository root on the GPU machine (no Ray, no network; torch with CUDA, transformers):

  python bench/device/memory_prediction_gpu.py                       # a few minutes on an H100/H200
  python bench/device/memory_prediction_gpu.py --rows 4 --length 2048 --out /tmp/memory.json
  python bench/device/memory_prediction_gpu.py --device cpu --tiny   # the code path only (no figures)

Prints one line per phase (load, log-prob, update, optimizer step): measured GiB, predicted GiB, error.
The GDN layers run fla's kernel where flash-linear-attention is installed, else transformers' torch rule
(the prediction follows whichever imports).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

# ~1.1B parameters: Qwen3.5's vocabulary and head sizes, 16 layers (3 GDN : 1 attention)
CONFIG_1B = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 2048,
    "intermediate_size": 6144, "num_hidden_layers": 16, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 16, "full_attention_interval": 4,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "pad_token_id": 0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="the shipped tiny-qwen3_5 instead of the 1B config")
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()

    import torch

    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.decisions import memory as m
    from verl_lite.decisions.layout import Layout
    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.models import ASSETS_DIR

    if args.tiny:
        path = str(Path(ASSETS_DIR) / "tiny-qwen3_5")
        hf = json.loads((Path(path) / "config.json").read_text())
    else:
        path = tempfile.mkdtemp(prefix="qwen3_5_1b_")
        (Path(path) / "config.json").write_text(json.dumps(CONFIG_1B))
        hf = CONFIG_1B
    cuda = args.device == "cuda"
    allocated = (lambda: torch.cuda.memory_allocated()) if cuda else (lambda: 0)
    peak = (lambda: torch.cuda.max_memory_allocated()) if cuda else (lambda: 0)
    reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)

    engine = TorchLMEngine(ModelConfig(path=path), ActorConfig(), OptimConfig(lr=1e-6), args.device, "actor")
    engine.initialize()
    loaded = allocated()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, int(hf["vocab_size"]), (args.rows, args.length), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "position_ids": torch.arange(args.length).expand(args.rows, args.length), "responses": ids[:, args.length // 2:]}

    measured = {"load": loaded}
    engine.eval_mode()
    reset()
    engine.forward_backward([batch], forward_only=True)
    measured["log-prob"] = peak()
    engine.train_mode()
    reset()
    engine.forward_backward([batch], loss_fn=lambda out, mb: (-out["log_probs"].mean(), {}))
    measured["update"] = peak()
    reset()
    engine.optimizer_step()
    measured["optimizer step"] = peak()

    d = m.model_dims(hf)
    lay = Layout("fsdp", 1)
    state = m.state_bytes(d, lay, m.fsdp_precision("float32"), distributed_optimizer=True)
    fla = importlib.util.find_spec("fla") is not None
    tokens = args.rows * args.length
    common = dict(tokens=tokens, sequences=args.rows, act_bytes=2 if cuda else 4, seq_len=args.length,
                  sequence_parallel=False, gdn_kernel="chunked" if fla else "torch", fused_norms=False)
    fwd, upd = m.Pass(backward=False, **common), m.Pass(**common)
    gathered = d.vocab * d.hidden * 2  # the bf16 copy of the (tied) embedding, the largest unit
    predicted = {
        "load": state.weights,
        "log-prob": state.weights + m.activation_bytes(d, lay, fwd) + m.logits_bytes(d, lay, fwd) + gathered,
        "update": state.weights + state.grads + m.activation_bytes(d, lay, upd) + m.logits_bytes(d, lay, upd) + gathered,
        "optimizer step": state.weights + state.grads + state.optimizer,
    }
    rows = []
    print(f"Qwen3.5 {m.total_params(d) / 1e9:.2f}B params, {args.rows} x {args.length} tokens, GDN kernel "
          f"{'fla' if fla else 'torch'}, device {args.device}")
    for phase in measured:
        got, want = measured[phase], predicted[phase]
        err = (want - got) / got if got else float("nan")
        rows.append({"phase": phase, "measured_gib": got / m.GIB, "predicted_gib": want / m.GIB, "error": err})
        print(f"  {phase:<15} measured {got / m.GIB:7.2f} GiB  predicted {want / m.GIB:7.2f} GiB  error {100 * err:+6.1f}%")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "tokens": tokens, "fla": fla}, indent=1))


if __name__ == "__main__":
    main()
