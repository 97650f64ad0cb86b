"""The Megatron engine (megatron-core 0.16) of the policy/reference language model, which the critic's
(`value.MegatronValueEngine`) subclasses.

Registered for (language_model, "megatron", cpu | cuda); on npu the MindSpeed subclasses in
`verl_lite.engine.megatron.mindspeed` serve the same keys. Nothing here imports megatron at
module import time: MindSpeed must patch megatron before its first import, so every megatron
import happens inside the methods (and the helper modules' functions) that need it. This module
holds the engine's lifecycle; the package's __init__ lists the parts beside it.

What an engine does (see `BaseEngine` for the batch contract):
- `initialize()`: the caller has already set up torch.distributed (a single-rank caller may leave
  it to the engine, which then starts a one-process group). Device-mesh init calls
  `initialize_model_parallel(TP, PP, VPP, CP, EP, ETP)` unless it ran already (the actor and the
  ref of one worker share it). The model is a GPTModel built through the model's bridge; its
  weights come from the HF safetensors or, when the directory has none, from an HF model randomly
  initialised with `model.init_seed` (so every parallel layout starts from the same weights as
  the torch engine would). The optimizer is megatron's Adam with an `OptimizerParamScheduler`.
  Through Megatron-Bridge / mbridge (bridges/select.py) the external bridge builds and loads the
  chunks; the DDP wrap, the freeze, the optimizer and eval mode are this class's own (`_set_up_chunks`).
- `forward_backward()` runs megatron's pipeline schedule (`schedule`); outputs reach every pipeline stage.
- `optimizer_step()` clips to `optim.clip_grad` itself (megatron's clip asserts CUDA tensors).

Remove-padding (`model.use_remove_padding`, null = auto; decisions/packing_mode.py decides per engine,
device and GDN kernel): packed micro-batches are THD (`batch.prepare_packed_batch`: each
sequence aligned to TP as verl's `preprocess_packed_seqs`, megatron's `PackedSeqParams`); attention
layers get a core attention that takes them (`model.packed_core_attention`), GDN layers reset
their state per sequence (`gdn`), outputs come back in the padded layout. Padded batches
otherwise (Qwen3.5's GDN layers mask the padding).

Not supported yet: context parallelism inside forward (CP>1 builds the mesh, forward raises).
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from verl_lite.config.roles import SECTION
from verl_lite.config.schema import MegatronConfig
from verl_lite.decisions import packing_mode, ulysses
from verl_lite.decisions.layout import Layout, section_layout, ulysses_setting
from verl_lite.engine import hf_export
from verl_lite.engine.base import BaseEngine, LossFn, UnsupportedModelError
from verl_lite.engine.logits import log_prob_outputs
from verl_lite.engine.megatron import checkpoint as megatron_checkpoint
from verl_lite.engine.megatron import conventions
from verl_lite.engine.megatron import hf as megatron_hf
from verl_lite.engine.megatron import memory as megatron_memory
from verl_lite.engine.megatron import model as megatron_model
from verl_lite.engine.megatron import optim as megatron_optim
from verl_lite.engine.megatron import parallel
from verl_lite.engine.megatron import schedule as megatron_schedule
from verl_lite.engine.megatron import vocab as megatron_vocab
from verl_lite.engine.megatron.bridges import ModelShard, ModelBridge
from verl_lite.engine.megatron.bridges import select as bridge_select
from verl_lite.models import resolve_model_dir

logger = logging.getLogger(__name__)


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
        self.layout: Optional[ModelShard] = None
        self.external: Any = None  # Megatron-Bridge / mbridge build, when that bridge is chosen (bridges/select.py)
        self._parking = megatron_memory.StorageParking()
        self.remove_padding = False  # packed (THD) micro-batches; decided in initialize() (_decide_packing)

    # ---------------------------------------------------------------------------- settings

    @property
    def compute_device(self) -> str:
        """Where tensors live ("cpu", "cuda", "npu"). MindSpeed engines may override it in tests."""
        return self.device

    def parallel_layout(self) -> Layout:
        """The role's parallel layout, from its section (decisions/layout.py, as the preflight reads it) over
        this process group's ranks."""
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        return section_layout(self.engine_config, self.role, "megatron", world)

    def parallel_sizes(self) -> Dict[str, Any]:
        """megatron's parallel arguments for the layout (initialize_model_parallel, TransformerConfig, a bridge)."""
        return self.parallel_layout().megatron_kwargs()

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

    @property
    def _tied_lm_head(self) -> bool:
        return self.layout.tied and self.model_type == "language_model"

    # ---------------------------------------------------------------------------- lifecycle

    @property
    def megatron_key(self) -> str:
        """The role's megatron section, as messages name it (e.g. actor_rollout_ref.actor.megatron)."""
        return f"{SECTION[self.role]}.megatron"

    def initialize(self) -> None:

        refused = ulysses.problems(*ulysses_setting(self.engine_config, SECTION[self.role]), None, None, None,
                                   strategy="megatron")
        if refused:
            raise ValueError(refused[0])
        self._import_backend()  # first: on Ascend, MindSpeed patches megatron before anything imports it
        from megatron.core import parallel_state as mpu

        parallel.ensure_process_group(self.compute_device, self.role)
        self._prepare_device()
        self.init_device_mesh()
        parallel.seed(self.compute_device, self.megatron_config.seed)
        self.hf_config = self._read_hf_config()
        hf_export.check_hf_model_possible(self, self.hf_config)  # save_contents=[hf_model]: fail now, not at a save
        # verl_lite's registry, Megatron-Bridge's AutoBridge or mbridge, as verl's use_mbridge/vanilla_mbridge
        # say (decisions/bridge_choice.py); on npu MindSpeed-Bridge registers here, after the repatch above.
        selection = bridge_select.select_bridge(self.megatron_config, self.hf_config, self.device, self._model_dir(),
                                                self.model_type, bool(self.model_config.trust_remote_code),
                                                own_refused=self._own_bridge_refusal())
        tp_size, tp_rank = mpu.get_tensor_model_parallel_world_size(), mpu.get_tensor_model_parallel_rank()
        if selection.external is not None:
            # the external bridge builds and loads the chunks; wrapping, optimizer and freeze are ours
            self.external = selection.external
            self._decide_packing(bridge_select.external_gdn_kernel(self.hf_config, self.device,
                                                                   self.transformer_overrides()))
            chunks = bridge_select.build_external(self.external, self.parallel_sizes(),
                                                  self.megatron_config.sequence_parallel, self.transformer_overrides(),
                                                  self.dtype, self.model_type == "value_model")
            # how schedule.run_schedule calls them: verl's call for the model's class, not verl_lite's own
            conventions.mark_forward_convention(chunks, self.device)
            self.tf_config = getattr(chunks[0], "config", None)
            self.layout = bridge_select.external_layout(self.hf_config, tp_size, tp_rank)
            self._set_up_chunks(chunks)
            return
        self.bridge = selection.bridge
        if self.bridge.has_vision and self.model_type == "value_model":
            raise UnsupportedModelError(
                f"{self.role}: a critic on the vision-language model {type(self.bridge).__name__} is not supported by "
                f"verl_lite's Megatron engines yet (use critic.strategy=fsdp, or an estimator without a critic: "
                f"algorithm.adv_estimator=grpo)")
        self.tf_config = megatron_model.transformer_config(
            self.bridge, self.parallel_sizes(), self.dtype, self.transformer_overrides(),
            self.megatron_config.sequence_parallel, self.compute_device, self.role, device=self.device,
            gdn_chunk_size=self.model_config.linear_attention_chunk_size)
        if getattr(self.tf_config, "gdn_kernel", None) is not None:
            self._configure_gdn(self.tf_config)
        self._decide_packing(getattr(self.tf_config, "gdn_kernel", None), self._gdn_packs)
        self.layout = self.bridge.layout(tp_size, tp_rank)
        chunks = megatron_model.build_chunks(self.tf_config, self.bridge, self.layout, self.torch_device(),
                                             self.compute_device, self._tied_lm_head, self._attach_head,
                                             packed_attention=self.remove_padding)
        self._set_up_chunks(chunks, lambda: megatron_hf.load_hf_weights(self._local_params(), self.bridge,
                                                                        self.layout, self._hf_source()))

    def _set_up_chunks(self, chunks: List[Any], load_weights: Optional[Callable[[], None]] = None) -> None:
        """The one set-up of built model chunks, whichever bridge built them: DDP-wrapped with the
        optimizer when the role trains, frozen otherwise; `load_weights` runs between the wrap and the
        optimizer (an external bridge has loaded its chunks already); then eval mode."""
        trains = self.role != "ref" and self.optim_config is not None
        use_dist_opt = bool(self.megatron_config.use_distributed_optimizer) and self.compute_device != "cpu"
        if trains:
            self.model = megatron_model.wrap_ddp(self.tf_config, chunks, use_dist_opt, self.megatron_key,
                                                 self.parallel_layout().tp)
        else:
            for module in chunks:
                module.requires_grad_(False)
            self.model = chunks
        if load_weights is not None:
            load_weights()
        if trains:
            self.optimizer, self.lr_scheduler = megatron_optim.build_optimizer(
                self.model, self.optim_config, self.dtype, use_distributed_optimizer=use_dist_opt, role=self.role)
        self.eval_mode()

    def _own_bridge_refusal(self) -> Optional[str]:
        """Hook: why verl_lite's own bridges cannot build this model here (the MindSpeed engines' stack)."""
        return None

    def _configure_gdn(self, tf_config: Any) -> None:
        """Hook: how the model's Gated DeltaNet layers run beyond the kernel the switches chose (the
        MindSpeed engines apply their Ascend stack: MindSpeed's own GatedDeltaNet where it swaps it in)."""

    _gdn_packs: Optional[bool] = None  # set by _configure_gdn where the GDN layer's packing differs from its kernel's

    def _decide_packing(self, gdn_kernel: Optional[str], gdn_packs: Optional[bool] = None) -> None:
        """model.use_remove_padding for this engine (decisions/packing_mode.py: null = auto): packed where
        the attention and the GDN kernel take packed input; an explicit True that cannot be honoured
        raises with the reason."""
        te = None
        if self.compute_device == "cuda" and self.external is None:
            te = megatron_model.transformer_engine_attention() is not None
        decision = packing_mode.decide_megatron(
            self.model_config.use_remove_padding, self.device, gdn_kernel, self.transformer_overrides(),
            external=self.external is not None, te_installed=te, gdn_packs=gdn_packs,
            vision=self.bridge is not None and self.bridge.has_vision)
        if decision.refusal:
            raise ValueError(f"{self.role}: model.use_remove_padding=True cannot run here: {decision.refusal}")
        self.remove_padding = decision.packed
        logger.info("%s: micro-batches %s", self.role, decision.why)

    def _import_backend(self) -> None:
        """Hook run before anything imports megatron (MindSpeed imports its adaptor here)."""

    def _before_parallel_init(self) -> None:
        """Hook run in device-mesh init before `initialize_model_parallel` (MindSpeed repatches)."""

    def _prepare_device(self) -> None:
        parallel.prepare_device(self.compute_device)

    def torch_device(self) -> torch.device:
        return parallel.torch_device(self.compute_device)

    def init_device_mesh(self) -> None:
        """Set up TP/PP/CP/EP groups unless this process already has them (actor and ref share)."""
        self._before_parallel_init()
        parallel.init_groups(self.parallel_layout(), self.role, self.megatron_key)

    # ---------------------------------------------------------------------------- the model (LM / value hooks)

    def _model_dir(self) -> str:
        return resolve_model_dir(self.model_config.path)

    def _read_hf_config(self) -> Any:
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(self._model_dir(), trust_remote_code=bool(self.model_config.trust_remote_code))
        for key, value in self.model_config.override_config.items():
            setattr(hf_config, key, value)
        return hf_config

    def _attach_head(self, module: Any) -> None:
        """Language models keep megatron's (vocab-parallel) output layer."""

    def _hf_model_class(self) -> Any:
        from transformers import AutoModelForCausalLM

        own = getattr(self.bridge, "hf_model_class", None)  # a vision-language bridge names its class
        return own() if callable(own) else AutoModelForCausalLM

    def _hf_source(self) -> megatron_hf.HFSource:
        """The HF tensors to start from: the checkpoint's safetensors, else a seeded random init."""
        files = sorted(glob.glob(os.path.join(self._model_dir(), "*.safetensors")))
        if files:
            return megatron_hf.SafetensorsSource(files)
        return megatron_hf.random_hf_state(self._hf_model_class(), self.hf_config, int(self.model_config.init_seed))

    def _mapping_name(self, name: str) -> str:
        """A parameter's name as the bridge knows it."""
        return name

    def _local_params(self) -> Iterator[megatron_hf.LocalParam]:
        return megatron_hf.local_params(self.model, self._mapping_name)

    # ---------------------------------------------------------------------------- compute

    def train_mode(self) -> None:
        super().train_mode()
        for chunk in self.model:
            chunk.train()

    def eval_mode(self) -> None:
        super().eval_mode()
        for chunk in self.model:
            chunk.eval()

    def postprocess(self, output: torch.Tensor, batch: Dict[str, Any], with_entropy: bool) -> Dict[str, torch.Tensor]:
        responses = batch["responses"]
        r = responses.shape[1]
        logits = output[:, -r - 1 : -1, :]  # position t predicts token t + 1
        temperature = float(batch.get("temperature", 1.0) or 1.0)  # the rollout's, as the torch engine divides
        if temperature != 1.0:
            logits = logits / temperature
        role = self.engine_config  # the role's log-prob settings, as on the torch engine (engine/torch/fused.py)
        chunk = int(role.entropy_from_logits_chunk_size) if role.entropy_from_logits_with_chunking else None
        # sum_pi_squared first: it reads the logits without changing them (verl's order too)
        extra = ({"sum_pi_squared": megatron_vocab.vocab_parallel_sum_pi_squared(logits, self.layout.vocab, chunk)}
                 if self._sum_pi_squared else {})
        out = log_prob_outputs(*megatron_vocab.vocab_parallel_log_probs(
            logits, responses, self.layout.vocab, with_entropy, role.use_torch_compile, chunk_size=chunk,
            checkpoint=bool(role.entropy_checkpointing)))
        out.update(extra)
        return out

    _sum_pi_squared = False  # set for the duration of a forward_backward(calculate_sum_pi_squared=True)

    def forward_backward(self, micro_batches: List[Dict[str, Any]], loss_fn: Optional[LossFn] = None,
                         forward_only: bool = False, calculate_entropy: bool = False,
                         calculate_sum_pi_squared: bool = False) -> List[Dict[str, Any]]:
        """`calculate_sum_pi_squared` (forward-only passes): also "sum_pi_squared", (B, R), from the
        vocabulary-parallel logits (each TP rank's partial sums all-reduced)."""
        if calculate_sum_pi_squared and not forward_only:
            raise ValueError("calculate_sum_pi_squared is computed in the forward-only log-prob pass, not in training")
        self._sum_pi_squared = bool(calculate_sum_pi_squared)
        try:
            return megatron_schedule.forward_backward(self, micro_batches, loss_fn, forward_only, calculate_entropy)
        finally:
            self._sum_pi_squared = False

    def micro_batch_multiple(self) -> int:
        """The interleaved schedule (virtual pipeline stages) runs micro-batches in groups of PP."""
        layout = self.parallel_layout()
        return layout.pp if layout.vpp and int(layout.vpp) > 1 and layout.pp > 1 else 1

    # ---------------------------------------------------------------------------- optimizer

    def need_optimizer(self, what: str) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"{what}: the {self.role} engine has no optimizer (ref engines only run forward)")

    def optimizer_zero_grad(self) -> None:
        self.need_optimizer("optimizer_zero_grad")
        for chunk in self.model:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()

    def optimizer_step(self) -> float:
        """Step with gradients clipped to optim.clip_grad; returns the norm before clipping."""
        self.need_optimizer("optimizer_step")
        return megatron_optim.clipped_step(self.optimizer, float(self.optim_config.clip_grad), self.role)

    def lr_scheduler_step(self) -> float:
        self.need_optimizer("lr_scheduler_step")
        self.lr_scheduler.step(1)
        return self.current_lr()

    def current_lr(self) -> float:
        return megatron_optim.current_lr(self.optimizer)

    # ---------------------------------------------------------------------------- memory

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Offload to "cpu" or load back to the engine's device. A no-op for a CPU engine."""
        if device not in ("cpu", self.device, "device"):
            raise ValueError(f"{self.role}: to({device!r}) on a {self.device} engine (use 'cpu' or {self.device!r})")
        target = torch.device("cpu") if device == "cpu" else self.torch_device()
        if target == self.torch_device() and self.compute_device == "cpu":
            return
        if model:
            megatron_memory.move_model(self.model, target, self._parking)
        if grad and self.optimizer is not None:
            megatron_memory.move_grads(self.model, target, self._parking)
        if optimizer and self.optimizer is not None:
            megatron_memory.move_optimizer_state(self.model, self.optimizer, target)
        if target.type != "cpu" and hasattr(torch, self.compute_device):
            getattr(torch, self.compute_device).synchronize()

    def snapshot_to_cpu(self) -> List[Dict[str, Any]]:
        """This rank's weights on CPU, one entry per model chunk (see megatron_memory.snapshot_chunks)."""
        return megatron_memory.snapshot_chunks(self.model, self.role)

    def restore_from_cpu(self, snapshot: List[Dict[str, Any]]) -> None:
        megatron_memory.restore_chunks(self.model, snapshot, self.role)

    # ---------------------------------------------------------------------------- weights out

    def export_hf_weights(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """Every HF-named full tensor on CPU, one at a time, on every rank (a collective: every
        rank iterates to the end); gathered across TP, streamed across PP stages."""
        if self.external is not None:  # the external bridge's own gather over TP/PP/EP
            return self.external.export([megatron_model.unwrap(chunk) for chunk in self.model])

        def this_stage() -> Iterator[Tuple[str, torch.Tensor]]:
            return megatron_hf.stage_hf_tensors(self._local_params(), self.bridge, self.layout,
                                                skip_output_layer=self._tied_lm_head)

        return megatron_hf.stream_over_pipeline(this_stage, self._tied_lm_head, self.torch_device())

    # ---------------------------------------------------------------------------- checkpoints

    def save_hf_model(self, path: str, strict: bool = True) -> Optional[str]:
        """The weights as an HF model dir (config, safetensors, tokenizer; a collective, rank 0 writes)."""
        return megatron_checkpoint.save_hf_model(self, path, strict)

    def save_checkpoint(self, path: str) -> None:
        """checkpoint.save_contents: one file per TP/PP rank and/or the HF copy (checkpoint.py)."""
        megatron_checkpoint.save(self, path)

    def load_checkpoint(self, path: str) -> None:
        megatron_checkpoint.load(self, path)

    # ---------------------------------------------------------------------------- topology

    def data_parallel_rank(self) -> int:
        return parallel.data_parallel_rank()

    def data_parallel_size(self) -> int:
        return parallel.data_parallel_size()

    def is_data_parallel_leader(self) -> bool:
        return parallel.is_data_parallel_leader()

    def data_parallel_group(self) -> Any:
        """Megatron's data-parallel group of this rank: its peers on the same TP rank and pipeline stage,
        so only last-stage ranks (the ones that compute the loss) reduce together."""
        from megatron.core import parallel_state as mpu

        if not mpu.model_parallel_is_initialized() or mpu.get_data_parallel_world_size() == 1:
            return None
        return mpu.get_data_parallel_group()
