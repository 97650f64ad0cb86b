"""GRPO step throughput of verl_lite next to TRL's GRPOTrainer, same tiny model and task, one machine.

Usage:
  python bench/trl_compare.py                                  # 3- and 16-token settings, 3 rounds each
  python bench/trl_compare.py --response-lengths 3 --rounds 1  # a quick look
  python bench/trl_compare.py --systems verl_lite,trl --json /tmp/trl_compare.json

Both sides train the shipped tiny Qwen3.5 (verl_lite/assets/tiny-qwen3_5, random init, seed 0,
so both start from identical weights) on the synthetic copy task, with 16 prompts x 8 samples per
step, lr 2e-3, no KL, one optimizer update per step, on CPU with the same torch thread count
(--threads, default 1 as the main job's CPU workers; exported as OMP_NUM_THREADS to every run).
  verl_lite          `python -m verl_lite.main ...` as the main job runs it (Ray workers, the default)
  verl_lite_chunk64  the same with linear_attention_chunk_size=64, transformers' own GDN chunk
  verl_lite_nice0    the Ray path with RAY_worker_niceness=0 (Ray starts workers at nice 15, so on
                     a shared box they lose the CPU to every normal-priority process; not run by default)
  verl_lite_inproc   the same job with trainer.ray=false (one in-process worker)
  trl                trl.GRPOTrainer over a PreTrainedTokenizerFast built locally on the same char vocab,
                     the model as transformers builds it (GDN chunk 64)
  trl_chunk_auto     TRL with verl_lite's GDN chunk choice applied to its model: what is left of the
                     gap when both use the faster kernel setting
Each run is its own process. Runs alternate between systems within a round, so a load change on a
shared machine hits every system alike. The first --warmup steps of a run are dropped.

Per-step figures: s/step is verl_lite's `timing_s/step` (prompts -> rollout -> reward -> update
-> weight sync; with one update per step there is no old-log-prob pass) and TRL's on_step_begin..on_step_end (generation, reward,
loss, backward, optimizer step); logging is outside both. tokens/s is generated (response) tokens
of a step over that step's time; gen-only tokens/s counts the generation call alone. The ratio
to TRL is taken per round (runs minutes apart, under similar load) and its median reported.
TRL is a benchmark-only dependency: pip install 'trl==1.16.*' 'torch==<the installed version>'.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "tiny-qwen3_5"
SYSTEMS = ("verl_lite", "verl_lite_chunk64", "verl_lite_nice0", "verl_lite_inproc", "trl", "trl_chunk_auto")
DEFAULT_SYSTEMS = ("verl_lite", "verl_lite_chunk64", "verl_lite_inproc", "trl", "trl_chunk_auto")
TIMING_KEYS = ("gen", "reward", "old_log_prob", "update_actor")

# Shared settings: the comparison values (see docs/benchmarks.md).
PROMPTS_PER_STEP = 16
GROUP_SIZE = 8
LR = 2e-3
MAX_PROMPT_LENGTH = 8
SEED = 1  # verl_lite's trainer.seed default; TRL's TrainingArguments.seed
WEIGHT_DECAY = 0.01  # verl_lite's optim default (TRL's is 0.0)
GRAD_CLIP = 1.0  # both defaults


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_avg() -> List[float]:
    with open("/proc/loadavg", encoding="utf-8") as f:
        return [float(x) for x in f.read().split()[:3]]


# -- verl_lite ---------------------------------------------------------------------------------


def verl_lite_overrides(data_dir: str, run_dir: str, response_length: int, total_steps: int, ray: bool,
                        chunk: Optional[int] = None) -> List[str]:
    """The main job's overrides (examples/grpo/run_tiny.sh) with one update per step and no side work."""
    batch = PROMPTS_PER_STEP * GROUP_SIZE
    return [f"actor_rollout_ref.model.linear_attention_chunk_size={'null' if chunk is None else chunk}",
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=hf",
        "trainer.logger=[jsonl]",
        f"trainer.total_training_steps={total_steps}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.strategy=fsdp",
        f"actor_rollout_ref.model.path={MODEL}",
        f"data.train_files={os.path.join(data_dir, 'train.parquet')}",
        f"data.val_files={os.path.join(data_dir, 'val.parquet')}",
        f"data.train_batch_size={PROMPTS_PER_STEP}",
        f"data.max_prompt_length={MAX_PROMPT_LENGTH}",
        f"data.max_response_length={response_length}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS_PER_STEP}",  # one optimizer step per GRPO step
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch}",  # one forward, as TRL's batch of 128
        f"actor_rollout_ref.rollout.n={GROUP_SIZE}",
        f"trainer.default_local_dir={run_dir}",
        "trainer.resume_mode=disable",
        "trainer.plot_rewards=false",
        # A shared 2-core box can stall one call for tens of seconds; a timeout would end the run.
        "trainer.ray_timeout_s=900",
        f"trainer.ray={str(ray).lower()}",
    ]


