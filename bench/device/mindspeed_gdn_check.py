#!/usr/bin/env python3
"""Qwen3.5's Gated DeltaNet layers on an Ascend node, the way each plan of the npu engine builds them:
which bridge, which GDN layer class and kernel, packed or padded, log-probs against transformers,
three training steps.

Run from the repository root on one NPU of a node with the documented stack installed (CANN, torch-npu,
Megatron-LM + MindSpeed of core_r0.16.0 or core_r0.18.0, optionally flash-linear-attention-npu,
Megatron-Bridge and MindSpeed-Bridge; docs/ascend.md). No Ray, no network:

  python bench/device/mindspeed_gdn_check.py                      # every plan, about 1-2 minutes
  python bench/device/mindspeed_gdn_check.py --plans naive_l2norm --stack core_r0.16.0
  python bench/device/mindspeed_gdn_check.py --cpu-double core_r0.16.0   # the script's own code paths on CPU,
                                                                           # through the MindSpeed test double
  python bench/device/mindspeed_gdn_check.py --cpu-double core_r0.18.0 --bridge-double   # + the bridge doubles

A tiny Qwen3.5 conditional-generation checkpoint (two text layers: one GDN, one gated attention; a 2-block
vision tower; seeded random weights) is written to a temp dir, so every bridge the engine may choose
(verl_lite's registry, Megatron-Bridge + MindSpeed-Bridge) can build it. Each plan runs in its own process
(MindSpeed's patches belong to the process):

- `default`: no GDN switches (verl's default, use_triton_gdn=True): on core_r0.16.0 verl_lite's layer with
  the fla name, which MindSpeed stands in with its AscendC `flash_gated_delta_rule` (fla_npu installed) or its
  Triton rule;
- `naive_l2norm`: use_naive_l2norm=True, as verl's NPU Qwen3.5 scripts set it: on core_r0.16.0 MindSpeed's
  own GatedDeltaNet replaces megatron's (a warning and no change on core_r0.18.0);
- `ascend_gdn`: use_triton_gdn=False, use_ascend_gdn=True (`USE_MINDSPEED_BRIDGE=True`): Megatron-Bridge +
  MindSpeed-Bridge where installed, else on core_r0.16.0 the AscendC entry inside verl_lite's layer.

Per plan it prints the Ascend stack, the bridge, the GDN layer classes and kernel, whether micro-batches
pack, the largest log-prob difference of the response tokens from transformers' fp32 model on CPU
(padded, and packed where the engine packs; the engine computes in bf16 on npu, so expect ~1e-2), three
losses of optimizer steps at lr 1e-3, and the times. A plan the stack refuses prints the engine's
refusal, which is a result too (e.g. verl_lite's own Qwen3.5 layers on core_r0.18.0). The last line is
a one-line summary: OK when every plan that built is within `--tol` and its loss fell.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network on the device machine: never reach for hub kernels

PLANS = {
    "default": {},
    "naive_l2norm": {"use_naive_l2norm": True},
    "ascend_gdn": {"use_triton_gdn": False, "use_ascend_gdn": True},
}
SEED = 5
B, T, R = 3, 32, 8  # rows, tokens per row, response tokens
PAD_TOKEN = 7  # a padding token with a non-zero embedding: a leak through the GDN state would show


# ----------------------------------------------------------------------------------- parent: checkpoint, reference

def tiny_config():
    from transformers import Qwen3_5Config

    text = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=256, pad_token_id=0,
                layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                     mrope_interleaved=True, mrope_section=[2, 1, 1]))
    vision = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=16, temporal_patch_size=2,
                  spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=16)
    return Qwen3_5Config(text_config=text, vision_config=vision, architectures=["Qwen3_5ForConditionalGeneration"],
                         image_token_id=250, video_token_id=251, vision_start_token_id=252, vision_end_token_id=253,
                         tie_word_embeddings=False)


def write_checkpoint(path: str):
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3_5ForConditionalGeneration

    torch.manual_seed(SEED)
    config = tiny_config()
    model = Qwen3_5ForConditionalGeneration(config).eval()
    config.save_pretrained(path)
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(path, "model.safetensors"))
    return model


def make_batch():
    """Left-padded rows of different lengths; the padding is PAD_TOKEN, masked out."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(8, 240, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    for row, pad in ((0, 9), (2, 4)):
        mask[row, :pad] = 0
        ids[row, :pad] = PAD_TOKEN
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -R:],
                response_mask=mask[:, -R:])


