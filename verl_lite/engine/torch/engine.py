"""The torch-native engine (backend `fsdp`): one process on CPU, or torch FSDP2 over data-parallel ranks.

With a process group of more than one rank, the wrap targets (decoder layers; untied embeddings and LM
head) and the root module are sharded with `fully_shard` (gloo on CPU, nccl/hccl on devices); gradients
are averaged over ranks, so each rank scales its loss by the data-parallel size (done by the worker's
loss function). The fsdp_config settings (dtypes, mesh, CPU offload policy, prefetch, wrap policy) are
resolved in engine/torch/fsdp_policy.py; one process is sharded too when they need it (mixed precision).
This module holds the engines' set-up, step and weights; the package's __init__ lists the parts beside it.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from verl_lite.config.roles import SECTION
from verl_lite.decisions import fsdp_settings
from verl_lite.decisions.layout import ulysses_setting
from verl_lite.engine.base import BaseEngine, LossFn
from verl_lite.engine.hf_export import check_hf_model_possible
from verl_lite.engine.torch import checkpoint as torch_checkpoint
from verl_lite.engine.torch import fsdp_policy
from verl_lite.engine.torch import lora
from verl_lite.engine.torch.activations import enable_activation_offload
from verl_lite.engine.torch.fused import LogProbHead
from verl_lite.engine.torch.optim import build_optimizer, make_lr_lambda
from verl_lite.engine.torch.packing import decide, packed_forward
from verl_lite.engine.torch.ulysses import SequenceParallel, checked as checked_sp_size
from verl_lite.models.hf import build_causal_lm, image_inputs, model_position_ids

logger = logging.getLogger(__name__)


def torch_device(device: str) -> torch.device:
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    if device == "npu":
        return torch.device("npu", torch.npu.current_device())  # type: ignore[attr-defined]
    raise ValueError(f"unknown device {device!r} (choose cpu, cuda or npu)")


def _local(param: torch.Tensor) -> torch.Tensor:
    """The tensor that holds this rank's values: a DTensor's local shard, else the tensor itself."""
    return param.to_local() if hasattr(param, "to_local") else param


class ValueHeadModel(nn.Module):
    """A causal LM backbone with a scalar head: values (B, T)."""

    base_model_prefix = "model"  # as a transformers model names its backbone (PEFT's LoRA reads it)

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.model = lm.model  # the decoder stack; the LM head is dropped
        self.config = lm.config
        self.value_head = nn.Linear(lm.config.get_text_config().hidden_size, 1)
        with torch.no_grad():
            self.value_head.weight.normal_(0.0, 0.02)
            self.value_head.bias.zero_()

    def forward(self, input_ids, attention_mask=None, position_ids=None, **image_kwargs):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False, **image_kwargs).last_hidden_state
        return self.value_head(hidden).squeeze(-1)


class TorchLMEngine(BaseEngine):
    """The language model (actor or ref) as a transformers model on torch, sharded with FSDP2 over the
    data-parallel ranks when there are several (or when the fsdp_config policies need it).

    Built by the workers through `verl_lite.registry.ENGINES` for (language_model, "fsdp", cpu | cuda | npu)
    and set up by `initialize()`. It owns the model (`module`: the HF model, with LoRA the PEFT wrapper,
    fully_shard'ed when `sharded`), its optimizer and LambdaLR schedule (engine/torch/optim.py), the
    resolved dtypes and sharding (engine/torch/fsdp_policy.py), the log-prob head (engine/torch/fused.py),
    the Ulysses sequence-parallel groups (`sp`, engine/torch/ulysses.py) and the remove-padding decision;
    its checkpoints are engine/torch/checkpoint.py's. `TorchValueEngine` is the critic on the same set-up.
    """

    model_type = "language_model"

    def __init__(self, model_config, engine_config, optim_config, device, role="actor"):
        super().__init__(model_config, engine_config, optim_config, device, role)
        self.module: Optional[nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.lr_scheduler = None
        self.dp_rank, self.dp_size = 0, 1
        self.sharded = False
        # fsdp_config's dtypes (engine/torch/fsdp_policy.py); `sharding` is set when fully_shard ran
        self.precision = fsdp_settings.resolve_precision(self.engine_config.fsdp_config, role, device)
        self.sharding: Optional[fsdp_policy.Sharding] = None
        # <role>.ulysses_sequence_parallel_size > 1 (engine/torch/ulysses.py)
        self.sp: Optional[SequenceParallel] = None
        # model.use_remove_padding: each micro-batch's real tokens packed into one row (engine/torch/packing.py)
        # (null = auto, resolved with the model in build: engine/torch/packing.py:decide)
        self.remove_padding = self.model_config.use_remove_padding is not False
        self.log_prob_head = LogProbHead(self.model_config, self.engine_config) if self.model_type == "language_model" \
            else None

    # -- build ---------------------------------------------------------------------------------

    def _build_module(self) -> nn.Module:
        return build_causal_lm(self.model_config)

    def initialize(self) -> None:
        import torch.distributed as dist

        module = self._build_module()
        check_hf_model_possible(self, module.config)
        # the role's Ulysses size, read once: the packing decision and the SP groups use this value
        sp_key, sp = ulysses_setting(self.engine_config, SECTION[self.role])
        if self.remove_padding:
            self.remove_padding = decide(self.role, self.model_config.use_remove_padding, getattr(module, "config", None),
                                         sequence_parallel=int(sp or 1) > 1)
        if self.model_config.enable_gradient_checkpointing:
            # the critic's ValueHeadModel checkpoints its decoder stack (a transformers model)
            target = module if hasattr(module, "gradient_checkpointing_enable") else getattr(module, "model", None)
            if not hasattr(target, "gradient_checkpointing_enable"):
                raise ValueError(f"{self.role}: model.enable_gradient_checkpointing=True, but {type(module).__name__} "
                                 "has no gradient checkpointing; set it to False")
            target.gradient_checkpointing_enable()
        # model.enable_activation_offload: saved activations in host memory between forward and backward
        self.activation_offload = (enable_activation_offload(module, self.device)
                                   if self.model_config.enable_activation_offload else None)
        if lora.enabled(self.model_config):  # adapters before sharding, as verl (engine/torch/lora.py)
            module = lora.wrap(module, self.model_config, self.model_type, self.role)
        # the stored dtype (model_dtype) for all of it, then the floating buffers in buffer_dtype
        module.to(torch_device(self.device), dtype=fsdp_policy.torch_dtype(self.precision.storage))
        fsdp_policy.cast_buffers(module, self.precision)
        fsdp_cfg = self.engine_config.fsdp_config
        multi_rank = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if multi_rank or self.precision.mixed or fsdp_settings.cpu_offload(fsdp_cfg, self.role, self.device):
            if not multi_rank:  # FSDP2 applies its policies to fully_shard'ed modules only (verl shards 1 rank too)
                fsdp_policy.ensure_one_rank_group(self.device, self.role)
            self.dp_rank, self.dp_size = dist.get_rank(), dist.get_world_size()
            module = self._shard(module)
        self._sequence_parallel(module, sp_key, sp)
        self.module = module
        optim = self.optim_config
        if optim is not None:
            # only the trainable parameters: with LoRA the adapters (the base is frozen)
            trainable = [p for p in self.module.parameters() if p.requires_grad]
            self.optimizer = build_optimizer(trainable, optim)
            total = int(optim.total_training_steps)
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, make_lr_lambda(optim, total))
        self.eval_mode()

    def _sequence_parallel(self, module: nn.Module, key: str, sp: Any) -> None:
        """Ulysses SP over `sp` ranks (the role's setting `key`, read at build), checked for this model and world."""
        world = self.dp_size if self.sharded else 1
        sp = checked_sp_size(key, sp, world, module.config, self.model_config.use_remove_padding)
        if sp > 1:
            self.sp = SequenceParallel(sp, torch_device(self.device).type)
            self.sp.attach(module)

    def _shard(self, module: nn.Module) -> nn.Module:
        import torch.distributed as dist

        fsdp_cfg = self.engine_config.fsdp_config
        world = dist.get_world_size()  # FSDP shards over every rank (verl: its mesh is the whole world)
        self.sharding = fsdp_policy.shard(module, fsdp_cfg, self.precision,
                                          fsdp_settings.cpu_offload(fsdp_cfg, self.role, self.device),
                                          torch_device(self.device).type, world)
        logger.info("%s: %s, %d wrapped modules; %s", self.role, fsdp_settings.describe_mesh(fsdp_cfg.fsdp_size, world),
                    self.sharding.wrapped, self.precision.describe())
        self.sharded = True
        return module

    @property
    def _host_offloaded(self) -> bool:
        """FSDP2's CPUOffloadPolicy keeps the shards on the host of a device run."""
        return self.sharding is not None and self.sharding.cpu_offload and self.device != "cpu"

    # -- modes ---------------------------------------------------------------------------------

    def train_mode(self) -> None:
        super().train_mode()
        # Dropout stays off (configs have 0.0); train() only matters for layers that check it.
        self.module.train()

    def eval_mode(self) -> None:
        super().eval_mode()
        self.module.eval()

    # -- compute -------------------------------------------------------------------------------

    def _image_kwargs(self, mb: Dict[str, Any], dev: torch.device) -> Dict[str, Any]:
        """The micro-batch's pixel inputs (its samples' multi_modal_inputs concatenated in order, as verl's
        dp_actor does) for a vision-language model; images for another model are refused."""
        pixels = image_inputs(mb.get("multi_modal_inputs"), dev)
        if pixels and not hasattr(getattr(self.module, "config", None), "vision_config"):
            raise ValueError(f"{self.role}: the batch has images (multi_modal_inputs) but {type(self.module).__name__} "
                             "is not a vision-language model: use a vision-language model.path")
        if pixels and (self.remove_padding or self.sp):  # packing_problem keeps vision-language models padded
            raise ValueError(f"{self.role}: images need a padded forward: set model.use_remove_padding=False and "
                             "ulysses_sequence_parallel_size=1")
        return pixels

    def _forward(self, mb: Dict[str, Any], calculate_entropy: bool,
                 calculate_sum_pi_squared: bool = False) -> Dict[str, Any]:
        dev = torch_device(self.device)
        input_ids = mb["input_ids"].to(dev)
        attention_mask = mb["attention_mask"].to(dev)
        position_ids = mb["position_ids"].to(dev)
        pixels = self._image_kwargs(mb, dev)
        # the log-prob head (engine/torch/fused.py): logits, or with model.use_fused_kernels the final hidden states
        head = self.log_prob_head
        if position_ids.dim() == 3:  # Qwen-VL's 3-D positions: the model takes them as (3, B, L)
            if self.remove_padding or self.sp:
                raise ValueError(f"{self.role}: 3-D (mrope) positions need a padded forward: set "
                                 "model.use_remove_padding=False and ulysses_sequence_parallel_size=1")
            output = head.pick(self.module(input_ids=input_ids, attention_mask=attention_mask,
                                           position_ids=model_position_ids(position_ids), use_cache=False,
                                           **pixels, **head.model_kwargs()))
        elif self.remove_padding:
            forward = self.sp.packed_forward if self.sp else packed_forward  # Ulysses SP: engine/torch/ulysses.py
            output = forward(self.module, {"input_ids": input_ids, "attention_mask": attention_mask,
                                           "position_ids": position_ids}, head.pick, **head.model_kwargs())
        else:
            output = head.pick(self.module(input_ids=input_ids, attention_mask=attention_mask,
                                           position_ids=position_ids, use_cache=False, **pixels,
                                           **head.model_kwargs()))
        return head(self.module, output, mb["responses"].to(dev), mb.get("temperature", 1.0), calculate_entropy,
                    calculate_sum_pi_squared)

    def forward_backward(self, micro_batches: List[Dict[str, Any]], loss_fn: Optional[LossFn] = None,
                         forward_only: bool = False, calculate_entropy: bool = False,
                         calculate_sum_pi_squared: bool = False) -> List[Dict[str, Any]]:
        """`calculate_sum_pi_squared` (forward-only passes): also "sum_pi_squared", (B, R)."""
        if calculate_sum_pi_squared and not forward_only:
            raise ValueError("calculate_sum_pi_squared is computed in the forward-only log-prob pass, not in training")
        results = []
        compute = fsdp_policy.compute_context(self.precision, torch_device(self.device).type)
        for mb in micro_batches:
            if forward_only:
                with torch.no_grad(), compute:
                    out = self._forward(mb, calculate_entropy, calculate_sum_pi_squared)
                    metrics: Dict[str, float] = {}
                    if loss_fn is not None:
                        _, metrics = loss_fn(out, mb)
            else:
                with compute:
                    out = self._forward(mb, calculate_entropy)
                    loss, metrics = loss_fn(out, mb)
                loss.backward()
            res = {k: v.detach().cpu() for k, v in out.items()}
            res["metrics"] = metrics
            results.append(res)
        return results

    def optimizer_zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> float:
        """Clip gradients to `optim.clip_grad` (0 = no clipping), step; returns the norm before clipping.
        `clip_grad` is the one clip setting, as in verl 0.9's engines (`actor.grad_clip` is not read)."""
        clip = float(self.optim_config.clip_grad)
        params = [p for p in self.module.parameters() if p.grad is not None]
        if self._host_offloaded:  # the norm's reduction runs on the device (verl's fsdp2_clip_grad_norm_)
            grad_norm = fsdp_policy.clip_grad_norm(params, clip, torch_device(self.device))
        elif clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm = float(grad_norm)
        if not math.isfinite(grad_norm):
            logger.warning("%s: gradient norm is %s, skipping this optimizer step", self.role, grad_norm)
            self.optimizer.zero_grad(set_to_none=True)
            return grad_norm
        self.optimizer.step()
        return grad_norm

    def lr_scheduler_step(self) -> float:
        self.lr_scheduler.step()
        return float(self.lr_scheduler.get_last_lr()[0])

    def current_lr(self) -> float:
        return float(self.lr_scheduler.get_last_lr()[0]) if self.lr_scheduler else 0.0

    # -- memory --------------------------------------------------------------------------------

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        target = torch_device(device) if device != "cpu" else torch.device("cpu")
        if model:
            if self.sharded and target.type == "cpu":
                from torch.distributed.fsdp import FSDPModule

                for m in self.module.modules():  # free what reshard_after_forward=False kept all-gathered
                    if isinstance(m, FSDPModule):
                        m.reshard()
            self.module.to(target)
        if grad:
            for p in self.module.parameters():
                if p.grad is not None:
                    p.grad = p.grad.to(target)
        if optimizer and self.optimizer is not None:
            for state in self.optimizer.state.values():
                for k, v in state.items():
                    if isinstance(v, torch.Tensor) and k != "step":
                        state[k] = v.to(target)

    # -- weights -------------------------------------------------------------------------------

    def export_hf_weights(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """The model's state dict (HF names: the module is a transformers model), one tensor at a
        time; under FSDP2 each is all-gathered in turn (a collective: every rank iterates to the end).
        With LoRA: the merged weights (base + adapter) under the HF model's names (engine/torch/lora.py)."""
        if lora.is_peft(self.module):
            yield from lora.merged_weights(self.module)
            return
        for name, value in self.module.state_dict().items():
            if hasattr(value, "full_tensor"):
                if self._host_offloaded:  # the all-gather runs on the device
                    value = value.to(torch_device(self.device))
                value = value.full_tensor()
            yield name, value.detach().cpu()

    @torch.no_grad()
    def snapshot_to_cpu(self) -> Dict[str, torch.Tensor]:
        """This rank's parameters on CPU: an FSDP2 (DTensor) parameter as its local shard."""
        return {name: _local(p).detach().to("cpu", copy=True) for name, p in self.module.named_parameters()}

    @torch.no_grad()
    def restore_from_cpu(self, snapshot: Dict[str, torch.Tensor]) -> None:
        params = dict(self.module.named_parameters())
        if set(params) != set(snapshot):
            diff = sorted(set(params) ^ set(snapshot))[:3]
            raise ValueError(f"{self.role}: the CPU snapshot does not match the model's parameters (e.g. {diff})")
        for name, p in params.items():
            local = _local(p)
            local.copy_(snapshot[name].to(local.device, non_blocking=True))

    def disable_adapter(self):
        """A context in which the model runs without its LoRA adapters: the base model, which is the
        ref policy when LoRA is on (verl's ref in the actor)."""
        return lora.disabled(self.module)

    # -- checkpoints ---------------------------------------------------------------------------

    # the critic's value head is HF's token-classification `score`
    HF_RENAME: Dict[str, str] = {}

    def save_hf_model(self, path: str, strict: bool = True, state: Optional[Dict[str, torch.Tensor]] = None
                      ) -> Optional[str]:
        """The model as an HF model dir at `path` (a collective, rank 0 writes; engine/torch/checkpoint.py).
        `state`: the full state dict when the caller holds it already (then nothing is gathered again)."""
        return torch_checkpoint.save_hf_model(self, path, strict, state)

    def save_checkpoint(self, path: str) -> None:
        """checkpoint.save_contents: model.pt, rng_rank*.pt and/or the HF copy (engine/torch/checkpoint.py)."""
        torch_checkpoint.save(self, path)

    def load_checkpoint(self, path: str) -> None:
        torch_checkpoint.load(self, path)

    # -- topology ------------------------------------------------------------------------------

    # with Ulysses SP the ranks of one SP group are one data-parallel rank fed the same data
    def data_parallel_rank(self) -> int:
        return self.sp.dp_rank if self.sp else self.dp_rank

    def data_parallel_size(self) -> int:
        return self.sp.dp_size if self.sp else self.dp_size

    def is_data_parallel_leader(self) -> bool:
        return self.sp.rank == 0 if self.sp else True

    def sequence_parallel_size(self) -> int:
        return self.sp.size if self.sp else 1

    def data_parallel_group(self) -> Any:
        """Every rank of the world (the SP peers of a data-parallel rank hold the same micro-batch)."""
        import torch.distributed as dist

        return dist.group.WORLD if self.dp_size > 1 else None


class TorchValueEngine(TorchLMEngine):
    """The critic: the LM's decoder stack with a scalar head (`ValueHeadModel`); outputs values (B, R)."""

    model_type = "value_model"
    HF_RENAME = {"value_head.": "score."}

    def _build_module(self) -> nn.Module:
        lm = build_causal_lm(self.model_config)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.model_config.init_seed) + 1)
            return ValueHeadModel(lm)

    def _forward(self, mb: Dict[str, Any], calculate_entropy: bool,
                 calculate_sum_pi_squared: bool = False) -> Dict[str, Any]:
        if calculate_sum_pi_squared:
            raise ValueError(f"{self.role}: a value model has no token distribution: no sum_pi_squared")
        dev = torch_device(self.device)
        inputs = {k: mb[k].to(dev) for k in ("input_ids", "attention_mask", "position_ids")}
        pixels = self._image_kwargs(mb, dev)
        if inputs["position_ids"].dim() == 3 or pixels:  # vision-language rows: padded, 3-D positions as (3, B, L)
            values = self.module(**dict(inputs, position_ids=model_position_ids(inputs["position_ids"])), **pixels)
        elif self.remove_padding:
            values = (self.sp.packed_forward if self.sp else packed_forward)(self.module, inputs, None)
        else:
            values = self.module(**inputs)
        resp_len = mb["responses"].shape[1]
        return {"values": values[:, -resp_len - 1:-1].float()}
