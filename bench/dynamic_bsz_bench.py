"""Fixed vs dynamic (token-budget) micro-batches on a ragged batch: padded tokens computed and time.

One update pass (forward + backward of a policy loss) and one log-prob pass on the torch engine with
a shipped tiny model, over a batch whose responses run up to 128 tokens with a mean of about 44 (most
short, a few long, as a GRPO batch early in training). Fixed: micro-batches of --micro sequences,
every one padded to the batch's full width. Dynamic: verl_lite.trainer.dynamic_batch with the token
budget --budget (default: the fixed run's micro-batch cells, --micro x full width, so both use the
same memory per micro-batch).

    python bench/dynamic_bsz_bench.py [--model tiny-qwen3_5] [--rows 64] [--micro 16] [--repeat 3]
                                      [--hidden 256 --layers 4]   # a wider model, so compute dominates

Prints the cells (rows x columns) each run computes, the real tokens, and the best of --repeat
times per pass (the runs alternate, so a busy machine slows both alike). One process, CPU float32
unless --device says otherwise.
"""

from __future__ import annotations

import argparse
import time

import torch


def ragged_batch(rows: int, prompt: int, response: int, mean: float, seed: int = 0):
    """Left-padded prompts of prompt/2..prompt tokens; response lengths drawn from a geometric-like
    distribution with the given mean, cut at `response` (one row always at the maximum)."""
    g = torch.Generator().manual_seed(seed)
    width = prompt + response
    ids = torch.randint(3, 40, (rows, width), generator=g)
    mask = torch.zeros(rows, width, dtype=torch.long)
    p_len = torch.randint(prompt // 2, prompt + 1, (rows,), generator=g)
    r_len = (torch.empty(rows).exponential_(1.0 / (mean - 1), generator=g) + 1).round().long().clamp(1, response)
    r_len[0] = response
    for i in range(rows):
        mask[i, prompt - p_len[i]:prompt + r_len[i]] = 1
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, prompt:],
                response_mask=mask[:, prompt:], advantages=torch.randn(rows, response, generator=g),
                old_log_probs=-torch.rand(rows, response, generator=g) * 4)


def size_override(model: str, hidden=None, layers=None) -> dict:
    """override_config for a wider / deeper tiny model: hidden size (MLP x3) and layer count (Qwen3.5:
    three GDN layers to one full-attention layer, as the real models)."""
    override = {}
    if hidden:
        override.update(hidden_size=hidden, intermediate_size=3 * hidden)
    if layers:
        gdn = model.startswith("tiny-qwen3_5")
        override.update(num_hidden_layers=layers, layer_types=["linear_attention" if gdn and (i + 1) % 4 else
                                                               "full_attention" for i in range(layers)])
    return override


def policy_loss(global_tokens: int):
    """A token-mean vanilla policy loss over `global_tokens` response tokens (the engines' loss_fn form)."""
    from verl_lite.trainer.algos.policy_losses import PolicyLossInput, compute_policy_loss

    def loss_fn(out, mb):
        pg = compute_policy_loss("vanilla", PolicyLossInput(mb["old_log_probs"], out["log_probs"], mb["advantages"],
                                                            mb["response_mask"].float(),
                                                            global_token_num=global_tokens))
        return pg["pg_loss"], {"pg_loss": pg["pg_loss"].item()}

    return loss_fn


def update_pass(engine, parts, loss_fn) -> float:
    """Forward + backward of `loss_fn` over the micro-batches `parts`; returns the summed loss."""
    engine.train_mode()
    engine.optimizer_zero_grad()
    outs = engine.forward_backward(parts.parts, parts.loss(loss_fn))
    engine.eval_mode()
    return sum(o["metrics"]["pg_loss"] for o in outs)


def log_prob_pass(engine, parts):
    """The response log-probs of the micro-batches `parts`, in the batch's row order."""
    return parts.gather(engine.forward_backward(parts.parts, forward_only=True), "log_probs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-qwen3_5")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--mean", type=float, default=44.0)
    parser.add_argument("--micro", type=int, default=16)
    parser.add_argument("--budget", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=None, help="override the model's hidden size (and MLP x3)")
    parser.add_argument("--layers", type=int, default=None, help="override the model's layer count")
    args = parser.parse_args()

    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.trainer.dynamic_batch import MicroBatches
    from verl_lite.engine.torch.engine import TorchLMEngine

    torch.manual_seed(0)
    override = size_override(args.model, args.hidden, args.layers)
    engine = TorchLMEngine(ModelConfig(path=args.model, override_config=override), ActorConfig(), OptimConfig(),
                           args.device, "actor")
    engine.initialize()
    batch = ragged_batch(args.rows, args.prompt, args.response, args.mean)
    budget = args.budget or args.micro * (args.prompt + args.response)
    mask = batch["response_mask"]
    gtok = int(mask.sum())

    loss_fn = policy_loss(gtok)
    runs = {"fixed": MicroBatches(batch, micro_batch_size=args.micro), "dynamic": MicroBatches(batch, max_token_len=budget)}
    print(f"model {args.model} on {args.device}: {args.rows} sequences, prompts <= {args.prompt}, responses <= "
          f"{args.response} (mean {float(mask.sum(1).float().mean()):.1f}); real tokens "
          f"{int(batch['attention_mask'].sum())}; fixed micro-batch {args.micro}, token budget {budget}")
    print(f"{'run':8} {'micro-batches':>13} {'cells computed':>15} {'update pass s':>14} {'log-prob pass s':>16} {'pg_loss':>10}")

    def update(parts):
        return update_pass(engine, parts, loss_fn)

    def log_probs(parts):
        return log_prob_pass(engine, parts)

    best = {(name, kind): float("inf") for name in runs for kind in ("update", "log_probs")}
    values = {}
    for _ in range(args.repeat + 1):  # the first round warms up (kernels, allocator) and is not timed
        for name, parts in runs.items():
            for kind, fn in (("update", update), ("log_probs", log_probs)):
                t = time.perf_counter()
                values[(name, kind)] = fn(parts)
                elapsed = time.perf_counter() - t
                if _ > 0:
                    best[(name, kind)] = min(best[(name, kind)], elapsed)
    results = {}
    for name, parts in runs.items():
        t_update, t_lp = best[(name, "update")], best[(name, "log_probs")]
        results[name] = (t_update, t_lp, values[(name, "log_probs")])
        print(f"{name:8} {len(parts.parts):>13} {parts.padded_tokens():>15} {t_update:>14.3f} {t_lp:>16.3f} "
              f"{values[(name, 'update')]:>10.6f}")
    (tu_f, tl_f, lp_f), (tu_d, tl_d, lp_d) = results["fixed"], results["dynamic"]
    gap = (lp_f - lp_d)[mask.bool()].abs().max().item()
    print(f"dynamic / fixed: cells {runs['dynamic'].padded_tokens() / runs['fixed'].padded_tokens():.2f}x, update time "
          f"{tu_d / tu_f:.2f}x, log-prob time {tl_d / tl_f:.2f}x; largest log-prob gap {gap:.2e}")


if __name__ == "__main__":
    main()
