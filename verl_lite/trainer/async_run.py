"""Fully-async GRPO (`async_training.enable=True`): rollout replicas on their own devices generate
continuously into a bounded queue while the training pool consumes batches from it.

  rollout pool (RolloutWorker x replicas) --chunks--> ChunkBuffer --groups--> driver --> TrainWorker group
                    ^                                                                      |
                    +------------- weights, version step // trigger_parameter_sync_step ---+

A step takes `async_pools.step_prompts` prompt groups from the queue (data.train_batch_size, or with
verl's data.train_batch_size=0 ppo_mini_batch_size * require_batches). The rollouter starts at most
`async_pools.max_required_samples` groups per weight version (verl's staleness budget, counted in the
ChunkBuffer and reset at each sync). A group more than ceil(staleness_threshold) versions old is
dropped (`stale_policy=drop`) or trained on with its advantages scaled by the truncated per-token
importance weight
min(exp(old_log_prob - rollout_log_prob), reweight_cap) (`stale_policy=reweight`). Old log-probs
come from the weights last published to the rollouters (a CPU snapshot on the train workers: the
engine's `snapshot_to_cpu`, kept by `TrainWorker.save_model_to_cpu`), so PPO's clip bounds the drift
from the policy that generated the data. algorithm.rollout_correction works as in verl's fully-async
trainer: the rollout's log-probs (under the weights that sampled each token) play "rollout" and the
published weights' old log-probs "old" in decoupled mode, applied before the advantages; bypass mode
takes the rollout's log-probs as the old ones and scores none.

The rollout replicas are `rollout_pool.RolloutPool`; `async_setup.fit_async` builds the run.
Faults stop the run with the cause: a rollout replica that raises or dies is seen within
POLL_S seconds; a queue that stays empty for `async_training.queue_timeout_s` raises QueueTimeout
with what the replicas did meanwhile. See docs/async.md.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import time
from typing import Any, Dict, List, Optional

from verl_lite.batch import batch_size, concat, select
from verl_lite.decisions import async_pools
from verl_lite.decisions.rollout_correction import needs_rollout_log_probs
from verl_lite.faults import fault_point
from verl_lite.trainer import core_algos
from verl_lite.trainer.advantage_phase import advantage_phase
from verl_lite.trainer.checkpoint import CheckpointManager, DRIVER_STATE
from verl_lite.trainer.data_parallel import dp_shards, num_mini_batches, update_meta
from verl_lite.trainer.dumps import Dumps
from verl_lite.trainer.dynamic_sampling import reward_extra_metrics
from verl_lite.trainer.loop import StepLoop, StopRequest
from verl_lite.trainer.rollout_pool import RolloutError, RolloutPool
from verl_lite.trainer.step_metrics import batch_metrics, entropy_mean, timing_metrics
from verl_lite.trainer.update_metrics import merge_rank_metrics

logger = logging.getLogger("verl_lite")

POLL_S = 0.5  # how often a waiting trainer looks at the rollout replicas' health
PUBLISHED = "published"  # the train workers' CPU snapshot of the weights the rollouters have
TRAIN_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask",
              "multi_modal_inputs")  # the pixel inputs per sample where the rows have images
ASYNC_CONSOLE_KEYS = ("async/staleness/mean", "async/queue_depth", "async/dropped_groups", "timing_s/wait_rollout")


class QueueTimeout(RuntimeError):
    """No rollout chunk arrived for async_training.queue_timeout_s seconds."""


def torch_cat(parts: List[Any]) -> Any:
    import torch

    return torch.cat([p.reshape(-1) for p in parts])


def split_groups(chunk: Dict[str, Any], n: int) -> List[Dict[str, Any]]:
    """A chunk's prompt groups (n rows each) with the oldest weight version that generated them."""
    groups = []
    for start in range(0, batch_size(chunk), n):
        data = select(chunk, range(start, start + n))
        groups.append({"data": data, "v_min": int(data["version_min"].min()), "reweight": False,
                       "resumed": int((data["version_max"] > data["version_min"]).sum())})
    return groups


