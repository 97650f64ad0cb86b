"""Megatron engines (megatron-core 0.16): the policy/reference language model and the critic.

Registered for (language_model | value_model, "megatron", cpu | cuda); on npu the MindSpeed
subclasses in `verl_lite.engine.mindspeed` serve the same keys. Nothing here imports megatron at
module import time: MindSpeed must patch megatron before its first import, so every megatron
import happens inside the methods (and the helper modules' functions) that need it.

This module holds the engine's lifecycle; the parts beside it:
  megatron_model   TransformerConfig, GPT model chunks, DDP wrapping, the value head
  megatron_hf      HF weights in (safetensors or seeded random init) and out (the export stream)
  megatron_batch   the micro-batch contract, vocab-parallel log-probs, the pipeline schedule
  megatron_optim   optimizer + LR schedule from the `optim` section, the clipped step
  megatron_checkpoint  checkpoint.save_contents / load_contents: per-rank files, the HF copy (hf_export)
  megatron_memory  offload (parking flat DDP buffers) and CPU snapshots
  megatron_cpu     what lets megatron-core run on CPU over gloo (device cpu only)
  megatron_gdn     Qwen3.5's Gated DeltaNet layer (GDN kernel per run, padding masked) and its norms
  megatron_norm    the RMSNorm of the layer specs (takes sequence parallelism, unlike megatron's torch norm)
  bridges          HF <-> Megatron per model family, by HF architecture (`registry.BRIDGES`)

What an engine does (see `BaseEngine` for the batch contract):
- `initialize()`: the caller has already set up torch.distributed (a single-rank caller may leave
  it to the engine, which then starts a one-process group). Device-mesh init calls
  `initialize_model_parallel(TP, PP, VPP, CP, EP, ETP)` unless it ran already (the actor and the
  ref of one worker share it). The model is a GPTModel built through the model's bridge; its
  weights come from the HF safetensors or, when the directory has none, from an HF model randomly
  initialised with `model.init_seed` (so every parallel layout starts from the same weights as
  the torch engine would). The optimizer is megatron's Adam with an `OptimizerParamScheduler`.
- `forward_backward()` runs megatron's pipeline schedule; outputs reach every pipeline stage.
- `optimizer_step()` clips to `optim.clip_grad` itself (megatron's clip asserts CUDA tensors).

Remove-padding (`model.use_remove_padding`, null = auto; decisions/packing_mode.py decides per engine,
device and GDN kernel): packed micro-batches are THD (`megatron_batch.prepare_packed_batch`: each
sequence aligned to TP as verl's `preprocess_packed_seqs`, megatron's `PackedSeqParams`); attention
layers get a core attention that takes them (`megatron_model.packed_core_attention`), GDN layers reset
their state per sequence (`megatron_gdn`), outputs come back in the padded layout. Padded batches
otherwise (Qwen3.5's GDN layers mask the padding).

Not supported yet: context parallelism inside forward (CP>1 builds the mesh, forward raises).
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from verl_lite.config.schema import MegatronConfig
from verl_lite.engine import hf_export, megatron_batch, megatron_hf, megatron_memory, megatron_model, megatron_optim
from verl_lite.engine.base import BaseEngine, LossFn
from verl_lite.engine.bridges import Layout, ModelBridge
from verl_lite.engine.bridges import select as bridge_select

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
        self.layout: Optional[Layout] = None
        self.external: Any = None  # Megatron-Bridge / mbridge build, when that bridge is chosen (bridges/select.py)
        self._parking = megatron_memory.StorageParking()
        self.remove_padding = False  # packed (THD) micro-batches; decided in initialize() (_decide_packing)

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

    @property
    def _tied_lm_head(self) -> bool:
        return self.layout.tied and self.model_type == "language_model"

    # ---------------------------------------------------------------------------- lifecycle

    def initialize(self) -> None:
        self._import_backend()  # first: on Ascend, MindSpeed patches megatron before anything imports it
        from megatron.core import parallel_state as mpu

        self._ensure_process_group()
        self._prepare_device()
        self.init_device_mesh()
        self._seed()
        self.hf_config = self._read_hf_config()
        hf_export.check_hf_model_possible(self, self.hf_config)  # save_contents=[hf_model]: fail now, not at a save
        # verl_lite's registry, Megatron-Bridge's AutoBridge or mbridge, as verl's use_mbridge/vanilla_mbridge
        # say (decisions/bridge_choice.py); on npu MindSpeed-Bridge registers here, after the repatch above.
        selection = bridge_select.select_bridge(self.megatron_config, self.hf_config, self.device, self._model_dir(),
                                                self.model_type, bool(self.model_config.trust_remote_code))
        if selection.external is not None:
            self.external = selection.external
            self._decide_packing(self._external_gdn_kernel())
            bridge_select.initialize_external(self, self.external)
            return
        self.bridge = selection.bridge
        self.tf_config = megatron_model.transformer_config(
            self.bridge, self.parallel_sizes(), self.dtype, self.transformer_overrides(),
            self.megatron_config.sequence_parallel, self.compute_device, self.role, device=self.device,
            gdn_chunk_size=self.model_config.linear_attention_chunk_size)
        self._decide_packing(getattr(self.tf_config, "gdn_kernel", None))
        self.layout = self.bridge.layout(mpu.get_tensor_model_parallel_world_size(), mpu.get_tensor_model_parallel_rank())
        chunks = megatron_model.build_chunks(self.tf_config, self.bridge, self.layout, self._torch_device(),
                                             self.compute_device, self._tied_lm_head, self._attach_head,
                                             packed_attention=self.remove_padding)
        trains = self.role != "ref" and self.optim_config is not None
        if trains:
            use_dist_opt = bool(self.megatron_config.use_distributed_optimizer) and self.compute_device != "cpu"
            prefix = {"critic": "critic.megatron"}.get(self.role, f"actor_rollout_ref.{self.role}.megatron")
            self.model = megatron_model.wrap_ddp(self.tf_config, chunks, use_dist_opt, prefix)
        else:
            for module in chunks:
                module.requires_grad_(False)
            self.model = chunks
        megatron_hf.load_hf_weights(self._local_params(), self.bridge, self.layout, self._hf_source())
        if trains:
            self.optimizer, self.lr_scheduler = megatron_optim.build_optimizer(
                self.model, self.optim_config, self.dtype, use_distributed_optimizer=use_dist_opt, role=self.role)
        self.eval_mode()

    def _decide_packing(self, gdn_kernel: Optional[str]) -> None:
        """model.use_remove_padding for this engine (decisions/packing_mode.py: null = auto): packed where
        the attention and the GDN kernel take packed input; an explicit True that cannot be honoured
        raises with the reason."""
        from verl_lite.decisions import packing_mode

        te = None
        if self.compute_device == "cuda" and self.external is None:
            te = megatron_model.transformer_engine_attention() is not None
        decision = packing_mode.decide_megatron(
            self.model_config.use_remove_padding, self.device, gdn_kernel, self.transformer_overrides(),
            external=self.external is not None, te_installed=te)
        if decision.refusal:
            raise ValueError(f"{self.role}: model.use_remove_padding=True cannot run here: {decision.refusal}")
        self.remove_padding = decision.packed
        logger.info("%s: micro-batches %s", self.role, decision.why)

    def _external_gdn_kernel(self) -> Optional[str]:
        """The GDN kernel of a Megatron-Bridge / mbridge build of a Gated DeltaNet model (None otherwise),
        as the real stack picks it (config/bridge_choice.gdn_kernel)."""
        from verl_lite.decisions import bridge_choice
        from verl_lite.models import is_gdn_model

        hf = self.hf_config.to_dict() if hasattr(self.hf_config, "to_dict") else dict(vars(self.hf_config))
        if not is_gdn_model(hf):
            return None
        from verl_lite.engine.megatron_gdn import fla_installed

        return bridge_choice.gdn_kernel(self.device, self.transformer_overrides(), fla_installed())

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

    # ---------------------------------------------------------------------------- the model (LM / value hooks)

    def _model_dir(self) -> str:
        from verl_lite.models import resolve_model_dir

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

        return AutoModelForCausalLM

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

    def _postprocess(self, output: torch.Tensor, batch: Dict[str, Any], with_entropy: bool) -> Dict[str, torch.Tensor]:
        responses = batch["responses"]
        r = responses.shape[1]
        logits = output[:, -r - 1 : -1, :]  # position t predicts token t + 1
        log_probs, entropy = megatron_batch.vocab_parallel_log_probs(logits, responses, self.layout.vocab, with_entropy,
                                                                     self.engine_config.use_torch_compile)
        out = {"log_probs": log_probs}
        if entropy is not None:
            out["entropy"] = entropy
        return out

    def forward_backward(self, micro_batches: List[Dict[str, Any]], loss_fn: Optional[LossFn] = None,
                         forward_only: bool = False, calculate_entropy: bool = False) -> List[Dict[str, Any]]:
        from megatron.core import parallel_state as mpu

        if not micro_batches:
            return []
        if not forward_only:
            self._need_optimizer("forward_backward(forward_only=False)")
            if loss_fn is None:
                raise ValueError("forward_backward(forward_only=False) needs a loss_fn")
        if mpu.get_context_parallel_world_size() > 1:
            raise NotImplementedError("context_parallel_size > 1 is not supported by verl_lite's Megatron forward yet")
        pipelined = mpu.get_pipeline_model_parallel_world_size() > 1
        # Micro-batches of different shapes (dynamic batch size) cross pipeline stages with their shapes
        # sent first (megatron's variable_seq_lengths); equal shapes keep one fixed p2p shape.
        variable = pipelined and len({tuple(mb["input_ids"].shape) for mb in micro_batches}) > 1
        pad_id = int(getattr(self.hf_config, "pad_token_id", 0) or 0)
        if self.remove_padding:
            # each sequence aligned to TP, as verl's preprocess_packed_seqs; packed shapes differ per micro-batch
            align = mpu.get_tensor_model_parallel_world_size()
            prepared = [megatron_batch.prepare_packed_batch(mb, self._torch_device(), pad_id, align=align)
                        for mb in micro_batches]
            variable = pipelined and len({tuple(p["input_ids"].shape) for p in prepared}) > 1
        else:
            # sequence parallelism splits the sequence over TP: its length must divide by TP (left padding)
            multiple = mpu.get_tensor_model_parallel_world_size() if getattr(self.tf_config, "sequence_parallel", False) else 1
            prepared = [megatron_batch.prepare_batch(mb, self._torch_device(), 0, pad_id, multiple=multiple)
                        for mb in micro_batches]
        return megatron_batch.run_schedule(self.model, prepared, self._postprocess, loss_fn, forward_only,
                                           calculate_entropy, variable_shapes=variable)

    def micro_batch_multiple(self) -> int:
        """The interleaved schedule (virtual pipeline stages) runs micro-batches in groups of PP."""
        vpp = self.megatron_config.virtual_pipeline_model_parallel_size
        pp = int(self.megatron_config.pipeline_model_parallel_size)
        return pp if vpp and int(vpp) > 1 and pp > 1 else 1

    # ---------------------------------------------------------------------------- optimizer

    def _need_optimizer(self, what: str) -> None:
        if self.optimizer is None:
            raise RuntimeError(f"{what}: the {self.role} engine has no optimizer (ref engines only run forward)")

    def optimizer_zero_grad(self) -> None:
        self._need_optimizer("optimizer_zero_grad")
        for chunk in self.model:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()

    def optimizer_step(self) -> float:
        """Step with gradients clipped to optim.clip_grad; returns the norm before clipping."""
        self._need_optimizer("optimizer_step")
        return megatron_optim.clipped_step(self.optimizer, float(self.optim_config.clip_grad), self.role)

    def lr_scheduler_step(self) -> float:
        self._need_optimizer("lr_scheduler_step")
        self.lr_scheduler.step(1)
        return self.current_lr()

    def current_lr(self) -> float:
        return megatron_optim.current_lr(self.optimizer)

    # ---------------------------------------------------------------------------- memory

    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Offload to "cpu" or load back to the engine's device. A no-op for a CPU engine."""
        if device not in ("cpu", self.device, "device"):
            raise ValueError(f"{self.role}: to({device!r}) on a {self.device} engine (use 'cpu' or {self.device!r})")
        target = torch.device("cpu") if device == "cpu" else self._torch_device()
        if target == self._torch_device() and self.compute_device == "cpu":
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
        if self.external is not None:
            return bridge_select.export_external(self)

        def this_stage() -> Iterator[Tuple[str, torch.Tensor]]:
            return megatron_hf.stage_hf_tensors(self._local_params(), self.bridge, self.layout,
                                                skip_output_layer=self._tied_lm_head)

        return megatron_hf.stream_over_pipeline(this_stage, self._tied_lm_head, self._torch_device())

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

    def save_hf_model(self, path: str, strict: bool = True) -> Optional[str]:
        """The weights as an HF model dir (config, safetensors, tokenizer; a collective, rank 0 writes)."""
        from verl_lite.engine import megatron_checkpoint

        return megatron_checkpoint.save_hf_model(self, path, strict)

    def save_checkpoint(self, path: str) -> None:
        """checkpoint.save_contents: one file per TP/PP rank and/or the HF copy (engine/megatron_checkpoint.py)."""
        from verl_lite.engine import megatron_checkpoint

        megatron_checkpoint.save(self, path)

    def load_checkpoint(self, path: str) -> None:
        from verl_lite.engine import megatron_checkpoint

        megatron_checkpoint.load(self, path)

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


