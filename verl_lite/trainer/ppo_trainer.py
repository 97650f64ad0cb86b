"""The GRPO/PPO driver loop: generate, score, advantages, update, sync weights, log, checkpoint.

The driver holds the data, the reward function and the metrics; workers (Ray actors) hold the
models. One step:
  prompts -> rollout (n samples each) -> rewards -> old log-probs [-> ref log-probs] [-> values]
  -> advantages (trainer/advantage_phase.py) [-> critic update] -> actor update -> weight sync.
What the fully-async driver (`async_run`) runs too has rooms of its own: the advantage phase, the step
metrics (`step_metrics`), the data-parallel dealing (`data_parallel`) and the update metrics'
merging (`update_metrics`); this driver's generation batches are in `generation`, its per-step
plan in `step_plan`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from verl_lite.batch import Batch, select
from verl_lite.data.dataset import BatchSampler
from verl_lite.decisions.dynamic_sampling import prompts_per_fetch
from verl_lite.decisions.layout import train_world
from verl_lite.decisions.profiling import is_profiled_step, recording_bounds
from verl_lite.faults import fault_point
from verl_lite.reward.manager import score_responses
from verl_lite.trainer import core_algos
from verl_lite.trainer.advantage_phase import advantage_phase
from verl_lite.trainer.algos import token_estimators
from verl_lite.trainer.checkpoint import DRIVER_STATE, load_into_workers, manager_for, select_checkpoint
from verl_lite.trainer.data_parallel import dp_shards, num_mini_batches, update_meta
from verl_lite.trainer.dumps import Dumps
from verl_lite.trainer.dynamic_sampling import EXTRA_PREFIX, DynamicSampler, reward_extra_metrics
from verl_lite.trainer.generation import (LIST_KEYS, PROMPT_KEYS, Generation, answer, generate_ahead_enabled,
                                          prompt_batch, prompts_of, submit_generation, worker_fields)
from verl_lite.trainer.loop import StepLoop, StopRequest, total_steps
from verl_lite.trainer.step_metrics import batch_metrics, entropy_mean, throughput_metrics, timing_metrics
from verl_lite.trainer.step_plan import StepPlan, read_plan
from verl_lite.trainer.tracking import val_generations
from verl_lite.trainer.update_metrics import merge_rank_metrics

logger = logging.getLogger(__name__)

CONSOLE_KEYS = ("critic/score/mean", "val/score", "actor/pg_loss", "actor/kl_loss", "actor/entropy",
                "response_length/mean", "timing_s/step", "perf/tokens_per_s")


class EpochsExhausted(Exception):
    """Dynamic sampling needs prompts after trainer.total_epochs passes over the data."""

    def __init__(self, epochs: int):
        super().__init__(f"the training data ran out after {epochs} epochs")
        self.epochs = epochs


_UNSET: Any = object()


class PPOTrainer(StepLoop):
    """The synchronous GRPO/PPO driver: one step at a time, generation, scoring, advantages and the
    updates in turn (the next step's generation may be sent behind this step's actor update: see
    _prefetch_allowed). run.py's `_fit_sync` builds it over the worker groups it started (the
    actor/rollout/ref group, the critic group for gae) and calls `fit`. It owns the driver's state:
    the prompt sampler, the KL controller of algorithm.use_kl_in_reward, dynamic sampling's rounds,
    the step counter and history, and the checkpoints (the workers save their own parts)."""

    def __init__(self, cfg: Any, device: str, actor_wg, critic_wg, tokenizer, train_set, val_set, reward_fn,
                 tracking, out_dir: str, stop: Optional[StopRequest] = None, resume: Any = _UNSET):
        self.cfg, self.device = cfg, device
        self.actor_wg, self.critic_wg = actor_wg, critic_wg
        self.n_devices = max(1, train_world(cfg))
        self.tokenizer, self.train_set, self.val_set = tokenizer, train_set, val_set
        self.reward_fn, self.tracking, self.out_dir = reward_fn, tracking, out_dir
        # data.gen_batch_size prompts at a time (verl's dataloader batch), train_batch_size when null
        self.sampler = BatchSampler(len(train_set), prompts_per_fetch(cfg), int(cfg.data.seed), bool(cfg.data.shuffle))
        self.dynamic = (DynamicSampler(cfg, tokenizer.pad_token_id) if cfg.algorithm.filter_groups.enable else None)
        self.ckpt = manager_for(cfg)  # max_actor_ckpt_to_keep and max_critic_ckpt_to_keep
        self.global_step = 0
        self.saved_step = 0
        self.stop = stop or StopRequest()
        self.resume = resume  # select_checkpoint's answer when the caller already asked (run.py does)
        self.history: List[Dict[str, Any]] = []
        self.total_steps = total_steps(cfg, len(train_set))
        # algorithm.use_kl_in_reward: the KL controller lives on the driver, as verl's trainer holds it
        self.kl_ctrl_in_reward = (core_algos.get_kl_controller(cfg.algorithm.kl_ctrl)
                                  if cfg.algorithm.use_kl_in_reward else None)
        self._ahead: Optional[Generation] = None  # the next step's generation, sent during this step (_prefetch_allowed)
        self._generate_ahead = generate_ahead_enabled()  # run() checked it before anything started
        self._step_plan: Optional[StepPlan] = None
        self._last_step_end = 0.0
        self.dumps = Dumps.of(cfg.trainer)  # trainer.rollout_data_dir / validation_data_dir

    # -- checkpoints ---------------------------------------------------------------------------

    def _save(self) -> None:
        step = self.global_step

        def write(tmp: str) -> None:
            self.actor_wg.call_all("save_checkpoint", tmp)
            if self.critic_wg is not None:
                self.critic_wg.call_all("save_checkpoint", tmp)
            with open(os.path.join(tmp, DRIVER_STATE), "w", encoding="utf-8") as f:
                json.dump({"global_step": step, "sampler": self.sampler.state_dict(), "history": self.history}, f)

        path = self.ckpt.save(step, write)
        self.saved_step = step
        logger.info("saved checkpoint %s", path)

    def _maybe_resume(self) -> bool:
        """Load the checkpoint that trainer.resume_mode selects; True if one was loaded."""
        if self.resume is _UNSET:
            self.resume = select_checkpoint(self.cfg)
        if self.resume is None:
            return False
        path, state = self.resume
        load_into_workers(path, self.actor_wg, self.critic_wg)
        self.sampler.load_state_dict(state["sampler"])
        self.global_step = self.saved_step = int(state["global_step"])
        self.history = list(state.get("history", []))
        logger.info("resumed from %s at step %d", path, self.global_step)
        return True

    # -- one step ------------------------------------------------------------------------------

    def _next_prompts(self, fetches: int = 1) -> Batch:
        examples = []
        for _ in range(fetches):
            idx = self.sampler.next_batch()
            if idx is None:
                if self.dynamic is not None and self.sampler.state.epoch >= int(self.cfg.trainer.total_epochs):
                    raise EpochsExhausted(self.sampler.state.epoch)
                idx = self.sampler.next_batch()
            examples += [self.train_set.examples[i] for i in idx]
        return prompt_batch(examples, int(self.cfg.actor_rollout_ref.rollout.n), self.tokenizer.pad_token_id)

    def _score(self, batch: Batch) -> torch.Tensor:
        token_scores, batch["_texts"], extra = score_responses(self.tokenizer, self.reward_fn, batch)
        batch.update({EXTRA_PREFIX + k: v for k, v in extra.items()})  # per-row lists: select/concat keep them
        return token_scores

    def _generate_and_score(self, prompts: Batch, sampling: Dict[str, Any], log_probs: bool, ref_log_probs: bool,
                            timing: Dict[str, float]) -> Batch:
        """One generation batch, scored; adds its seconds to timing's gen, old_log_prob and reward."""
        return self._score_generation(self._submit_generation(prompts, sampling, log_probs, ref_log_probs), timing)

    def _submit_generation(self, prompts: Batch, sampling: Dict[str, Any], log_probs: bool,
                           ref_log_probs: bool) -> Generation:
        return submit_generation(self.actor_wg, prompts, int(self.cfg.data.max_response_length), sampling,
                                 log_probs, ref_log_probs)

    def _score_generation(self, pending: Generation, timing: Dict[str, float], ahead: bool = False) -> Batch:
        """The generation's answer (generation.answer: `ahead` when sent during the previous step's
        update, _prefetch_allowed), scored; the reward's seconds go to timing's reward."""
        gen = answer(pending, timing, ahead)
        gen["temperature"] = float(self.cfg.actor_rollout_ref.rollout.temperature)
        t = time.perf_counter()
        gen["token_level_scores"] = self._score(gen)
        timing["reward"] = timing.get("reward", 0.0) + time.perf_counter() - t
        return gen

    def _plan(self) -> StepPlan:
        """What every step's calls ask for (step_plan.read_plan), read once."""
        if self._step_plan is None:
            self._step_plan = read_plan(self.cfg, self.kl_ctrl_in_reward is not None)
        return self._step_plan

    # -- generating the next step's batch during this step's update -----------------------------

    def _prefetch_allowed(self) -> bool:
        """Whether the next step's generation may be sent now, behind this step's actor update: on the
        Ray path, where the worker then starts it as soon as the update ends and the driver's own
        work (the answer, the metrics, the log) overlaps it. Every call still runs in the order of a
        step-by-step run, with the same prompts, so the results are the same. Not when something
        must come between the update and the next generation in that order: validation, a checkpoint
        (it saves the sampler and the workers' RNG), a profiler start or stop; nor under dynamic
        sampling, whose rounds depend on the answers; nor after a stop request or on the last step."""
        t = self.cfg.trainer
        step, nxt = self.global_step + 1, self.global_step + 2
        return (self._generate_ahead and self.actor_wg.use_ray and self.dynamic is None and not self.stop.requested
                and nxt <= self.total_steps
                and not (t.test_freq > 0 and step % t.test_freq == 0)
                and not (t.save_freq > 0 and step % t.save_freq == 0)
                and not is_profiled_step(self.cfg, step) and not is_profiled_step(self.cfg, nxt))

    def _send_ahead(self, plan: StepPlan, timing: Dict[str, float]) -> Optional[BaseException]:
        """Send the next step's generation when _prefetch_allowed; its seconds go to timing's gen_send.
        A failure to prepare or send it is returned (with a note naming the next step), to be raised
        once this step's update has answered, so that the update's own failure comes first."""
        if not self._prefetch_allowed():
            return None
        t = time.perf_counter()
        try:
            self._ahead = self._send_generation(plan)
        except Exception as e:
            e.add_note(f"sending the generation of step {self.global_step + 2} during step {self.global_step + 1}")
            return e
        finally:
            timing["gen_send"] = time.perf_counter() - t
        return None

    def _send_generation(self, plan: StepPlan) -> Generation:
        """The step's generate call (without dynamic sampling), sent: train_batch_size prompts, fetched
        gen_batch_size at a time."""
        fetches = int(self.cfg.data.train_batch_size) // prompts_per_fetch(self.cfg)
        return self._submit_generation(self._next_prompts(fetches), plan.sampling, plan.score_old, plan.score_ref)

    def step(self) -> Dict[str, Any]:
        cfg = self.cfg
        timing: Dict[str, float] = {}
        ahead, self._ahead = self._ahead, None
        # a step whose generation was sent during the previous one starts where that one ended
        t0 = self._last_step_end if ahead is not None else time.perf_counter()
        plan = self._plan()
        gen, sampling_metrics = self._generation(plan, ahead, timing)
        entropy = self._before_advantages(plan, gen, timing)
        rewards, kl_metrics = gen["token_level_scores"], {}
        if plan.kl_in_reward:
            rewards, kl_metrics = core_algos.apply_kl_penalty(
                rewards, gen["old_log_probs"], gen["ref_log_prob"], gen["response_mask"].float(),
                self.kl_ctrl_in_reward, cfg.algorithm.kl_penalty)
        phase = advantage_phase(cfg.algorithm, gen, rewards, lambda: self._greedy_rewards(gen, plan.sampling, timing))
        adv, mask = phase.advantages, phase.mask
        gen["advantages"], gen["returns"] = adv, phase.returns
        metrics: Dict[str, Any] = dict(kl_metrics)
        metrics.update(phase.correction_metrics)
        metrics.update(sampling_metrics)
        metrics.update(reward_extra_metrics(gen))
        metrics.update(phase.input_metrics)
        self._update(plan, worker_fields(gen), metrics, timing)
        self._last_step_end = time.perf_counter()
        timing["step"] = self._last_step_end - t0
        # verl's critic/score: before the KL penalty; response lengths: the generated ones
        metrics.update(batch_metrics(gen["token_level_scores"], adv, mask, phase.generated_mask, rewards=rewards,
                                     prompt_mask=gen["attention_mask"][:, :-mask.shape[1]]))
        metrics.update(throughput_metrics(phase.generated_mask, gen["attention_mask"], timing, self.n_devices))
        if entropy is not None:  # else the update measured it (on-policy), or the actor was not updated
            metrics["actor/entropy"] = entropy
        if "sum_pi_squared" in gen:  # verl's variance proxies, with the actor's gradient norm when it stepped
            metrics.update(token_estimators.variance_proxy_metrics(gen["old_log_probs"], gen["sum_pi_squared"], adv,
                                                                   mask, gen.get("rollout_is_weights"),
                                                                   metrics.get("actor/grad_norm")))
        metrics.update(timing_metrics(timing))
        metrics["sample"] = gen["_texts"][0]
        self.dumps.rollout(self.global_step + 1, self.tokenizer, gen, gen["token_level_scores"].sum(-1))
        return metrics

    def _generation(self, plan: StepPlan, ahead: Optional[Generation],
                    timing: Dict[str, float]) -> Tuple[Batch, Dict[str, Any]]:
        """The step's scored generation batch and dynamic sampling's metrics: the one sent during the
        previous step, or train_batch_size prompts now, or DAPO's rounds of gen_batch_size prompts
        until enough groups with varied rewards."""
        if ahead is not None:
            return self._score_generation(ahead, timing, ahead=True), {}
        if self.dynamic is None:
            return self._score_generation(self._send_generation(plan), timing), {}
        return self.dynamic.collect(lambda _round: self._generate_and_score(
            self._next_prompts(1), plan.sampling, plan.score_old, plan.score_ref, timing))

    def _before_advantages(self, plan: StepPlan, gen: Batch, timing: Dict[str, float]) -> Optional[float]:
        """What the batch holds before its advantages: in bypass mode the rollout's log-probs as the old
        ones, the critic's values (timed with the old log-probs); the old pass's entropy is returned."""
        if plan.bypass:
            if "rollout_log_probs" not in gen:
                raise RuntimeError("algorithm.rollout_correction.bypass_mode=True needs the rollout's log-probs: set "
                                   "actor_rollout_ref.rollout.calculate_log_probs=True")
            gen["old_log_probs"] = gen["rollout_log_probs"]
        entropy = entropy_mean(gen.pop("entropy"), gen["response_mask"].float()) if plan.score_old else None
        if self.critic_wg is not None:
            t = time.perf_counter()
            gen["values"] = self.critic_wg.dp_call("compute_values", worker_fields(gen))["values"]
            timing["old_log_prob"] += time.perf_counter() - t
        if plan.correction_active and not plan.bypass and not ("rollout_log_probs" in gen and "old_log_probs" in gen):
            raise RuntimeError("algorithm.rollout_correction is set but the rollout returned no rollout_log_probs: "
                               "set actor_rollout_ref.rollout.calculate_log_probs=True")
        return entropy

    def _update(self, plan: StepPlan, train_batch: Batch, metrics: Dict[str, Any], timing: Dict[str, float]) -> None:
        """The critic's update, then the actor's (from trainer.critic_warmup on), the next step's
        generation sent behind it (_send_ahead); their metrics go into `metrics`."""
        cfg = self.cfg
        balance = bool(cfg.trainer.balance_batch)
        t = time.perf_counter()
        if self.critic_wg is not None:
            critic_mini = num_mini_batches(cfg.data.train_batch_size, cfg.critic.ppo_mini_batch_size
                                           or cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
            dp = self.critic_wg.dp_size
            res = self.critic_wg.call_shards("update_critic", dp_shards(train_batch, critic_mini, dp, balance),
                                             update_meta(train_batch, critic_mini, dp))
            metrics.update(merge_rank_metrics(res))
        timing["update_critic"] = time.perf_counter() - t
        t = time.perf_counter()
        if self.global_step >= int(cfg.trainer.critic_warmup):
            dp = self.actor_wg.dp_size
            meta = update_meta(train_batch, plan.num_mini, dp)
            # The worker pushes the new weights to its rollout before it answers: one round trip.
            meta.update(on_policy=plan.on_policy, sync_weights_version=self.global_step + 1)
            shards = dp_shards(train_batch, plan.num_mini, dp, balance, metrics)
            update = self.actor_wg.submit_shards("update_actor", shards, meta)
            sending = self._send_ahead(plan, timing)
            metrics.update(merge_rank_metrics(update.result()))
            if sending is not None:  # the update answered: a failure to send the next generation is step t+1's
                raise sending
            fault_point("step")
        else:
            sending = self._send_ahead(plan, timing)
            if sending is not None:
                raise sending
        # the update's call alone: sending the next step's generation is timed apart (timing_s/gen_send)
        timing["update_actor"] = time.perf_counter() - t - timing.get("gen_send", 0.0)

    def _greedy_rewards(self, gen: Batch, sampling: Dict[str, Any], timing: Dict[str, float]) -> torch.Tensor:
        """remax's baseline, as verl's trainer makes it: the score of one greedy response per prompt of
        `gen` (same policy, same reward), repeated over that prompt's rollout.n responses (B,); its
        seconds are timing's gen_baseline."""
        t = time.perf_counter()
        prompts = prompts_of(gen)
        n = int(self.cfg.actor_rollout_ref.rollout.n)
        firsts = list(range(0, len(prompts["uid"]), n))
        dp = self.actor_wg.dp_size
        rows = [firsts[i % len(firsts)] for i in range(-(-len(firsts) // dp) * dp)]  # a multiple of the DP size
        picked = select(prompts, rows)
        greedy = self.actor_wg.dp_call("generate_sequences", worker_fields(picked, PROMPT_KEYS),
                                       int(self.cfg.data.max_response_length), dict(sampling, do_sample=False))
        greedy.pop("timing_s")
        for k in LIST_KEYS:
            greedy[k] = picked[k]
        scores = self._score(greedy).sum(-1)[:len(firsts)]
        timing["gen_baseline"] = time.perf_counter() - t
        return scores.repeat_interleave(n)

    # -- validation ----------------------------------------------------------------------------

    def validate(self) -> Dict[str, float]:
        if self.val_set is None:
            return {}
        vk = dict(self.cfg.actor_rollout_ref.rollout.val_kwargs)
        n = int(vk.get("n", 1))
        examples = self.val_set.examples
        bs = len(examples) - len(examples) % max(1, self.actor_wg.dp_size)
        batch = prompt_batch(examples[:bs], n, self.tokenizer.pad_token_id)
        gen = self.actor_wg.dp_call("generate_sequences", worker_fields(batch, PROMPT_KEYS),
                                    int(self.cfg.data.max_response_length), vk)
        gen.pop("timing_s")
        for k in LIST_KEYS:
            gen[k] = batch[k]
        scores = self._score(gen).sum(-1)
        self.dumps.validation(self.global_step, self.tokenizer, gen, scores)
        metrics = val_generations(self.tokenizer, gen, gen["_texts"], scores.tolist(),
                                  int(self.cfg.trainer.log_val_generations))
        out: Dict[str, List[float]] = defaultdict(list)
        for ds, s in zip(gen["data_source"], scores.tolist()):
            out[ds].append(s)
        metrics.update({f"val/test_score/{ds}": float(np.mean(v)) for ds, v in out.items()})
        metrics["val/score"] = float(scores.mean())
        return metrics

    # -- loop ----------------------------------------------------------------------------------

    def fit(self, progress: bool = True) -> List[Dict[str, Any]]:
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():
            return self._fit(progress)

    def _fit(self, progress: bool) -> List[Dict[str, Any]]:
        from tqdm import tqdm

        with self.during("resuming before step", self.global_step + 1):
            resumed = self._maybe_resume()
        self.tracking.rewind(self.global_step if resumed else -1)
        t = self.cfg.trainer
        if self.global_step == 0 and t.val_before_train and not self.stop.requested:
            with self.during("validating before step", 1):
                m = self.validate()
            self.tracking.log(m, 0)
        desc = "PPO" if self.cfg.algorithm.adv_estimator == "gae" else self.cfg.algorithm.adv_estimator.upper()
        bar = tqdm(total=self.total_steps, initial=self.global_step, desc=desc, disable=not progress,
                   dynamic_ncols=True, unit="step")
        try:
            self._loop(bar)
        finally:
            bar.close()  # also on a failure, so the error line starts on a line of its own
            self.dumps.close()
        self.finish_stop()
        return self.history

    def _profile(self, profiled: bool, method: str, *args: Any) -> None:
        """global_profiler: start or stop the workers' recording of a profiled step."""
        if profiled:
            for wg in (self.actor_wg, self.critic_wg):
                if wg is not None:
                    wg.call_all(method, *args)

    def _loop(self, bar) -> None:
        t = self.cfg.trainer
        self._profiling = False  # a recording of continuous profiled steps is open
        while self.global_step < self.total_steps and (not self.stop.requested or self._ahead is not None):
            if self.stop.requested:  # the stop came after the next step's generation was sent: that step is finished too
                logger.warning("finishing step %d before stopping: its generation had already begun (the checkpoint "
                               "will be of step %d)", self.global_step + 1, self.global_step + 1)
            try:
                with self.during("at step", self.global_step + 1):
                    step = self.global_step + 1
                    start, stop = recording_bounds(self.cfg, step)
                    # a run of continuous steps is started at the first step this run trains (a resumed run
                    # can begin inside it) and written at its last one when the run ends inside it
                    profiled = is_profiled_step(self.cfg, step)
                    start = start or (profiled and not self._profiling)
                    stop = stop or (profiled and step >= self.total_steps)
                    self._profile(start, "start_profile", step)
                    self._profiling = profiled and not stop
                    metrics = self.step()
                    self._profile(stop, "stop_profile")
            except EpochsExhausted as e:  # dynamic sampling drew more prompts per step than total_steps counted
                logger.info("the training data ran out after %d epochs (trainer.total_epochs) at step %d of %d: dynamic "
                            "sampling draws more than train_batch_size prompts a step; stopping as verl's DAPO "
                            "trainer does", e.epochs, self.global_step, self.total_steps)
                if t.save_freq > 0 and self.global_step > self.saved_step:
                    with self.during("saving the checkpoint of step", self.global_step):
                        self._save()
                break
            self.global_step += 1
            is_last = self.global_step >= self.total_steps
            if t.test_freq > 0 and (self.global_step % t.test_freq == 0 or is_last):
                with self.during("validating after step", self.global_step):
                    metrics.update(self.validate())
            sample = metrics.pop("sample", "")
            self.tracking.log(metrics, self.global_step)
            self.history.append({"step": self.global_step, "score": metrics["critic/score/mean"],
                                 **({"val": metrics["val/score"]} if "val/score" in metrics else {})})
            bar.set_postfix(reward=f"{metrics['critic/score/mean']:.3f}", sample=repr(sample)[:16])
            bar.update(1)
            if t.save_freq > 0 and (self.global_step % t.save_freq == 0 or is_last):
                with self.during("saving the checkpoint of step", self.global_step):
                    self._save()
