"""GPTModelProvider: the provider's contract as verl's engine uses it (Megatron-Bridge de93536e
src/megatron/bridge/models/model_provider.py `provide_distributed_model` l.106-210, `get_model` l.475-610;
gpt_provider.py; `apply_overrides_and_finalize` from v0.5 on). The real provider is a TransformerConfig
dataclass; this one declares the fields the tests and verl_lite's engine set and, as the real
`apply_overrides_and_finalize`, refuses an attribute it lacks with
`AttributeError: <Provider> has no attribute '<name>'.` (MindSpeed's arguments count as attributes where
MindSpeed is imported: `_mindspeed_arguments`)

`provide_distributed_model` builds real models on megatron's initialized groups (`_build.language_chunks`:
verl_lite's own bridge, on CPU): megatron-core `GPTModel` chunks here (what Megatron-Bridge's Qwen3,
Qwen3-MoE and Qwen3-Next providers return), the provider's `MODEL_CLASS` around each for the
vision-language providers (models/qwen_vl). With fp16/bf16 each is wrapped in megatron's Float16Module, as
get_model does (model_provider.py:583-594); `wrap_with_ddp=True` needs `ddp_config`
(model_provider.py:161-162), and the double builds DDP-free models only (verl and verl_lite wrap
themselves)."""

import sys
from typing import Any, List, Optional

from megatron.bridge._double import record

FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "vocab_size", "num_moe_experts",
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
    "variable_seq_lengths", "batch_p2p_comm", "overlap_p2p_comm", "attention_backend", "moe_token_dispatcher_type",
    "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_grouped_gemm",
    "moe_permute_fusion", "recompute_method", "recompute_granularity", "recompute_num_layers",
    "share_embeddings_and_output_weights", "params_dtype", "fp16", "bf16", "perform_initialization",
)


class GPTModelProvider:
    EXTRA_FIELDS: tuple = ()
    MODEL_CLASS: Optional[type] = None  # None: the GPTModel chunks themselves

    def __init__(self, bridge: str = "", hf_config: Any = None, **values: Any):
        for name in self.field_names():
            setattr(self, name, None)
        self.fp16, self.bf16 = False, False
        self.tensor_model_parallel_size = self.pipeline_model_parallel_size = self.context_parallel_size = 1
        self.expert_model_parallel_size = 1
        for name, value in values.items():
            setattr(self, name, value)
        self.bridge = bridge
        self.hf_config = hf_config or {}
        self.finalized = False
        self._mindspeed_arguments()

    def _mindspeed_arguments(self) -> None:
        """Under MindSpeed, a provider (a TransformerConfig dataclass) has MindSpeed's arguments as attributes
        (the repatch plan's keys among them, e.g. use_flash_attn): core_r0.16.0's patch of
        TransformerConfig.__init_subclass__ (megatron_basic.py:55, arguments_basic.py:132-153) gives every
        subclass defined after it MindSpeed's full arguments, and Megatron-Bridge's providers are defined after
        the repatch on the npu path. On core_r0.18.0 that is assumed (its own patches wrap only
        TransformerConfig.__init__: the facts table's unverified entry for the providers)."""
        args = sys.modules.get("mindspeed.args_utils")
        if args is None:
            return
        for name, value in vars(args.get_full_args()).items():
            if not hasattr(self, name):
                setattr(self, name, value)

    @classmethod
    def field_names(cls) -> tuple:
        return FIELDS + cls.EXTRA_FIELDS

    def finalize(self) -> None:
        if self.num_attention_heads and self.tensor_model_parallel_size and \
                self.num_attention_heads % self.tensor_model_parallel_size:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"tensor_model_parallel_size ({self.tensor_model_parallel_size})")
        self.finalized = True

    def apply_overrides_and_finalize(self, dtype: Any = None, overrides: Any = None) -> "GPTModelProvider":
        if dtype is not None:
            import torch

            self.params_dtype = dtype
            self.fp16 = dtype == torch.float16
            self.bf16 = dtype == torch.bfloat16
        for name, value in (overrides or {}).items():
            if not hasattr(self, name):
                raise AttributeError(f"{type(self).__name__} has no attribute {name!r}.")
            setattr(self, name, value)
        record("apply_overrides_and_finalize", provider=type(self).__name__, overrides=dict(overrides or {}))
        self.finalize()
        return self

    def provide_distributed_model(self, ddp_config: Any = None, wrap_with_ddp: bool = True, fp16: Any = None,
                                  bf16: Any = None, **kwargs: Any) -> List[Any]:
        if wrap_with_ddp and not ddp_config:
            raise ValueError("ddp_config is required when wrap_with_ddp is True")
        if not self.finalized:
            raise RuntimeError("provider not finalized (call apply_overrides_and_finalize or finalize first)")
        if wrap_with_ddp:
            raise NotImplementedError("the Megatron-Bridge double builds models without DDP only (wrap_with_ddp=False)")
        record("provide_distributed_model", provider=type(self).__name__, bridge=self.bridge,
               wrap_with_ddp=wrap_with_ddp, tp=self.tensor_model_parallel_size, pp=self.pipeline_model_parallel_size,
               ep=self.expert_model_parallel_size, bf16=bf16)
        from megatron.bridge import _build

        from megatron.core.enums import ModelType

        chunks = _build.language_chunks(self)
        models = [self.wrap(chunk) for chunk in chunks]
        for model in models:  # _create_model sets it on every model (model_provider.py:649, 662)
            model.model_type = ModelType.encoder_or_decoder
        if self.fp16 or self.bf16:  # get_model's mixed_precision_wrapper (model_provider.py:583-594)
            from megatron.core.transformer.module import Float16Module

            models = [Float16Module(model.config, model) for model in models]
        return models

    def wrap(self, chunk: Any) -> Any:
        """The model of one virtual stage around verl_lite's GPTModel chunk (the chunk itself here)."""
        return chunk if self.MODEL_CLASS is None else self.MODEL_CLASS(chunk, self.hf_config)
