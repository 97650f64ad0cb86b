"""Write tests/py/data/core_algos_cases.json: verl's own advantage estimators and policy losses
evaluated on fixed inputs, for tests/py/test_verl_core_algos_table.py to compare verl_lite's with.

Runs in a virtual environment of its own, where verl (the pinned checkout) imports, never in
verl_lite's. It installs nothing; the environment is made once:

    python3 -m venv /work/venv_verlref && . /work/venv_verlref/bin/activate
    pip install torch==2.13.0 numpy omegaconf tensordict && pip install -e /work/verl_src --no-deps
    pip install --no-deps packaging ray msgpack protobuf ... (what `import verl` asks for)
    python tools/gen_core_algos_cases.py                  # rewrites the table

Inputs (float32, B responses x R tokens): ragged response masks (lengths 0..R, an empty row
included; one case with holes in the masks, as multi-turn responses have), groups of several
responses and of one, tied scores within a group, all-zero rewards, outcome rewards on the last
token and rewards spread over tokens, three seeds; for the optimal token baselines the old
log-probs and sum_pi_squared of a small softmax, with and without rollout IS weights (and verl's
variance_proxy metrics on their advantages); for gdpo two reward components per response, with
and without weights. Each case records
its inputs and verl's outputs (or the error verl raises); losses also record the gradient of the
loss with respect to log_prob and their metrics under verl's names. clip_cov draws with torch's
global generator: the case records the seed set just before the call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "py" / "data" / "core_algos_cases.json"
VERL_SRC = Path("/work/verl_src")

B, R = 8, 6
LOSS_B, LOSS_R = 5, 7
SEEDS = (0, 1, 2)
AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
ESTIMATORS = ("gae", "grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo",
              "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gpg", "remax", "optimal_token_baseline",
              "tir_optimal_token_baseline", "gdpo")
OTB = ("optimal_token_baseline", "tir_optimal_token_baseline")
GDPO_KEYS = ("accuracy_reward", "format_reward")
VOCAB = 5  # the old policy's softmax over a small vocabulary gives old_log_probs and sum_pi_squared
LOSSES = ("vanilla", "gspo", "geo_mean", "dppo_tv", "dppo_kl", "sapo", "gpg", "clip_cov", "kl_cov", "dro", "cispo")
# actor settings: verl's defaults (dro_beta null: dro refuses), and one where every loss's own knobs bite
LOSS_SETTINGS = {
    "defaults": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0, "tau_pos": 1.0, "tau_neg": 1.05,
                 "clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0, "kl_cov_ratio": 0.0002,
                 "ppo_kl_coef": 0.1, "dro_beta": None},
    "active": {"clip_ratio_low": 0.1, "clip_ratio_high": 0.28, "clip_ratio_c": 1.5, "tau_pos": 1.5, "tau_neg": 3.0,
               "clip_cov_ratio": 0.3, "clip_cov_lb": -0.5, "clip_cov_ub": 5.0, "kl_cov_ratio": 0.2,
               "ppo_kl_coef": 1.0, "dro_beta": 0.1},
}


def f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (keeps the table small)."""
    return float(str(np.float32(x)))


def rows(t: torch.Tensor):
    return [[f32(x) for x in row] for row in t.tolist()] if t.dim() == 2 else [f32(x) for x in t.tolist()]


