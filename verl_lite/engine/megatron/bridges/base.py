"""What a model bridge is: the HF <-> Megatron conversion of one model family, for the Megatron
engines (see `verl_lite.engine.megatron.bridges` for the lookup by HF architecture).

A bridge knows, for its family:
- whether an HF config is one it can build (`check_supported`, raising UnsupportedModelError);
- the megatron `TransformerConfig` fields, layer spec and `GPTModel` arguments that describe it;
- the weight mapping, one tensor-parallel shard at a time, so the conversion never depends on the
  TP size: `megatron_to_hf` splits a local Megatron shard into HF-named shards that the engine
  concatenates along the returned dim across TP ranks (export), and `hf_to_megatron` cuts full HF
  tensors into this rank's shard (load).

Nothing here imports megatron at module import time (MindSpeed must patch it first on Ascend):
a bridge imports megatron inside the methods that need it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

from verl_lite.decisions.layout import heads_problem
from verl_lite.engine.base import UnsupportedModelError


def hf_field(hf_config: Any, name: str, default: Any = None) -> Any:
    """A field of an HF config object or of a parsed config.json dict."""
    if isinstance(hf_config, dict):
        return hf_config.get(name, default)
    return getattr(hf_config, name, default)


def padded_vocab_size(vocab_size: int, tp_size: int) -> int:
    """The vocabulary rounded up to a multiple of the TP size (megatron splits it evenly)."""
    return -(-vocab_size // tp_size) * tp_size


def top_params(hf_prefix: str = "model.") -> Dict[str, Tuple[str, str]]:
    """megatron's names outside the layers -> (kind, HF name) of a Qwen-style GPT whose text model's
    weights sit under `hf_prefix` (the LM head and the value head's score outside it)."""
    return {
        "embedding.word_embeddings.weight": ("vocab", f"{hf_prefix}embed_tokens.weight"),
        "decoder.final_layernorm.weight": ("norm", f"{hf_prefix}norm.weight"),
        "output_layer.weight": ("vocab", "lm_head.weight"),
        "value_head.weight": ("norm", "score.weight"),
        "value_head.bias": ("norm", "score.bias"),
    }


def gpt_config_kwargs(hf_config: Any, ffn_hidden_size: int) -> Dict[str, Any]:
    """The TransformerConfig fields every Qwen-style GPT shares (RMSNorm, SwiGLU, no linear bias, q/k
    norms) from an HF (text) config; a missing size raises UnsupportedModelError naming it."""
    def size(name: str) -> int:
        value = hf_field(hf_config, name)
        if value is None:
            raise UnsupportedModelError(f"the HF config has no {name!r}")
        return int(value)

    heads, hidden = size("num_attention_heads"), size("hidden_size")
    return dict(
        num_layers=size("num_hidden_layers"),
        hidden_size=hidden,
        ffn_hidden_size=ffn_hidden_size,
        num_attention_heads=heads,
        num_query_groups=int(hf_field(hf_config, "num_key_value_heads", None) or heads),
        kv_channels=int(hf_field(hf_config, "head_dim", None) or hidden // heads),
        layernorm_epsilon=float(hf_field(hf_config, "rms_norm_eps", 1e-6)),
        normalization="RMSNorm",
        gated_linear_unit=True,
        add_bias_linear=False,
        qk_layernorm=True,
        init_method_std=float(hf_field(hf_config, "initializer_range", 0.02)),
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


def moe_config_kwargs(hf_config: Any, int_field: Callable[[str], int], shared_expert: bool = False) -> Dict[str, Any]:
    """The TransformerConfig MoE fields of a Qwen-style MoE text config (Qwen3-VL MoE, Qwen3.5 MoE):
    top-k routing then softmax over the k (= softmax, top-k, renormalise), the aux loss only when
    the config asks for router logits with a positive coefficient, alltoall dispatch, MoE on every
    layer. `int_field(name)` reads a required integer field (the bridge's own spelling rules);
    `shared_expert` adds the gated shared expert of Qwen3.5 MoE."""
    aux = float(hf_field(hf_config, "router_aux_loss_coef", 0.0) or 0.0)
    aux_on = bool(hf_field(hf_config, "output_router_logits", False)) and aux > 0
    kwargs = dict(
        num_moe_experts=int_field("num_experts"),
        moe_router_topk=int_field("num_experts_per_tok"),
        moe_ffn_hidden_size=int_field("moe_intermediate_size"),
        moe_router_pre_softmax=False,
        moe_router_load_balancing_type="aux_loss" if aux_on else "none",
        moe_aux_loss_coeff=aux if aux_on else 0.0,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=False,
        moe_layer_freq=1,
    )
    if shared_expert:
        kwargs.update(moe_shared_expert_intermediate_size=int_field("shared_expert_intermediate_size"),
                      moe_shared_expert_gate=True)
    return kwargs


def check_divides_tp(what: str, count: int, tp_size: int) -> None:
    """Refuse a size split over TP ranks that TP does not divide (decisions/layout.py: the arithmetic)."""
    problem = heads_problem(count, tp_size)
    if problem:
        raise UnsupportedModelError(f"{what}={count} is not divisible by tensor_model_parallel_size={tp_size} "
                                    f"({problem}: choose a TP size that divides it)")


@dataclass(frozen=True)
class ModelShard:
    """Model sizes and this rank's tensor-parallel position (a dense GPT: Qwen3)."""

    hidden: int
    ffn: int
    heads: int
    groups: int
    head_dim: int
    vocab: int
    tp_size: int = 1
    tp_rank: int = 0
    tied: bool = False

    @classmethod
    def from_hf(cls, hf_config: Any, tp_size: int = 1, tp_rank: int = 0) -> "ModelShard":
        heads = int(hf_field(hf_config, "num_attention_heads"))
        hidden = int(hf_field(hf_config, "hidden_size"))
        layout = cls(
            hidden=hidden,
            ffn=int(hf_field(hf_config, "intermediate_size")),
            heads=heads,
            groups=int(hf_field(hf_config, "num_key_value_heads", heads) or heads),
            head_dim=int(hf_field(hf_config, "head_dim", None) or hidden // heads),
            vocab=int(hf_field(hf_config, "vocab_size")),
            tp_size=tp_size,
            tp_rank=tp_rank,
            tied=bool(hf_field(hf_config, "tie_word_embeddings", False)),
        )
        for what, n in (("num_key_value_heads", layout.groups), ("intermediate_size", layout.ffn)):
            check_divides_tp(what, n, tp_size)
        return layout

    @property
    def padded_vocab(self) -> int:
        return padded_vocab_size(self.vocab, self.tp_size)


@dataclass(frozen=True)
class ExpertPiece:
    """Marks an exported shard as routed expert `local_index` of the `local_count` experts of this
    expert-parallel rank: the engine gathers it over expert TP (along the shard's dim), stacks the
    local experts and gathers the stacks over EP into one [num_experts, ...] HF tensor."""

    local_index: int
    local_count: int


# One HF tensor shard: (HF name, local shard, dim along which TP shards concatenate or None), or,
# for a routed expert, (HF name, shard, dim along which expert-TP shards concatenate, ExpertPiece).
HFShard = Union[Tuple[str, torch.Tensor, Optional[int]], Tuple[str, torch.Tensor, Optional[int], ExpertPiece]]


class ModelBridge(abc.ABC):
    """HF <-> Megatron for one model family. Constructed with the model's HF config, which it checks."""

    def __init__(self, hf_config: Any):
        self.check_supported(hf_config)
        self.hf_config = hf_config

    @classmethod
    @abc.abstractmethod
    def check_supported(cls, hf_config: Any) -> None:
        """Raise UnsupportedModelError naming what in `hf_config` the bridge does not cover."""

    # -- the megatron model --------------------------------------------------------------------

    @abc.abstractmethod
    def transformer_config_kwargs(self) -> Dict[str, Any]:
        """TransformerConfig fields that describe the HF architecture."""

    def layer_spec(self) -> Any:
        """The megatron layer spec (ModuleSpec) of a decoder layer, for families whose layers are
        all alike; others override `model_spec`."""
        raise NotImplementedError(f"{type(self).__name__} builds its model from model_spec()")

    def model_spec(self, config: Any, vp_stage: Optional[int] = None) -> Any:
        """What GPTModel's `transformer_layer_spec` receives for the chunk of virtual pipeline stage
        `vp_stage`: the layer spec, or a block spec (one spec per layer of the chunk)."""
        return self.layer_spec()

    has_vision = False  # the model takes images (a vision tower on the first pipeline stage)

    def finish_chunk(self, module: Any, tf_config: Any) -> None:
        """Called on each GPTModel chunk right after it is built, before its weights load (a
        vision-language bridge adds its vision tower and rotary layout here)."""

    def visual_inputs(self, micro_batch: Dict[str, Any], device: torch.device) -> Optional[Dict[str, torch.Tensor]]:
        """A micro-batch's image inputs for the vision tower (None: a text model, or no images)."""
        return None

    @abc.abstractmethod
    def gpt_model_kwargs(self) -> Dict[str, Any]:
        """GPTModel arguments of the architecture (position embeddings, rotary base, length)."""

    def layout(self, tp_size: int, tp_rank: int) -> ModelShard:
        return ModelShard.from_hf(self.hf_config, tp_size, tp_rank)

    # -- weights -------------------------------------------------------------------------------

    @abc.abstractmethod
    def hf_to_megatron(self, name: str, layout: ModelShard, get_hf: Callable[[str], torch.Tensor],
                       layer_offset: int = 0) -> torch.Tensor:
        """This rank's shard of megatron parameter `name`, from full HF tensors given by `get_hf`."""

    @abc.abstractmethod
    def megatron_to_hf(self, name: str, shard: torch.Tensor, layout: ModelShard, layer_offset: int = 0) -> List[HFShard]:
        """Split one local megatron parameter into HF-named local shards."""

    def finish_load(self) -> None:
        """Called after every parameter was loaded: drop what the load kept (read caches)."""

    def finish_hf_tensor(self, hf_name: str, full: torch.Tensor, layout: ModelShard) -> torch.Tensor:
        """The HF tensor from the full (TP-gathered) one: drops megatron's vocabulary padding (the
        embedding under the bridge's `hf_prefix`, `model.` unless it says otherwise)."""
        embedding = getattr(self, "hf_prefix", "model.") + "embed_tokens.weight"
        if hf_name in (embedding, "lm_head.weight") and full.shape[0] != layout.vocab:
            return full[: layout.vocab]
        return full
