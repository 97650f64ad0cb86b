"""Workers: the actor+rollout+ref group and the critic group. Each worker is one rank.

Run as Ray actors (the default) or in-process (`trainer.ray=false`, for unit tests). Workers
build engines through the registry, so the same code serves fsdp/megatron on cpu/cuda/npu.

A worker takes the run's config as the `VerlLiteConfig` dataclass (it pickles, so it crosses Ray
typed) and hands its sections to the engines and the rollout as they are. A plain dict (the config
flattened with `OmegaConf.to_container`) or a DictConfig is accepted too and converted once with
`as_section(VerlLiteConfig, ...)`, the schema's defaults filling what it lacks.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from typing import Any, Dict, List, Optional

from verl_lite.batch import chunk
from verl_lite.config import roles
from verl_lite.config.schema import VerlLiteConfig
from verl_lite.config.sections import as_section
from verl_lite.data.tokenizer import load_tokenizer
from verl_lite.decisions.micro_batch import micro_batch_size
from verl_lite.device import DIST_BACKENDS
from verl_lite.registry import ROLLOUTS, load_engine
from verl_lite.rollout.metrics import RolloutGap
from verl_lite.trainer import dynamic_batch
from verl_lite.trainer.offload import OffloadPolicy, PhaseOwner
from verl_lite.trainer.placement import assigned_device_index
from verl_lite.trainer.profiling import RolloutReplica, WorkerProfiler
from verl_lite.trainer.update_loss import mini_batch_loss, policy_loss, value_loss
from verl_lite.trainer.update_metrics import mini_batch_metrics, per_mini_batch

logger = logging.getLogger(__name__)

# the model section's LoRA settings (engine/torch/lora.py)
LORA_KEYS = ("lora_rank", "lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")


def profiled_stage(name: str):
    """The method is the profiler stage `name` (decisions.profiling.STAGES) of a profiled step."""
    def decorate(method):
        @functools.wraps(method)
        def staged(self, *args, **kwargs):
            profiler = getattr(self, "_profiler", None)
            if profiler is None:
                return method(self, *args, **kwargs)
            with profiler.stage(name):
                return method(self, *args, **kwargs)
        return staged
    return decorate


def _setup_process(cfg: VerlLiteConfig, rank: int, world_size: int, master_addr: str, master_port: int, device: str,
                   threads: int, timeout_s: int = 600) -> None:
    """`timeout_s`: verl's nccl_timeout, how long a collective of the workers' process group may wait."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, threads))
    torch.manual_seed(int(cfg.trainer.seed) * 1000 + rank)
    local = assigned_device_index(device)
    if local is not None:
        # The device Ray gave this process, not the rank: rank 9 on a node of 8 opens its node's device 1
        # (or 0 of the one it sees), whatever Ray's visibility mode.
        os.environ["LOCAL_RANK"] = str(local)
        getattr(torch, device).set_device(local)
    if world_size > 1 and not dist.is_initialized():
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(rank),
                          WORLD_SIZE=str(world_size))
        os.environ.setdefault("LOCAL_RANK", str(rank))
        backend = DIST_BACKENDS[device]
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=int(timeout_s)))


