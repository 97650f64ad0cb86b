"""What DAPO's dynamic sampling (algorithm.filter_groups) and data.gen_batch_size can do in a config: the
preflight's rules and the sampler's prompts per fetch, torch-free (trainer/dynamic_sampling.py runs it).
"""

from __future__ import annotations

from typing import Any, List


def filter_groups_problems(cfg: Any) -> List[str]:
    """What algorithm.filter_groups and data.gen_batch_size cannot do in this config."""
    fg, d = cfg.algorithm.filter_groups, cfg.data
    gen, train = d.gen_batch_size, int(d.train_batch_size)
    problems = []
    if cfg.async_training.enable:
        if gen is not None and int(gen) != 1:
            problems.append(f"data.gen_batch_size={gen} with async_training.enable=True: verl's fully-async trainer "
                            "streams prompts one at a time and requires 1 (as here: the queue holds prompt groups, a "
                            "replica generates actor_rollout_ref.rollout.micro_batch_size // rollout.n of them at a "
                            "time); set it to 1 or remove it")
        if fg.enable:
            problems.append("algorithm.filter_groups.enable=True with async_training.enable=True: dynamic sampling "
                            "is supported by the synchronous trainer only; remove it or set async_training.enable=False")
        return problems
    if gen is not None and int(gen) < 1:
        problems.append(f"data.gen_batch_size={gen} must be >= 1 (or null = data.train_batch_size)")
        return problems
    if not fg.enable:
        if gen is not None and train % int(gen):
            problems.append(f"data.gen_batch_size={gen} does not divide data.train_batch_size={train}: without "
                            "algorithm.filter_groups a step trains on train_batch_size prompts fetched gen_batch_size "
                            "at a time (as verl's trainer); choose a divisor, or leave it null")
        return problems
    if not fg.metric:
        problems.append("algorithm.filter_groups.enable=True needs algorithm.filter_groups.metric: acc or score (keys "
                        "the reward returns; reward_model.reward_manager=dapo records acc), seq_reward or "
                        "seq_final_reward")
    elif fg.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward:
        problems.append("algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=True is not "
                        "supported yet: the in-reward KL penalty is applied after the groups are chosen; use "
                        "seq_reward (the score before the penalty)")
    return problems


def prompts_per_fetch(cfg: Any) -> int:
    """Prompts the sampler draws at a time: data.gen_batch_size, else data.train_batch_size."""
    return int(cfg.data.gen_batch_size or cfg.data.train_batch_size)
