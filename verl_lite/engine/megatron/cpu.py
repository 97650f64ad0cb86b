"""Adaptations that let megatron-core 0.16 run on CPU over gloo (device `cpu` only).

megatron-core assumes CUDA in a handful of places. On a CPU-only machine (development, CI) the
Megatron engines call `enable()` before touching megatron, and only when their device is `cpu`;
nothing here runs for `cuda` or `npu`. What changes, and why:

1. `torch.cuda.current_device()` yields the CPU device: megatron allocates parameters, gathered
   activations and rotary tables with `device=torch.cuda.current_device()`.
2. `torch.cuda.synchronize()` is a no-op: the pipeline p2p code calls it after batched send/recv.
3. Megatron's CUDA RNG states tracker is replaced by one that forks torch's CPU generator
   (the original reads `torch.cuda.default_generators`, which is empty without CUDA), and the
   "CUDA" state that activation recomputation saves and restores is the CPU generator's.
4. Modules that create tensors with a literal `device="cuda"` (the schedules' token counters,
   the grad buffers, the optimizer's scalars, grad clipping, the default causal mask) see a
   `torch` whose factory functions map "cuda" to "cpu". Only those modules are touched.
5. While a model is built, `Tensor.cuda()` returns the tensor itself: with PP > 1 and tied
   embeddings megatron moves the shared weight with `.cuda()` before an all-reduce.
6. megatron's `jit_fuser` is `torch.compile`: on CPU inductor would compile C++ at the first call
   of each shape (seconds each; the gated attention output and the MoE router call such
   functions), so those functions run as the plain Python they wrap.

7. Packed (THD) micro-batches (remove-padding): megatron's local DotProductAttention refuses
   packed_seq_params and CPU has neither Transformer Engine nor MindSpeed's flash attention, so the
   engines' attention layers get `packed_core_attention_class()`: megatron's own DotProductAttention
   run once per packed sequence (cu_seqlens), each causal on its own, so no token attends across a
   sequence boundary. Used only for cpu engines (`model.packed_core_attention`).

Process-wide effects (1, 2) are why this module is only for processes whose engines run on CPU.
Sequence parallelism runs on CPU: verl_lite's norms (`norm.py`) take it, and gloo (torch
2.13) has the collectives megatron's sequence-parallel linears call (`all_gather_into_tensor` /
`_all_gather_base`, `reduce_scatter_tensor` / `_reduce_scatter_base`), so nothing is emulated.
Settings megatron cannot honour on CPU are turned off by `cpu_settings()` with a warning:
the distributed optimizer needs Apex/Transformer Engine kernels, gradient
accumulation fusion needs a CUDA kernel, the MoE all-to-all token dispatcher needs CUDA streams
(the all-gather dispatcher routes the same way), and the optimizer's own grad clipping uses CUDA
multi-tensor kernels (the engine clips itself).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Dict, Iterator

import torch

logger = logging.getLogger(__name__)

_ENABLED = False
_CPU = torch.device("cpu")

# megatron modules that write `device="cuda"` literally.
_CUDA_LITERAL_MODULES = (
    "megatron.core.pipeline_parallel.schedules",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.optimizer.optimizer",
    "megatron.core.optimizer.clip_grads",
    "megatron.core.transformer.utils",
    "megatron.core.tensor_parallel.data",
    "megatron.core.utils",
)
# megatron modules whose `@jit_fuser` (torch.compile) functions run as plain Python on CPU.
_JIT_FUSER_MODULES = (
    "megatron.core.transformer.attention",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.moe_utils",
    "megatron.core.transformer.moe.experts",
    "megatron.core.transformer.moe.token_dispatcher",
    "megatron.core.ssm.gated_delta_net",
    "megatron.core.transformer.utils",
    "megatron.core.activations",
)
_FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "arange", "zeros_like", "ones_like", "empty_like")


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, (str, int)) and (str(device) == "cuda" or str(device).startswith("cuda:"))


class _CpuTorch:
    """`torch` as seen by one megatron module: tensor factories place "cuda" tensors on CPU."""

    def __init__(self) -> None:
        for name in _FACTORIES:
            setattr(self, name, self._factory(getattr(torch, name)))

    @staticmethod
    def _factory(fn):
        @functools.wraps(fn)
        def make(*args, **kwargs):
            if _is_cuda(kwargs.get("device")):
                kwargs["device"] = _CPU
            return fn(*args, **kwargs)

        return make

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _cpu_rng_tracker_class():
    from megatron.core.tensor_parallel import random as mrandom

    class CpuRNGStatesTracker(mrandom.CudaRNGStatesTracker):
        """Megatron's named RNG states (data-parallel, model-parallel, expert) on the CPU generator."""

        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise Exception(f"seed {seed} already exists")
            self.seeds_.add(seed)
            if name in self.states_:
                raise Exception(f"rng state {name} already exists")
            saved = torch.get_rng_state()
            torch.manual_seed(seed)
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)

        @contextlib.contextmanager
        def fork(self, name: str = mrandom._MODEL_PARALLEL_RNG_TRACKER_NAME) -> Iterator[None]:
            if name not in self.states_:
                raise Exception(f"rng state {name} is not added")
            saved = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(saved)

    return CpuRNGStatesTracker


def install_cpu_rng_tracker() -> None:
    """Make megatron's global RNG tracker a CPU one (idempotent; keeps an installed CPU tracker)."""
    from megatron.core.tensor_parallel import random as mrandom

    current = mrandom._CUDA_RNG_STATE_TRACKER
    if current is not None and type(current).__name__ == "CpuRNGStatesTracker":
        return
    mrandom._CUDA_RNG_STATE_TRACKER = _cpu_rng_tracker_class()()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def _cpu_generator_state(device: Any = "cuda", clone: bool = False, graph_safe: bool = False) -> torch.Tensor:
    return torch.get_rng_state()