class EngineWorker:
    """Shared plumbing: set up the rank's process, build an engine from the registry and run
    PPO-style updates on it."""

    def _init_process(self, cfg: VerlLiteConfig, rank: int, world_size: int, master_addr: str,
                      master_port: int, device: str, threads: int) -> VerlLiteConfig:
        """The config as a `VerlLiteConfig` (also `self.cfg`; a dict is converted), with seeds,
        threads and the process group set."""
        self.cfg = cfg = as_section(VerlLiteConfig, cfg)
        self.rank, self.world_size, self.device = rank, world_size, device
        _setup_process(cfg, rank, world_size, master_addr, master_port, device, threads, self._nccl_timeout(cfg))
        return cfg

    def _nccl_timeout(self, cfg: VerlLiteConfig) -> int:
        return int(cfg.actor_rollout_ref.nccl_timeout)

    def ready(self) -> bool:
        return True

    # The role whose profiler section this worker records with (the actor's: the actor, its rollout and
    # ref; the critic's), and verl's name of the worker in the trace files.
    PROFILED_ROLE = "actor"

    def _worker_name(self) -> str:
        return "critic"

    def start_profile(self, step: int) -> None:
        """Start recording before step `step` when this role and rank are profiled (trainer/profiling.py)."""
        if getattr(self, "_profiler", None) is None:
            rollout = getattr(self, "rollout", None)
            place = None
            if rollout is not None:  # the rollout replica this rank belongs to, and its engine's name of the rank
                size = int(rollout.replica_world_size())
                place = RolloutReplica(self.rank // size, size, rollout.trace_worker_name())
            self._profiler = WorkerProfiler(self.cfg, self.PROFILED_ROLE, self._worker_name(), self.rank, self.device,
                                            rollout=place)
        self._profiler.start(step)

    def stop_profile(self) -> List[str]:
        """Stop the recording start_profile began; the files (npu: directories) it wrote, [] when none."""
        profiler = getattr(self, "_profiler", None)
        return profiler.stop() if profiler is not None else []

    def _make_engine(self, model_cfg, engine_cfg, optim_cfg, role: str):
        cls = load_engine(self.cfg, role, self.device)
        engine = cls(model_cfg, engine_cfg, optim_cfg, self.device, role)
        if hasattr(engine, "ascend_stack_setting"):  # the MindSpeed engines: the Ascend stack the run names
            engine.ascend_stack_setting = str(self.cfg.trainer.ascend_stack)
        engine.initialize()
        # what the role's offload flags move off the device leaves it now (as verl, after the build)
        self.phases.add(engine, OffloadPolicy.of(engine_cfg, roles.strategy(self.cfg, role), role, self.device))
        return engine

    @property
    def phases(self):
        """The one owner of where this process's engines keep their tensors in each phase
        (`verl_lite.trainer.offload.PhaseOwner`), with the rollout's sleep and wake."""
        owner = self.__dict__.get("_phases")
        if owner is None:
            owner = self.__dict__["_phases"] = PhaseOwner()
        return owner

    def save_checkpoint(self, path: str) -> None:
        engine = self._main_engine()
        with self.phases.phase("checkpoint", engine.role):
            engine.save_checkpoint(os.path.join(path, engine.role))

    def load_checkpoint(self, path: str) -> None:
        engine = self._main_engine()
        with self.phases.phase("checkpoint", engine.role):
            engine.load_checkpoint(os.path.join(path, engine.role))

    def topology(self) -> Dict[str, Any]:
        engine = self._main_engine()
        return {"dp_rank": engine.data_parallel_rank(), "dp_size": engine.data_parallel_size(),
                "leader": engine.is_data_parallel_leader()}

    def _token_budget(self, role: str, training: bool) -> Optional[int]:
        """The role's token budget per micro-batch when its dynamic batch size is on, else None: training
        reads use_dynamic_bsz / ppo_max_token_len_per_gpu (actor, critic), the log-prob passes the rollout's
        (actor) or the ref's log_prob_use_dynamic_bsz / log_prob_max_token_len_per_gpu; the critic's value
        pass uses its ppo budget (verl's forward_max_token_len_per_gpu default)."""
        arr = self.cfg.actor_rollout_ref
        if role == "critic":
            critic = self.cfg.critic
            return int(critic.ppo_max_token_len_per_gpu) if critic.use_dynamic_bsz else None
        if training:
            return int(arr.actor.ppo_max_token_len_per_gpu) if arr.actor.use_dynamic_bsz else None
        section = arr.ref if role == "ref" else arr.rollout
        return int(section.log_prob_max_token_len_per_gpu) if section.log_prob_use_dynamic_bsz else None

    def _update(self, engine, batch: Dict[str, Any], meta: Dict[str, Any], make_loss, epochs: int,
                micro_bsz: int, calculate_entropy: bool) -> Dict[str, List[float]]:
        with self.phases.phase("update", engine.role):
            result = self._update_steps(engine, batch, meta, make_loss, epochs, micro_bsz, calculate_entropy)
            # as verl's train mode on exit: no gradients are kept between updates (nothing to offload)
            engine.optimizer_zero_grad()
            return result

    def _update_steps(self, engine, batch: Dict[str, Any], meta: Dict[str, Any], make_loss, epochs: int,
                      micro_bsz: int, calculate_entropy: bool) -> Dict[str, List[float]]:
        engine.train_mode()
        per_mini: List[Dict[str, float]] = []
        for _ in range(epochs):
            for j, mini in enumerate(chunk(batch, meta["num_mini_batches"])):
                engine.optimizer_zero_grad()
                micro = dynamic_batch.engine_micro_batches(engine, mini, micro_bsz,
                                                           self._token_budget(engine.role, training=True))
                outs = engine.forward_backward(micro.parts, mini_batch_loss(make_loss, meta, j, micro),
                                               calculate_entropy=calculate_entropy)
                m = mini_batch_metrics(outs)
                m[f"{engine.role}/grad_norm"] = engine.optimizer_step()
                per_mini.append(m)
        lr = engine.lr_scheduler_step()
        engine.eval_mode()
        out = per_mini_batch(per_mini)
        out[f"{engine.role}/lr"] = [lr]
        return out


class ActorRolloutRefWorker(EngineWorker):
    """One rank of the synchronous run's actor group: the actor's engine (trained), the ref's engine
    when a KL term needs one (with LoRA the actor with its adapters off), and this rank's rollout,
    which takes the actor's weights after every update (`sync_rollout_weights`). run.py's `_fit_sync`
    builds the group through a `WorkerGroup`, which calls its methods on every rank: generate (with
    the old and ref log-prob passes in the same call), score log-probs, update the actor (the loss:
    `update_loss.policy_loss`), checkpoint, profile. `async_workers.TrainWorker` is it without a rollout."""

    def __init__(self, cfg: VerlLiteConfig, rank: int, world_size: int, master_addr: str = "127.0.0.1",
                 master_port: int = 29500, device: str = "cpu", threads: int = 1):
        cfg = self._init_process(cfg, rank, world_size, master_addr, master_port, device, threads)
        model_cfg, actor_cfg = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
        self.tokenizer = load_tokenizer(model_cfg.tokenizer_path or model_cfg.path, model_cfg.trust_remote_code)
        self.actor = self._make_engine(model_cfg, actor_cfg, actor_cfg.optim, "actor")
        self.ref = None
        if roles.ref_enabled(cfg) and not roles.ref_in_actor(cfg):
            self.ref = self._make_engine(model_cfg, cfg.actor_rollout_ref.ref, None, "ref")
        # Sampling draws from torch's generator: the ranks of one model-parallel group (one data-parallel
        # rank) get the same prompts and must draw the same responses, or the TP/PP ranks would score and
        # train on different sequences together. Seeded per data-parallel rank, not per process.
        import torch

        torch.manual_seed(int(cfg.trainer.seed) * 1000 + self.actor.data_parallel_rank())
        rollout_cfg = cfg.actor_rollout_ref.rollout
        self.rollout = ROLLOUTS.load(rollout_cfg.name)(model_cfg, rollout_cfg, self.tokenizer, device)
        self.phases.attach_rollout(self.rollout)
        self.weight_version = 0
        self.sync_rollout_weights(0)

    def _main_engine(self):
        return self.actor

    def _worker_name(self) -> str:
        return "actor_rollout_ref" if roles.ref_enabled(self.cfg) else "actor_rollout"

    def sync_rollout_weights(self, version: int) -> int:
        """Stream the actor's weights into this rank's rollout, one tensor at a time (a collective)."""
        self.weight_version = version
        with self.phases.phase("sync", "actor"):
            return self.rollout.update_weights(self.actor.export_hf_weights(), version)

    def generate_sequences(self, prompts: Dict[str, Any], response_length: int, sampling: Dict[str, Any],
                           log_probs: bool = False, ref_log_probs: bool = False) -> Dict[str, Any]:
        """Sample responses. With `log_probs` / `ref_log_probs` the actor / ref also score them here,
        in the same call, which spares the driver a round trip per pass. `timing_s` holds this rank's
        seconds for generation (`gen`) and the scoring passes (`old_log_prob`), and the CPU seconds
        of the thread that generated (`gen_cpu`: comparable across runs on a loaded machine)."""
        t, c = time.perf_counter(), time.thread_time()
        with self.phases.phase("rollout"):
            out = self._generate(prompts, response_length, sampling)
        timing = {"gen": time.perf_counter() - t, "old_log_prob": 0.0, "gen_cpu": time.thread_time() - c}
        if log_probs or ref_log_probs:
            t = time.perf_counter()
            scored = dict(out, temperature=float(sampling.get("temperature", 1.0)))
            if log_probs:
                out.update(self.compute_log_prob(scored))
            if ref_log_probs:
                out.update(self.compute_ref_log_prob(scored))
            timing["old_log_prob"] = time.perf_counter() - t
        out["timing_s"] = timing
        return out

    @profiled_stage("generate_sequences")
    def _generate(self, prompts: Dict[str, Any], response_length: int, sampling: Dict[str, Any]) -> Dict[str, Any]:
        return self.rollout.generate(prompts, response_length, sampling)

    def _log_probs(self, engine, batch: Dict[str, Any], key: str, entropy: bool = False,
                   micro: Optional[int] = None, budget_role: Optional[str] = None,
                   sum_pi_squared: bool = False) -> Dict[str, Any]:
        """`budget_role`: whose token budget cuts the micro-batches (the ref's, for the ref pass run on the
        actor's engine with LoRA); the engine's role by default. `sum_pi_squared`: also verl's
        sum_pi_squared (actor.calculate_sum_pi_squared), (B, R)."""
        section = self.cfg.actor_rollout_ref
        micro = micro_batch_size(micro, section.rollout.log_prob_micro_batch_size_per_gpu,
                                 section.actor.ppo_micro_batch_size_per_gpu)
        engine.eval_mode()
        parts = dynamic_batch.engine_micro_batches(engine, batch, int(micro),
                                                   self._token_budget(budget_role or engine.role, training=False))
        with self.phases.phase("forward", engine.role):
            outs = engine.forward_backward(parts.parts, None, forward_only=True,
                                           calculate_entropy=entropy,
                                           **({"calculate_sum_pi_squared": True} if sum_pi_squared else {}))
        res = {key: parts.gather(outs, "log_probs")}
        if entropy:
            res["entropy"] = parts.gather(outs, "entropy")
        if sum_pi_squared:
            res["sum_pi_squared"] = parts.gather(outs, "sum_pi_squared")
        return res

    @profiled_stage("actor_compute_log_prob")
    def compute_log_prob(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        return self._log_probs(self.actor, batch, "old_log_probs", entropy=True,
                               sum_pi_squared=bool(self.cfg.actor_rollout_ref.actor.calculate_sum_pi_squared))

    @profiled_stage("ref_compute_log_prob")
    def compute_ref_log_prob(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        micro = self.cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
        if self.ref is None and roles.ref_enabled(self.cfg) and roles.ref_in_actor(self.cfg):
            with self.actor.disable_adapter():  # LoRA: the ref is the base model (verl's ref in the actor)
                return self._log_probs(self.actor, batch, "ref_log_prob", micro=micro, budget_role="ref")
        if self.ref is None:
            raise RuntimeError("compute_ref_log_prob called but no ref model was built (the ref runs only with "
                               "actor_rollout_ref.actor.use_kl_loss=True or algorithm.use_kl_in_reward=True)")
        # the ref's own micro-batch when set (verl's ref.log_prob_micro_batch_size_per_gpu), else the actor's
        return self._log_probs(self.ref, batch, "ref_log_prob", micro=micro)

    @profiled_stage("actor_update")
    def update_actor(self, batch: Dict[str, Any], meta: Dict[str, Any]) -> Dict[str, List[float]]:
        """PPO update of the actor on this rank's shard. Optional `meta` keys:
        - `on_policy`: the batch is trained once, in one mini-batch (ppo_epochs=1), so the policy that
          sampled it is the one being updated: the old log-probs are this forward's own, detached (as
          verl's dp_actor does), and `batch` needs no `old_log_probs`. `actor/entropy` is measured here.
        - `sync_weights_version`: push the updated weights to the rollout before returning.
        `perf/cpu_s/update_actor`: this thread's CPU seconds for the update and the sync."""
        cpu = time.thread_time()
        actor = self.cfg.actor_rollout_ref.actor
        on_policy = bool(meta.get("on_policy", False))
        if on_policy and (meta["num_mini_batches"] != 1 or int(actor.ppo_epochs) != 1):
            raise ValueError(f"update_actor: on_policy needs one mini-batch and ppo_epochs=1, got "
                             f"{meta['num_mini_batches']} mini-batches and ppo_epochs={actor.ppo_epochs} "
                             f"(send old_log_probs instead)")

        correction = self.cfg.algorithm.rollout_correction
        # bypass mode's batch normalisation: over this micro-batch index on every data-parallel rank
        dp_group = self.actor.data_parallel_group() if correction.bypass_mode else None
        gap = RolloutGap(batch, on_policy)  # training-vs-rollout probabilities, when the rollout sent its own
        make_loss = policy_loss(actor, correction, on_policy, meta["dp_size"], dp_group, gap)
        micro = micro_batch_size(actor.ppo_micro_batch_size_per_gpu, actor.ppo_micro_batch_size)
        result = self._update(self.actor, batch, meta, make_loss, actor.ppo_epochs, int(micro),
                              calculate_entropy=actor.entropy_coeff != 0 or on_policy)
        result.update(gap.metrics())
        if meta.get("sync_weights_version") is not None:
            self.sync_rollout_weights(int(meta["sync_weights_version"]))
        result["perf/cpu_s/update_actor"] = [time.thread_time() - cpu]
        return result

    def actor_state_dict(self) -> Dict[str, Any]:
        """Full actor weights on CPU (HF names), all at once, for tests and inspection (a collective)."""
        with self.phases.phase("sync", "actor"):
            return dict(self.actor.export_hf_weights())

    def load_checkpoint(self, path: str) -> None:
        super().load_checkpoint(path)
        self.sync_rollout_weights(self.weight_version)


class CriticWorker(EngineWorker):
    PROFILED_ROLE = "critic"

    def _nccl_timeout(self, cfg: VerlLiteConfig) -> int:
        return int(cfg.critic.nccl_timeout)

    def __init__(self, cfg: VerlLiteConfig, rank: int, world_size: int, master_addr: str = "127.0.0.1",
                 master_port: int = 29501, device: str = "cpu", threads: int = 1):
        cfg = self._init_process(cfg, rank, world_size, master_addr, master_port, device, threads)

        critic = cfg.critic
        # An empty critic.model.path means the actor's model (roles.model_path reads it the same way).
        model_cfg = critic.model if roles.model_path(cfg, "critic") == critic.model.path else cfg.actor_rollout_ref.model
        if model_cfg is not critic.model:  # the critic's LoRA is critic.model's own, as in verl, not the actor's
            model_cfg = dataclasses.replace(model_cfg, **{k: getattr(critic.model, k) for k in LORA_KEYS})
        self.critic = self._make_engine(model_cfg, critic, critic.optim, "critic")

    def _main_engine(self):
        return self.critic

    @profiled_stage("critic_compute_values")
    def compute_values(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        micro = micro_batch_size(self.cfg.critic.ppo_micro_batch_size_per_gpu)
        self.critic.eval_mode()
        parts = dynamic_batch.engine_micro_batches(self.critic, batch, int(micro),
                                                   self._token_budget("critic", training=False))
        with self.phases.phase("forward", "critic"):
            outs = self.critic.forward_backward(parts.parts, None, forward_only=True)
        return {"values": parts.gather(outs, "values")}

    @profiled_stage("critic_update")
    def update_critic(self, batch: Dict[str, Any], meta: Dict[str, Any]) -> Dict[str, List[float]]:
        critic = self.cfg.critic
        epochs = critic.ppo_epochs or self.cfg.actor_rollout_ref.actor.ppo_epochs
        micro = micro_batch_size(critic.ppo_micro_batch_size_per_gpu)
        return self._update(self.critic, batch, meta, value_loss(critic, meta["dp_size"]), int(epochs), micro,
                            calculate_entropy=False)
