"""Building the Megatron model of an engine: the `TransformerConfig` (the bridge's architecture
fields, the parallel layout, the user's `override_transformer_config`), the GPT model chunks (one
per virtual pipeline stage) and their DDP wrapping for training.

Used by `verl_lite.engine.megatron.engine`; megatron is imported inside the functions only (MindSpeed
must patch it first on Ascend).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from typing import Any, Callable, Dict, List, Optional

import torch

from verl_lite.decisions.bridge_choice import ascend_gdn_problem, fla_importable, gdn_kernel
from verl_lite.decisions.layout import moe_sequence_parallel_problem, sequence_parallel_on
from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron import cpu as megatron_cpu
from verl_lite.engine.megatron.bridges import ModelShard, ModelBridge
from verl_lite.engine.megatron.bridges.base import hf_field
from verl_lite.engine.megatron import gdn as megatron_gdn
from verl_lite.engine.megatron.gdn import fla_installed

logger = logging.getLogger(__name__)


def transformer_config(bridge: ModelBridge, parallel_sizes: Dict[str, Any], dtype: torch.dtype,
                       overrides: Dict[str, Any], sequence_parallel: bool, compute_device: str, role: str,
                       device: Optional[str] = None, gdn_chunk_size: Optional[int] = None) -> Any:
    """The TransformerConfig: the bridge's fields, then the parallel sizes and fixed settings, then
    the overrides. `sequence_parallel` (megatron.sequence_parallel) is passed on when TP > 1; the
    batch's sequence length is then padded to a multiple of TP (`batch.prepare_batch`).
    Overrides megatron does not define are set as attributes afterwards (e.g.
    `use_ascend_gdn` / `use_triton_gdn`). For a model with Gated DeltaNet layers `gdn_kernel` is
    set from those two switches and the run's `device` (the engine's device: npu for MindSpeed
    engines even when tests run their internals on CPU; defaults to `compute_device`), and
    `gdn_chunk_size` (model.linear_attention_chunk_size: the torch rule's chunk, None = by length)."""
    from megatron.core.transformer import TransformerConfig

    kwargs = bridge.transformer_config_kwargs()
    kwargs.update(parallel_sizes)
    kwargs.update(
        activation_func=torch.nn.functional.silu,
        # at TP=1 sequence parallelism splits nothing: megatron gets it only with TP > 1
        sequence_parallel=sequence_parallel_on(sequence_parallel, parallel_sizes),
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        perform_initialization=False,  # weights always come from an HF source
    )
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    kwargs.update({k: v for k, v in overrides.items() if k in fields})
    if compute_device == "cpu":
        kwargs = megatron_cpu.cpu_settings(kwargs)
    config = TransformerConfig(**kwargs)
    for key, value in overrides.items():
        if key not in fields:
            setattr(config, key, value)
    if kwargs.get("experimental_attention_variant") == "gated_delta_net":
        if gdn_chunk_size is not None and int(gdn_chunk_size) < 1:
            raise ValueError(f"linear_attention_chunk_size={gdn_chunk_size!r} must be a positive integer or null (auto)")
        config.gdn_chunk_size = None if gdn_chunk_size is None else int(gdn_chunk_size)
        switches = {k: getattr(config, k, None) for k in ("use_triton_gdn", "use_ascend_gdn")}
        problem = ascend_gdn_problem(device or compute_device, switches)
        if problem:
            raise ValueError(problem)
        # on npu the fla name always imports (MindSpeed stands it in): the MindSpeed engines then say which
        # kernel it is and whether MindSpeed's own GatedDeltaNet replaces the layer (`configure_gdn`)
        config.gdn_kernel = gdn_kernel(device or compute_device, switches,
                                       have_fla=fla_importable(device or compute_device, fla_installed()))
        config.gdn_layer = "verl_lite"
        logger.info("%s: Gated DeltaNet kernel %r (use_triton_gdn=%s, use_ascend_gdn=%s, device %s)", role,
                    config.gdn_kernel, getattr(config, "use_triton_gdn", None), getattr(config, "use_ascend_gdn", None),
                    device or compute_device)
    return config


def transformer_engine_attention() -> Any:
    """megatron's Transformer Engine attention (`TEDotProductAttention`, THD input with cu_seqlens), or
    None where Transformer Engine does not import."""
    try:
        from megatron.core.extensions.transformer_engine import TEDotProductAttention
    except Exception:  # ImportError, or TE without its CUDA libraries
        return None
    return TEDotProductAttention


def packed_core_attention(compute_device: str) -> Any:
    """The core attention of packed (THD) micro-batches: megatron's local DotProductAttention refuses
    packed_seq_params. cpu: a per-sequence attention (megatron/cpu.py, cpu only); cuda: Transformer
    Engine's, as in megatron's TE layer spec; npu: None (megatron's DotProductAttention stays: MindSpeed's
    flash attention replaces its forward and takes packed TND input)."""
    if compute_device == "cpu":
        return megatron_cpu.packed_core_attention_class()
    if compute_device == "cuda":
        te = transformer_engine_attention()
        if te is None:
            raise ImportError("packed micro-batches on cuda need Transformer Engine's attention (THD), which does not "
                              "import: install transformer-engine or set model.use_remove_padding=False")
        return te
    return None


def with_core_attention(spec: Any, core_attention: Any) -> Any:
    """A copy of a layer or block spec whose attention layers use `core_attention` (GDN layers have none)."""
    spec = copy.deepcopy(spec)
    layers = getattr(spec, "layer_specs", None)
    for layer in layers if layers is not None else [spec]:
        attention = getattr(getattr(layer, "submodules", None), "self_attention", None)
        sub = getattr(attention, "submodules", None)
        if sub is not None and hasattr(sub, "core_attention"):
            sub.core_attention = core_attention
    return spec


def build_chunks(tf_config: Any, bridge: ModelBridge, layout: ModelShard, device: torch.device, compute_device: str,
                 share_embeddings: bool, attach_head: Callable[[Any], None], packed_attention: bool = False) -> List[Any]:
    """One GPTModel per virtual pipeline stage of this rank, on `device`; `attach_head(module)` runs
    on the chunk holding the last stage (the value engine puts its scalar head there).
    `packed_attention`: the micro-batches will be packed (THD), so attention layers get a core
    attention that takes them (`packed_core_attention`)."""
    from megatron.core import parallel_state as mpu
    from megatron.core.models.gpt import GPTModel

    vpp = mpu.get_virtual_pipeline_model_parallel_world_size()
    build = contextlib.nullcontext
    if compute_device == "cpu":
        build = megatron_cpu.model_build
    chunks = []
    for stage in range(vpp or 1):
        vp_stage = stage if vpp else None
        spec = bridge.model_spec(tf_config, vp_stage)
        core = packed_core_attention(compute_device) if packed_attention else None
        if core is not None:
            spec = with_core_attention(spec, core)
        with build():
            module = GPTModel(
                config=tf_config,
                transformer_layer_spec=spec,
                vocab_size=layout.padded_vocab,
                pre_process=mpu.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                post_process=mpu.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
                parallel_output=True,
                share_embeddings_and_output_weights=share_embeddings,
                vp_stage=vp_stage,
                **bridge.gpt_model_kwargs(),
            )
            bridge.finish_chunk(module, tf_config)
            megatron_gdn.mask_padding(module, tf_config)  # MindSpeed's GatedDeltaNet ignores the mask
        if module.post_process:
            attach_head(module)
        if module.pre_process:
            freeze_padding_row(module, hf_field(bridge.hf_config, "pad_token_id"))
        if not tf_config.perform_initialization:
            mark_tensor_parallel_weights(module)
        chunks.append(module.to(device))
    return chunks


def freeze_padding_row(module: Any, pad_token_id: Any) -> None:
    """The embedding lookup of `pad_token_id` passes no gradient to its row, as transformers'
    `nn.Embedding(vocab, hidden, padding_idx=pad_token_id)` of Qwen3 / Qwen3.5 does (megatron's
    vocab-parallel embedding has no padding index). Without it a sampled pad token trains the row
    that HF keeps fixed: HF inits it to zeros, and the RMSNorm of a zero vector has a gradient of
    1/sqrt(eps), so one such token swamped the step's gradient norm (604 against ~1). A tied LM head
    still trains the row through the output side, as in transformers."""
    if pad_token_id is None:
        return
    pad = int(pad_token_id)

    def hook(embedding: Any, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        ids = inputs[0]
        mask = ids == pad  # [batch, seq]
        if output.shape[:2] == ids.shape:  # [batch, seq, hidden]
            keep = mask.unsqueeze(-1)
        else:  # sequence parallel: [seq / TP, batch, hidden], this rank's part of the sequence
            from megatron.core import parallel_state as mpu

            part = output.shape[0]
            rank = mpu.get_tensor_model_parallel_rank()
            keep = mask.t()[rank * part:(rank + 1) * part].unsqueeze(-1)
        # contiguous: torch.where may take the transposed mask's layout, and megatron's MoE router
        # views its input
        return torch.where(keep, output.detach(), output).contiguous()

    module.embedding.word_embeddings.register_forward_hook(hook)


def mark_tensor_parallel_weights(module: Any) -> None:
    """megatron sets `tensor_model_parallel` / `partition_dim` / `partition_stride` on the weights of
    its parallel layers only while initialising them (`perform_initialization`); verl_lite loads HF
    weights instead, so they are set here as megatron's init would set them. Without them megatron
    takes every TP-split weight for a replica (`param_is_not_tensor_parallel_duplicate`): the grad
    norm, and so the clipping, counted only TP rank 0's shards."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding

    for layer in module.modules():
        if isinstance(layer, (ColumnParallelLinear, VocabParallelEmbedding)):
            dim = 0
        elif isinstance(layer, RowParallelLinear):
            dim = 1
        else:
            continue
        weight = getattr(layer, "weight", None)
        if weight is None or getattr(weight, "tensor_model_parallel", False):
            continue
        weight.tensor_model_parallel = True
        weight.partition_dim = dim
        weight.partition_stride = int(getattr(layer, "stride", 1) or 1)


def wrap_ddp(tf_config: Any, chunks: List[Any], use_distributed_optimizer: bool,
             prefix: str, tp: int) -> List[Any]:
    """Megatron DDP around each chunk (gradient buffers, grad reduction over data-parallel ranks).
    Refuses to train MoE layers with TP > 1 without sequence parallelism: megatron-core's MoE layer
    then raises a ValueError in its training forward (the preflight refuses it before Ray starts).
    `prefix`: the role's megatron section, for the message (e.g. actor_rollout_ref.actor.megatron); `tp`: the
    role's TP size (its Layout's, the one its TransformerConfig was built with)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads

    problem = moe_sequence_parallel_problem(tf_config.num_moe_experts, int(tp or 1),
                                            bool(tf_config.sequence_parallel), prefix)
    if problem:  # the preflight's rule (decisions/layout.py), the same message
        raise UnsupportedModelError(problem)

    wrapped = []
    for i, module in enumerate(chunks):
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=use_distributed_optimizer
        )
        wrapped.append(DistributedDataParallel(tf_config, ddp_config, module, disable_bucketing=i > 0))

    def finalize(model: List[Any], *args: Any, **kwargs: Any) -> Any:
        result = finalize_model_grads(model, *args, **kwargs)
        sum_partial_grads_over_tp(model, tf_config)
        return result

    tf_config.finalize_model_grads_func = finalize
    no_sync = [m.no_sync for m in wrapped]
    tf_config.no_sync_func = no_sync[0] if len(no_sync) == 1 else no_sync
    return wrapped