def mask_of(lengths, width) -> torch.Tensor:
    return (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()


def estimator_inputs():
    """(name, inputs) of the advantage cases."""
    index = ["a", "a", "a", "b", "b", "b", "c", "d"]  # two groups of 3, two groups of one
    cases = []
    for seed in SEEDS:
        g = torch.Generator().manual_seed(seed)
        lengths = [int(x) for x in torch.randint(1, R + 1, (B,), generator=g)]
        lengths[seed] = R  # one full-length response
        mask = mask_of(lengths, R)
        outcome = torch.zeros(B, R)
        score = torch.randint(0, 3, (B,), generator=g).float() * 0.5  # few values: ties within groups
        outcome[torch.arange(B), torch.tensor(lengths) - 1] = score
        spread = torch.randn(B, R, generator=g) * mask
        values = torch.randn(B, R, generator=g) * mask
        baselines = torch.randn(B, generator=g)
        for kind, rewards in (("outcome", outcome), ("spread", spread)):
            cases.append((f"seed{seed}-{kind}", dict(rewards=rewards, mask=mask, index=index, values=values,
                                                     reward_baselines=baselines, gamma=0.9, lam=0.95,
                                                     norm_adv_by_std_in_grpo=seed != 1)))
    mask = mask_of([6, 3, 1, 6, 4, 2, 5, 1], R)
    tied = torch.zeros(B, R)
    tied[:, 0] = 1.0  # every response scores 1: each group's std is 0
    cases.append(("tied-scores", dict(rewards=tied * mask, mask=mask, index=index, values=torch.zeros(B, R),
                                      reward_baselines=torch.ones(B), gamma=1.0, lam=1.0,
                                      norm_adv_by_std_in_grpo=True)))
    cases.append(("all-zero-rewards", dict(rewards=torch.zeros(B, R), mask=mask, index=index,
                                           values=torch.zeros(B, R), reward_baselines=torch.zeros(B), gamma=1.0,
                                           lam=1.0, norm_adv_by_std_in_grpo=True)))
    # groups of two and more only (grpo_passk's minimum), in an order that interleaves them
    groups = ["p", "p", "q", "q", "p", "r", "r", "q"]
    for seed in SEEDS:
        g = torch.Generator().manual_seed(7 + seed)
        lengths = [int(x) for x in torch.randint(1, R + 1, (B,), generator=g)]
        mask = mask_of(lengths, R)
        outcome = torch.zeros(B, R)
        outcome[:, 0] = torch.randint(0, 3, (B,), generator=g).float()
        cases.append((f"pairs{seed}", dict(rewards=outcome * mask, mask=mask, index=groups,
                                           values=torch.randn(B, R, generator=g) * mask,
                                           reward_baselines=torch.full((B,), 0.5), gamma=1.0, lam=1.0,
                                           norm_adv_by_std_in_grpo=seed != 2)))
    # multi-turn-like masks with holes (tool output between turns) and an empty response
    holes = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0],
                          [1, 1, 0, 1, 0, 0], [1, 1, 1, 0, 0, 1], [1, 0, 0, 1, 0, 0], [0, 1, 1, 0, 0, 0]]).float()
    g = torch.Generator().manual_seed(99)
    holed = torch.zeros(B, R)
    holed[:, -1] = torch.randint(0, 3, (B,), generator=g).float()
    cases.append(("holes", dict(rewards=(torch.randn(B, R, generator=g) * 0.3 + holed) * holes, mask=holes,
                                index=index, values=torch.randn(B, R, generator=g) * holes,
                                reward_baselines=torch.zeros(B), gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True)))
    for number, (_, x) in enumerate(cases):
        x.update(policy_inputs(number, x["mask"]))
    return cases


def policy_inputs(number: int, mask: torch.Tensor) -> dict:
    """The optimal token baseline's and gdpo's inputs of case `number`, from a generator of their own (the
    other inputs stay as they were): old log-probs of sampled tokens and sum_pi_squared from a random
    softmax over VOCAB tokens (sharper in odd cases), rollout IS weights in every other case, two reward
    components per response (ties and zeros: few values), gdpo weights in every third case."""
    g = torch.Generator().manual_seed(1000 + number)
    logits = torch.randn(B, R, VOCAB, generator=g) * (3.0 if number % 2 else 1.0)
    probs = torch.softmax(logits, dim=-1)
    tokens = torch.multinomial(probs.reshape(-1, VOCAB), 1, generator=g).reshape(B, R)
    old = torch.log(probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)) * mask
    sum_pi_sq = (probs ** 2).sum(-1) * mask
    is_weights = (torch.rand(B, R, generator=g) * 1.5 + 0.25) * mask if number % 2 == 0 else None
    components = {"accuracy_reward": (torch.randint(0, 2, (B,), generator=g).float()).tolist(),
                  "format_reward": (torch.randint(0, 3, (B,), generator=g).float() * 0.5).tolist()}
    weights = [1.0, 0.5] if number % 3 == 0 else None
    return dict(old_log_probs=old, sum_pi_squared=sum_pi_sq, rollout_is_weights=is_weights,
                reward_components=components, gdpo_reward_weights=weights)


