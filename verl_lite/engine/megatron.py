"""Megatron engines (megatron-core 0.16): the policy/reference language model and the critic.

Registered for (language_model | value_model, "megatron", cpu | cuda); on npu the MindSpeed
subclasses in `verl_lite.engine.mindspeed` serve the same keys. Nothing here imports megatron at
module import time: MindSpeed must patch megatron before its first import, so every megatron
import happens inside the methods that need it.

What an engine does (see `BaseEngine` for the batch contract):
- `initialize()`: the caller has already set up torch.distributed (a single-rank caller may leave
  it to the engine, which then starts a one-process group). Device-mesh init calls
  `initialize_model_parallel(TP, PP, VPP, CP, EP, ETP)` unless it ran already (the actor and the
  ref of one worker share it). The model is a GPTModel with megatron's local layer spec, built from
  the HF config; its weights come from the HF safetensors through `megatron_weights`, or, when the
  directory has no weights, from an HF model randomly initialised with `model.init_seed` (so every
  parallel layout starts from the same weights as the torch engine would). The optimizer is
  megatron's (Adam, from the `optim` section) with an `OptimizerParamScheduler`.
- `forward_backward()` runs megatron's pipeline schedule. Log-probs are a vocab-parallel
  log-softmax across TP ranks; the loss function sees the outputs on the last pipeline stage and
  its loss is back-propagated as is (the schedule's division by the number of micro-batches is
  undone: the caller scales each loss). Outputs are broadcast to every pipeline stage.
- Gradient clipping happens here, not inside megatron's optimizer (its clip asserts CUDA tensors):
  the optimizer computes the norm, the engine scales the gradients, then the optimizer steps.

Not supported yet: context parallelism inside forward (CP>1 builds the mesh, forward raises),
sequence packing (remove-padding), MoE layers, Qwen3.5 GDN layers (see megatron_weights).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import logging
import math
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from verl_lite.config.schema import MegatronConfig
from verl_lite.engine.bridges import Layout, ModelBridge, bridge_for
from verl_lite.engine.base import BaseEngine, LossFn

logger = logging.getLogger(__name__)

BATCH_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")
_NEG = -1.0e30  # logit for padded vocabulary entries: exp() underflows to 0, 0 * _NEG stays finite


# ------------------------------------------------------------------------------ tensor helpers


def vocab_parallel_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, with_entropy: bool
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log p(target) and entropy from logits split over the vocabulary across TP ranks.

    `logits` (B, R, V/tp) is this rank's slice; padded vocabulary entries (index >= vocab_size)
    are excluded. Sums cross ranks with an all-reduce whose backward is the identity, which is
    right because everything after it is replicated on every TP rank.
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as reduce

    logits = logits.float()
    local_v = logits.shape[-1]
    start = mpu.get_tensor_model_parallel_rank() * local_v
    if start + local_v > vocab_size:
        index = torch.arange(start, start + local_v, device=logits.device)
        logits = logits.masked_fill(index >= vocab_size, _NEG)
    peak = logits.detach().max(dim=-1, keepdim=True).values
    if mpu.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX, group=mpu.get_tensor_model_parallel_group())
    shifted = logits - peak
    lse = reduce(shifted.exp().sum(dim=-1)).log()
    local_t = targets - start
    inside = (local_t >= 0) & (local_t < local_v)
    picked = shifted.gather(-1, local_t.clamp(0, local_v - 1).unsqueeze(-1)).squeeze(-1)
    log_probs = reduce(picked * inside) - lse
    entropy = None
    if with_entropy:
        probs = (shifted - lse.unsqueeze(-1)).exp()
        entropy = lse - reduce((probs * shifted).sum(dim=-1))
    return log_probs, entropy


def attention_mask_4d(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) 1=token -> (B, 1, T, T) bool, True where attention is masked (future or padding)."""
    t = attention_mask.shape[1]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=attention_mask.device), diagonal=1)
    return causal[None, None] | (attention_mask == 0)[:, None, None, :]


