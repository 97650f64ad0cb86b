"""The fully-async run assembled for run.py's job (`async_training.enable=True`): the training pool
(a `TrainWorker` group) and the rollout pool (`RolloutPool`) on their node groups, the queue between
them (`ChunkBuffer`, on the driver's node), the checkpoint the job selected loaded, and the
`AsyncTrainer` over them fitted; everything started here is stopped on the way out."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

from verl_lite.decisions import async_pools, layout, placement
from verl_lite.trainer import tensor_transport
from verl_lite.trainer.async_buffer import ChunkBuffer
from verl_lite.trainer.async_run import AsyncTrainer
from verl_lite.trainer.async_workers import TrainWorker
from verl_lite.trainer.checkpoint import load_into_workers
from verl_lite.trainer.loop import StopRequest, total_steps
from verl_lite.trainer.placement import NodeGroups
from verl_lite.trainer.rollout_pool import RolloutPool
from verl_lite.trainer.worker_group import WorkerGroup

logger = logging.getLogger("verl_lite")


def fit_async(job: Any, typed_cfg: Any, tracking: Any, stop: StopRequest) -> List[Dict[str, Any]]:
    """The fully-async trainer for run.py's job: the training pool, the queue and the rollout pool,
    resumed from the checkpoint the job selected; returns the step history."""
    import ray

    cfg, t, d, actor_rollout_ref = job.cfg, job.cfg.trainer, job.cfg.data, job.cfg.actor_rollout_ref
    batch, n = async_pools.step_prompts(cfg), int(actor_rollout_ref.rollout.n)
    total = total_steps(cfg, len(job.train_set))
    streaming = async_pools.streaming(cfg)
    limit = (async_pools.total_rollout_prompts(cfg, len(job.train_set))
             if streaming or actor_rollout_ref.rollout.total_rollout_steps is not None else None)
    train, own = layout.train_pool(cfg), layout.rollout_pool(cfg)
    train_devices, replicas = train.world, layout.rollout_replicas(cfg)
    logger.info("fully-async: device=%s, training pool %d x %d (%s), rollout pool %d x %d -> %d %s replica(s), "
                "sync every %d step(s), staleness_threshold %s (%s)", job.device, train.nodes, train.per_node,
                actor_rollout_ref.actor.strategy, own.nodes, own.per_node, replicas, actor_rollout_ref.rollout.name,
                cfg.async_training.trigger_parameter_sync_step, cfg.async_training.staleness_threshold,
                cfg.async_training.stale_policy)
    train_wg = pool = buffer = None
    nodes: List[Any] = []
    try:
        # Each pool one placement group per node (decisions/placement.py): the training pool, then the
        # rollout pool in bundles of a replica's devices; a node holds a part of each when it has the devices.
        train_pool, rollout_pool = placement.async_pool_list(cfg)
        nodes.append(NodeGroups(train_pool, job.device, job.wait_nodes_s))
        nodes.append(NodeGroups(rollout_pool, job.device, job.wait_nodes_s,
                                per_bundle=layout.rollout_layout(cfg).engine_ranks))
        train_wg = WorkerGroup(TrainWorker, "trainer", typed_cfg, train_devices, job.device, True, job.threads,
                               call_timeout_s=job.call_timeout_s, placement=nodes[0])
        state: Dict[str, Any] = {}
        if job.resume is not None:
            path, state = job.resume
            load_into_workers(path, train_wg)
            logger.info("resumed from %s at step %d (prompts the rollouters had generated but not trained on are "
                        "skipped)", path, state["global_step"])
        chunk_groups = max(1, min(batch, int(actor_rollout_ref.rollout.micro_batch_size) // n))
        budget = async_pools.max_required_samples(cfg)  # verl's max_required_samples, also its max_queue_size
        resumed = {"sampler": state["sampler"], "pending": state.get("pending", [])} if state else None
        # verl deals one prompt at a time over whole epochs (gen_batch_size 1); with a batch, whole batches
        sampler_batch = 1 if streaming else batch
        # resumed: verl's rollouter counts the prompts trained on as dealt (fully_async_rollouter.py:712)
        dealt = int(state.get("global_step", 0)) * batch if state else 0
        # the queue lives on the driver's node: a lost worker node never takes it (and the run's state) along
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        buffer = ray.remote(tensor_transport.actor_class(ChunkBuffer)).options(num_cpus=0, max_restarts=0, scheduling_strategy=here).remote(
            len(job.train_set), sampler_batch, int(d.seed), bool(d.shuffle), budget, chunk_groups, resumed,
            budget, limit, dealt)
        logger.info("fully-async: %d prompt group(s) a step, at most %d started per weight version (verl's "
                    "max_required_samples), %s prompts in the run, %d step(s)", batch, budget,
                    "all" if limit is None else limit, total)
        val_examples = job.val_set.examples if job.val_set else []
        pool = RolloutPool(typed_cfg, replicas, job.device, job.threads, job.train_set.examples, val_examples,
                           job.call_timeout_s, placement=nodes[1])
        trainer = AsyncTrainer(cfg, train_wg, pool, buffer, tracking, job.out_dir, state, total, stop,
                               tokenizer=job.tokenizer)
        tracking.rewind(trainer.global_step if state else -1)  # steps logged after the checkpoint are redone
        trainer.publish()
        pool.start(buffer)
        if t.val_before_train and trainer.global_step == 0 and not stop.requested:
            with trainer.during("validating before step", 1):
                tracking.log(trainer.dumps.take_validation(0, pool.validate(0)), 0)
        return trainer.fit(progress=True)
    finally:
        if pool is not None:
            pool.shutdown(buffer)
        if buffer is not None:
            ray.kill(buffer, no_restart=True)
        if train_wg is not None:
            train_wg.shutdown()
        for n in nodes:
            n.remove()
