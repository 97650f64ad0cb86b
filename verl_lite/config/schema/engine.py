"""The schema's engine sections: optimizer, Megatron and FSDP settings, and the model a role loads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


# ---------------------------------------------------------------------------- optimizer


@dataclass
class OptimConfig:
    # Peak learning rate (reached after warm-up).
    lr: float = 1e-6
    # Weight decay (decoupled except with fsdp's Adam).
    weight_decay: float = 0.01
    # Adam's beta1 and beta2.
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    # The optimizer, as verl names it; null = the strategy's default (verl's: AdamW on fsdp, adam on
    # megatron). fsdp: AdamW (torch.optim.AdamW, decoupled weight decay) or Adam (torch.optim.Adam,
    # weight decay added to the gradient), built from optimizer_impl. megatron: adam (megatron-core's
    # Adam, decoupled weight decay). Other names are refused with this list.
    optimizer: Optional[str] = None
    # fsdp: the module the optimizer class is taken from, as verl's build_optimizer does; torch.optim
    # only (verl's torchao / bitsandbytes optimizers are refused). Not read on megatron.
    optimizer_impl: str = "torch.optim"
    # Linear warm-up length in training steps (the LR schedule steps once per update). 0 or negative =
    # use lr_warmup_steps_ratio (as verl; with the ratio's 0.0, no warm-up).
    lr_warmup_steps: int = -1
    # Warm-up as a fraction of the schedule, used when lr_warmup_steps is not positive: of
    # optim.total_training_steps on fsdp, of lr_decay_steps on megatron (as verl).
    lr_warmup_steps_ratio: float = 0.0
    # fsdp: LR after warm-up (verl's get_constant_schedule_with_warmup / get_cosine_schedule_with_warmup):
    # constant, or cosine decay to min_lr_ratio * lr at optim.total_training_steps. On megatron set
    # lr_decay_style instead (refused there unless constant).
    lr_scheduler_type: str = "constant"
    # fsdp: verl's deprecated spelling of lr_scheduler_type (constant or cosine); when set it wins.
    warmup_style: Optional[str] = None
    # fsdp cosine: the final learning rate as a fraction of lr. On megatron set min_lr instead.
    min_lr_ratio: float = 0.0
    # fsdp cosine: the number of cosine waves over the decay (0.5 = half a wave, lr down to the minimum).
    num_cycles: float = 0.5
    # fsdp: the schedule counts steps from 0 (True, verl's default) or from 1 (False: the first update
    # already runs at step 1 of the warm-up).
    zero_indexed_step: bool = True
    # megatron: the LR the warm-up starts from (megatron-core OptimizerParamScheduler init_lr).
    lr_warmup_init: float = 0.0
    # megatron: steps over which the LR decays to min_lr; null = optim.total_training_steps (as verl).
    lr_decay_steps: Optional[int] = None
    # megatron: the decay after warm-up, megatron-core's OptimizerParamScheduler styles: constant, linear,
    # cosine, inverse-square-root, WSD (warm-up, stable, then lr_wsd_decay_style over lr_wsd_decay_steps).
    lr_decay_style: str = "constant"
    # megatron: the LR the decay ends at (absolute; fsdp's cosine takes min_lr_ratio).
    min_lr: float = 0.0
    # megatron: the weight-decay ramp style of OptimizerParamScheduler (constant, linear, cosine); verl
    # ramps from weight_decay to weight_decay, so every style keeps it constant.
    weight_decay_incr_style: str = "constant"
    # megatron, lr_decay_style=WSD: the final decay's shape: exponential, linear, cosine, minus_sqrt.
    lr_wsd_decay_style: str = "exponential"
    # megatron, lr_decay_style=WSD: the length of the final decay in steps (needed by WSD).
    lr_wsd_decay_steps: Optional[int] = None
    # Clip of the global gradient L2 norm at each optimizer step, on fsdp and megatron; 0 = no clipping.
    # The one clip setting, as in verl 0.9's engines (the role's grad_clip is not read).
    clip_grad: float = 1.0
    # Length of the LR schedule in training steps (cosine, warm-up ratio); -1 = trainer.total_training_steps,
    # or total_epochs epochs when that is null, which the trainer fills in as verl does.
    # verl overwrites even a set value; verl_lite keeps a positive one.
    total_training_steps: int = -1
    # megatron strategy: fields of megatron-core's OptimizerConfig, passed as they are (verl's
    # `+<role>.optim.override_optimizer_config.<field>=<value>`; dtypes as fp32/bf16/fp16). The CPU
    # optimizer (optimizer_cpu_offload, optimizer_offload_fraction, overlap_cpu_optimizer_d2h_h2d) acts on
    # cuda/npu and has no effect on cpu (Adam's state is in host memory there); use_precision_aware_optimizer
    # needs Transformer Engine on the workers and is refused on cpu. A field verl_lite sets from its own key
    # (optimizer, lr, min_lr, weight_decay, betas, clip_grad, dtype, use_distributed_optimizer) is refused
    # naming that key, an unknown field naming the valid ones. fsdp strategy: keyword arguments of the
    # torch optimizer (eps, amsgrad, foreach, fused, ...), as verl's build_optimizer passes them; lr, betas
    # and weight_decay are refused naming their optim keys, other names with the optimizer's keywords.
    override_optimizer_config: Dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- megatron


@dataclass
class MegatronConfig:
    # Tensor parallel size (TP): each layer's weights split over TP devices; must divide the model's
    # attention and key/value heads. DP = devices / (TP*PP*CP).
    tensor_model_parallel_size: int = 1
    # Pipeline parallel size (PP): layers split into PP stages; the layer count must divide by PP*VPP
    # unless override_transformer_config sets uneven first/last stages.
    pipeline_model_parallel_size: int = 1
    # Virtual pipeline stages (model chunks) per PP rank, for the interleaved schedule; null = none.
    virtual_pipeline_model_parallel_size: Optional[int] = None
    # Context parallel size (CP): sequences split over CP devices; counts in DP = devices / (TP*PP*CP).
    # CP > 1 is refused by the preflight: verl_lite's Megatron forward does not run it yet.
    context_parallel_size: int = 1
    # Expert parallel size (EP) for MoE models: must divide the expert count; EP*ETP*PP must divide the
    # devices; 1 for dense models. The Megatron engines split MoE models' routed experts over EP ranks.
    expert_model_parallel_size: int = 1
    # Tensor parallel size inside the experts (ETP); null = TP.
    expert_tensor_parallel_size: Optional[int] = None
    # Megatron sequence parallelism (verl's default True): with TP > 1, activations outside attention
    # and MLP (norms, dropout) are split along the sequence over the TP group; the sequence is padded
    # to a multiple of TP. Needed to train MoE models with TP > 1. No effect with TP = 1.
    sequence_parallel: bool = True
    # Shard the optimizer state over data-parallel ranks (Megatron's distributed optimizer);
    # on cuda and npu only, ignored on cpu.
    use_distributed_optimizer: bool = True
    # Keep the parameters and gradients (DDP buffers) on the host between phases: on the device for
    # a forward, an update or a weight sync only (less device memory, slower; as verl). The ref's
    # follows the actor's unless set. No effect on cpu (docs/reliability.md, "Offload").
    param_offload: bool = False
    # Keep the gradients on the host between updates (with param_offload they move anyway, as in verl).
    grad_offload: bool = False
    # Keep the optimizer state (Adam moments, fp32 main parameters) on the host except during updates
    # and checkpoints.
    optimizer_offload: bool = False
    # Seed of Megatron's model-parallel RNG tracker (model_parallel_cuda_manual_seed).
    seed: int = 42
    # Passed to megatron's TransformerConfig and to MindSpeed's repatch on NPU. Open: `+key=value`.
    override_transformer_config: Dict[str, Any] = field(default_factory=dict)
    # Build the model and map HF <-> Megatron weights through a model bridge (verl's default). False
    # is refused: verl_lite has no bridge-less Megatron build (decisions/bridge_choice.py, docs/ascend.md).
    use_mbridge: bool = True
    # verl: with use_mbridge, True = the legacy `mbridge` package (refused unless it imports); False =
    # Megatron-Bridge's AutoBridge where installed, else verl_lite's own bridges (registry.BRIDGES).
    vanilla_mbridge: bool = False
    # verl: a Megatron distributed checkpoint to load the initial weights from (use_dist_checkpointing).
    # Not supported by verl_lite yet: a path is refused by the preflight.
    dist_checkpointing_path: Optional[str] = None
    # verl: the dtype the Megatron engine trains in. verl_lite's is float32 on cpu and bfloat16 on cuda
    # and npu; null = that, and a value other than the target device's is refused.
    dtype: Optional[str] = None


@dataclass
class FSDPConfig:
    # Keep the parameters and gradients on the host between phases: on the device for a forward, an
    # update or a weight sync only (less device memory, slower; as verl). No effect on cpu
    # (docs/reliability.md, "Offload").
    param_offload: bool = False
    # Keep the optimizer state on the host except during updates and checkpoints. The ref has none.
    optimizer_offload: bool = False
    # verl: ranks per FSDP shard group. -1 (or the data-parallel size or more) = shard over all ranks; a
    # divisor N of it = hybrid sharding on verl's 2-D mesh (replicate DP/N, shard N): parameters sharded
    # within each group of N ranks, gradients all-reduced across groups.
    fsdp_size: int = -1
    # FSDP2: free the gathered parameters after forward (less memory, another all-gather in backward);
    # matters only with more than one rank.
    reshard_after_forward: bool = True
    # verl: the dtype the parameters are stored in (master weights, gradients, optimizer state): fp32 | bf16
    # (verl's spellings fp32/float32/bf16/bfloat16). null = verl's null: fp32, bf16 for the ref.
    model_dtype: Optional[str] = "fp32"
    # verl: FSDP mixed precision, keys param_dtype (forward/backward compute, also torch.autocast), reduce_dtype
    # (gradient reduction), buffer_dtype (the model's floating buffers); a missing key = verl's bf16 / fp32 /
    # fp32. Empty (verl's null) = those on cuda and npu; on cpu none (compute in model_dtype). Set a key:
    # `+<role>.fsdp_config.mixed_precision.param_dtype=bf16` (this runs on cpu too).
    mixed_precision: Dict[str, Any] = field(default_factory=dict)
    # verl: FSDP2's CPUOffloadPolicy: the shards, gradients and the optimizer step live on the host. When on
    # (and always for the ref on cuda/npu, as verl's forward-only engine), param_offload and
    # optimizer_offload move nothing (the policy holds the tensors there), as in verl.
    offload_policy: bool = False
    # verl: each wrapped layer starts the next one's all-gather during its own forward (depth 1).
    forward_prefetch: bool = False
    # verl: which modules get their own fully_shard. min_num_params > 0: every module whose parameters not in
    # an already wrapped child reach that count (FSDP1's size policy, verl's fsdp strategy); 0 = by layer
    # class: `+...wrap_policy.transformer_layer_cls_to_wrap=[Qwen3DecoderLayer]` (default: the model's
    # _no_split_modules), plus the embeddings and LM head unless tied (verl's fsdp2). The root always.
    wrap_policy: Dict[str, Any] = field(default_factory=lambda: {"min_num_params": 0})
    # verl's engine-level Ulysses SP size (verl copies the role's ulysses_sequence_parallel_size here when that is
    # above 1): read when the role's own key is 1. Same meaning and checks as the role's key.
    ulysses_sequence_parallel_size: int = 1


# ---------------------------------------------------------------------------- model


@dataclass
class FusedKernelOptions:
    # The implementation of use_fused_kernels: torch (verl's default). verl's triton is refused: verl_lite
    # has no Triton kernel for it.
    impl_backend: str = "torch"


@dataclass
class ModelConfig:
    # A local directory with config.json (and weights, else random init) or a shipped tiny config name
    # such as "tiny-qwen3_5"; nothing is ever downloaded. critic.model.path "" = the actor's model section.
    path: str = "tiny-qwen3_5"
    # Tokenizer directory; null = the model path. Only actor_rollout_ref.model's is read (the critic
    # needs no tokenizer).
    tokenizer_path: Optional[str] = None
    # Let transformers run the model directory's own Python code (config, model, tokenizer); only for
    # directories you trust.
    trust_remote_code: bool = False
    # Pack each micro-batch's real tokens into one sequence for the forward (no padded tokens computed;
    # same log-probs as padded). null = auto: packed where the engine packs natively (Megatron: attention
    # layers, and GDN layers with fla or the Ascend kernel), padded otherwise (Megatron's GDN layers on the
    # torch rule, which True packs one sequence at a time; the torch engine, whose packed attention mask is
    # dense over the micro-batch's tokens: True packs there, GDN layers one row per sequence). True is
    # refused where it cannot be honoured (other linear-attention models on the torch engine; see
    # decisions/packing_mode.py). verl's default is True. verl's megatron spelling
    # <role>.megatron.use_remove_padding is the same key.
    use_remove_padding: Optional[bool] = None
    # Recompute activations in backward to save memory (transformers' gradient checkpointing; the
    # critic's decoder stack too); fsdp strategy only, the megatron engine does not read it.
    enable_gradient_checkpointing: bool = False
    # Keep the activations saved for backward in host memory during forward and bring each back when
    # backward needs it (torch saved-tensor hooks: parameters and tensors already on the host stay put),
    # as verl's enable_activation_offload; fsdp strategy only. No effect on cpu (activations are in host
    # memory there).
    enable_activation_offload: bool = False
    # Log-probs and entropy from the final hidden states and the LM head weight, a chunk of 512 tokens
    # at a time, recomputed chunk by chunk in backward: the (tokens x vocabulary) logits are never held
    # whole (engine/torch/fused.py; bench/fsdp_memory_bench.py). Same numbers as the logits path; the actor and
    # ref on the fsdp strategy (the critic has no LM head; True is refused there and on megatron).
    use_fused_kernels: bool = False
    # With use_fused_kernels: impl_backend = torch (verl_lite's chunked torch code); verl's triton
    # kernels are refused.
    fused_kernel_options: FusedKernelOptions = field(default_factory=lambda: FusedKernelOptions())
    # Extra HF config fields for the model (`+...override_config.x=y`).
    override_config: Dict[str, Any] = field(default_factory=dict)
    # Random init seed when the path holds no weights.
    init_seed: int = 0
    # Chunk of the pure-torch GDN (linear_attention) rule, used where flash-linear-attention is not
    # installed (CPU): null = by sequence length (16 up to 128 tokens); 64 = transformers' own.
    linear_attention_chunk_size: Optional[int] = None
    # LoRA rank: > 0 trains low-rank adapters (PEFT) instead of the whole model, 0 = off (verl's default).
    # fsdp strategy only (megatron refuses it). The ref is then this model with its adapters disabled
    # (no second model), and the rollout gets the merged weights. The critic reads critic.model's own.
    lora_rank: int = 0
    # LoRA scaling numerator: the adapter's update is scaled by lora_alpha / lora_rank.
    lora_alpha: int = 16
    # The layers that get adapters: "all-linear" (every nn.Linear but the output head) or a list of
    # module names (e.g. [q_proj,v_proj]; PEFT's target_modules).
    target_modules: Any = "all-linear"
    # Module names (or a regex) kept without adapters; null = none (PEFT's exclude_modules).
    exclude_modules: Any = None
    # A saved PEFT adapter dir (adapter_config.json, adapter_model.safetensors; e.g. a checkpoint's
    # actor/lora_adapter) to continue training from; its own rank, alpha and targets apply. Turns LoRA on
    # even with lora_rank 0, as verl's trainer reads it. null = a fresh adapter when lora_rank > 0.
    lora_adapter_path: Optional[str] = None
