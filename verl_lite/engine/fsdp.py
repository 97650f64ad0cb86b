"""Torch-native engine (backend `fsdp`): one process on CPU, or torch FSDP2 over data-parallel ranks.

With a process group of more than one rank, the wrap targets (decoder layers; untied embeddings and LM
head) and the root module are sharded with `fully_shard` (gloo on CPU, nccl/hccl on devices); gradients
are averaged over ranks, so each rank scales its loss by the data-parallel size (done by the worker's
loss function). The fsdp_config settings (dtypes, mesh, CPU offload policy, prefetch, wrap policy) are
resolved in engine/fsdp_policy.py; one process is sharded too when they need it (mixed precision).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from verl_lite.checkpoint_files import CheckpointError, load_tensors
from verl_lite.config.schema import OptimConfig
from verl_lite.decisions.lr_schedule import TORCH_OPTIMIZERS
from verl_lite.engine import fsdp_policy
from verl_lite.engine import lora
from verl_lite.engine.base import BaseEngine, LossFn
from verl_lite.engine.hf_export import (HF_DIR, Contents, check_hf_model_possible, check_loadable, hf_files,
                                        save_hf_model, write_contents)
from verl_lite.engine.activations import enable_activation_offload
from verl_lite.engine.fused import LogProbHead
from verl_lite.engine.packing import decide, packed_forward
from verl_lite.engine.ulysses import SequenceParallel, checked as checked_sp_size, setting_of as sp_setting_of
from verl_lite.models import resolve_model_dir
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


def schedule_type(optim: OptimConfig) -> str:
    """fsdp's schedule: verl's deprecated `warmup_style` wins over `lr_scheduler_type` when set."""
    kind = optim.warmup_style if optim.warmup_style is not None else optim.lr_scheduler_type
    if kind not in ("constant", "cosine"):
        name = "warmup_style" if optim.warmup_style is not None else "lr_scheduler_type"
        raise ValueError(f"optim.{name}={kind!r}: choose constant or cosine")
    return kind


def make_lr_lambda(optim: OptimConfig, total_steps: int):
    """LR multiplier by step, as verl's FSDP engine builds it (verl/utils/torch_functional.py):
    linear warm-up from 0 over `lr_warmup_steps` (else `lr_warmup_steps_ratio * total_steps`), then
    constant, or `num_cycles` cosine waves from 1 down to `min_lr_ratio` at `total_steps`."""
    warmup = int(optim.lr_warmup_steps)
    if warmup <= 0:
        warmup = int(float(optim.lr_warmup_steps_ratio) * total_steps)
    kind = schedule_type(optim)
    min_ratio, cycles = float(optim.min_lr_ratio), float(optim.num_cycles)
    shift = 0 if optim.zero_indexed_step else 1

    def constant(step: int) -> float:
        return step / max(1.0, warmup) if step < warmup else 1.0

    def cosine(step: int) -> float:
        step += shift
        if step < warmup:
            return step / max(1, warmup)
        progress = (step - warmup) / max(1, total_steps - warmup)
        wave = math.cos(math.pi * cycles * 2.0 * progress)
        return max(min_ratio, min_ratio + (1 - min_ratio) * 0.5 * (1 + wave))

    return constant if kind == "constant" else cosine


def build_optimizer(params, optim: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer class `optim.optimizer` of `optim.optimizer_impl` (torch.optim), as verl's
    build_optimizer makes it: lr, weight_decay, betas, and override_optimizer_config's keyword arguments
    (checked by the preflight, decisions/optimizer_overrides.torch_problems)."""
    name = optim.optimizer or "AdamW"
    if optim.optimizer_impl != "torch.optim" or name not in TORCH_OPTIMIZERS:
        raise ValueError(f"optim.optimizer={name!r} of optim.optimizer_impl={optim.optimizer_impl!r}: the fsdp "
                         f"engine builds {', '.join(TORCH_OPTIMIZERS)} of torch.optim")
    cls = getattr(torch.optim, name)
    extra = dict(optim.override_optimizer_config or {})
    return cls(params, lr=float(optim.lr), betas=tuple(optim.betas), weight_decay=float(optim.weight_decay), **extra)


