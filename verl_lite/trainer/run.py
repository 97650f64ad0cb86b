"""Build and run a training job from a checked config: data, reward, Ray, worker groups, trainer.

Stopping: the first SIGINT or SIGTERM lets the current step finish, writes a checkpoint and
makes `run` return 130 or 143 (128 + the signal); a second one abandons the step at once
(checkpoints are written atomically, so nothing half-written is ever resumed from). Whatever
happens, the worker groups and a Ray instance started here are shut down before returning.
Failures carry a note naming the step they interrupted; `describe_failure` makes the one line
that `python -m verl_lite.main` prints.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
from typing import Any, Iterator, Optional

from verl_lite.config import roles, to_dataclass
from verl_lite.config.compose import ConfigError
from verl_lite.decisions import async_pools
from verl_lite.decisions.layout import train_world
from verl_lite.data.dataset import DataError, PromptDataset, as_file_list, expand
from verl_lite.data.multimodal import load_processor
from verl_lite.data.tokenizer import load_tokenizer
from verl_lite.decisions import placement
from verl_lite.device import resolve_device
from verl_lite.faults import fault_spec, reset_faults
from verl_lite.preflight.run import settings_problems
from verl_lite.reward.registry import build_reward_manager
from verl_lite.reward.manager import (CODE_SCORER_HINT, CODE_SOURCES, SUPPORTED_SOURCES,
                                     has_default_scorer)
from verl_lite.secrets import redact, redacted_logs
from verl_lite.trainer.async_run import ASYNC_CONSOLE_KEYS
from verl_lite.trainer.async_setup import fit_async
from verl_lite.trainer.checkpoint import CheckpointManager, select_checkpoint
from verl_lite.trainer.loop import StopRequest, lr_schedule_steps
from verl_lite.trainer.plot import plot_rewards
from verl_lite.trainer.generation import generate_ahead_enabled
from verl_lite.trainer.ppo_trainer import CONSOLE_KEYS, PPOTrainer
from verl_lite.trainer.tracking import Tracking
from verl_lite.trainer import tensor_transport
from verl_lite.trainer.placement import NodeGroups, wait_for_cluster
from verl_lite.trainer.worker_group import NodeLostError, WorkerGroup, cpu_threads
from verl_lite.trainer.workers import ActorRolloutRefWorker, CriticWorker
from verl_lite.runtime_env import (LOCAL_RAY_ENV, get_runtime_env, local_ray_cpus, ray_join_address, ray_workers,
                                   runtime_env_overrides, uses_ray)

logger = logging.getLogger("verl_lite")



def driver_trusts_remote_code(cfg) -> bool:
    """trust_remote_code for the driver's tokenizer and processor: the model's setting, or verl's
    data.trust_remote_code, which verl's fully-async and one-step-off drivers load them with."""
    return bool(cfg.actor_rollout_ref.model.trust_remote_code) or (
        bool(cfg.async_training.enable) and bool(cfg.data.trust_remote_code))