def verl_estimate(core_algos, AlgoConfig, name, x):
    config = AlgoConfig(gamma=x["gamma"], lam=x["lam"], adv_estimator=name,
                        norm_adv_by_std_in_grpo=x["norm_adv_by_std_in_grpo"])
    rewards, mask = x["rewards"].clone(), x["mask"].clone()
    index = np.array(x["index"], dtype=object)
    if name == "gae":
        return core_algos.compute_gae_advantage_return(rewards, x["values"].clone(), mask, x["gamma"], x["lam"])
    if name in ("grpo", "grpo_vectorized"):  # verl's own function, with its norm_adv_by_std_in_grpo argument
        return core_algos.get_adv_estimator_fn(name)(rewards, mask, index,
                                                     norm_adv_by_std_in_grpo=x["norm_adv_by_std_in_grpo"])
    if name == "gdpo":  # verl's trainer passes non_tensor_batch and batch; the components sit on the last token
        config = AlgoConfig(gamma=x["gamma"], lam=x["lam"], adv_estimator=name, gdpo_reward_keys=list(GDPO_KEYS),
                            gdpo_reward_weights=x["gdpo_reward_weights"])
        prompt = torch.ones(mask.shape[0], 3, dtype=torch.long)
        batch = {"prompts": prompt, "attention_mask": torch.cat([prompt, mask.long()], dim=1)}
        non_tensor = {k: np.array(v, dtype=object) for k, v in x["reward_components"].items()}
        non_tensor["uid"] = index
        # verl's trainer calls gdpo without norm_adv_by_std_in_grpo (always True); verl_lite applies the
        # setting, so the table calls verl's function with it
        return core_algos.get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=index,
                                                     config=config, non_tensor_batch=non_tensor, batch=batch,
                                                     norm_adv_by_std_in_grpo=x["norm_adv_by_std_in_grpo"])
    kwargs = {"token_level_rewards": rewards, "response_mask": mask, "config": config, "index": index}
    if name in OTB:  # as verl's trainer passes them
        kwargs.update(old_log_probs=x["old_log_probs"].clone(), sum_pi_squared=x["sum_pi_squared"].clone(),
                      rollout_is_weights=None if x["rollout_is_weights"] is None else x["rollout_is_weights"].clone())
    if name == "remax":
        kwargs["reward_baselines"] = x["reward_baselines"].clone()
    return core_algos.get_adv_estimator_fn(name)(**kwargs)


GRAD_NORM = 0.7  # the actor's gradient norm the variance proxies are given


def verl_variance_proxy(x, advantages):
    """verl's compute_variance_proxy_metrics (logged whenever sum_pi_squared is computed)."""
    from verl import DataProto
    from verl.trainer.ppo.metric_utils import compute_variance_proxy_metrics

    tensors = {"old_log_probs": x["old_log_probs"].clone(), "sum_pi_squared": x["sum_pi_squared"].clone(),
               "advantages": advantages, "response_mask": x["mask"].clone()}
    if x["rollout_is_weights"] is not None:
        tensors["rollout_is_weights"] = x["rollout_is_weights"].clone()
    metrics = compute_variance_proxy_metrics(DataProto.from_dict(tensors=tensors), gradient_norm=GRAD_NORM)
    return {"gradient_norm": GRAD_NORM, "metrics": {k: f32(float(v)) for k, v in metrics.items()}}


def loss_inputs():
    cases = []
    for seed in SEEDS:
        g = torch.Generator().manual_seed(100 + seed)
        lengths = [LOSS_R, 0] + [int(x) for x in torch.randint(1, LOSS_R + 1, (LOSS_B - 2,), generator=g)]
        mask = mask_of(lengths, LOSS_R)
        old = -torch.rand(LOSS_B, LOSS_R, generator=g) * 3 - 0.05
        new = old + torch.randn(LOSS_B, LOSS_R, generator=g) * 0.3
        new = torch.minimum(new, torch.full_like(new, -1e-3))  # log-probs stay below 0
        per_seq = torch.randn(LOSS_B, 1, generator=g).expand(LOSS_B, LOSS_R).clone()
        per_seq[2] = 0.0  # a zero advantage
        per_token = torch.randn(LOSS_B, LOSS_R, generator=g) * 2
        for kind, adv in (("seq-adv", per_seq), ("token-adv", per_token)):
            cases.append((f"seed{seed}-{kind}", dict(old=old, new=new, adv=adv * mask, mask=mask)))
    return cases


