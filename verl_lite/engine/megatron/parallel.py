"""The process-level set-up of a Megatron engine, before any model exists: the torch.distributed group
(a one-process group for a single-rank caller), the device, megatron's model-parallel groups and its
seeded RNG tracker; and what the engine reads back of those groups (data-parallel rank and size).

Used by `verl_lite.engine.megatron.engine`; megatron is imported inside the functions only (MindSpeed
must patch it first on Ascend).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from verl_lite.decisions.layout import Layout, groups_clash, span_problem
from verl_lite.device import DIST_BACKENDS, init_one_rank_group
from verl_lite.engine.megatron import cpu as megatron_cpu

logger = logging.getLogger(__name__)


def ensure_process_group(compute_device: str, role: str) -> None:
    """Megatron needs torch.distributed. A multi-rank caller sets it up; one rank gets its own."""
    if torch.distributed.is_initialized():
        return
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        raise RuntimeError(
            f"torch.distributed is not initialized but WORLD_SIZE={os.environ['WORLD_SIZE']}: the worker "
            "must call init_process_group (gloo on cpu) before MegatronLMEngine.initialize()"
        )
    backend = DIST_BACKENDS[compute_device]
    logger.info("%s: single-rank run, starting a one-process %s group", role, backend)
    init_one_rank_group(backend)


def prepare_device(compute_device: str) -> None:
    if compute_device == "cpu":
        megatron_cpu.enable()
    elif compute_device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    elif compute_device == "npu":
        torch.npu.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # type: ignore[attr-defined]
    else:
        raise ValueError(f"device {compute_device!r} is not one of cpu, cuda, npu")


def torch_device(compute_device: str) -> torch.device:
    if compute_device == "cpu":
        return torch.device("cpu")
    return torch.device(compute_device, int(os.environ.get("LOCAL_RANK", "0")))


def init_groups(layout: Layout, role: str, prefix: str) -> None:
    """Set up TP/PP/CP/EP groups unless this process already has them (actor and ref share).
    `prefix`: the role's megatron section (e.g. actor_rollout_ref.actor.megatron), for the message."""
    from megatron.core import parallel_state as mpu

    if mpu.model_parallel_is_initialized() and not _groups_alive(mpu):
        # their process group was destroyed since (e.g. by a vLLM engine's shutdown in this process): the
        # groups are stale and every use would fail; they are built again on the current group
        logger.info("%s: megatron's model parallel groups belong to a destroyed process group: rebuilding them", role)
        mpu.destroy_model_parallel()
    if mpu.model_parallel_is_initialized():
        have = Layout("megatron", layout.world, tp=mpu.get_tensor_model_parallel_world_size(),
                      pp=mpu.get_pipeline_model_parallel_world_size(), cp=mpu.get_context_parallel_world_size())
        clash = groups_clash(have, layout)
        if clash:
            raise ValueError(
                f"{role}: model parallel groups already exist with a different layout "
                f"(existing, wanted): {clash}; give every engine of one worker the same layout"
            )
        return
    world = torch.distributed.get_world_size()
    problem = span_problem(world, "TP*PP*CP", (layout.tp, layout.pp, layout.cp),
                           f"{prefix}.tensor/pipeline_model_parallel_size, context_parallel_size")
    if problem:
        raise ValueError(f"{role}: world size {world} {problem}; change the parallel sizes or the number of devices")
    mpu.initialize_model_parallel(**layout.megatron_kwargs())


def _groups_alive(mpu: Any) -> bool:
    """Whether megatron's model parallel groups are still registered with torch.distributed."""
    if not torch.distributed.is_initialized():
        return False
    try:
        torch.distributed.get_rank(group=mpu.get_pipeline_model_parallel_group())
    except (ValueError, RuntimeError):
        return False
    return True


def seed(compute_device: str, value: int) -> None:
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    if compute_device == "cpu":
        megatron_cpu.install_cpu_rng_tracker()
    model_parallel_cuda_manual_seed(int(value))


def data_parallel_rank() -> int:
    from megatron.core import parallel_state as mpu

    return mpu.get_data_parallel_rank() if mpu.model_parallel_is_initialized() else 0


def data_parallel_size() -> int:
    from megatron.core import parallel_state as mpu

    return mpu.get_data_parallel_world_size() if mpu.model_parallel_is_initialized() else 1


def is_data_parallel_leader() -> bool:
    from megatron.core import parallel_state as mpu

    if not mpu.model_parallel_is_initialized():
        return True
    return (
        mpu.get_tensor_model_parallel_rank() == 0
        and mpu.get_context_parallel_rank() == 0
        and mpu.is_pipeline_last_stage(ignore_virtual=True)
    )