class StorageParking:
    """Move tensors' storage off the device and back while every view of them stays valid.

    Megatron's grad buffers (and param buffers with the distributed optimizer) are flat tensors
    that parameters view into; replacing them would orphan the views. Parking copies the data to
    the host and frees the storage (`resize_(0)`); restoring re-grows it and copies back.
    """

    def __init__(self) -> None:
        self._parked: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def park(self, tensor: torch.Tensor) -> None:
        if id(tensor) in self._parked or tensor.untyped_storage().size() == 0:
            return
        host = tensor.detach().to("cpu", copy=True)
        self._parked[id(tensor)] = (tensor, host)
        tensor.untyped_storage().resize_(0)

    def restore(self, tensor: torch.Tensor) -> None:
        entry = self._parked.pop(id(tensor), None)
        if entry is None:
            return
        _, host = entry
        tensor.untyped_storage().resize_(host.numel() * host.element_size())
        tensor.copy_(host)

    def __contains__(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self._parked


class SafetensorsSource:
    """HF tensors read one by one from a directory's *.safetensors files."""

    def __init__(self, files: List[str]):
        from safetensors import safe_open

        self._where: Dict[str, str] = {}
        for path in files:
            with safe_open(path, framework="pt") as f:
                for key in f.keys():
                    self._where[key] = path

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __call__(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        if name not in self._where:
            raise KeyError(f"{name} is not in the checkpoint")
        with safe_open(self._where[name], framework="pt") as f:
            return f.get_tensor(name)


# ------------------------------------------------------------------------------ engines


class MegatronLMEngine(BaseEngine):
    """Language model (actor or ref) on megatron-core."""

    model_type = "language_model"

    def __init__(self, model_config: Any, engine_config: Any, optim_config: Any, device: str, role: str = "actor"):
        super().__init__(model_config, engine_config, optim_config, device, role)
        self.megatron_config: MegatronConfig = self.engine_config.megatron
        self.model: List[Any] = []  # one module per virtual pipeline stage (DDP-wrapped when training)
        self.optimizer: Any = None
        self.lr_scheduler: Any = None
        self.hf_config: Any = None
        self.tf_config: Any = None
        self.bridge: Optional[ModelBridge] = None  # HF <-> Megatron for the model's architecture
        self.layout: Optional[Layout] = None
        self._parking = StorageParking()
        self._where = {"model": "device", "optimizer": "device", "grad": "device"}

    # ---------------------------------------------------------------------------- settings

    @property
    def compute_device(self) -> str:
        """Where tensors live ("cpu", "cuda", "npu"). MindSpeed engines may override it in tests."""
        return self.device

    def parallel_sizes(self) -> Dict[str, Any]:
        megatron = self.megatron_config
        return dict(
            tensor_model_parallel_size=int(megatron.tensor_model_parallel_size),
            pipeline_model_parallel_size=int(megatron.pipeline_model_parallel_size),
            virtual_pipeline_model_parallel_size=megatron.virtual_pipeline_model_parallel_size,
            context_parallel_size=int(megatron.context_parallel_size),
            expert_model_parallel_size=int(megatron.expert_model_parallel_size),
            expert_tensor_parallel_size=megatron.expert_tensor_parallel_size,
        )

    def transformer_overrides(self) -> Dict[str, Any]:
        """override_transformer_config with `attention_backend` names turned into AttnBackend."""
        overrides = dict(self.megatron_config.override_transformer_config)
        backend = overrides.get("attention_backend")
        if isinstance(backend, str):
            from megatron.core.transformer.enums import AttnBackend

            overrides["attention_backend"] = AttnBackend[backend.split(".")[-1].strip().lower()]
        return overrides

    @property
    def dtype(self) -> torch.dtype:
        """float32 on CPU (gloo, no bf16 kernels worth using), bfloat16 on devices."""
        return torch.float32 if self.compute_device == "cpu" else torch.bfloat16

    # ---------------------------------------------------------------------------- lifecycle

    def initialize(self) -> None:
        self._import_backend()
        self._ensure_process_group()
        self._prepare_device()
        self.init_device_mesh()
        self._seed()
        self.hf_config = self._read_hf_config()
        self.bridge = bridge_for(self.hf_config)
        self.tf_config = self._build_transformer_config()
        self.model = self._build_model()
        self._load_initial_weights()
        if self.role != "ref" and self.optim_config is not None:
            self._build_optimizer()
        self.eval_mode()

    def _ensure_process_group(self) -> None:
        """Megatron needs torch.distributed. A multi-rank caller sets it up; one rank gets its own."""
        if torch.distributed.is_initialized():
            return
        if int(os.environ.get("WORLD_SIZE", "1")) != 1:
            raise RuntimeError(
                f"torch.distributed is not initialized but WORLD_SIZE={os.environ['WORLD_SIZE']}: the worker "
                "must call init_process_group (gloo on cpu) before MegatronLMEngine.initialize()"
            )
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        backend = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}[self.compute_device]
        logger.info("%s: single-rank run, starting a one-process %s group", self.role, backend)
        torch.distributed.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)

    def _import_backend(self) -> None:
        """Hook run before anything imports megatron (MindSpeed imports its adaptor here)."""

    def _before_parallel_init(self) -> None:
        """Hook run in device-mesh init before `initialize_model_parallel` (MindSpeed repatches)."""

    def _prepare_device(self) -> None:
        device = self.compute_device
        if device == "cpu":
            from verl_lite.engine import megatron_cpu

            megatron_cpu.enable()
        elif device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        elif device == "npu":
            torch.npu.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # type: ignore[attr-defined]
        else:
            raise ValueError(f"device {device!r} is not one of cpu, cuda, npu")

    def _torch_device(self) -> torch.device:
        if self.compute_device == "cpu":
            return torch.device("cpu")
        return torch.device(self.compute_device, int(os.environ.get("LOCAL_RANK", "0")))

    def init_device_mesh(self) -> None:
        """Set up TP/PP/CP/EP groups unless this process already has them (actor and ref share)."""
        from megatron.core import parallel_state as mpu

        self._before_parallel_init()
        sizes = self.parallel_sizes()
        if mpu.model_parallel_is_initialized():
            have = dict(
                tensor_model_parallel_size=mpu.get_tensor_model_parallel_world_size(),
                pipeline_model_parallel_size=mpu.get_pipeline_model_parallel_world_size(),
                context_parallel_size=mpu.get_context_parallel_world_size(),
            )
            clash = {k: (v, sizes[k]) for k, v in have.items() if v != sizes[k]}
            if clash:
                raise ValueError(
                    f"{self.role}: model parallel groups already exist with a different layout "
                    f"(existing, wanted): {clash}; give every engine of one worker the same layout"
                )
            return
        world = torch.distributed.get_world_size()
        span = sizes["tensor_model_parallel_size"] * sizes["pipeline_model_parallel_size"] * sizes["context_parallel_size"]
        if world % span:
            raise ValueError(
                f"{self.role}: world size {world} is not divisible by TP*PP*CP = {span} "
                f"({sizes}); change the parallel sizes or the number of devices"
            )
        mpu.initialize_model_parallel(**sizes)

    def _seed(self) -> None:
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        if self.compute_device == "cpu":
            from verl_lite.engine import megatron_cpu

            megatron_cpu.install_cpu_rng_tracker()
        model_parallel_cuda_manual_seed(int(self.megatron_config.seed))

    def _model_dir(self) -> str:
        from verl_lite.models import resolve_model_dir

        return resolve_model_dir(self.model_config.path)

    def _read_hf_config(self) -> Any:
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(
            self._model_dir(), trust_remote_code=bool(self.model_config.trust_remote_code)
        )
        for key, value in self.model_config.override_config.items():
            setattr(hf_config, key, value)
        return hf_config

    def _build_transformer_config(self) -> Any:
        from megatron.core.transformer import TransformerConfig

        kwargs = self.bridge.transformer_config_kwargs()
        kwargs.update(self.parallel_sizes())
        kwargs.update(
            activation_func=torch.nn.functional.silu,
            sequence_parallel=False,
            params_dtype=self.dtype,
            pipeline_dtype=self.dtype,
            bf16=self.dtype == torch.bfloat16,
            bias_activation_fusion=False,
            masked_softmax_fusion=False,
            bias_dropout_fusion=False,
            apply_rope_fusion=False,
            gradient_accumulation_fusion=False,
            perform_initialization=False,  # weights always come from an HF source
        )
        if self.megatron_config.sequence_parallel and kwargs["tensor_model_parallel_size"] > 1:
            # megatron's local layer spec uses torch norms, which reject sequence parallel
            logger.warning("%s: megatron.sequence_parallel=True is not supported by verl_lite yet; running without it", self.role)
        overrides = self.transformer_overrides()
        fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        kwargs.update({k: v for k, v in overrides.items() if k in fields})
        if self.compute_device == "cpu":
            from verl_lite.engine import megatron_cpu

            kwargs = megatron_cpu.cpu_settings(kwargs)
        config = TransformerConfig(**kwargs)
        for key, value in overrides.items():  # e.g. use_ascend_gdn: read by MindSpeed-Bridge layers
            if key not in fields:
                setattr(config, key, value)
        return config

    def _build_model(self) -> List[Any]:
        from megatron.core import parallel_state as mpu
        from megatron.core.models.gpt import GPTModel

        self.layout = self.bridge.layout(mpu.get_tensor_model_parallel_world_size(), mpu.get_tensor_model_parallel_rank())
        spec = self.bridge.layer_spec()
        vpp = mpu.get_virtual_pipeline_model_parallel_world_size()
        build = contextlib.nullcontext
        if self.compute_device == "cpu":
            from verl_lite.engine import megatron_cpu

            build = megatron_cpu.model_build
        chunks = []
        for stage in range(vpp or 1):
            vp_stage = stage if vpp else None
            with build():
                module = GPTModel(
                    config=self.tf_config,
                    transformer_layer_spec=spec,
                    vocab_size=self.layout.padded_vocab,
                    pre_process=mpu.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                    post_process=mpu.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
                    parallel_output=True,
                    share_embeddings_and_output_weights=self.layout.tied and self.model_type == "language_model",
                    vp_stage=vp_stage,
                    **self.bridge.gpt_model_kwargs(),
                )
            if module.post_process:
                self._attach_head(module)
            chunks.append(module.to(self._torch_device()))
        if self.role == "ref" or self.optim_config is None:
            for module in chunks:
                module.requires_grad_(False)
            return chunks
        return self._wrap_ddp(chunks)

    def _attach_head(self, module: Any) -> None:
        """Language models keep megatron's (vocab-parallel) output layer."""

    def _wrap_ddp(self, chunks: List[Any]) -> List[Any]:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads

        use_dist_opt = bool(self.megatron_config.use_distributed_optimizer) and self.compute_device != "cpu"
        wrapped = []
        for i, module in enumerate(chunks):
            ddp_config = DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=use_dist_opt
            )
            wrapped.append(DistributedDataParallel(self.tf_config, ddp_config, module, disable_bucketing=i > 0))
        self.tf_config.finalize_model_grads_func = finalize_model_grads
        no_sync = [m.no_sync for m in wrapped]
        self.tf_config.no_sync_func = no_sync[0] if len(no_sync) == 1 else no_sync
        return wrapped

    @staticmethod
    def _unwrap(chunk: Any) -> Any:
        return getattr(chunk, "module", chunk)

    # ---------------------------------------------------------------------------- weights in

    def _hf_source(self) -> Callable[[str], torch.Tensor]:
        files = sorted(glob.glob(os.path.join(self._model_dir(), "*.safetensors")))
        if files:
            return SafetensorsSource(files)
        return self._random_hf_state()

    def _hf_model_class(self) -> Any:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM

    def _random_hf_state(self) -> Callable[[str], torch.Tensor]:
        """Weights of an HF model built from the config with `model.init_seed` (same on all ranks)."""
        seed = int(self.model_config.init_seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            hf_model = self._hf_model_class().from_config(self.hf_config, dtype=torch.float32)
        state = {k: v.detach() for k, v in hf_model.state_dict().items()}
        del hf_model
        return state.__getitem__

    def _layer_offset(self, module: Any) -> int:
        layers = getattr(getattr(module, "decoder", None), "layers", None)
        return int(layers[0].layer_number) - 1 if layers is not None and len(layers) else 0

    def _mapping_name(self, name: str) -> str:
        return name

    def _local_params(self) -> Iterator[Tuple[str, torch.nn.Parameter, int]]:
        for chunk in self.model:
            module = self._unwrap(chunk)
            offset = self._layer_offset(module)
            for name, param in module.named_parameters():
                yield self._mapping_name(name), param, offset

    def _load_initial_weights(self) -> None:
        source = self._hf_source()
        with torch.no_grad():
            for name, param, offset in self._local_params():
                shard = self.bridge.hf_to_megatron(name, self.layout, source, offset)
                if tuple(shard.shape) != tuple(param.shape):
                    raise ValueError(f"{name}: HF weights give shape {tuple(shard.shape)}, model has {tuple(param.shape)}")
                param.copy_(shard.to(param.dtype))

    # ---------------------------------------------------------------------------- optimizer

    def _build_optimizer(self) -> None:
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        optim = self.optim_config
        lr, betas, weight_decay = float(optim.lr), list(optim.betas), float(optim.weight_decay)
        config = OptimizerConfig(
            optimizer="adam",
            lr=lr,
            min_lr=lr * float(optim.min_lr_ratio),
            weight_decay=weight_decay,
            adam_beta1=float(betas[0]),
            adam_beta2=float(betas[1]),
            clip_grad=0.0,  # clipped by optimizer_step (megatron's clip asserts CUDA tensors)
            bf16=self.dtype == torch.bfloat16,
            params_dtype=self.dtype,
            use_distributed_optimizer=self._unwrap(self.model[0]) is not self.model[0]
            and self.model[0].ddp_config.use_distributed_optimizer,
        )
        self.optimizer = get_megatron_optimizer(config, self.model)
        total = int(optim.total_training_steps)
        warmup = int(optim.lr_warmup_steps)
        if warmup < 0:
            warmup = int(float(optim.lr_warmup_steps_ratio) * max(total, 0))
        style = optim.lr_scheduler_type
        decay_steps = max(total, warmup + 1, 1)
        if style == "cosine" and total <= 0:
            raise ValueError("optim.lr_scheduler_type=cosine needs optim.total_training_steps > 0")
        self.lr_scheduler = OptimizerParamScheduler(
            self.optimizer,
            init_lr=0.0 if warmup > 0 else lr,
            max_lr=lr,
            min_lr=config.min_lr,
            lr_warmup_steps=warmup,
            lr_decay_steps=decay_steps,
            lr_decay_style=style,
            start_wd=weight_decay,
            end_wd=weight_decay,
            wd_incr_steps=decay_steps,
            wd_incr_style="constant",
        )

    def _need_optimizer(self, what: str) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"{what}: the {self.role} engine has no optimizer (ref engines only run forward)")

    def optimizer_zero_grad(self) -> None:
        self._need_optimizer("optimizer_zero_grad")
        for chunk in self.model:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()

    def _optimizer_params(self) -> List[torch.Tensor]:
        optimizers = getattr(self.optimizer, "chained_optimizers", [self.optimizer])
        return [p for opt in optimizers for p in opt.get_parameters()]

    def optimizer_step(self) -> float:
        """Step with gradients clipped to optim.clip_grad; returns the norm before clipping."""
        self._need_optimizer("optimizer_step")
        if self.optimizer.prepare_grads():  # found inf/nan (fp16 loss scaling only)
            return float("nan")
        grad_norm = float(self.optimizer.get_grad_norm())
        if not math.isfinite(grad_norm):
            logger.warning("%s: gradient norm is %s; skipping this optimizer step", self.role, grad_norm)
            return grad_norm
        clip = float(self.optim_config.clip_grad)  # the one clip setting, as in verl 0.9 (actor.grad_clip is not read)
        if clip > 0 and grad_norm > clip:
            grads = [p.grad for p in self._optimizer_params() if p.grad is not None]
            torch._foreach_mul_(grads, clip / (grad_norm + 1e-6))
        self.optimizer.step_with_ready_grads()
        return grad_norm

    def lr_scheduler_step(self) -> float:
        self._need_optimizer("lr_scheduler_step")
        self.lr_scheduler.step(1)
        return self.current_lr()

    def current_lr(self) -> float:
        optimizers = getattr(self.optimizer, "chained_optimizers", [self.optimizer])
        return float(optimizers[0].param_groups[0]["lr"])

    # ---------------------------------------------------------------------------- compute

    def train_mode(self) -> None:
        super().train_mode()
        for chunk in self.model:
            chunk.train()

    def eval_mode(self) -> None:
        super().eval_mode()
        for chunk in self.model:
            chunk.eval()

    def _prepare_batch(self, micro_batch: Dict[str, Any], pad_to: int) -> Dict[str, Any]:
        missing = [k for k in BATCH_KEYS if k not in micro_batch]
        if missing:
            raise KeyError(f"micro-batch lacks {missing} (engine batch contract: {', '.join(BATCH_KEYS)})")
        device = self._torch_device()
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in micro_batch.items()}
        ids, mask, pos = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
        extra = pad_to - ids.shape[1]
        if extra > 0:  # left padding keeps the responses in the last R columns
            ids = torch.nn.functional.pad(ids, (extra, 0), value=int(getattr(self.hf_config, "pad_token_id", 0) or 0))
            mask = torch.nn.functional.pad(mask, (extra, 0), value=0)
            pos = torch.nn.functional.pad(pos, (extra, 0), value=0)
        return {"batch": batch, "input_ids": ids, "position_ids": pos, "mask4d": attention_mask_4d(mask)}

    def _postprocess(self, output: torch.Tensor, batch: Dict[str, Any], with_entropy: bool) -> Dict[str, torch.Tensor]:
        responses = batch["responses"]
        r = responses.shape[1]
        logits = output[:, -r - 1 : -1, :]  # position t predicts token t + 1
        log_probs, entropy = vocab_parallel_log_probs(logits, responses, self.layout.vocab, with_entropy)
        out = {"log_probs": log_probs}
        if entropy is not None:
            out["entropy"] = entropy
        return out

    def forward_backward(
        self,
        micro_batches: List[Dict[str, Any]],
        loss_fn: Optional[LossFn] = None,
        forward_only: bool = False,
        calculate_entropy: bool = False,
    ) -> List[Dict[str, Any]]:
        from megatron.core import parallel_state as mpu
        from megatron.core.pipeline_parallel import get_forward_backward_func

        if not micro_batches:
            return []
        if not forward_only:
            self._need_optimizer("forward_backward(forward_only=False)")
            if loss_fn is None:
                raise ValueError("forward_backward(forward_only=False) needs a loss_fn")
        if mpu.get_context_parallel_world_size() > 1:
            raise NotImplementedError("context_parallel_size > 1 is not supported by verl_lite's Megatron forward yet")
        pp = mpu.get_pipeline_model_parallel_world_size()
        lengths = {mb["input_ids"].shape[1] for mb in micro_batches}
        sizes = {mb["input_ids"].shape[0] for mb in micro_batches}
        if pp > 1 and len(sizes) > 1:
            raise ValueError(f"pipeline parallelism needs equal micro-batch sizes, got {sorted(sizes)}")
        seq_len = max(lengths)
        prepared = [self._prepare_batch(mb, seq_len if pp > 1 else 0) for mb in micro_batches]
        n = len(prepared)
        outputs: List[Dict[str, Any]] = []

        def loss_step(item: Dict[str, Any], output: torch.Tensor):
            result = self._postprocess(output, item["batch"], calculate_entropy)
            if forward_only:
                loss, metrics = output.sum() * 0.0, {}
            else:
                loss, metrics = loss_fn(result, item["batch"])
            record = {k: v.detach().float().cpu() for k, v in result.items()}
            record["metrics"] = {k: float(v) for k, v in (metrics or {}).items()}
            outputs.append(record)
            # The schedule divides by the number of micro-batches; the caller already scaled.
            return loss * n, {"loss": loss.detach()}

        def forward_step(data_iterator, model):
            item = next(data_iterator)
            output = model(item["input_ids"], item["position_ids"], item["mask4d"])
            return output, functools.partial(loss_step, item)

        chunks = len(self.model)
        iterator = iter(prepared) if chunks == 1 else [iter(prepared) for _ in range(chunks)]
        grad_ctx = torch.no_grad() if forward_only else contextlib.nullcontext()
        with grad_ctx:
            get_forward_backward_func()(
                forward_step_func=forward_step,
                data_iterator=iterator,
                model=self.model if chunks > 1 else self.model[0],
                num_microbatches=n,
                seq_length=seq_len,
                micro_batch_size=max(sizes),
                forward_only=forward_only,
            )
        if pp > 1:
            holder = [outputs]
            torch.distributed.broadcast_object_list(
                holder, src=mpu.get_pipeline_model_parallel_last_rank(), group=mpu.get_pipeline_model_parallel_group()
            )
            outputs = holder[0]
        return outputs

    # ---------------------------------------------------------------------------- memory

    @staticmethod
    def _ddp_buffers(chunk: Any) -> List[Any]:
        """The flat grad (and, with the distributed optimizer, param) buffers of a DDP-wrapped chunk;
        none for an unwrapped one (the ref), whose `buffers` is torch's Module.buffers method."""
        from megatron.core.distributed import DistributedDataParallel

        if not isinstance(chunk, DistributedDataParallel):
            return []
        return list(chunk.buffers) + list(getattr(chunk, "expert_parallel_buffers", []))

    def _grad_buffers(self) -> List[torch.Tensor]:
        return [buf.grad_data for chunk in self.model for buf in self._ddp_buffers(chunk)]

    @classmethod
    def _chunk_param_buffers(cls, chunk: Any) -> List[torch.Tensor]:
        """Flat buffers the chunk's parameters view into (distributed optimizer only)."""
        return [buf.param_data for buf in cls._ddp_buffers(chunk) if getattr(buf, "param_data", None) is not None]

    def _param_buffers(self) -> List[torch.Tensor]:
        return [t for chunk in self.model for t in self._chunk_param_buffers(chunk)]

    def _move_model(self, target: torch.device) -> None:
        param_buffers = self._param_buffers()
        if param_buffers:  # distributed optimizer: parameters are views of flat buffers
            for buf in param_buffers:
                self._parking.park(buf) if target.type == "cpu" else self._parking.restore(buf)
            return
        for chunk in self.model:
            for param in chunk.parameters():
                param.data = param.data.to(target, non_blocking=True)

    def _move_grads(self, target: torch.device) -> None:
        for buf in self._grad_buffers():
            self._parking.park(buf) if target.type == "cpu" else self._parking.restore(buf)

    def _move_optimizer(self, target: torch.device) -> None:
        model_params = {id(p) for chunk in self.model for p in chunk.parameters()}
        for opt in getattr(self.optimizer, "chained_optimizers", [self.optimizer]):
            inner = getattr(opt, "optimizer", opt)
            for group in inner.param_groups:
                for p in group["params"]:
                    if id(p) not in model_params:  # fp32 main copies of bf16 parameters
                        p.data = p.data.to(target, non_blocking=True)
            for state in inner.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        state[key] = value.to(target, non_blocking=True)

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Offload to "cpu" or load back to the engine's device. A no-op for a CPU engine."""
        if device not in ("cpu", self.device, "device"):
            raise ValueError(f"{self.role}: to({device!r}) on a {self.device} engine (use 'cpu' or {self.device!r})")
        target = torch.device("cpu") if device == "cpu" else self._torch_device()
        if target == self._torch_device() and self.compute_device == "cpu":
            return
        if model:
            self._move_model(target)
        if grad and self.optimizer is not None:
            self._move_grads(target)
        if optimizer and self.optimizer is not None:
            self._move_optimizer(target)
        if target.type != "cpu" and hasattr(torch, self.compute_device):
            getattr(torch, self.compute_device).synchronize()

    # ---------------------------------------------------------------------------- CPU snapshots

    @torch.no_grad()
    def snapshot_to_cpu(self) -> List[Dict[str, Any]]:
        """This rank's weights on CPU, one entry per model chunk: a chunk whose parameters view into
        flat buffers (the distributed optimizer) is copied buffer by buffer, one flat copy each;
        other chunks (the ref, a CPU run) parameter by parameter. An offloaded model cannot be
        copied: load it back first."""
        snapshot = []
        for i, chunk in enumerate(self.model):
            flat = self._chunk_param_buffers(chunk)
            if flat:
                if any(t.untyped_storage().size() == 0 for t in flat):
                    raise RuntimeError(f"{self.role}: model chunk {i} is offloaded to CPU; load it before a snapshot")
                snapshot.append({"buffers": [t.detach().to("cpu", copy=True) for t in flat]})
            else:
                snapshot.append({"params": {n: p.detach().to("cpu", copy=True) for n, p in chunk.named_parameters()}})
        return snapshot

    @torch.no_grad()
    def restore_from_cpu(self, snapshot: List[Dict[str, Any]]) -> None:
        if len(snapshot) != len(self.model):
            raise ValueError(f"{self.role}: snapshot of {len(snapshot)} model chunks for {len(self.model)}")
        for i, (chunk, saved) in enumerate(zip(self.model, snapshot)):
            if "buffers" in saved:
                flat = self._chunk_param_buffers(chunk)
                if len(flat) != len(saved["buffers"]):
                    raise ValueError(f"{self.role}: chunk {i} has {len(flat)} parameter buffers, "
                                     f"the snapshot {len(saved['buffers'])}")
                for live, cpu in zip(flat, saved["buffers"]):
                    live.copy_(cpu.to(live.device, non_blocking=True))
                continue
            params = dict(chunk.named_parameters())
            if set(params) != set(saved["params"]):
                raise ValueError(f"{self.role}: chunk {i}: the snapshot does not match the model's parameters")
            for name, p in params.items():
                p.data.copy_(saved["params"][name].to(p.device, non_blocking=True))

    # ---------------------------------------------------------------------------- weights out

    def _hf_shards(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """(HF name, full tensor) for the parameters on this pipeline stage, gathered across TP."""
        from megatron.core import parallel_state as mpu

        tp = mpu.get_tensor_model_parallel_world_size()
        group = mpu.get_tensor_model_parallel_group()
        for name, param, offset in self._local_params():
            if name == "output_layer.weight" and self.layout.tied and self.model_type == "language_model":
                continue  # the pipeline's last-stage copy of the tied embedding
            for hf_name, shard, dim in self.bridge.megatron_to_hf(name, param.detach(), self.layout, offset):
                if dim is not None and tp > 1:
                    parts = [torch.empty_like(shard) for _ in range(tp)]
                    torch.distributed.all_gather(parts, shard.contiguous(), group=group)
                    shard = torch.cat(parts, dim=dim)
                yield hf_name, self.bridge.finish_hf_tensor(hf_name, shard, self.layout)

    def export_hf_weights(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """Yield every HF-named full tensor on CPU, one at a time, on every rank (a collective:
        every rank iterates to the end). Each tensor is gathered across TP ranks; with PP > 1 the
        stages take turns, each broadcasting its tensors one by one to the other stages (the name,
        shape and dtype first, then the tensor), so no rank holds more than one exported tensor."""
        from megatron.core import parallel_state as mpu

        tied = self.layout.tied and self.model_type == "language_model"

        def with_tied_head(hf_name: str, tensor: torch.Tensor) -> Iterator[Tuple[str, torch.Tensor]]:
            yield hf_name, tensor
            if tied and hf_name == "model.embed_tokens.weight":
                yield "lm_head.weight", tensor

        if mpu.get_pipeline_model_parallel_world_size() == 1:
            for hf_name, tensor in self._hf_shards():
                yield from with_tied_head(hf_name, tensor.to("cpu", copy=True))  # never alias a live parameter
            return
        group = mpu.get_pipeline_model_parallel_group()
        my_stage = mpu.get_pipeline_model_parallel_rank()
        for stage, src in enumerate(torch.distributed.get_process_group_ranks(group)):
            mine = self._hf_shards() if stage == my_stage else iter(())
            while True:
                item = next(mine, None)
                meta = [None if item is None else (item[0], tuple(item[1].shape), item[1].dtype)]
                torch.distributed.broadcast_object_list(meta, src=src, group=group)
                if meta[0] is None:  # the stage has sent all its tensors
                    break
                hf_name, shape, dtype = meta[0]
                if stage == my_stage:
                    data = item[1].contiguous()
                else:
                    data = torch.empty(shape, dtype=dtype, device=self._torch_device())
                torch.distributed.broadcast(data, src=src, group=group)
                yield from with_tied_head(hf_name, data.to("cpu", copy=True))

    # ---------------------------------------------------------------------------- checkpoints

    def _shard_file(self, path: str) -> str:
        from megatron.core import parallel_state as mpu

        tag = f"tp{mpu.get_tensor_model_parallel_rank():02d}_pp{mpu.get_pipeline_model_parallel_rank():02d}"
        return os.path.join(path, f"{self.role}_{tag}.pt")

    def _rng_state(self) -> Dict[str, Any]:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        state = {"cpu": torch.get_rng_state(), "tracker": dict(get_cuda_rng_tracker().get_states())}
        if self.compute_device == "cuda":
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def save_checkpoint(self, path: str) -> None:
        """One file per TP/PP rank, written by data-parallel rank 0 (a collective)."""
        os.makedirs(path, exist_ok=True)
        if self.data_parallel_rank() == 0:
            state: Dict[str, Any] = {
                "model": [
                    {k: v for k, v in self._unwrap(c).state_dict().items() if isinstance(v, torch.Tensor)}
                    for c in self.model
                ],
                "rng": self._rng_state(),
            }
            if self.optimizer is not None:
                state["optimizer"] = self.optimizer.state_dict()
                state["lr_scheduler"] = self.lr_scheduler.state_dict()
            torch.save(state, self._shard_file(path))
        torch.distributed.barrier()

    def load_checkpoint(self, path: str) -> None:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        state = torch.load(self._shard_file(path), map_location="cpu", weights_only=True)
        for chunk, weights in zip(self.model, state["model"]):
            missing, unexpected = self._unwrap(chunk).load_state_dict(weights, strict=False)
            missing = [k for k in missing if not k.endswith("_extra_state")]
            if missing or unexpected:
                raise ValueError(f"checkpoint {path} does not fit the model: missing {missing}, unexpected {unexpected}")
        if self.optimizer is not None and "optimizer" in state:
            if hasattr(self.optimizer, "reload_model_params"):
                self.optimizer.reload_model_params()
            self.optimizer.load_state_dict(state["optimizer"])
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        torch.set_rng_state(state["rng"]["cpu"])
        get_cuda_rng_tracker().set_states(state["rng"]["tracker"])
        if "cuda" in state["rng"] and self.compute_device == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"])

    # ---------------------------------------------------------------------------- topology

    def data_parallel_rank(self) -> int:
        from megatron.core import parallel_state as mpu

        return mpu.get_data_parallel_rank() if mpu.model_parallel_is_initialized() else 0

    def data_parallel_size(self) -> int:
        from megatron.core import parallel_state as mpu

        return mpu.get_data_parallel_world_size() if mpu.model_parallel_is_initialized() else 1

    def is_data_parallel_leader(self) -> bool:
        from megatron.core import parallel_state as mpu

        if not mpu.model_parallel_is_initialized():
            return True
        return (
            mpu.get_tensor_model_parallel_rank() == 0
            and mpu.get_context_parallel_rank() == 0
            and mpu.is_pipeline_last_stage(ignore_virtual=True)
        )


class ValueHead(torch.nn.Module):
    """Scalar output layer with megatron's output-layer call signature; replicated over TP."""

    def __init__(self, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, 1, bias=True, dtype=dtype)

    @property
    def weight(self) -> torch.nn.Parameter:
        return self.linear.weight

    def forward(self, hidden_states: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None):
        return self.linear(hidden_states), None


class MegatronValueEngine(MegatronLMEngine):
    """Critic on megatron-core: the LM's trunk with a scalar head; outputs values (B, R)."""

    model_type = "value_model"

    def _attach_head(self, module: Any) -> None:
        module.output_layer = ValueHead(self.tf_config.hidden_size, self.dtype)

    def _mapping_name(self, name: str) -> str:
        if name.startswith("output_layer.linear."):
            return "value_head." + name[len("output_layer.linear.") :]
        return name

    def _hf_model_class(self) -> Any:
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification

    def _read_hf_config(self) -> Any:
        hf_config = super()._read_hf_config()
        hf_config.num_labels = 1
        return hf_config

    def _hf_source(self) -> Callable[[str], torch.Tensor]:
        source = super()._hf_source()
        if not isinstance(source, SafetensorsSource) or "score.weight" in source:
            return source
        # An LM checkpoint: the value head starts like HF's token-classification head.
        generator = torch.Generator().manual_seed(int(self.model_config.init_seed))
        std = float(getattr(self.hf_config, "initializer_range", 0.02))
        head = {
            "score.weight": torch.randn(1, self.hf_config.hidden_size, generator=generator) * std,
            "score.bias": torch.zeros(1),
        }
        return lambda name: head[name] if name in head else source(name)

    def _postprocess(self, output: torch.Tensor, batch: Dict[str, Any], with_entropy: bool) -> Dict[str, torch.Tensor]:
        r = batch["responses"].shape[1]
        return {"values": output[:, -r - 1 : -1, 0].float()}