def run_verl_lite(data_dir: str, run_dir: str, response_length: int, total_steps: int, ray: bool,
                  env: Dict[str, str], chunk: Optional[int] = None) -> List[Dict]:
    cmd = [sys.executable, "-m", "verl_lite.main"] + verl_lite_overrides(data_dir, run_dir, response_length,
                                                                         total_steps, ray, chunk)
    _run(cmd, os.path.join(run_dir, "run.log"), env)
    steps = []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            tokens = row["response_length/mean"] * row["perf/num_sequences"]
            steps.append({"s": row["timing_s/step"], "tokens": tokens, "gen_s": row["timing_s/gen"],
                          "score": row["critic/score/mean"],
                          "timing": {k: row[f"timing_s/{k}"] for k in TIMING_KEYS}})
    return steps


def _run(cmd: List[str], log_path: str, env: Dict[str, str]) -> None:
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as out:
        out.write(" ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.run(cmd, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
                              env={**os.environ, **env})
    if proc.returncode != 0:
        with open(log_path, encoding="utf-8") as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{cmd[1:3]} exited {proc.returncode}; log {log_path}:\n{tail}")


# -- TRL ---------------------------------------------------------------------------------------


def char_tokenizer_fast():
    """A PreTrainedTokenizerFast with verl_lite's char vocab: same ids, <bos> first, chars joined back."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from verl_lite.data.tokenizer import load_tokenizer

    char = load_tokenizer(MODEL)
    vocab = {tok: i for i, tok in enumerate(char.itos)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(?m:.)"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", char.bos_token_id)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")
    for text in ("314=", "90 + 1"):
        want = char.apply_chat_template([{"role": "user", "content": text}])
        got = fast(text)["input_ids"]
        if got != want:
            raise AssertionError(f"char tokenizer mismatch on {text!r}: fast {got} vs verl_lite {want}")
    return fast


def trl_worker(spec: Dict[str, Any]) -> None:
    """Train with trl.GRPOTrainer in this process; write per-step records to spec['result']."""
    import torch

    torch.set_num_threads(spec["threads"])
    import pyarrow.parquet as pq
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from verl_lite.data.synthetic import compute_score
    from verl_lite.config.schema import ModelConfig
    from verl_lite.models.hf import build_causal_lm

    rows = pq.read_table(os.path.join(spec["data_dir"], "train.parquet")).to_pylist()
    dataset = Dataset.from_list([{"prompt": "".join(str(m["content"]) for m in r["prompt"]),
                                  "ground_truth": r["reward_model"]["ground_truth"],
                                  "data_source": r["data_source"]} for r in rows])
    # verl_lite's init: same weights on both sides. Chunk 64 is transformers' own setting (stock TRL).
    model = build_causal_lm(ModelConfig(path=MODEL, init_seed=0, linear_attention_chunk_size=spec["chunk"]))
    tokens: List[int] = []
    gen_s: List[float] = []
    scores: List[float] = []

    def copy_reward(prompts, completions, completion_ids, ground_truth, data_source, **_):
        tokens.append(sum(len(c) for c in completion_ids))
        out = [compute_score(ds, c, gt) for c, gt, ds in zip(completions, ground_truth, data_source)]
        scores.append(sum(out) / len(out))
        return out

    generate = model.generate

    def timed_generate(*args, **kwargs):
        t = time.perf_counter()
        out = generate(*args, **kwargs)
        gen_s.append(time.perf_counter() - t)
        return out

    model.generate = timed_generate

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.t0, self.steps = 0.0, []

        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.steps.append(time.perf_counter() - self.t0)

    timer = StepTimer()
    batch = PROMPTS_PER_STEP * GROUP_SIZE
    args = GRPOConfig(
        output_dir=spec["run_dir"], use_cpu=True, bf16=False, fp16=False, seed=SEED, report_to="none",
        save_strategy="no", logging_steps=10, disable_tqdm=True, dataloader_num_workers=0,
        max_steps=spec["total_steps"], per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=GROUP_SIZE, steps_per_generation=1, num_iterations=1,  # one update per step
        max_completion_length=spec["response_length"], temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=LR, lr_scheduler_type="constant", weight_decay=WEIGHT_DECAY, max_grad_norm=GRAD_CLIP,
        beta=0.0, epsilon=0.2, loss_type="dapo",  # dapo = token-mean over the batch, verl's default
        gradient_checkpointing=False,  # TRL defaults to True; verl_lite's enable_gradient_checkpointing is False
    )
    trainer = GRPOTrainer(model=model, reward_funcs=copy_reward, args=args, train_dataset=dataset,
                          processing_class=char_tokenizer_fast(), callbacks=[timer])
    trainer.train()
    if not (len(timer.steps) == len(tokens) == len(gen_s) == spec["total_steps"]):
        raise RuntimeError(f"expected one generation per step: {len(timer.steps)} steps, {len(tokens)} reward "
                           f"calls, {len(gen_s)} generate calls")
    steps = [{"s": s, "tokens": n, "gen_s": g, "score": sc} for s, n, g, sc in zip(timer.steps, tokens, gen_s, scores)]
    with open(spec["result"], "w", encoding="utf-8") as f:
        json.dump(steps, f)


def run_trl(data_dir: str, run_dir: str, response_length: int, total_steps: int, env: Dict[str, str],
            chunk: Optional[int] = 64) -> List[Dict]:
    spec = {"data_dir": data_dir, "run_dir": run_dir, "response_length": response_length, "chunk": chunk,
            "total_steps": total_steps, "threads": int(env["OMP_NUM_THREADS"]),
            "result": os.path.join(run_dir, "steps.json")}
    _run([sys.executable, os.path.abspath(__file__), "--trl-worker", json.dumps(spec)],
         os.path.join(run_dir, "run.log"), env)
    with open(spec["result"], encoding="utf-8") as f:
        return json.load(f)


# -- driver ------------------------------------------------------------------------------------


def summarise(steps: List[Dict]) -> Dict[str, Any]:
    s = [x["s"] for x in steps]
    out = {
        "steps": len(steps),
        "s_per_step": statistics.median(s),
        "tokens_per_step": statistics.mean(x["tokens"] for x in steps),
        "tokens_per_s": statistics.median(x["tokens"] / x["s"] for x in steps),
        "gen_tokens_per_s": statistics.median(x["tokens"] / x["gen_s"] for x in steps),
        "score_last": statistics.mean(x["score"] for x in steps[-5:]),
    }
    if steps and "timing" in steps[0]:
        out["timing_median"] = {k: statistics.median(x["timing"][k] for x in steps) for k in TIMING_KEYS}
    return out


def run_one(system: str, data_dir: str, run_dir: str, response_length: int, total_steps: int,
            threads: int) -> List[Dict]:
    env = {"OMP_NUM_THREADS": str(threads)}
    if system.startswith("trl"):
        return run_trl(data_dir, run_dir, response_length, total_steps, env,
                       None if system == "trl_chunk_auto" else 64)
    if system == "verl_lite_nice0":
        env["RAY_worker_niceness"] = "0"
    return run_verl_lite(data_dir, run_dir, response_length, total_steps, system != "verl_lite_inproc", env,
                         64 if system == "verl_lite_chunk64" else None)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="bench/trl_compare.py", description=__doc__.splitlines()[0])
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"comma list of {', '.join(SYSTEMS)}")
    p.add_argument("--response-lengths", default="3,16", help="comma list of max response lengths")
    p.add_argument("--warmup", type=int, default=5, help="steps dropped at the start of each run")
    p.add_argument("--steps", type=int, default=25, help="measured steps per run")
    p.add_argument("--rounds", type=int, default=3, help="runs per system and setting, alternating systems")
    p.add_argument("--threads", type=int, default=1, help="torch threads of every system (OMP_NUM_THREADS)")
    p.add_argument("--work-dir", default="", help="data, logs and metrics (default: a new temp dir)")
    p.add_argument("--json", default="", help="also write every per-step record and the summary here")
    p.add_argument("--from-json", default="", help="print the tables of a run saved with --json; run nothing")
    p.add_argument("--trl-worker", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    sys.path.insert(0, REPO_ROOT)
    if a.trl_worker:
        trl_worker(json.loads(a.trl_worker))
        return 0
    if a.from_json:
        with open(a.from_json, encoding="utf-8") as f:
            saved = json.load(f)
        s = saved["settings"]
        systems = [x for x in s["systems"].split(",") if x]
        lengths = [int(x) for x in s["response_lengths"].split(",") if x]
        report(saved["runs"], systems, lengths, s["warmup"], s["threads"])
        return 0
    systems = [s for s in a.systems.split(",") if s]
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or not systems:
        print(f"trl_compare: unknown system(s) {bad} (choose from {', '.join(SYSTEMS)})", file=sys.stderr)
        return 1
    lengths = [int(x) for x in a.response_lengths.split(",") if x]
    work = a.work_dir or tempfile.mkdtemp(prefix="trl_compare_")
    data_dir = os.path.join(work, "data")
    from verl_lite.data.synthetic import generate

    generate(data_dir, task="copy", digits=3)
    total = a.warmup + a.steps
    log(f"work dir {work}; {os.cpu_count()} cpus, {a.threads} torch thread(s) per run; load {load_avg()}")
    runs: List[Dict[str, Any]] = []
    for rnd in range(a.rounds):
        for length in lengths:
            order = systems if rnd % 2 == 0 else systems[::-1]  # alternate who goes first
            for system in order:
                run_dir = os.path.join(work, f"{system}_len{length}_r{rnd}")
                before, t0 = load_avg(), time.time()
                steps = run_one(system, data_dir, run_dir, length, total, a.threads)
                runs.append({"system": system, "response_length": length, "round": rnd, "load_before": before,
                             "load_after": load_avg(), "wall_s": time.time() - t0, "steps": steps})
                m = summarise(steps[a.warmup:])
                log(f"round {rnd} len {length} {system}: {m['s_per_step']:.3f} s/step, "
                    f"{m['tokens_per_s']:.0f} tok/s, wall {time.time() - t0:.0f} s, load {load_avg()}")
    summary = report(runs, systems, lengths, a.warmup, a.threads)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"settings": vars(a), "runs": runs, "summary": summary}, f, indent=1)
    return 0


def round_ratios(runs: List[Dict], system: str, length: int, warmup: int, base: str = "trl") -> List[float]:
    """tokens/s of `system` over `base`'s (TRL's) in the same round: both ran minutes apart, under similar load."""
    out = []
    for r in runs:
        if r["system"] != system or r["response_length"] != length:
            continue
        t = [x for x in runs if x["system"] == base and x["round"] == r["round"] and x["response_length"] == length]
        if t:
            mine, trl = summarise(r["steps"][warmup:]), summarise(t[0]["steps"][warmup:])
            out.append(mine["tokens_per_s"] / trl["tokens_per_s"])
    return out


def report(runs: List[Dict], systems: List[str], lengths: List[int], warmup: int, threads: int) -> List[Dict]:
    rows = []
    for length in lengths:
        for system in systems:
            pooled = [s for r in runs if r["system"] == system and r["response_length"] == length
                      for s in r["steps"][warmup:]]
            row = {"system": system, "response_length": length, **summarise(pooled)}
            ratios = round_ratios(runs, system, length, warmup) if "trl" in systems else []
            if ratios:
                row["round_ratios_vs_trl"] = ratios
                row["ratio_vs_trl"] = statistics.median(ratios)
            # at equal GDN kernel settings: TRL given verl_lite's chunk choice, so only the trainers differ
            same_kernels = (round_ratios(runs, system, length, warmup, "trl_chunk_auto")
                            if "trl_chunk_auto" in systems and system.startswith("verl_lite")
                            and system != "verl_lite_chunk64" else [])
            if same_kernels:
                row["round_ratios_vs_trl_chunk_auto"] = same_kernels
                row["ratio_vs_trl_chunk_auto"] = statistics.median(same_kernels)
            rows.append(row)
    loads = [r["load_before"][0] for r in runs] + [r["load_after"][0] for r in runs]
    print(f"\nmeasured steps per run: {len(runs[0]['steps']) - warmup}; runs per system and setting: "
          f"{max(r['round'] for r in runs) + 1}; 1-min load average during the runs: "
          f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cpus; torch threads per run: {threads}\n")
    equal = "trl_chunk_auto" in systems
    print("| system | response tokens | s/step (median) | generated tokens/s | gen-only tokens/s | tokens/step "
          "| ratio vs TRL (tokens/s, median of rounds) | per round |"
          + (" vs TRL with verl_lite's chunk (equal kernels) | per round |" if equal else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if equal else ""))

    def ratio_cells(r: Dict, key: str) -> str:
        ratio = f"{r['ratio_' + key]:.2f}x" if "ratio_" + key in r else "-"
        each = " ".join(f"{x:.2f}" for x in r.get("round_ratios_" + key, [])) or "-"
        return f" {ratio} | {each} |"

    for r in rows:
        print(f"| {r['system']} | {r['response_length']} | {r['s_per_step']:.3f} | {r['tokens_per_s']:.0f} "
              f"| {r['gen_tokens_per_s']:.0f} | {r['tokens_per_step']:.0f} |" + ratio_cells(r, "vs_trl")
              + (ratio_cells(r, "vs_trl_chunk_auto") if equal else ""))
    timed = [r for r in rows if "timing_median" in r]
    if timed:
        print("\nverl_lite step breakdown, median s (timing_s/*):")
        for r in timed:
            parts = ", ".join(f"{k} {v:.3f}" for k, v in r["timing_median"].items())
            print(f"  {r['system']} len {r['response_length']}: {parts}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