def sum_partial_grads_over_tp(model: List[Any], tf_config: Any) -> None:
    """Sum over TP the grads of replicated weights marked `tp_partial_grad` (the GDN output norm: per
    head, heads split over TP) when megatron does not: without sequence parallelism its
    finalize_model_grads sums only sequence-parallel-marked and q/k-norm weights."""
    from megatron.core import parallel_state as mpu

    if tf_config.sequence_parallel or mpu.get_tensor_model_parallel_world_size() <= 1:
        return
    grads = [p.main_grad for chunk in model for p in chunk.parameters()
             if p.requires_grad and getattr(p, "tp_partial_grad", False) and getattr(p, "main_grad", None) is not None]
    if not grads:
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    coalesced = _flatten_dense_tensors(grads)
    torch.distributed.all_reduce(coalesced, group=mpu.get_tensor_model_parallel_group())
    for grad, summed in zip(grads, _unflatten_dense_tensors(coalesced, grads)):
        grad.copy_(summed)


def unwrap(chunk: Any) -> Any:
    """The GPTModel inside a DDP-wrapped chunk (an unwrapped chunk is returned as it is)."""
    return getattr(chunk, "module", chunk)


class ValueHead(torch.nn.Module):
    """Scalar output layer with megatron's output-layer call signature; replicated over TP. With
    sequence parallelism it first gathers the sequence (as megatron's output layer does); every TP
    rank then computes the same values and loss, so the backward takes this rank's slice of the
    (replicated) gradient instead of summing it over TP."""

    def __init__(self, hidden: int, dtype: torch.dtype, sequence_parallel: bool = False):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, 1, bias=True, dtype=dtype)
        self.sequence_parallel = bool(sequence_parallel)

    @property
    def weight(self) -> torch.nn.Parameter:
        return self.linear.weight

    def forward(self, hidden_states: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None):
        if self.sequence_parallel:
            from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

            hidden_states = gather_from_sequence_parallel_region(hidden_states, tensor_parallel_output_grad=False)
        return self.linear(hidden_states), None
