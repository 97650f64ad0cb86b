"""Write tests/py/data/rollout_correction_cases.json: verl's own rollout correction
(`verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_and_rejection_mask`) on fixed inputs,
for tests/py/test_rollout_correction_table.py to compare verl_lite's with.

Runs in the reference environment where verl imports (see tools/gen_core_algos_cases.py for how it
is made):  /work/venv_verlref/bin/python tools/gen_rollout_correction_cases.py

Inputs (float32, B responses x R tokens): ragged response masks (an empty row included), three
regimes of log-probs (small noise, extreme ratios beyond the +-20 safety bound, all equal), each
setting of rollout_is / threshold / batch normalisation and each rollout_rs option with thresholds.
Each case records its inputs and verl's outputs: the IS weights, the response mask after rejection
and the metrics under verl's names (or the error verl raises). Bypass cases run verl's
`compute_policy_loss_bypass_mode` (old log-probs = the rollout's; loss_type ppo_clip / reinforce)
with advantages and record its loss, the gradient with respect to log_prob and its metrics. The
two-rank bypass cases (`bypass_dp`) run it with rollout_is_batch_normalize on two gloo ranks (torch
multiprocessing), each with half the rows, and record each rank's loss, gradient and metrics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "py" / "data" / "rollout_correction_cases.json"
B, R = 6, 7
LENGTHS = (7, 3, 0, 5, 1, 6)

SETTINGS = [
    {"rollout_is": "token", "rollout_is_threshold": 2.0},
    {"rollout_is": "token", "rollout_is_threshold": "0.5_1.5"},
    {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True},
    {"rollout_is": "sequence", "rollout_is_threshold": 5.0},
    {"rollout_is": "sequence", "rollout_is_threshold": "0.2_3.0", "rollout_is_batch_normalize": True},
    {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.6_1.6"},
    {"rollout_rs": "token_k1", "rollout_rs_threshold": 1.5},
    {"rollout_rs": "token_k2", "rollout_rs_threshold": 0.02},
    {"rollout_rs": "token_k3", "rollout_rs_threshold": 0.02},
    {"rollout_rs": "seq_sum_k1", "rollout_rs_threshold": "0.5_2.0"},
    {"rollout_rs": "seq_sum_k3", "rollout_rs_threshold": 0.05},
    {"rollout_rs": "seq_mean_k1", "rollout_rs_threshold": 1.2},
    {"rollout_rs": "seq_mean_k2", "rollout_rs_threshold": 0.01},
    {"rollout_rs": "seq_max_k2", "rollout_rs_threshold": 0.05},
    {"rollout_rs": "seq_max_k3", "rollout_rs_threshold": 0.05},
    {"rollout_rs": "token_k1,seq_mean_k3,token_k1", "rollout_rs_threshold": "0.5_2.0,0.02"},
    {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k3",
     "rollout_rs_threshold": 0.01},
    {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "token_k2,seq_sum_k2",
     "rollout_rs_threshold": "0.05"},
    # refused by verl: the test expects verl_lite to refuse them too
    {"rollout_rs": "token_k2", "rollout_rs_threshold": "0.1_0.5"},
    {"rollout_rs": "token_k9", "rollout_rs_threshold": 1.0},
    {"rollout_is": "token", "rollout_is_threshold": "3.0_1.0"},
]


def f32(x: float) -> float:
    return float(str(np.float32(x)))


def rows(t: torch.Tensor):
    return [[f32(x) for x in row] for row in t.tolist()]


def inputs(regime: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(R)[None, :] < torch.tensor(LENGTHS)[:, None]).float()
    rollout = -torch.rand(B, R, generator=g) * 3.0
    if regime == "small":
        old = rollout + 0.15 * torch.randn(B, R, generator=g)
    elif regime == "extreme":  # ratios far beyond exp(+-20) on some tokens
        old = rollout + torch.randn(B, R, generator=g) * 12.0
    else:  # all equal: ratio 1 everywhere
        old = rollout.clone()
    # padding carries junk, as a padded batch may
    old = torch.where(mask.bool(), old, torch.full_like(old, -7.0))
    return old.float(), rollout.float(), mask


BYPASS = [
    {"loss_type": "ppo_clip"},
    {"loss_type": "ppo_clip", "rollout_rs": "token_k1", "rollout_rs_threshold": "0.8_1.25"},
    {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 1.2},
    {"loss_type": "reinforce", "rollout_is": "sequence", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k3",
     "rollout_rs_threshold": 0.01},
    {"loss_type": "reinforce"},
    # batch normalisation (one rank here; over two ranks in bypass_dp_cases)
    {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 1.2, "rollout_is_batch_normalize": True},
    {"loss_type": "reinforce", "rollout_is": "sequence", "rollout_is_threshold": 2.0,
     "rollout_is_batch_normalize": True},
    {"loss_type": "ppo_clip", "rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True},
]
AGG = ("token-mean", "seq-mean-token-mean")
# verl normalises bypass mode's weights over the data-parallel ranks (distributed_masked_mean, an
# all-reduce in every micro-batch): two gloo ranks, each one half of the batch's rows
DP_SETTINGS = [s for s in BYPASS if s.get("rollout_is_batch_normalize")]
DP_ROWS = ((0, 1, 2), (3, 4, 5))  # rank 0 holds the empty row


def advantages(mask):
    g = torch.Generator().manual_seed(7)
    return (torch.randn(B, 1, generator=g).expand(B, R) * mask).contiguous()


def verl_bypass(setting, mode, old, rollout, mask, adv, global_batch_info=None):
    """verl's compute_policy_loss_bypass_mode on these rows: (loss, d loss / d log_prob, metrics)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_bypass_mode
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import ActorConfig, PolicyLossConfig

    rc = RolloutCorrectionConfig(**{"rollout_is": None, **setting, "bypass_mode": True})
    pl = PolicyLossConfig(loss_mode="bypass_mode")
    object.__setattr__(pl, "rollout_correction", rc)
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                         clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
                         loss_agg_mode=mode, policy_loss=pl)
    if global_batch_info:
        config.global_batch_info.update(global_batch_info)
    log_prob = old.clone().requires_grad_(True)  # the current policy
    loss, metrics = compute_policy_loss_bypass_mode(rollout.clone(), log_prob, adv.clone(), mask.clone(),
                                                    loss_agg_mode=mode, config=config)
    loss.backward()
    return f32(float(loss)), rows(log_prob.grad), {k: f32(float(v)) for k, v in sorted(metrics.items())}


