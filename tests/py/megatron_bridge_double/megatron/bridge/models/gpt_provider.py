"""GPTModelProvider: the provider's contract as verl's engine uses it (src/megatron/bridge/models/
model_provider.py `apply_overrides_and_finalize`, `provide_distributed_model`;
gpt_provider.py). The real provider is a TransformerConfig dataclass; this one declares the fields
the tests touch, and, as the real `apply_overrides_and_finalize`, refuses an attribute it lacks
with `AttributeError: <Provider> has no attribute '<name>'.`"""

from typing import Any, List

from megatron.bridge._double import record

FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "vocab_size", "num_moe_experts",
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
    "variable_seq_lengths", "batch_p2p_comm", "overlap_p2p_comm", "attention_backend", "moe_token_dispatcher_type",
    "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_grouped_gemm",
    "moe_permute_fusion", "recompute_method", "recompute_granularity", "recompute_num_layers", "use_flash_attn",
    "share_embeddings_and_output_weights", "params_dtype", "fp16", "bf16", "perform_initialization",
)


class GPTModelProvider:
    EXTRA_FIELDS: tuple = ()

    def __init__(self, bridge: str = "", **values: Any):
        for name in FIELDS + self.EXTRA_FIELDS:
            setattr(self, name, None)
        self.fp16, self.bf16 = False, False
        self.tensor_model_parallel_size = self.pipeline_model_parallel_size = self.context_parallel_size = 1
        self.expert_model_parallel_size = 1
        for name, value in values.items():
            setattr(self, name, value)
        self.bridge = bridge
        self.finalized = False

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
        record("provide_distributed_model", provider=type(self).__name__, bridge=self.bridge,
               wrap_with_ddp=wrap_with_ddp, tp=self.tensor_model_parallel_size, pp=self.pipeline_model_parallel_size,
               ep=self.expert_model_parallel_size, bf16=bf16)
        return [ModelChunk(self)]


def ModelChunk(provider: GPTModelProvider) -> Any:
    """Stands for a GPTModel chunk: a torch module with the provider as its `config` and two named
    tensors for export (no transformer layers)."""
    import torch

    class _Chunk(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = provider
            self.hf_names = ["model.embed_tokens.weight", "lm_head.weight"]
            self.weights = {name: torch.zeros(2, 2) for name in self.hf_names}
            self.embedding = torch.nn.Parameter(torch.zeros(2, 2))

    return _Chunk()