def response_log_probs(logits, batch):
    import torch

    return torch.log_softmax(logits[:, -R - 1: -1].float(), -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def reference_log_probs(model, batch):
    import torch

    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    return response_log_probs(logits, batch)


# ----------------------------------------------------------------------------------- child: one plan

def _cpu_double(stack: str, bridge_double: bool) -> None:
    """The MindSpeed test double of `stack` first on sys.path (and the Megatron-Bridge / MindSpeed-Bridge
    doubles with `bridge_double`); megatron's tensors on CPU (the tests' seam)."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "py" / "mindspeed_double" / stack))
    if bridge_double:
        sys.path.insert(0, str(REPO_ROOT / "tests" / "py" / "megatron_bridge_double"))
    from verl_lite.engine.megatron import mindspeed as ms

    ms.MindSpeedEngineMixin.internals_device = "cpu"
    if stack == "core_r0.18.0":  # the double runs on megatron-core 0.16 underneath
        ms.MindSpeedEngineMixin.megatron_core_version = "0.18.0"


def _layer_classes(engine) -> list:
    names = set()
    for chunk in engine.model:
        for module in chunk.modules():
            cls = type(module)
            if cls.__name__ in ("GatedDeltaLayer", "GatedDeltaNet"):
                names.add(f"{cls.__module__}:{cls.__qualname__}")
    return sorted(names)


def _sections(path: str, overrides: dict, lr: float):
    from omegaconf import OmegaConf

    from verl_lite.config.schema import VerlLiteConfig

    cfg = OmegaConf.structured(VerlLiteConfig)
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    model.path = path
    actor.strategy = "megatron"
    actor.megatron.override_transformer_config = dict(overrides)
    actor.megatron.use_distributed_optimizer = False
    actor.optim.lr = lr
    return model, actor


def run_plan(args) -> dict:
    import torch

    rec = {"plan": args.plan}
    if args.cpu_double:
        _cpu_double(args.cpu_double, args.bridge_double)
    else:
        importlib.import_module("torch_npu")  # before megatron, as the workers import it
    data = torch.load(args.data)
    batch, reference = data["batch"], data["reference"]
    from verl_lite.registry import ENGINES

    model, actor = _sections(args.checkpoint, PLANS[args.plan], args.lr)
    engine = ENGINES.load("language_model", "megatron", "npu")(model, actor, actor.optim, "npu", "actor")
    engine.ascend_stack_setting = args.stack
    start = time.perf_counter()
    try:
        engine.initialize()
    except Exception as e:  # a refusal of the stack is a result; print what the engine said
        rec["refused"] = f"{type(e).__name__}: {e}"
        rec["stack"] = getattr(engine.stack, "name", None)
        return rec
    rec["init_s"] = time.perf_counter() - start
    rec["stack"] = engine.stack.name
    rec["bridge"] = type(engine.external).__name__ if engine.external is not None else "verl_lite registry"
    rec["gdn_layer_classes"] = _layer_classes(engine)
    rec["gdn_kernel"] = getattr(engine.tf_config, "gdn_kernel", None)
    rec["packs"] = bool(engine.remove_padding)
    response = batch["response_mask"].bool()
    diffs = {}
    for packed in ([False, True] if engine.remove_padding else [False]):
        engine.remove_padding = packed
        start = time.perf_counter()
        out = engine.forward_backward([batch], forward_only=True)[0]["log_probs"].float().cpu()
        diffs["packed" if packed else "padded"] = (out - reference)[response].abs().max().item()
        rec[f"forward_s_{'packed' if packed else 'padded'}"] = time.perf_counter() - start
    engine.remove_padding = rec["packs"]
    rec["log_prob_diff"] = diffs

    def nll(outputs, mb):
        mask = mb["response_mask"].float()
        loss = -(outputs["log_probs"] * mask).sum() / mask.sum()
        return loss, {"loss": loss.item()}

    engine.train_mode()
    losses = []
    start = time.perf_counter()
    for _ in range(3):
        engine.optimizer_zero_grad()
        losses.append(engine.forward_backward([batch], nll)[0]["metrics"]["loss"])
        engine.optimizer_step()
    rec["train_3_steps_s"] = time.perf_counter() - start
    rec["losses"] = losses
    return rec


# ----------------------------------------------------------------------------------- parent: report

def show(rec: dict) -> str:
    if "error" in rec:
        return f"[{rec['plan']}] FAILED\n{rec['error']}"
    if "refused" in rec:
        return f"[{rec['plan']}] refused on stack {rec.get('stack')}: {rec['refused']}"
    diffs = ", ".join(f"{k} {v:.2e}" for k, v in rec["log_prob_diff"].items())
    return (f"[{rec['plan']}] stack {rec['stack']}, bridge {rec['bridge']}, GDN layers {rec['gdn_layer_classes']}, "
            f"kernel {rec['gdn_kernel']}, packs {rec['packs']}; log-probs vs transformers fp32: {diffs}; "
            f"losses {', '.join(f'{x:.4f}' for x in rec['losses'])}; init {rec['init_s']:.1f} s, "
            f"3 steps {rec['train_3_steps_s']:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", default=",".join(PLANS), help=f"comma-separated, of {', '.join(PLANS)}")
    parser.add_argument("--stack", default="auto", help="trainer.ascend_stack: auto, core_r0.16.0, core_r0.18.0")
    parser.add_argument("--tol", type=float, default=0.1, help="largest log-prob difference accepted (bf16)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--cpu-double", metavar="STACK", default=None,
                        help="run on CPU through tests/py/mindspeed_double/STACK (a smoke run of this script)")
    parser.add_argument("--bridge-double", action="store_true",
                        help="with --cpu-double: the Megatron-Bridge and MindSpeed-Bridge doubles too (every plan then "
                             "builds through Megatron-Bridge, as on a node that has it)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per plan")
    # the child's arguments
    parser.add_argument("--plan", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.plan:  # a child
        try:
            rec = run_plan(args)
        except Exception:
            rec = {"plan": args.plan, "error": traceback.format_exc()}
        Path(args.out).write_text(json.dumps(rec), encoding="utf-8")
        return 0

    plans = [p.strip() for p in args.plans.split(",") if p.strip()]
    unknown = [p for p in plans if p not in PLANS]
    if unknown:
        print(f"mindspeed_gdn_check: unknown plan {unknown[0]!r} (allowed: {', '.join(PLANS)})", file=sys.stderr)
        return 1
    if args.cpu_double is None:
        missing = [m for m in ("torch_npu", "mindspeed", "megatron.core") if importlib.util.find_spec(m.split(".")[0]) is None]
        if missing:
            print(f"mindspeed_gdn_check: {', '.join(missing)} not installed: this check runs on an Ascend node with "
                  f"the documented stack (docs/ascend.md), or with --cpu-double STACK on CPU", file=sys.stderr)
            return 1
    import torch

    start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="mindspeed_gdn_check_")
    checkpoint = os.path.join(tmp, "tiny-qwen3_5-cg")
    hf_model = write_checkpoint(checkpoint)
    batch = make_batch()
    try:
        reference = reference_log_probs(hf_model, batch)
    except Exception as e:
        print(f"mindspeed_gdn_check: transformers' reference forward failed on CPU ({type(e).__name__}: {e}); "
              f"a kernel package that runs only on the device may have been picked up", file=sys.stderr)
        return 1
    data = os.path.join(tmp, "data.pt")
    torch.save({"batch": batch, "reference": reference}, data)
    print(f"tiny Qwen3.5 checkpoint at {checkpoint}; {B} rows x {T} tokens, {R} response tokens; "
          f"{'CPU through the MindSpeed double ' + args.cpu_double if args.cpu_double else 'npu'}", flush=True)

    results = []
    for plan in plans:
        out = os.path.join(tmp, f"{plan}.json")
        cmd = [sys.executable, __file__, "--plan", plan, "--checkpoint", checkpoint, "--data", data, "--out", out,
               "--stack", args.stack, "--lr", str(args.lr)]
        if args.cpu_double:
            cmd += ["--cpu-double", args.cpu_double] + (["--bridge-double"] if args.bridge_double else [])
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rec = {"plan": plan, "error": f"did not finish in {args.timeout} s (--timeout)"}
        else:
            rec = json.loads(Path(out).read_text(encoding="utf-8")) if os.path.exists(out) else \
                {"plan": plan, "error": f"exit {done.returncode}\n{done.stderr[-3000:]}"}
        results.append(rec)
        print(show(rec), flush=True)

    built = [r for r in results if "losses" in r]
    failed = [r["plan"] for r in results if "error" in r]
    off = [r["plan"] for r in built if max(r["log_prob_diff"].values()) > args.tol or not r["losses"][-1] < r["losses"][0]]
    ok = bool(built) and not failed and not off
    parts = [f"{r['plan']}: {'refused' if 'refused' in r else 'failed' if 'error' in r else r['gdn_kernel']}"
             for r in results]
    print(f"SUMMARY {'OK' if ok else 'CHECK'}: {'; '.join(parts)}; failed {failed or 'none'}, off tolerance or "
          f"loss not falling {off or 'none'}; {time.perf_counter() - start:.0f} s in all", flush=True)
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
