"""Build and run a training job from a checked config: data, reward, Ray, worker groups, trainer."""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

logger = logging.getLogger("verl_lite")


def _init_ray(cfg: Any, device: str, world: int) -> None:
    import ray

    from verl_lite.runtime_env import get_runtime_env

    if ray.is_initialized():
        return
    ri = cfg.ray_init
    kwargs: dict = {"include_dashboard": bool(ri.include_dashboard), "log_to_driver": True,
                    "runtime_env": get_runtime_env(cfg, device), "logging_level": logging.WARNING}
    if ri.address:
        kwargs["address"] = ri.address
    else:
        cpus = ri.num_cpus or max(os.cpu_count() or 1, world + 1 if device == "cpu" else 1)
        kwargs["num_cpus"] = int(cpus)
        kwargs["_temp_dir"] = ri.temp_dir or os.environ.get("RAY_TMPDIR") or os.path.join(tempfile.gettempdir(), "verl_lite_ray")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(**kwargs)


def run(cfg: Any) -> int:
    if cfg.async_training.enable:
        from verl_lite.trainer.async_run import run_async

        return run_async(cfg)
    from omegaconf import OmegaConf

    from verl_lite.config import roles
    from verl_lite.data.dataset import PromptDataset, as_file_list, expand
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.device import resolve_device
    from verl_lite.reward.manager import RewardManager
    from verl_lite.trainer.plot import plot_rewards
    from verl_lite.trainer.ppo_trainer import CONSOLE_KEYS, PPOTrainer
    from verl_lite.trainer.tracking import Tracking
    from verl_lite.trainer.worker_group import WorkerGroup
    from verl_lite.trainer.workers import ActorRolloutRefWorker, CriticWorker

    t = cfg.trainer
    device = resolve_device(t.device)
    arr = cfg.actor_rollout_ref
    out_dir = os.path.abspath(os.path.expanduser(t.default_local_dir))
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = load_tokenizer(arr.model.tokenizer_path or arr.model.path, arr.model.trust_remote_code)
    d = cfg.data
    train_set = PromptDataset(d.train_files, tokenizer, d.max_prompt_length, d.prompt_key, d.truncation,
                              d.filter_overlong_prompts)
    val_files = [f for f in as_file_list(d.val_files) if os.path.isfile(expand(f))]
    val_set = (PromptDataset(val_files, tokenizer, d.max_prompt_length, d.prompt_key, d.truncation,
                             d.filter_overlong_prompts) if val_files else None)
    crf = cfg.custom_reward_function
    reward_fn = RewardManager.from_custom(crf.path, crf.name) if crf.path else RewardManager()
    world = int(t.nnodes) * int(t.n_gpus_per_node)
    cfg_dict = OmegaConf.to_container(cfg, resolve=True)
    threads = max(1, (os.cpu_count() or 1) // max(1, world)) if device == "cpu" else 1
    logger.info("device=%s ranks=%d strategy=%s rollout=%s train_prompts=%d", device, world, arr.actor.strategy,
                arr.rollout.name, len(train_set))
    if t.ray:
        _init_ray(cfg, device, world)
    tracking = Tracking(list(t.logger), out_dir, CONSOLE_KEYS)
    actor_wg = critic_wg = None
    try:
        timeout = float(t.ray_timeout_s) if t.ray_timeout_s and t.ray_timeout_s > 0 else None
        actor_wg = WorkerGroup(ActorRolloutRefWorker, "actor_rollout_ref", cfg_dict, world, device, bool(t.ray),
                               threads, call_timeout_s=timeout)
        if roles.critic_enabled(cfg):
            critic_wg = WorkerGroup(CriticWorker, "critic", cfg_dict, world, device, bool(t.ray), threads,
                                    call_timeout_s=timeout)
        trainer = PPOTrainer(cfg, device, actor_wg, critic_wg, tokenizer, train_set, val_set, reward_fn, tracking,
                             out_dir)
        history = trainer.fit(progress=True)
        if t.plot_rewards and history:
            png = plot_rewards(history, os.path.join(out_dir, "reward_curve.png"),
                               f"{t.project_name}/{t.experiment_name}: mean reward")
            logger.info("reward curve: %s", png)
        if "jsonl" in t.logger:
            logger.info("metrics: %s", tracking.jsonl_path)
        if history:
            first, last = history[0]["score"], history[-1]["score"]
            k = min(10, len(history))
            tail = sum(h["score"] for h in history[-k:]) / k
            logger.info("done: %d steps, reward %.3f at the first step, %.3f mean over the last %d", len(history),
                        first, tail, k)
        return 0
    finally:
        tracking.close()
        for wg in (actor_wg, critic_wg):
            if wg is not None:
                wg.shutdown()
        if t.ray:
            import ray

            if ray.is_initialized():
                ray.shutdown()