class Abandoned(BaseException):
    """A second stop signal: leave the current step now (not an Exception: nothing may swallow it)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by a second {signal.Signals(signum).name}: the current step was abandoned")
        self.signum = signum


_restore: list = []  # undo callables for what _init_ray set for a local cluster


def _init_ray(cfg: Any, device: str, world: int) -> bool:
    """Start (or join) Ray; True when this call started it (or connected to it), so that only then
    `_end_ray` shuts it down.

    A cluster to join (`ray_init.address`, else RAY_ADDRESS) keeps its own settings: only the address,
    the runtime env and logging are passed (Ray refuses num_cpus and friends when joining).
    A local cluster is started with `ray_init.num_cpus`, `ray_init.temp_dir` (else RAY_TMPDIR, else
    <tmp>/verl_lite_ray), the dashboard only with `ray_init.include_dashboard`, and LOCAL_RAY_ENV.
    """
    address = ray_join_address(cfg)
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        tensor_transport.install()
        return False
    if not address:
        _set_local_env()
    import ray

    for line in runtime_env_overrides(cfg, device):
        logger.warning("%s", line)
    kwargs: dict = {"log_to_driver": True, "runtime_env": get_runtime_env(cfg, device),
                    "logging_level": logging.WARNING}
    if address:
        kwargs["address"] = address
    else:
        ri = cfg.ray_init
        kwargs.update(num_cpus=local_ray_cpus(cfg, device, world), include_dashboard=bool(ri.include_dashboard),
                      _node_ip_address="127.0.0.1",
                      _temp_dir=ri.temp_dir or os.environ.get("RAY_TMPDIR")
                      or os.path.join(tempfile.gettempdir(), "verl_lite_ray"))
    kwargs.update(cfg.ray_init.extra)  # ray.init's other arguments (verl: ray_kwargs.ray_init.<name>)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        ray.init(**kwargs)
    except BaseException:
        _end_ray(started=False)
        raise
    tensor_transport.install()
    return True


def _set_local_env() -> None:
    for name, value in LOCAL_RAY_ENV.items():
        if name not in os.environ:
            os.environ[name] = value
            _restore.append(lambda name=name: os.environ.pop(name, None))
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        # Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, on import; this process imported Ray before.
        before = constants.ENABLE_RAY_CLUSTER
        constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"].lower() in ("1", "true")
        _restore.append(lambda: setattr(constants, "ENABLE_RAY_CLUSTER", before))


def _end_ray(started: bool) -> None:
    """Shut down a Ray instance that `_init_ray` started, and undo what it set for it."""
    if started:
        import ray

        ray.shutdown()
    while _restore:
        _restore.pop()()


# ---------------------------------------------------------------------------- stopping


@contextlib.contextmanager
def _stop_on_signals(stop: Any) -> Iterator[None]:
    """SIGINT/SIGTERM set `stop.signum` (finish the step, save, stop); a second one raises Abandoned.
    Installed after ray.init, which sets its own SIGTERM handler; the previous handlers come back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        if stop.requested:
            raise Abandoned(signum)
        stop.signum = signum
        logger.warning("%s: finishing the current step, then saving a checkpoint and stopping (send it again to "
                       "stop at once)", signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def describe_failure(e: BaseException) -> str:
    """One line for a failed run: the error, its type, and the step it interrupted (if any)."""
    notes = "; ".join(getattr(e, "__notes__", []) or [])
    text = " ".join(str(e).split()) or type(e).__name__
    kind = type(e).__name__
    if kind not in ("WorkerError", "NodeLostError", "CheckpointError", "DataError", "RewardFunctionError",
                    "ConfigError"):
        text = f"{kind}: {text}"
    hint = getattr(e, "resume_hint", "")
    if hint:
        text = f"{text}; {hint}"
    return redact(f"{notes}: {text}" if notes else text)


def run(cfg: Any) -> int:
    """Train, synchronously or fully-async (`async_training.enable`); 0 when done, 128 + signal number
    when stopped by SIGINT/SIGTERM. Errors propagate. Both modes share everything up to the trainer's
    fit: fault points, log redaction, early data and checkpoint checks, Ray, signal handling."""
    reset_faults()
    fault_spec()  # a malformed VERL_LITE_FAULT is refused before anything starts
    generate_ahead_enabled()  # and so is a malformed VERL_LITE_GENERATE_AHEAD
    with redacted_logs():
        # Data, tokenizer, reward and the checkpoint to resume from first, with no torch import:
        # their errors come in about a second, before Ray starts and before any model is built.
        job = _Job(cfg)
        stop = StopRequest()
        started_ray = False
        try:
            if job.uses_ray:
                started_ray = _init_ray(cfg, job.device, job.ray_workers)
                # A cluster that is joined may still be growing; a local one is looked at once.
                wait_for_cluster(placement.cluster_need(cfg, job.device),
                                 job.wait_nodes_s if ray_join_address(cfg) else 0.0)
            with _stop_on_signals(stop):
                try:
                    job.train(stop)
                except Abandoned as e:
                    stop.signum = e.signum
                    logger.warning("%s", e)
        finally:
            _end_ray(started_ray)
    return 128 + stop.signum if stop.requested else 0


class _Job:
    """What the driver holds: data, tokenizer, reward function, the checkpoint to resume from; `train`
    builds the workers and runs the synchronous or the fully-async trainer's fit."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        t, actor_rollout_ref, d = cfg.trainer, cfg.actor_rollout_ref, cfg.data
        self.is_async = bool(cfg.async_training.enable)
        # verl's settings that the schema takes but no code acts on, and numbers outside their range, are
        # refused here too, not only by the preflight, so a run started from Python (run(cfg) without the
        # check) cannot ignore them.
        # Left to main: the layout, bridge, memory and machine rules, whose problems fail loudly here, not silently.
        problems = settings_problems(cfg)
        if problems:
            raise ConfigError(problems)
        self.device = resolve_device(t.device)
        self.world = train_world(cfg)
        self.uses_ray = uses_ray(cfg)  # fully-async always: a training pool and a rollout pool
        self.ray_workers = ray_workers(cfg)
        self.out_dir = os.path.abspath(os.path.expanduser(t.default_local_dir))
        os.makedirs(self.out_dir, exist_ok=True)
        model = actor_rollout_ref.model
        trust = driver_trusts_remote_code(cfg)
        self.tokenizer = load_tokenizer(model.tokenizer_path or model.path, trust)
        # a vision-language model's processor encodes rows with images (None for a text model)
        self.processor = load_processor(model.tokenizer_path or model.path, trust)
        self.train_set = PromptDataset.from_config(d.train_files, self.tokenizer, d, self.processor)
        val_files = [f for f in as_file_list(d.val_files) if os.path.isfile(expand(f))]
        self.val_set = PromptDataset.from_config(val_files, self.tokenizer, d, self.processor) if val_files else None
        reward = cfg.custom_reward_function
        self.reward_fn = build_reward_manager(cfg)  # reward_model.reward_manager, scoring with custom_reward_function
        self._check_fit(reward.path)
        # One resume path for both modes: a damaged checkpoint is refused before Ray and the models,
        # and what an interrupted save left is tidied first.
        self.resume = select_checkpoint(cfg)
        # One torch thread per CPU worker unless OMP_NUM_THREADS says otherwise: the tiny model's
        # matmuls are too small to gain from threads, and extra threads thrash on a shared 2-core box
        # (0.41 vs 2.87 s/step measured under load).
        self.threads = cpu_threads() if self.device == "cpu" else 1
        self.call_timeout_s = float(t.ray_timeout_s) if t.ray_timeout_s and t.ray_timeout_s > 0 else None
        self.wait_nodes_s = max(0.0, float(t.ray_wait_nodes_s))

    def _check_fit(self, custom_reward: Optional[str]) -> None:
        """What would otherwise fail only after the models are built: too few prompts for one batch,
        data sources that the default reward cannot score."""
        bs = async_pools.step_prompts(self.cfg)
        key = ("actor_rollout_ref.actor.ppo_mini_batch_size * async_training.require_batches"
               if async_pools.streaming(self.cfg) else "data.train_batch_size")
        if bs > len(self.train_set):
            raise DataError(f"{key}={bs} exceeds the {len(self.train_set)} prompts in "
                            f"data.train_files (lower {key} or add data)")
        if custom_reward:
            return
        sets = [("data.train_files", self.train_set)] + ([("data.val_files", self.val_set)] if self.val_set else [])
        for key, ds in sets:
            unknown = sorted({e.data_source for e in ds.examples if not has_default_scorer(e.data_source)})
            if unknown:
                code = [s for s in unknown if s in CODE_SOURCES]
                hint = f" ({', '.join(map(repr, code))}: {CODE_SCORER_HINT})" if code else ""
                raise DataError(f"{key}: no rule reward for data_source {', '.join(map(repr, unknown[:3]))} "
                                f"(the default reward scores {SUPPORTED_SOURCES}); "
                                f"set custom_reward_function.path to a reward function for this data{hint}")

    def train(self, stop: Any) -> None:
        from omegaconf import OmegaConf

        cfg, t = self.cfg, self.cfg.trainer
        # The workers get the typed config: dataclasses pickle across Ray, every default is the schema's.
        typed = with_lr_schedule(to_dataclass(cfg), lr_schedule_steps(cfg, len(self.train_set)))
        logged = OmegaConf.to_container(cfg, resolve=True)  # the loggers': with the schedules the workers run
        logged["actor_rollout_ref"]["actor"]["optim"]["total_training_steps"] = \
            typed.actor_rollout_ref.actor.optim.total_training_steps
        logged["critic"]["optim"]["total_training_steps"] = typed.critic.optim.total_training_steps
        keys = CONSOLE_KEYS + (ASYNC_CONSOLE_KEYS if self.is_async else ())
        tracking = Tracking(list(t.logger), self.out_dir, keys, t.project_name, t.experiment_name, logged)
        try:
            fit = fit_async if self.is_async else _fit_sync
            try:
                history = fit(self, typed, tracking, stop)
            except NodeLostError as e:
                e.resume_hint = self._resume_hint()
                raise
            if not stop.requested:
                self._report(history, tracking)
        finally:
            tracking.close()

    def _resume_hint(self) -> str:
        """Where a run that lost a node resumes from: the newest complete checkpoint (the save a lost
        node interrupted is never complete: see checkpoint.py)."""
        found = CheckpointManager(self.out_dir).latest_complete()
        if found is None:
            return "no complete checkpoint yet (a rerun starts from step 0)"
        return f"last complete checkpoint {found[1]} (step {found[0]}; restart the node and run again to resume from it)"

    def _report(self, history: list, tracking: Any) -> None:
        t = self.cfg.trainer
        if t.plot_rewards and history:
            title = f"{t.project_name}/{t.experiment_name}: mean reward" + (" (fully-async)" if self.is_async else "")
            png = plot_rewards(history, os.path.join(self.out_dir, "reward_curve.png"), title)
            logger.info("reward curve: %s", png)
        if "jsonl" in t.logger:
            logger.info("metrics: %s", tracking.jsonl_path)
        if history:
            first = history[0]["score"]
            k = min(10, len(history))
            tail = sum(h["score"] for h in history[-k:]) / k
            logger.info("done: %d steps, reward %.3f at the first step, %.3f mean over the last %d", len(history),
                        first, tail, k)


def with_lr_schedule(typed_cfg: Any, steps: int) -> Any:
    """The workers' typed config (a tree `to_dataclass` built for them) with the actor's and the critic's
    unset optim.total_training_steps (<= 0) set to `steps` (lr_schedule_steps), in place: only those two
    fields are read and written, so the run's read tracking still sees which keys a run reads; the run's
    own config stays as the user composed it."""
    for section in (typed_cfg.actor_rollout_ref.actor, typed_cfg.critic):
        if int(section.optim.total_training_steps) <= 0:
            section.optim.total_training_steps = steps
    return typed_cfg


def _fit_sync(job: _Job, typed_cfg: Any, tracking: Any, stop: Any) -> list:
    """The synchronous trainer: an actor/rollout/ref worker group (and a critic group for gae)."""
    cfg, t = job.cfg, job.cfg.trainer
    actor_rollout_ref = cfg.actor_rollout_ref
    logger.info("device=%s ranks=%d strategy=%s rollout=%s train_prompts=%d", job.device, job.world,
                actor_rollout_ref.actor.strategy, actor_rollout_ref.rollout.name, len(job.train_set))
    actor_wg = critic_wg = nodes = None
    # The actor/rollout/ref group and the critic share each device: one placement group per node.
    share = 1.0 / (2 if roles.critic_enabled(cfg) else 1)
    try:
        if t.ray:
            nodes = NodeGroups(placement.sync_pool(cfg), job.device, job.wait_nodes_s)
        actor_wg = WorkerGroup(ActorRolloutRefWorker, "actor_rollout_ref", typed_cfg, job.world, job.device,
                               bool(t.ray), job.threads, call_timeout_s=job.call_timeout_s, placement=nodes,
                               share=share)
        if roles.critic_enabled(cfg):
            critic_wg = WorkerGroup(CriticWorker, "critic", typed_cfg, job.world, job.device, bool(t.ray), job.threads,
                                    call_timeout_s=job.call_timeout_s, placement=nodes, share=share)
        trainer = PPOTrainer(cfg, job.device, actor_wg, critic_wg, job.tokenizer, job.train_set, job.val_set,
                             job.reward_fn, tracking, job.out_dir, stop=stop, resume=job.resume)
        return trainer.fit(progress=True)
    finally:
        for wg in (actor_wg, critic_wg):
            if wg is not None:
                wg.shutdown()
        if nodes is not None:
            nodes.remove()