class TorchLMEngine(BaseEngine):
    model_type = "language_model"

    def __init__(self, model_config, engine_config, optim_config, device, role="actor"):
        super().__init__(model_config, engine_config, optim_config, device, role)
        self.module: Optional[nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.lr_scheduler = None
        self.dp_rank, self.dp_size = 0, 1
        self.sharded = False
        # fsdp_config's dtypes (engine/fsdp_policy.py); `sharding` is set when fully_shard ran
        self.precision = fsdp_policy.resolve_precision(self.engine_config.fsdp_config, role, device)
        self.sharding: Optional[fsdp_policy.Sharding] = None
        self.sp: Optional[SequenceParallel] = None  # <role>.ulysses_sequence_parallel_size > 1 (engine/ulysses.py)
        # model.use_remove_padding: each micro-batch's real tokens packed into one row (engine/packing.py)
        # (null = auto, resolved with the model in build: engine/packing.py:decide)
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
        sp_key, sp = sp_setting_of(self.role, self.engine_config)
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
        if lora.enabled(self.model_config):  # adapters before sharding, as verl (engine/lora.py)
            module = lora.wrap(module, self.model_config, self.model_type, self.role)
        # the stored dtype (model_dtype) for all of it, then the floating buffers in buffer_dtype
        module.to(torch_device(self.device), dtype=fsdp_policy.torch_dtype(self.precision.storage))
        fsdp_policy.cast_buffers(module, self.precision)
        fsdp_cfg = self.engine_config.fsdp_config
        multi_rank = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if multi_rank or self.precision.mixed or fsdp_policy.cpu_offload(fsdp_cfg, self.role, self.device):
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
                                          fsdp_policy.cpu_offload(fsdp_cfg, self.role, self.device),
                                          torch_device(self.device).type, world)
        logger.info("%s: %s, %d wrapped modules; %s", self.role, fsdp_policy.describe_mesh(fsdp_cfg.fsdp_size, world),
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
        # the log-prob head (engine/fused.py): logits, or with model.use_fused_kernels the final hidden states
        head = self.log_prob_head
        if position_ids.dim() == 3:  # Qwen-VL's 3-D positions: the model takes them as (3, B, L)
            if self.remove_padding or self.sp:
                raise ValueError(f"{self.role}: 3-D (mrope) positions need a padded forward: set "
                                 "model.use_remove_padding=False and ulysses_sequence_parallel_size=1")
            output = head.pick(self.module(input_ids=input_ids, attention_mask=attention_mask,
                                           position_ids=model_position_ids(position_ids), use_cache=False,
                                           **pixels, **head.model_kwargs()))
        elif self.remove_padding:
            forward = self.sp.packed_forward if self.sp else packed_forward  # Ulysses SP: engine/ulysses.py
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
        With LoRA: the merged weights (base + adapter) under the HF model's names (engine/lora.py)."""
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

    def _contents(self):
        return Contents(getattr(self.engine_config, "checkpoint", None), self.role)

    def _layout(self) -> Dict[str, Any]:
        """Recorded in contents.json; only the engine is compared on load: the full state dicts load at
        any data-parallel size."""
        return {"engine": "fsdp", "data_parallel_size": self.dp_size}

    # the critic's value head is HF's token-classification `score`
    _HF_RENAME: Dict[str, str] = {}

    def save_hf_model(self, path: str, strict: bool = True, state: Optional[Dict[str, torch.Tensor]] = None
                      ) -> Optional[str]:
        """Write the model as an HF model dir at `path` (config, safetensors, tokenizer; see
        engine/hf_export.py). A collective: every rank calls it, rank 0 writes. `state`: the full
        state dict when the caller holds it already (then nothing is gathered again)."""
        mc = self.model_config
        tensors = iter(state.items()) if state is not None else self.export_hf_weights()
        return save_hf_model(path, tensors, self.module.config, self.model_type,
                             mc.tokenizer_path or mc.path, bool(mc.trust_remote_code), strict, self.role,
                             model_dir=resolve_model_dir(mc.path), rename=self._HF_RENAME)

    def save_checkpoint(self, path: str) -> None:
        """What checkpoint.save_contents lists: model (the full, unsharded state dict), optimizer and
        extra (LR schedule, RNG) in model.pt and rng_rank*.pt, hf_model in huggingface/; rank 0
        writes all but each rank's RNG file."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        contents = self._contents()
        os.makedirs(path, exist_ok=True)
        peft = lora.is_peft(self.module)
        model_sd = None
        if "model" in contents.save:  # the whole model; with LoRA the adapters alone (the base is model.path)
            model_sd = lora.trainable_state(self.module) if peft else dict(self.export_hf_weights())
            if peft:
                lora.save_adapter(self.module, os.path.join(path, lora.ADAPTER_DIR), model_sd, self.dp_rank == 0)
        if "hf_model" in contents.save:  # with LoRA the merged model
            self.save_hf_model(os.path.join(path, HF_DIR), contents.strict, state=None if peft else model_sd)
        optim_sd = None
        if self.optimizer is not None and "optimizer" in contents.save:
            if self.sharded:
                optim_sd = get_optimizer_state_dict(self.module, self.optimizer,
                                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            else:
                optim_sd = self.optimizer.state_dict()
        extra = "extra" in contents.save
        if self.dp_rank == 0:
            if contents.save & {"model", "optimizer", "extra"}:
                payload = {"model": model_sd, "optimizer": optim_sd,
                           "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler and extra else None}
                torch.save(payload, os.path.join(path, "model.pt"))
            write_contents(path, contents.save, self._layout())
        if extra:
            rng = {"cpu": torch.get_rng_state()}
            if self.device in ("cuda", "npu"):  # sampling in the rollout draws from the device generator too
                rng[self.device] = getattr(torch, self.device).get_rng_state()
            torch.save(rng, os.path.join(path, f"rng_rank{self.dp_rank}.pt"))

    def _load_hf_weights(self, path: str) -> None:
        """The weights of the part's HF copy (huggingface/*.safetensors), whatever layout wrote them."""
        from safetensors.torch import load_file

        state: Dict[str, torch.Tensor] = {}
        for file in hf_files(path):
            state.update(load_file(file))
        for own_prefix, hf_prefix in self._HF_RENAME.items():
            state = {(own_prefix + k[len(hf_prefix):] if k.startswith(hf_prefix) else k): v for k, v in state.items()}
        own = self.module.state_dict()
        if "lm_head.weight" in own and "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied: written once, as HF does
        self._set_model_state(state, os.path.join(path, "huggingface"))

    def _set_model_state(self, state: Dict[str, Any], source: str, strict: bool = True) -> None:
        """`strict=False`: `state` covers part of the model (the LoRA adapters, checked by the caller)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        try:
            if self.sharded:
                set_model_state_dict(self.module, state, options=StateDictOptions(full_state_dict=True,
                                                                                  cpu_offload=True, strict=strict))
            else:
                self.module.load_state_dict(state, strict=strict)
        except RuntimeError as e:  # missing/unexpected keys or shape mismatch: another model's checkpoint
            raise CheckpointError(f"checkpoint {source} does not fit the {self.role} model "
                                  f"({' '.join(str(e).split())[:240]}); resume with the model it was "
                                  f"saved from, or set trainer.resume_mode=disable") from e

    def load_checkpoint(self, path: str) -> None:
        """What checkpoint.load_contents lists (a listed part the checkpoint lacks is a CheckpointError);
        the weights from model.pt, or with hf_model alone from the HF copy."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        contents = self._contents()
        check_loadable(path, contents, self.role, {"engine": "fsdp"})
        weights = contents.weights_from()
        payload: Dict[str, Any] = {}
        model_file = os.path.join(path, "model.pt")
        if weights == "model" or contents.load & {"optimizer", "extra"}:
            payload = load_tensors(model_file)  # weights_only=True: pickled objects are refused, never run
            if not isinstance(payload, dict) or "model" not in payload:
                raise CheckpointError(f"checkpoint file {model_file} is not a {self.role} checkpoint of this engine "
                                      f"(expected a dict with 'model', 'optimizer', 'lr_scheduler')")
        if weights == "model":
            if not isinstance(payload.get("model"), dict):
                raise CheckpointError(f"checkpoint file {model_file} holds no model weights")
            if lora.is_peft(self.module):  # the adapters alone; the base stays as model.path gave it
                lora.check_trainable_state(self.module, payload["model"], model_file)
                self._set_model_state(payload["model"], model_file, strict=False)
            else:
                self._set_model_state(payload["model"], model_file)
        elif weights == "hf_model" and lora.is_peft(self.module):
            raise CheckpointError(f"{path}: with LoRA the weights resume from the adapters in model.pt; "
                                  f"{self._contents().prefix}.load_contents has hf_model but not model (the merged "
                                  "HF copy cannot be split back into base and adapter): add model to load_contents")
        elif weights == "hf_model":
            self._load_hf_weights(path)
        if "optimizer" in contents.load and self.optimizer is not None and payload.get("optimizer") is not None:
            if self.sharded:
                set_optimizer_state_dict(self.module, self.optimizer, payload["optimizer"],
                                         options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            else:
                self.optimizer.load_state_dict(payload["optimizer"])
        if "extra" not in contents.load:
            return
        if self.lr_scheduler is not None and payload.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(payload["lr_scheduler"])
        rng_file = os.path.join(path, f"rng_rank{self.dp_rank}.pt")
        if not os.path.isfile(rng_file):  # saved by fewer data-parallel ranks: the full state dicts load alike
            logger.warning("%s: %s holds no RNG state for data-parallel rank %d (saved with another data-parallel "
                           "size); this rank's sampling continues from its own seed", self.role, path, self.dp_rank)
            return
        rng = load_tensors(rng_file)
        torch.set_rng_state(rng["cpu"])
        if self.device in ("cuda", "npu") and self.device in rng:
            getattr(torch, self.device).set_rng_state(rng[self.device])

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
    model_type = "value_model"
    _HF_RENAME = {"value_head.": "score."}

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
