"""HF weights into and out of an engine's Megatron chunks, through the model's bridge.

In: the HF tensors of a checkpoint's *.safetensors (`SafetensorsSource`, read one by one) or of a
randomly initialised HF model (`random_hf_state`, seeded like the torch engine, so every layout
starts from the same weights), cut into this rank's shards (`load_hf_weights`).
Out: this pipeline stage's parameters as full HF tensors, gathered across TP one at a time
(`stage_hf_tensors`), and the stream over all stages (`stream_over_pipeline`).

Megatron is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from verl_lite.engine.megatron.bridges import ModelShard, ModelBridge
from verl_lite.engine.megatron.model import unwrap

HFSource = Callable[[str], torch.Tensor]
# (megatron parameter name as the bridge knows it, parameter, layer offset of its chunk)
LocalParam = Tuple[str, torch.nn.Parameter, int]


class SafetensorsSource:
    """HF tensors read one by one from a directory's *.safetensors files."""

    def __init__(self, files: List[str]):
        from safetensors import safe_open

        self._file_of: Dict[str, str] = {}
        for path in files:
            with safe_open(path, framework="pt") as f:
                for key in f.keys():
                    self._file_of[key] = path

    def __contains__(self, name: str) -> bool:
        return name in self._file_of

    def __call__(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        if name not in self._file_of:
            raise KeyError(f"{name} is not in the checkpoint")
        with safe_open(self._file_of[name], framework="pt") as f:
            return f.get_tensor(name)


def random_hf_state(model_class: Any, hf_config: Any, seed: int) -> HFSource:
    """Weights of an HF model built from the config with `seed` (the same on every rank)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # an Auto class (from_config) or a model class (_from_config: a vision-language bridge names it)
        build = getattr(model_class, "from_config", None) or model_class._from_config
        hf_model = build(hf_config, dtype=torch.float32)
    state = {k: v.detach() for k, v in hf_model.state_dict().items()}
    del hf_model
    return state.__getitem__


def _layer_offset(module: Any) -> int:
    layers = getattr(getattr(module, "decoder", None), "layers", None)
    return int(layers[0].layer_number) - 1 if layers is not None and len(layers) else 0


def local_params(chunks: List[Any], mapping_name: Callable[[str], str]) -> Iterator[LocalParam]:
    """This rank's parameters, named for the bridge (`mapping_name`: the value head's rename)."""
    for chunk in chunks:
        module = unwrap(chunk)
        offset = _layer_offset(module)
        for name, param in module.named_parameters():
            yield mapping_name(name), param, offset


def load_hf_weights(params: Iterator[LocalParam], bridge: ModelBridge, layout: ModelShard, source: HFSource) -> None:
    with torch.no_grad():
        for name, param, offset in params:
            shard = bridge.hf_to_megatron(name, layout, source, offset)
            if tuple(shard.shape) != tuple(param.shape):
                raise ValueError(f"{name}: HF weights give shape {tuple(shard.shape)}, model has {tuple(param.shape)}")
            param.copy_(shard.to(param.dtype))
    bridge.finish_load()


def stage_hf_tensors(params: Iterator[LocalParam], bridge: ModelBridge, layout: ModelShard,
                     skip_output_layer: bool) -> Iterator[Tuple[str, torch.Tensor]]:
    """(HF name, full tensor) for the parameters on this pipeline stage, each gathered across TP as
    it is reached (a collective within the TP group). `skip_output_layer`: tied embeddings, where
    the last stage's output layer is a copy of the embedding.

    Routed experts (shards marked with an `ExpertPiece`) are gathered over expert TP, stacked per
    HF name until this rank's experts are all there, then gathered over expert parallelism into
    one [num_experts, ...] tensor (a collective within the EP group)."""
    from megatron.core import parallel_state as mpu

    tp = mpu.get_tensor_model_parallel_world_size()
    group = mpu.get_tensor_model_parallel_group()
    pending: Dict[str, Dict[int, torch.Tensor]] = {}

    def gather(shard: torch.Tensor, dim: Optional[int], size: int, grp: Any) -> torch.Tensor:
        if dim is None or size == 1:
            return shard
        parts = [torch.empty_like(shard) for _ in range(size)]
        torch.distributed.all_gather(parts, shard.contiguous(), group=grp)
        return torch.cat(parts, dim=dim)

    for name, param, offset in params:
        if skip_output_layer and name == "output_layer.weight":
            continue
        for item in bridge.megatron_to_hf(name, param.detach(), layout, offset):
            if len(item) == 3:
                hf_name, shard, dim = item
                yield hf_name, bridge.finish_hf_tensor(hf_name, gather(shard, dim, tp, group), layout)
                continue
            hf_name, shard, dim, piece = item
            full = gather(shard, dim, mpu.get_expert_tensor_parallel_world_size(),
                          mpu.get_expert_tensor_parallel_group())
            local = pending.setdefault(hf_name, {})
            local[piece.local_index] = full
            if len(local) < piece.local_count:
                continue
            del pending[hf_name]
            stacked = torch.stack([local[i] for i in range(piece.local_count)])
            stacked = gather(stacked, 0, mpu.get_expert_model_parallel_world_size(),
                             mpu.get_expert_model_parallel_group())
            yield hf_name, bridge.finish_hf_tensor(hf_name, stacked, layout)
    if pending:
        raise RuntimeError(f"expert tensors left incomplete on this rank: {sorted(pending)}")


def stream_over_pipeline(stage_tensors: Callable[[], Iterator[Tuple[str, torch.Tensor]]], tied_head: bool,
                         device: torch.device) -> Iterator[Tuple[str, torch.Tensor]]:
    """Every stage's HF tensors on every rank, on CPU, one at a time. With PP > 1 the stages take
    turns, each broadcasting its tensors one by one to the others (name, shape and dtype first,
    then the tensor), so no rank holds more than one exported tensor. `tied_head`: the LM head is
    the embedding, yielded again as `lm_head.weight`."""
    from megatron.core import parallel_state as mpu

    def with_tied_head(hf_name: str, tensor: torch.Tensor) -> Iterator[Tuple[str, torch.Tensor]]:
        yield hf_name, tensor
        if tied_head and hf_name == "model.embed_tokens.weight":
            yield "lm_head.weight", tensor

    if mpu.get_pipeline_model_parallel_world_size() == 1:
        for hf_name, tensor in stage_tensors():
            yield from with_tied_head(hf_name, tensor.to("cpu", copy=True))  # never alias a live parameter
        return
    group = mpu.get_pipeline_model_parallel_group()
    my_stage = mpu.get_pipeline_model_parallel_rank()
    for stage, src in enumerate(torch.distributed.get_process_group_ranks(group)):
        mine = stage_tensors() if stage == my_stage else iter(())
        while True:
            item = next(mine, None)
            meta = [None if item is None else (item[0], tuple(item[1].shape), item[1].dtype)]
            torch.distributed.broadcast_object_list(meta, src=src, group=group)
            if meta[0] is None:  # the stage has sent all its tensors
                break
            hf_name, shape, dtype = meta[0]
            data = item[1].contiguous() if stage == my_stage else torch.empty(shape, dtype=dtype, device=device)
            torch.distributed.broadcast(data, src=src, group=group)
            yield from with_tied_head(hf_name, data.to("cpu", copy=True))