class MegatronValueEngine(MegatronLMEngine):
    """Critic on megatron-core: the LM's trunk with a scalar head; outputs values (B, R)."""

    model_type = "value_model"

    def _attach_head(self, module: Any) -> None:
        module.output_layer = megatron_model.ValueHead(self.tf_config.hidden_size, self.dtype,
                                                       sequence_parallel=self.tf_config.sequence_parallel)

    def _mapping_name(self, name: str) -> str:
        if name.startswith("output_layer.linear."):
            return "value_head." + name[len("output_layer.linear.") :]
        return name

    def _read_hf_config(self) -> Any:
        hf_config = super()._read_hf_config()
        hf_config.num_labels = 1
        return hf_config

    def _hf_model_class(self) -> Any:
        """transformers' token-classification class where it has one for this config (Qwen3); Qwen3.5
        has none, so its seeded random init is the causal LM's and the head is added below."""
        from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

        if type(self.hf_config) in AutoModelForTokenClassification._model_mapping:
            return AutoModelForTokenClassification
        return AutoModelForCausalLM

    def _hf_source(self) -> megatron_hf.HFSource:
        source = super()._hf_source()
        if not isinstance(source, megatron_hf.SafetensorsSource) and self._hf_model_class().__name__.endswith(
                "TokenClassification"):
            return source
        if isinstance(source, megatron_hf.SafetensorsSource) and "score.weight" in source:
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