def bypass_cases(old, rollout, mask, name):
    adv = advantages(mask)
    out = []
    for setting in BYPASS:
        for mode in AGG:
            loss, grad, metrics = verl_bypass(setting, mode, old, rollout, mask, adv)
            out.append({"inputs": name, "bypass": setting, "loss_agg_mode": mode, "advantages": rows(adv),
                        "pg_loss": loss, "grad": grad, "metrics": metrics})
    return out


def _dp_rank(rank: int, world: int, port: int, name: str, result_dir: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    regime, seed = name.split("/")
    old, rollout, mask = inputs(regime, int(seed))
    adv = advantages(mask)
    idx = list(DP_ROWS[rank])
    # verl's global counts: the whole batch's tokens and sequences, dp_size = 2 (agg_loss multiplies by it)
    info = {"dp_size": world, "batch_num_tokens": int(mask.sum()), "global_batch_size": int((mask.sum(-1) > 0).sum())}
    out = []
    for setting in DP_SETTINGS:
        for mode in AGG:
            loss, grad, metrics = verl_bypass(setting, mode, old[idx], rollout[idx], mask[idx], adv[idx], info)
            out.append({"pg_loss": loss, "grad": grad, "metrics": metrics})
    torch.save(out, os.path.join(result_dir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


def bypass_dp_cases(name):
    """verl's bypass loss on two gloo ranks, each with its rows of the batch `name`: per rank its loss,
    gradient and metrics (the batch norm factor is the mean over both ranks' weights)."""
    import socket
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        torch.multiprocessing.spawn(_dp_rank, args=(2, port, name, d), nprocs=2, join=True)
        per_rank = [torch.load(f"{d}/rank{r}.pt") for r in range(2)]
    regime, seed = name.split("/")
    _, _, mask = inputs(regime, int(seed))
    adv = advantages(mask)
    out, k = [], 0
    for setting in DP_SETTINGS:
        for mode in AGG:
            out.append({"inputs": name, "bypass": setting, "loss_agg_mode": mode, "rows": [list(r) for r in DP_ROWS],
                        "advantages": rows(adv),
                        "dp_size": 2, "global_token_num": int(mask.sum()),
                        "global_batch_size": int((mask.sum(-1) > 0).sum()),
                        "ranks": [per_rank[r][k] for r in range(2)]})
            k += 1
    return out


def main() -> None:
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    cases, tables, bypass, bypass_dp = [], {}, [], []
    for regime in ("small", "extreme", "equal"):
        for seed in ((0, 1) if regime == "small" else (0,)):
            old, rollout, mask = inputs(regime, seed)
            name = f"{regime}/{seed}"
            tables[name] = {"old_log_prob": rows(old), "rollout_log_prob": rows(rollout), "response_mask": rows(mask)}
            if regime == "small":
                bypass += bypass_cases(old, rollout, mask, name)
                bypass_dp += bypass_dp_cases(name)
            for setting in SETTINGS:
                case = {"inputs": name, "setting": setting}
                kw = {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
                      "rollout_rs": None, "rollout_rs_threshold": None}
                kw.update(setting)
                try:
                    w, new_mask, metrics = compute_rollout_correction_and_rejection_mask(
                        old_log_prob=old, rollout_log_prob=rollout, response_mask=mask, **kw)
                except (ValueError, TypeError, ZeroDivisionError) as e:
                    case["error"] = str(e)
                else:
                    case["weights"] = None if w is None else rows(w.batch["rollout_is_weights"])
                    case["mask"] = rows(new_mask)
                    case["metrics"] = {k: f32(v) for k, v in sorted(metrics.items())}
                cases.append(case)
    OUT.write_text(json.dumps({"B": B, "R": R, "inputs": tables, "cases": cases, "bypass": bypass,
                               "bypass_dp": bypass_dp}, separators=(",", ":")) + "\n")
    print(f"wrote {len(cases)} cases, {len(bypass)} bypass cases, {len(bypass_dp)} two-rank bypass cases to {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