def _set_cpu_generator_state(new_state: torch.Tensor, device: int = -1, graph_safe: bool = False) -> None:
    torch.set_rng_state(new_state)


def _uncompiled(obj: Any) -> Any:
    return getattr(obj, "_torchdynamo_orig_callable", None)


def unwrap_jit_fusers() -> None:
    """Replace megatron's torch.compile-wrapped functions (module functions and methods) by the
    functions they wrap, in the modules of `_JIT_FUSER_MODULES` (idempotent)."""
    import importlib
    import inspect

    for name in _JIT_FUSER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attr, value in list(vars(module).items()):
            original = _uncompiled(value)
            if original is not None:
                setattr(module, attr, original)
            elif inspect.isclass(value) and value.__module__ == name:
                for method, member in list(vars(value).items()):
                    original = _uncompiled(member)
                    if original is not None:
                        setattr(value, method, original)


def enable() -> None:
    """Apply the CPU adaptations (idempotent). Call before building megatron models on CPU."""
    global _ENABLED
    if _ENABLED:
        return
    import importlib

    torch.cuda.current_device = lambda: _CPU  # type: ignore[assignment]
    torch.cuda.synchronize = lambda device=None: None  # type: ignore[assignment]
    shim = _CpuTorch()
    for name in _CUDA_LITERAL_MODULES:
        module = importlib.import_module(name)
        module.torch = shim
    from megatron.core.tensor_parallel import random as mrandom

    mrandom._get_cuda_rng_state = _cpu_generator_state
    mrandom._set_cuda_rng_state = _set_cpu_generator_state
    install_cpu_rng_tracker()
    unwrap_jit_fusers()
    _ENABLED = True
    logger.info("megatron-core CPU adaptations enabled (torch.cuda.current_device -> cpu)")


def is_enabled() -> bool:
    return _ENABLED


@contextlib.contextmanager
def model_build() -> Iterator[None]:
    """While building a model on CPU, `Tensor.cuda()` returns the tensor (tied embeddings, PP>1)."""
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.Tensor.cuda = original  # type: ignore[assignment]


def cpu_settings(settings: Dict[str, Any]) -> Dict[str, Any]:
    """Turn off (among the keys given) what megatron cannot do on CPU; warn for each that was on."""
    out = dict(settings)
    reasons = {
        "use_distributed_optimizer": "needs Apex/Transformer Engine multi-tensor kernels",
        "gradient_accumulation_fusion": "needs a CUDA kernel",
    }
    for key, why in reasons.items():
        if key in out:
            if out[key]:
                logger.warning("megatron on cpu: %s=True %s; turning it off", key, why)
            out[key] = False
    dispatcher = out.get("moe_token_dispatcher_type")
    if dispatcher not in (None, "allgather"):
        logger.warning("megatron on cpu: moe_token_dispatcher_type=%r needs CUDA streams; using 'allgather' "
                       "(the same routing, tokens exchanged by all-gather)", dispatcher)
        out["moe_token_dispatcher_type"] = "allgather"
    return out


_PACKED_ATTENTION = None


def packed_core_attention_class() -> type:
    """megatron's DotProductAttention taking packed (THD) input as well (cpu only; built on first use)."""
    global _PACKED_ATTENTION
    if _PACKED_ATTENTION is None:
        from megatron.core.transformer.dot_product_attention import DotProductAttention
        from megatron.core.transformer.enums import AttnMaskType

        class CpuPackedDotProductAttention(DotProductAttention):
            """Padded input: megatron's forward as it is. Packed input ([tokens, heads, dim] with
            cu_seqlens): the same forward per sequence, outputs concatenated. Each sequence is causal
            through this module's own mask type (`self.attn_mask_type`, set by the layer spec), which
            megatron's forward applies when no mask is given; the `attn_mask_type` argument is not
            read by megatron's forward, so a non-causal spec is refused here."""

            def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                        packed_seq_params=None):
                if packed_seq_params is None:
                    return super().forward(query, key, value, attention_mask, attn_mask_type=attn_mask_type,
                                           attention_bias=attention_bias)
                if self.attn_mask_type != AttnMaskType.causal:
                    raise ValueError(f"packed attention on cpu needs a causal layer spec, got {self.attn_mask_type}")
                if packed_seq_params.qkv_format != "thd":
                    raise ValueError(f"packed attention on cpu takes qkv_format 'thd', got {packed_seq_params.qkv_format!r}")
                cu_q = packed_seq_params.cu_seqlens_q_padded
                cu_q = (packed_seq_params.cu_seqlens_q if cu_q is None else cu_q).tolist()
                cu_kv = packed_seq_params.cu_seqlens_kv_padded
                cu_kv = (packed_seq_params.cu_seqlens_kv if cu_kv is None else cu_kv).tolist()
                if cu_q != cu_kv or cu_q[-1] != query.shape[0]:
                    raise ValueError(f"packed self-attention: cu_seqlens {cu_q} / {cu_kv} do not cover the "
                                     f"{query.shape[0]} packed tokens")
                parts = [
                    super(CpuPackedDotProductAttention, self).forward(
                        query[s:e].unsqueeze(1), key[s:e].unsqueeze(1), value[s:e].unsqueeze(1), None,
                        attention_bias=attention_bias)
                    for s, e in zip(cu_q[:-1], cu_q[1:]) if e > s
                ]
                return torch.cat(parts, dim=0)  # [tokens, 1, heads * dim]

        _PACKED_ATTENTION = CpuPackedDotProductAttention
    return _PACKED_ATTENTION
