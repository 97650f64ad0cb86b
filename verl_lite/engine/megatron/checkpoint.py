"""Checkpoints of the Megatron engines: what `checkpoint.save_contents` / `load_contents` list.

- model, optimizer, extra: one file per TP/PP rank (`<role>_tpXX_ppYY.pt`), written by data-parallel
  rank 0; the model chunks' state dicts, the optimizer's state dict, the LR schedule and RNG state
  ("extra"). megatron's distributed optimizer (cuda/npu) keeps its Adam moments and fp32 main params
  out of its state dict: they go to `<role>_optim_param_state_rankNNNNN.pt` through megatron's
  save_parameter_state / load_parameter_state (gathered to and scattered from data-parallel rank 0).
  These files are cut for the engine and parallel layout that wrote them (`contents.json` records
  both): a resume with another is refused, naming the saved and the current sizes (before Ray
  starts, by trainer/checkpoint.select_checkpoint, and again here).
- hf_model: `huggingface/`, the HF model from the engine's export stream (engine/hf_export.py).
  A resume whose load_contents has hf_model and not model loads the weights from it through the
  bridge, as the initial weights are loaded: any parallel layout reads it.

Megatron is imported inside the functions only (MindSpeed patches it first on npu).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import torch

from verl_lite.checkpoint_files import CheckpointError, load_tensors
from verl_lite.decisions.layout import Layout
from verl_lite.engine import hf_export
from verl_lite.engine.megatron import hf as megatron_hf
from verl_lite.engine.megatron import model as megatron_model


def layout(engine: Any) -> Dict[str, Any]:
    """The parallel sizes that cut the per-rank files (and the data-parallel size, which the
    distributed optimizer's state is sharded over)."""
    from megatron.core import parallel_state as mpu

    groups = Layout("megatron", torch.distributed.get_world_size(), tp=mpu.get_tensor_model_parallel_world_size(),
                    pp=mpu.get_pipeline_model_parallel_world_size(), vpp=len(engine.model),
                    ep=mpu.get_expert_model_parallel_world_size(), etp=mpu.get_expert_tensor_parallel_world_size())
    return groups.checkpoint_sizes(mpu.get_data_parallel_world_size() if _distributed_optimizer(engine) else None)


def _distributed_optimizer(engine: Any) -> bool:
    """megatron's DistributedOptimizer (alone or inside a ChainedOptimizer): its state_dict() leaves out
    the Adam moments and fp32 main params, which are sharded over data parallelism."""
    if engine.optimizer is None:
        return False
    inner = getattr(engine.optimizer, "chained_optimizers", [engine.optimizer])
    return any(type(o).__name__ == "DistributedOptimizer" for o in inner)


def _param_state_file(engine: Any, path: str) -> str:
    """The distributed optimizer's parameter state, written by each data-parallel group's rank 0 (one
    file per global rank: dense and expert data-parallel groups differ in their rank 0)."""
    return os.path.join(path, f"{engine.role}_optim_param_state_rank{torch.distributed.get_rank():05d}.pt")


def save_hf_model(engine: Any, path: str, strict: bool = True) -> Optional[str]:
    """The engine's weights as an HF model dir (a collective: every rank streams the export)."""
    mc = engine.model_config
    return hf_export.save_hf_model(path, engine.export_hf_weights(), engine.hf_config, engine.model_type,
                                   mc.tokenizer_path or mc.path, bool(mc.trust_remote_code), strict, engine.role,
                                   model_dir=engine._model_dir())


def shard_file(role: str, path: str) -> str:
    """This TP/PP rank's file of the role's checkpoint in `path`."""
    from megatron.core import parallel_state as mpu

    tag = f"tp{mpu.get_tensor_model_parallel_rank():02d}_pp{mpu.get_pipeline_model_parallel_rank():02d}"
    return os.path.join(path, f"{role}_{tag}.pt")


def rng_state(compute_device: str) -> Dict[str, Any]:
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    state = {"cpu": torch.get_rng_state(), "tracker": dict(get_cuda_rng_tracker().get_states())}
    if compute_device == "cuda":
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def save(engine: Any, path: str) -> None:
    contents = hf_export.Contents(getattr(engine.engine_config, "checkpoint", None), engine.role)
    os.makedirs(path, exist_ok=True)
    if "hf_model" in contents.save:
        save_hf_model(engine, os.path.join(path, hf_export.HF_DIR), contents.strict)
    if engine.data_parallel_rank() == 0 and contents.save & {"model", "optimizer", "extra"}:
        state: Dict[str, Any] = {}
        if "model" in contents.save:
            state["model"] = [
                {k: v for k, v in megatron_model.unwrap(c).state_dict().items() if isinstance(v, torch.Tensor)}
                for c in engine.model
            ]
        if "extra" in contents.save:
            state["rng"] = rng_state(engine.compute_device)
        if engine.optimizer is not None:
            if "optimizer" in contents.save:
                state["optimizer"] = engine.optimizer.state_dict()
            if "extra" in contents.save:
                state["lr_scheduler"] = engine.lr_scheduler.state_dict()
        torch.save(state, shard_file(engine.role, path))
    if "optimizer" in contents.save and _distributed_optimizer(engine):
        # megatron's own dp-zero format: gathered over data parallelism, written on its rank 0 (a collective)
        engine.optimizer.save_parameter_state(_param_state_file(engine, path))
    if hf_export.is_writer():
        hf_export.write_contents(path, contents.save, layout(engine))
    torch.distributed.barrier()


def load(engine: Any, path: str) -> None:
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    contents = hf_export.Contents(getattr(engine.engine_config, "checkpoint", None), engine.role)
    hf_export.check_loadable(path, contents, engine.role, layout(engine))
    weights = contents.weights_from()
    from_files: List[str] = [p for p in ("model", "optimizer", "extra") if p in contents.load]
    state: Dict[str, Any] = {}
    if from_files:
        file = shard_file(engine.role, path)
        if not os.path.isfile(file):
            raise CheckpointError(f"the {engine.role} checkpoint {path} has no {os.path.basename(file)} (written by "
                                  "another parallel layout?); resume with the layout that saved it")
        state = load_tensors(file)
    if weights == "model":
        for chunk, chunk_weights in zip(engine.model, state["model"]):
            missing, unexpected = megatron_model.unwrap(chunk).load_state_dict(chunk_weights, strict=False)
            missing = [k for k in missing if not k.endswith("_extra_state")]
            if missing or unexpected:
                raise CheckpointError(f"checkpoint {path} does not fit the {engine.role} model: missing {missing}, "
                                      f"unexpected {unexpected}")
    elif weights == "hf_model":
        if engine.external is not None:
            raise CheckpointError(f"{contents.prefix}.load_contents has hf_model, but loading the HF copy through "
                                  f"Megatron-Bridge / mbridge is not supported by verl_lite yet; load model instead "
                                  "(with the layout that saved it)")
        source = megatron_hf.SafetensorsSource(hf_export.hf_files(path))
        megatron_hf.load_hf_weights(engine._local_params(), engine.bridge, engine.layout, source)
    if weights is not None and engine.optimizer is not None and hasattr(engine.optimizer, "reload_model_params"):
        engine.optimizer.reload_model_params()  # the fp32 main params follow the loaded weights
    if engine.optimizer is not None and "optimizer" in contents.load and "optimizer" in state:
        engine.optimizer.load_state_dict(state["optimizer"])
        if _distributed_optimizer(engine):  # the moments and main params (load_state_dict left placeholders)
            engine.optimizer.load_parameter_state(_param_state_file(engine, path))
    if "extra" in contents.load:
        if engine.optimizer is not None and "lr_scheduler" in state:
            engine.lr_scheduler.load_state_dict(state["lr_scheduler"])
        rng = state["rng"]
        torch.set_rng_state(rng["cpu"])
        get_cuda_rng_tracker().set_states(rng["tracker"])
        if "cuda" in rng and engine.compute_device == "cuda":
            torch.cuda.set_rng_state(rng["cuda"])