def merge_groups(groups: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One batch from groups; the shared left padding of the prompts is trimmed."""
    batch = concat([g["data"] for g in groups])
    width = batch["prompts"].shape[1]
    used = (batch["attention_mask"][:, :width].sum(0) > 0).nonzero()
    first = int(used[0]) if len(used) else 0
    for k in ("input_ids", "attention_mask", "position_ids", "prompts"):
        batch[k] = batch[k][..., first:]  # the last dim: 3-D positions are (B, 3, T)
    return batch


class AsyncTrainer(StepLoop):
    """The fully-async GRPO driver: each step takes its prompt groups from the queue (collect: the stale
    ones dropped or marked for reweighting), scores the old log-probs under the published weights, runs
    the advantage phase and the actor update, and publishes the weights to the rollout pool every
    trigger_parameter_sync_step steps. `async_setup.fit_async` builds it over the training pool, the
    rollout pool and the queue. It owns the step counter and history, the groups carried to the next
    step, the staleness counts, and the checkpoints (the train workers' parts and the queue's sampler)."""

    def __init__(self, cfg: Any, train_wg: Any, pool: RolloutPool, buffer: Any, tracking: Any, out_dir: str,
                 state: Dict[str, Any], total_steps: int, stop: Optional[StopRequest] = None, tokenizer: Any = None):
        self.cfg, self.train_wg, self.pool, self.buffer = cfg, train_wg, pool, buffer
        self.tracking, self.out_dir, self.total_steps = tracking, out_dir, total_steps
        self.ckpt = CheckpointManager(cfg.trainer.default_local_dir, cfg.trainer.max_actor_ckpt_to_keep)
        self.stop = stop or StopRequest()
        self.global_step = self.saved_step = int(state.get("global_step", 0))
        self.history: List[Dict[str, Any]] = list(state.get("history", []))
        a = cfg.async_training
        self.k, self.threshold = int(a.trigger_parameter_sync_step), math.ceil(float(a.staleness_threshold))
        self.want = async_pools.step_prompts(cfg)
        self.policy = a.stale_policy
        self.carry: collections.deque = collections.deque()
        self.dropped_total = 0
        self.stale_groups_total = self.stale_rows_total = 0  # verl's fully_async/count/stale_*_processed
        self.exhausted = False  # the rollouter has produced all its prompts (rollout.total_rollout_steps)
        self.window: Optional[List[Dict[str, Any]]] = None  # replica stats at the last sync (rollouter idle ratio)
        self.sync_metrics: Dict[str, float] = {}
        self.idle_s = 0.0
        self.started = time.perf_counter()
        self.tokenizer, self.dumps = tokenizer, Dumps.of(cfg.trainer)  # rollout_data_dir / validation_data_dir

    # -- weights ---------------------------------------------------------------------------------

    def publish(self) -> float:
        """Push the current weights to every rollout replica as version global_step // k."""
        import ray

        t = time.perf_counter()
        version = self.global_step // self.k
        weights = self.train_wg.call_all("export_weights")[0]  # a gather: every rank takes part
        self.pool.push(ray.put(weights), version)
        if self.k > 1:
            self.train_wg.call_all("save_model_to_cpu", PUBLISHED)
        # verl's reset_staleness: what was generated with older weights counts against the new budget
        staleness = ray.get(self.buffer.reset_staleness.remote(len(self.carry)), timeout=60)
        self.sync_metrics = {"fully_async/count/staleness_samples": staleness, **self._rollouter_idle()}
        return time.perf_counter() - t

    def _rollouter_idle(self) -> Dict[str, float]:
        """verl's fully_async/rollouter/idle_ratio over the version that just ended: the share of the
        replicas' time spent not generating."""
        stats = self.pool.stats()
        before, self.window = self.window, stats
        if before is None:
            return {}
        span = sum(s["elapsed_s"] - b["elapsed_s"] for s, b in zip(stats, before))
        busy = sum(s["gen_s"] - b["gen_s"] for s, b in zip(stats, before))
        return {"fully_async/rollouter/idle_ratio": max(0.0, 1.0 - busy / span) if span > 0 else 0.0,
                "fully_async/rollouter/version_time": span / max(len(stats), 1)}

    # -- data ------------------------------------------------------------------------------------

    def collect(self) -> Optional[Dict[str, Any]]:
        """Wait for a step's fresh groups; drop or mark the stale ones on the way. None when the
        rollouter has produced all its prompts and fewer than a step's groups are left (verl's trainer
        stops there too)."""
        import ray

        want, n = self.want, int(self.cfg.actor_rollout_ref.rollout.n)
        version = self.global_step // self.k
        timeout = float(self.cfg.async_training.queue_timeout_s)
        used: List[Dict[str, Any]] = []
        dropped, waited = 0, 0.0
        last_arrival = time.monotonic()
        while True:
            while self.carry and len(used) < want:
                group = self.carry.popleft()
                group["staleness"] = version - group["v_min"]
                if group["staleness"] > self.threshold:
                    if self.policy == "drop":
                        dropped += 1
                        continue
                    group["reweight"] = True
                used.append(group)
            if len(used) >= want:
                break
            t = time.perf_counter()
            reply = ray.get(self.buffer.get.remote(POLL_S), timeout=POLL_S + 60)
            waited += time.perf_counter() - t
            if reply is None:
                self.pool.check()
                if time.monotonic() - last_arrival > timeout:
                    raise QueueTimeout(self._timeout_message(timeout, len(used), want))
                continue
            if reply.get("exhausted"):
                self.exhausted = True
                self.idle_s += waited
                logger.info("fully-async: the rollouter has produced all its prompts; %d group(s) left over, fewer "
                            "than a step's %d", len(used), want)
                return None
            last_arrival = time.monotonic()
            self.carry.extend(split_groups(reply["chunk"], n))
        self.dropped_total += dropped
        self.idle_s += waited
        depth = ray.get(self.buffer.depth.remote(), timeout=60)
        return {"groups": used, "dropped": dropped, "wait_s": waited, "depth": depth}

    def _timeout_message(self, timeout: float, have: int, want: int) -> str:
        try:
            stats = self.pool.stats()
            seen = "; ".join(f"replica {i}: {s['chunks']} chunks, {s['tokens']} tokens, weights v{s['version']}, "
                             f"{s['gen_s']:.0f} s generating, {s['wait_s']:.0f} s waiting for queue room"
                             for i, s in enumerate(stats))
        except RolloutError as e:
            seen = f"the replicas do not answer either ({e})"
        return (f"the rollout queue stayed empty for {timeout:.0f} s (async_training.queue_timeout_s) at step "
                f"{self.global_step + 1}, with {have}/{want} prompt groups in hand; the rollout replicas are alive "
                f"but produced nothing in that time ({seen}). Generating one chunk takes longer than the timeout, "
                "or generation hangs: raise async_training.queue_timeout_s, or lower "
                "actor_rollout_ref.rollout.micro_batch_size to make chunks smaller")

    # -- one step --------------------------------------------------------------------------------

    def step(self) -> Dict[str, Any]:
        import torch

        cfg, actor_rollout_ref = self.cfg, self.cfg.actor_rollout_ref
        timing: Dict[str, float] = {}
        t0 = time.perf_counter()
        got = self.collect()
        if got is None:
            return None
        timing["wait_rollout"] = got["wait_s"]
        groups = got["groups"]
        batch = merge_groups(groups)
        tensors = {k: batch[k] for k in TRAIN_KEYS if k in batch}
        tensors["temperature"] = float(actor_rollout_ref.rollout.temperature)
        t = time.perf_counter()
        correction = cfg.algorithm.rollout_correction
        bypass = bool(correction.bypass_mode)
        if needs_rollout_log_probs(correction) and "rollout_log_probs" not in batch:
            raise RuntimeError("algorithm.rollout_correction needs the rollout's log-probs and the rollout replicas "
                               "sent none: set actor_rollout_ref.rollout.calculate_log_probs=True")
        lp: Dict[str, Any] = {}
        if bypass:  # verl's apply_bypass_mode: the rollout's log-probs are the old ones, no scoring pass
            old = batch["rollout_log_probs"]
        else:
            if self.global_step % self.k:  # the weights moved on since they were published
                lp = self.train_wg.dp_call("compute_log_prob_from", tensors, PUBLISHED)
            else:
                lp = self.train_wg.dp_call("compute_log_prob", tensors)
            old = lp["old_log_probs"]
        train_batch = dict(tensors, old_log_probs=old)
        if actor_rollout_ref.actor.use_kl_loss:
            train_batch["ref_log_prob"] = self.train_wg.dp_call("compute_ref_log_prob", tensors)["ref_log_prob"]
        timing["old_log_prob"] = time.perf_counter() - t
        rewards = batch["token_level_scores"]
        # as verl's fully-async trainer (separation/ray_trainer.py _fit_compute_advantage): "rollout" = the
        # replica's log-probs, "old" = the published weights'; the correction's mask and weights are trained on
        view = {"old_log_probs": old, "response_mask": tensors["response_mask"], "uid": batch["uid"]}
        if "rollout_log_probs" in batch:
            view["rollout_log_probs"] = batch["rollout_log_probs"]
        phase = advantage_phase(cfg.algorithm, view, rewards)
        train_batch["response_mask"] = view["response_mask"]
        if "rollout_is_weights" in view:
            train_batch["rollout_is_weights"] = view["rollout_is_weights"]
        adv, ret, mask, generated_mask = phase.advantages, phase.returns, phase.mask, phase.generated_mask
        metrics: Dict[str, Any] = dict(phase.correction_metrics)
        metrics.update(phase.input_metrics)
        rows = torch.tensor([g["reweight"] for g in groups for _ in range(g["data"]["response_mask"].shape[0])])
        if rows.any():
            cap = float(cfg.async_training.reweight_cap)
            weight = (old - batch["rollout_log_probs"]).exp().clamp(max=cap)
            adv = torch.where(rows[:, None], adv * weight, adv)
            metrics["async/is_weight/mean"] = core_algos.masked_mean(weight[rows], mask[rows]).item()
        train_batch.update(advantages=adv, returns=ret)
        t = time.perf_counter()
        num_mini = num_mini_batches(self.want, actor_rollout_ref.actor.ppo_mini_batch_size)
        dp = self.train_wg.dp_size
        shards = dp_shards(train_batch, num_mini, dp, bool(cfg.trainer.balance_batch), metrics)
        res = self.train_wg.call_shards("update_actor", shards,
                                        update_meta(train_batch, num_mini, dp))
        metrics.update(merge_rank_metrics(res))
        timing["update_actor"] = time.perf_counter() - t
        fault_point("step")  # crash tests: mid-step, after the update, before the weights are published
        self.global_step += 1
        self.sync_metrics = {}
        if self.global_step % self.k == 0:
            timing["publish"] = self.publish()
            timing["param_sync"] = timing["publish"]  # verl's name
        timing["step"] = time.perf_counter() - t0
        staleness = torch.tensor([float(g["staleness"]) for g in groups])
        metrics.update(self._verl_metrics(groups, got, timing))
        metrics.update(batch_metrics(rewards, adv, mask, generated_mask))
        metrics.update({
            "async/param_version": self.global_step // self.k, "async/staleness/mean": staleness.mean().item(),
            "async/staleness/max": staleness.max().item(), "async/dropped_groups": got["dropped"],
            "async/dropped_groups_total": self.dropped_total,
            "async/reweighted_groups": int(sum(g["reweight"] for g in groups)),
            "async/resumed_sequences": int(sum(g["resumed"] for g in groups)),
            "async/queue_depth": got["depth"]["groups"], "async/queue_in_generation": got["depth"]["reserved"],
            "async/queue_capacity": got["depth"]["capacity"], "async/carry_groups": len(self.carry),
            "perf/num_sequences": int(mask.shape[0]),
        })
        if "entropy" in lp:  # of the old log-prob pass (none in bypass mode)
            metrics["actor/entropy"] = entropy_mean(lp["entropy"], generated_mask)
        metrics.update(reward_extra_metrics(batch))  # the dapo manager's overlong_buffer_cfg.log
        metrics.update(self._rollout_perf())
        metrics.update(timing_metrics(timing))
        self.dumps.rollout(self.global_step, self.tokenizer, batch, rewards.sum(-1))
        return metrics

    def _verl_metrics(self, groups: List[Dict[str, Any]], got: Dict[str, Any], timing: Dict[str, float]) -> Dict[str, Any]:
        """verl's fully-async metric names (fully_async_trainer.py:1036-1046, detach_utils.py:151-158,
        fully_async_rollouter.py:1170-1185). A trajectory is stale when the newest weights that generated
        it are older than the published version the step trains at (verl counts by max_global_steps); a
        partial one was generated by more than one version."""
        version = (self.global_step - 1) // self.k  # published when this step took its groups
        v_min = torch_cat([g["data"]["version_min"] for g in groups])
        v_max = torch_cat([g["data"]["version_max"] for g in groups])
        stale_rows = version - v_max >= 1
        self.stale_rows_total += int(stale_rows.sum())
        self.stale_groups_total += sum(int((version - g["data"]["version_max"] >= 1).any()) for g in groups)
        span = (v_max - v_min).abs()
        depth = got["depth"]
        a = self.cfg.async_training
        out = {
            "fully_async/count/stale_trajectory_processed": self.stale_rows_total,
            "fully_async/count/stale_samples_processed": self.stale_groups_total,
            "fully_async/count/current_param_version": self.global_step // self.k,
            "fully_async/count/total_generated_samples": depth["dealt"] - depth["reserved"],
            "fully_async/count/dropped_stale_samples": self.dropped_total,
            "fully_async/partial/total_partial_num": int((span > 0).sum()),
            "fully_async/partial/partial_ratio": float((span > 0).float().mean()),
            "fully_async/partial/max_partial_span": int(span.max()),
            "fully_async/total_wait_time": got["wait_s"],
            "fully_async/trainer/idle_ratio": got["wait_s"] / max(timing["step"], 1e-9),
            "fully_async/static/required_samples": self.want,
            "fully_async/static/max_required_samples": depth["budget"],
            "fully_async/static/max_queue_size": depth["capacity"],
            "fully_async/static/staleness_threshold": float(a.staleness_threshold),
            "fully_async/monitor/queue/mq_queue_size": depth["groups"],
            "fully_async/monitor/active_tasks_size": depth["reserved"],
            "training/global_step": self.global_step,
        }
        out.update(self.sync_metrics)
        return out

    def _rollout_perf(self) -> Dict[str, float]:
        stats = self.pool.stats()
        elapsed = max(max(s["elapsed_s"] for s in stats), 1e-9)
        wall = time.perf_counter() - self.started
        return {"perf/rollout_tokens_per_s": sum(s["tokens"] for s in stats) / elapsed,
                "perf/rollout_busy_frac": sum(s["gen_s"] for s in stats) / (elapsed * len(stats)),
                "perf/trainer_idle_frac": self.idle_s / max(wall, 1e-9),
                "async/resumed_sequences_total": sum(s["resumed"] for s in stats)}

    # -- loop ------------------------------------------------------------------------------------

    def fit(self, progress: bool = True) -> List[Dict[str, Any]]:
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        t = self.cfg.trainer
        self.started = time.perf_counter()
        with logging_redirect_tqdm():
            bar = tqdm(total=self.total_steps, initial=self.global_step, desc="GRPO async", disable=not progress,
                       dynamic_ncols=True, unit="step")
            try:
                while self.global_step < self.total_steps and not self.stop.requested:
                    with self.during("at step", self.global_step + 1):
                        metrics = self.step()
                    if metrics is None:  # the rollouter's prompts ran out before total_steps (stale drops)
                        if self.global_step > self.saved_step and t.save_freq > 0:
                            with self.during("saving the checkpoint of step", self.global_step):
                                self._save()
                        break
                    is_last = self.global_step >= self.total_steps
                    # As verl's fully-async trainer: test_freq and save_freq count weight versions (a
                    # version is trigger_parameter_sync_step steps), checked when one is published.
                    synced, version = self.global_step % self.k == 0, self.global_step // self.k
                    if t.test_freq > 0 and ((synced and version % t.test_freq == 0) or is_last):
                        with self.during("validating after step", self.global_step):
                            metrics.update(self.dumps.take_validation(self.global_step,
                                                                      self.pool.validate(self.global_step)))
                    self.tracking.log(metrics, self.global_step)
                    self.history.append({"step": self.global_step, "score": metrics["critic/score/mean"],
                                         **({"val": metrics["val/score"]} if "val/score" in metrics else {})})
                    bar.set_postfix(reward=f"{metrics['critic/score/mean']:.3f}",
                                    stale=f"{metrics['async/staleness/mean']:.1f}", queue=metrics["async/queue_depth"])
                    bar.update(1)
                    if t.save_freq > 0 and ((synced and version % t.save_freq == 0) or is_last):
                        with self.during("saving the checkpoint of step", self.global_step):
                            self._save()
            finally:
                bar.close()  # also on a failure, so the error line starts on a line of its own
                self.dumps.close()
            self.finish_stop()
        if self.history and not self.stop.requested:
            logger.info("fully-async: trainer idle %.0f%% of the time, %d stale groups dropped",
                        100 * self.idle_s / max(time.perf_counter() - self.started, 1e-9), self.dropped_total)
        return self.history

    def _save(self) -> None:
        import ray

        sampler = ray.get(self.buffer.sampler_state.remote(), timeout=60)
        step, history = self.global_step, self.history

        def write(tmp: str) -> None:
            self.train_wg.call_all("save_checkpoint", tmp)
            with open(os.path.join(tmp, DRIVER_STATE), "w", encoding="utf-8") as f:
                json.dump({"global_step": step, "sampler": sampler["sampler"], "pending": sampler["pending"],
                           "history": history, "mode": "async"}, f)

        logger.info("saved checkpoint %s", self.ckpt.save(step, write))
        self.saved_step = step