def verl_loss(core_algos, ActorConfig, PolicyLossConfig, name, x, settings, mode, seed):
    s = settings
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                         clip_ratio=0.2, clip_ratio_low=s["clip_ratio_low"], clip_ratio_high=s["clip_ratio_high"],
                         clip_ratio_c=s["clip_ratio_c"], tau_pos=s["tau_pos"], tau_neg=s["tau_neg"],
                         loss_agg_mode=mode,
                         policy_loss=PolicyLossConfig(loss_mode=name, clip_cov_ratio=s["clip_cov_ratio"],
                                                      clip_cov_lb=s["clip_cov_lb"], clip_cov_ub=s["clip_cov_ub"],
                                                      kl_cov_ratio=s["kl_cov_ratio"], ppo_kl_coef=s["ppo_kl_coef"],
                                                      dro_beta=s["dro_beta"]))
    new = x["new"].clone().requires_grad_(True)
    torch.manual_seed(seed)
    loss, metrics = core_algos.get_policy_loss_fn(name)(x["old"].clone(), new, x["adv"].clone(), x["mask"].clone(),
                                                        loss_agg_mode=mode, config=config)
    loss.backward()
    return f32(float(loss)), {k: f32(float(v)) for k, v in metrics.items()}, rows(new.grad)


def main() -> int:
    sys.path.insert(0, str(VERL_SRC))
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig, PolicyLossConfig

    table = {"about": "verl's advantage estimators and policy losses on fixed inputs (float32). Generated by "
                      "tools/gen_core_algos_cases.py from verl's core_algos.py; do not edit.",
             "verl_estimators": sorted(core_algos.ADV_ESTIMATOR_REGISTRY),
             "verl_policy_losses": sorted(core_algos.POLICY_LOSS_REGISTRY),
             "estimators": [], "loss_inputs": {}, "losses": []}
    for case, x in estimator_inputs():
        inputs = {"rewards": rows(x["rewards"]), "mask": rows(x["mask"]), "index": x["index"],
                  "values": rows(x["values"]), "reward_baselines": rows(x["reward_baselines"]),
                  "gamma": x["gamma"], "lam": x["lam"], "norm_adv_by_std_in_grpo": x["norm_adv_by_std_in_grpo"],
                  "old_log_probs": rows(x["old_log_probs"]), "sum_pi_squared": rows(x["sum_pi_squared"]),
                  "rollout_is_weights": None if x["rollout_is_weights"] is None else rows(x["rollout_is_weights"]),
                  "reward_components": {k: [f32(v) for v in vs] for k, vs in x["reward_components"].items()},
                  "gdpo_reward_keys": list(GDPO_KEYS), "gdpo_reward_weights": x["gdpo_reward_weights"]}
        outputs = {}
        for name in ESTIMATORS:
            try:
                adv, ret = verl_estimate(core_algos, AlgoConfig, name, x)
                outputs[name] = {"advantages": rows(adv), "returns": rows(ret)}
            except (ValueError, AssertionError) as e:
                outputs[name] = {"error": type(e).__name__, "message": str(e)}
        entry = {"case": case, "inputs": inputs, "outputs": outputs}
        if "advantages" in outputs["optimal_token_baseline"]:  # verl's variance proxies on the OTB advantages
            entry["variance_proxy"] = verl_variance_proxy(x, torch.tensor(outputs["optimal_token_baseline"]
                                                                          ["advantages"]))
        table["estimators"].append(entry)
    seed = 1234
    for case, x in loss_inputs():
        table["loss_inputs"][case] = {k: rows(v) for k, v in x.items()}
        for settings_name, settings in LOSS_SETTINGS.items():
            for mode in AGG_MODES:
                outputs = {}
                for name in LOSSES:
                    seed += 1
                    try:
                        loss, metrics, grad = verl_loss(core_algos, ActorConfig, PolicyLossConfig, name, x, settings,
                                                        mode, seed)
                        outputs[name] = {"seed": seed, "pg_loss": loss, "metrics": metrics, "grad": grad}
                    except (ValueError, AssertionError) as e:
                        outputs[name] = {"seed": seed, "error": type(e).__name__, "message": str(e)}
                table["losses"].append({"case": case, "settings": settings_name, "loss_agg_mode": mode,
                                        "outputs": outputs})
    table["loss_settings"] = LOSS_SETTINGS
    OUT.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(table['estimators'])} estimator cases, {len(table['losses'])} loss "
          f"cases, {OUT.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
