"""Device memory of an RL step, predicted from the model's shape and a role's layout: pure arithmetic,
no torch. The preflight (`preflight/memory.py`) builds the phases of a colocated step from these terms
and refuses a layout whose largest phase does not fit; docs/memory.md explains each term and its
measured error.

Three kinds of terms, per device (the most loaded rank):
- model state: parameters by dtype and sharding (TP-split, replicated, expert-split), gradients and
  Adam state (`state_bytes`); counted exactly (tests/py/test_memory.py checks the counts against
  transformers' models and the engines' own tensors);
- activations of one micro-batch (`activation_bytes`), layer kind by layer kind (attention, Gated
  DeltaNet, dense MLP, MoE with top-k routing, shared experts), with sequence parallelism, recompute
  and pipeline micro-batches in flight; an estimate (tensors saved for backward, as counted in
  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models");
- the logits (`logits_bytes`): tokens x vocabulary / TP x the copies the loss keeps.

The sharding of model state follows Megatron-LM's `theoretical_memory_usage.py`
(compute_weight_and_optimizer_memory): the most loaded pipeline stage holds 1/PP of the layers and an
embedding; experts are split over EP*ETP; the distributed optimizer shards the fp32 state over the
data-parallel ranks (DP*CP for dense parameters, the expert data-parallel size for experts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from verl_lite.decisions.layout import Layout
from verl_lite.decisions.memory_vision import vision_config, vision_params

GIB = 1024 ** 3
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# chunk of the chunked gated delta rule (fla's and the Ascend kernel's chunk size)
GDN_CHUNK = 64
# models whose full-attention layers have an output gate (q_proj emits the query and a gate)
GATED_ATTENTION_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")


@dataclass(frozen=True)
class ModelDims:
    """The sizes of a decoder that memory depends on, read from an HF config (`model_dims`)."""

    hidden: int
    layers: int
    vocab: int
    tied: bool
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # dense MLP intermediate size (0 for an all-MoE model)
    kinds: Tuple[str, ...]  # per layer: "attention" or "gdn"
    moe: Tuple[bool, ...]  # per layer: MoE MLP or dense
    experts: int = 0
    topk: int = 0
    expert_ffn: int = 0
    shared_ffn: int = 0
    gated_attention: bool = False
    qk_norm: bool = True
    attention_bias: bool = False
    gdn_key_heads: int = 0
    gdn_value_heads: int = 0
    gdn_key_dim: int = 0
    gdn_value_dim: int = 0
    gdn_conv: int = 4
    vision_params: int = 0  # the vision tower's (memory_vision.py): dense, on the first stage, not split over TP

    @property
    def gdn_conv_dim(self) -> int:
        return 2 * self.gdn_key_heads * self.gdn_key_dim + self.gdn_value_heads * self.gdn_value_dim


def model_dims(hf: Dict[str, Any]) -> ModelDims:
    """The decoder's sizes from an HF config.json (its text_config for a multimodal model)."""
    t = hf.get("text_config") or hf
    h, layers = int(t["hidden_size"]), int(t["num_hidden_layers"])
    heads = int(t["num_attention_heads"])
    kinds_hf = t.get("layer_types")
    if not kinds_hf and t.get("linear_num_value_heads"):
        interval = int(t.get("full_attention_interval") or 4)
        kinds_hf = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    kinds = tuple("gdn" if k == "linear_attention" else "attention" for k in (kinds_hf or ["full_attention"] * layers))
    experts = int(t.get("num_experts") or t.get("num_local_experts") or t.get("n_routed_experts") or 0)
    sparse_step = int(t.get("decoder_sparse_step") or 1)
    dense_only = set(t.get("mlp_only_layers") or [])
    moe = tuple(bool(experts) and i not in dense_only and (i + 1) % sparse_step == 0 for i in range(layers))
    model_type = str(t.get("model_type") or hf.get("model_type") or "")
    tied = bool(t.get("tie_word_embeddings", hf.get("tie_word_embeddings", False)))
    return ModelDims(
        hidden=h, layers=layers, vocab=int(t["vocab_size"]), tied=tied, heads=heads,
        kv_heads=int(t.get("num_key_value_heads") or heads), head_dim=int(t.get("head_dim") or h // heads),
        ffn=int(t.get("intermediate_size") or 0), kinds=kinds, moe=moe, experts=experts,
        topk=int(t.get("num_experts_per_tok") or 0), expert_ffn=int(t.get("moe_intermediate_size") or 0),
        shared_ffn=int(t.get("shared_expert_intermediate_size") or 0) if experts else 0,
        gated_attention=model_type in GATED_ATTENTION_TYPES, qk_norm=model_type.startswith("qwen3"),
        attention_bias=bool(t.get("attention_bias", False)),
        gdn_key_heads=int(t.get("linear_num_key_heads") or 0), gdn_value_heads=int(t.get("linear_num_value_heads") or 0),
        gdn_key_dim=int(t.get("linear_key_head_dim") or 0), gdn_value_dim=int(t.get("linear_value_head_dim") or 0),
        gdn_conv=int(t.get("linear_conv_kernel_dim") or 4), vision_params=vision_params(vision_config(hf)))


# ------------------------------------------------------------------------------ parameters


@dataclass
class Params:
    """Parameter counts by how a rank holds them: split over TP, replicated, split over EP*ETP."""

    tp: float = 0
    replicated: float = 0
    expert: float = 0

    def __add__(self, other: "Params") -> "Params":
        return Params(self.tp + other.tp, self.replicated + other.replicated, self.expert + other.expert)

    def scaled(self, k: float) -> "Params":
        return Params(self.tp * k, self.replicated * k, self.expert * k)

    @property
    def total(self) -> float:
        return self.tp + self.replicated + self.expert


def layer_params(d: ModelDims, i: int) -> Params:
    """Parameters of decoder layer `i` (HF's modules, which Megatron's split the same way)."""
    h = d.hidden
    p = Params(replicated=2 * h)  # input and post-attention RMSNorm
    if d.kinds[i] == "gdn":
        nk, nv, dk, dv = d.gdn_key_heads, d.gdn_value_heads, d.gdn_key_dim, d.gdn_value_dim
        # in_proj q,k,v,z and the b, a gates; depthwise conv over q,k,v; A_log, dt_bias per head; out_proj
        p.tp += h * (2 * nk * dk + 2 * nv * dv) + 2 * h * nv + d.gdn_conv_dim * d.gdn_conv + 2 * nv + nv * dv * h
        p.replicated += dv  # the gated RMSNorm over a head's values, shared by all heads
    else:
        q = d.heads * d.head_dim * (2 if d.gated_attention else 1)
        kv = 2 * d.kv_heads * d.head_dim
        p.tp += h * (q + kv) + d.heads * d.head_dim * h + ((q + kv) if d.attention_bias else 0)
        p.replicated += 2 * d.head_dim if d.qk_norm else 0
    if d.moe[i]:
        p.expert += d.experts * 3 * h * d.expert_ffn
        p.replicated += h * d.experts  # router
        if d.shared_ffn:
            p.tp += 3 * h * d.shared_ffn
            p.replicated += h  # shared-expert gate
    else:
        p.tp += 3 * h * d.ffn
    return p


def total_params(d: ModelDims) -> int:
    """Every parameter of the decoder with its embedding, final norm and LM head (untied)."""
    body = sum((layer_params(d, i) for i in range(d.layers)), Params()).total
    return int(body + d.hidden + d.vocab * d.hidden * (1 if d.tied else 2))


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary as verl_lite's Megatron bridges pad it: a multiple of TP (split evenly)."""
    return -(-vocab // tp) * tp


def stage_params(d: ModelDims, lay: Layout, stage: int, lm_head: bool = True) -> Tuple[float, float]:
    """(dense, expert) parameters on a rank of pipeline stage `stage` (Megatron): its share of the layers,
    the embedding (and a vision tower, replicated over TP) on the first stage, the final norm and the LM
    head on the last (tied with PP=1: one matrix; a value model's 1-wide head instead); dense weights split
    over TP, norms and routers replicated, experts split over EP*ETP."""
    per_stage = math.ceil(d.layers / lay.pp)
    first, last = stage == 0, stage == math.ceil(d.layers / per_stage) - 1
    block = sum((layer_params(d, i) for i in range(stage * per_stage, min(d.layers, (stage + 1) * per_stage))),
                Params())
    vocab = padded_vocab(d.vocab, lay.tp) * d.hidden / lay.tp
    head = (0.0 if (d.tied and first) else vocab) if lm_head else d.hidden
    extra = ((vocab + d.vision_params) if first else 0.0) + ((d.hidden + head) if last else 0.0)
    return block.tp / lay.tp + block.replicated + extra, block.expert / (lay.ep * lay.etp)


def rank_params(d: ModelDims, lay: Layout, lm_head: bool = True) -> Tuple[float, float]:
    """(dense, expert) parameters on the most loaded rank: Megatron's largest pipeline stage
    (`stage_params`); fsdp: every parameter / the shard group."""
    if lay.strategy != "megatron":
        head = 0.0 if lm_head else (d.hidden - (0 if d.tied else d.vocab * d.hidden))
        return (total_params(d) + d.vision_params + head) / lay.fsdp_shard, 0.0
    stages = [stage_params(d, lay, k, lm_head) for k in range(math.ceil(d.layers / math.ceil(d.layers / lay.pp)))]
    return max(stages, key=sum)


# ------------------------------------------------------------------------------ model state


@dataclass(frozen=True)
class Precision:
    """What each parameter costs: the stored weight, its gradient, the optimizer state."""

    weight: int  # bytes of the weights the forward uses
    grad: int  # bytes of a gradient (Megatron's fp32 main grads, FSDP's stored dtype)
    master: int  # bytes of an fp32 master copy (0 when the weights are fp32 already)
    moments: int = 8  # Adam's two fp32 moments


def megatron_precision(device: str) -> Precision:
    """verl_lite's Megatron engines: bf16 weights with fp32 main grads (grad_reduce_in_fp32) and fp32
    master weights on devices; float32 throughout on cpu."""
    if device == "cpu":
        return Precision(weight=4, grad=4, master=0)
    return Precision(weight=2, grad=4, master=4)


def fsdp_precision(storage: str) -> Precision:
    """FSDP2 with parameters stored in `storage` (verl's model_dtype): gradients and Adam state in that
    dtype's size too; no separate master copy."""
    b = BYTES.get(storage, 4)
    return Precision(weight=b, grad=b, master=0, moments=2 * b)


@dataclass(frozen=True)
class State:
    """Model state on one device, in bytes."""

    weights: float
    grads: float
    optimizer: float


def state_bytes(d: ModelDims, lay: Layout, prec: Precision, distributed_optimizer: bool, trains: bool = True,
                lm_head: bool = True) -> State:
    """Weights, gradients and optimizer state on the most loaded rank. The distributed optimizer (and
    FSDP, whose gradients and state follow its shards) splits the fp32 state over the data-parallel
    ranks: DP*CP for dense parameters, the expert data-parallel size for experts."""
    dense, expert = rank_params(d, lay, lm_head)
    weights = (dense + expert) * prec.weight
    if not trains:
        return State(weights, 0.0, 0.0)
    per_param = prec.master + prec.moments
    if lay.strategy != "megatron":
        return State(weights, (dense + expert) * prec.grad, (dense + expert) * per_param)
    shard_dense = lay.dp_ranks * lay.cp if distributed_optimizer else 1
    shard_expert = lay.expert_dp if distributed_optimizer else 1
    opt = dense * per_param / shard_dense + expert * per_param / shard_expert
    return State(weights, (dense + expert) * prec.grad, opt)


# ------------------------------------------------------------------------------ activations


@dataclass(frozen=True)
class Pass:
    """One micro-batch of a forward (and backward) pass on one rank."""

    tokens: int  # tokens of the micro-batch (padded rows x length, or the packed token budget)
    sequences: int  # rows in it
    act_bytes: int = 2  # bf16 on devices, 4 on cpu
    backward: bool = True
    sequence_parallel: bool = True
    recompute: str = "none"  # none | full | selective
    recompute_layers: int = 0  # full + block: the layers per stage recomputed; full + uniform: chunk size
    recompute_method: str = "uniform"
    microbatches: int = 1  # micro-batches of the step (pipeline in-flight bound)
    flash_attention: bool = True  # False: the softmax probabilities (heads x s^2) are kept
    seq_len: int = 0  # the longest row (the attention score matrix without flash attention)
    gdn_kernel: str = "chunked"  # chunked (fla, the Ascend kernel) | torch (the pure-torch rule)
    entropy: bool = False
    fused_logits: bool = False  # chunked log-probs: no full logits
    moe_load: float = 1.0  # tokens an expert rank holds over its average share (the capacity factor when padded to it)
    fused_norms: bool = True  # False: torch's RMSNorm and rotary embedding (HF, Megatron's local spec), which keep more
    logits_chunk: int = 0  # entropy_from_logits_with_chunking: tokens per chunk of the fp32 temporaries


def layer_activation_elems(d: ModelDims, i: int, p: Pass, lay: Layout) -> float:
    """Elements saved for backward by layer `i`, per token of the rank's sequence share: tensors sized
    by the hidden size are split over TP with sequence parallelism, the others always."""
    t = lay.tp
    s = t if (p.sequence_parallel and t > 1) else 1
    h = d.hidden
    e = 2 * h / s  # the layer input and the attention's norm output
    if d.kinds[i] == "gdn":
        nk, nv, dk, dv = d.gdn_key_heads, d.gdn_value_heads, d.gdn_key_dim, d.gdn_value_dim
        conv = d.gdn_conv_dim
        # the conv's input and output, q/k/v after the activation and l2norm, z, b, a, beta and g
        e += (3 * conv + 2 * nk * dk + nv * dv + 4 * nv) / t
        if p.gdn_kernel == "torch":
            # the pure-torch chunked rule keeps per chunk the decay mask and attention (C x C per head),
            # and the recurrent state (dk x dv per head) at each chunk boundary, in fp32
            e += nv * (3 * GDN_CHUNK + 2 * dk + 2 * dv + dk * dv / GDN_CHUNK) * 2 / t
        else:
            e += nv * GDN_CHUNK * 2 / t  # the kernel's within-chunk matrix (fp32), states recomputed
        e += 3 * nv * dv / t  # the core output, the gated norm's input and output (out_proj input)
    else:
        qkv = (d.heads + 2 * d.kv_heads) * d.head_dim
        o = d.heads * d.head_dim
        e += (qkv + o) / t + (2 * o / t if d.gated_attention else 0) + 2 * d.heads / t  # lse in fp32
        if not p.flash_attention and p.seq_len:
            # eager/math attention keeps the scores and their softmax: heads x the row's length per token
            e += 2 * d.heads * p.seq_len / t
    e += 2 * h / s  # the MLP's input and norm output
    if not p.fused_norms:
        # torch's RMSNorm keeps its fp32 normalised input besides its output (x, x * rsqrt, weight * ...), for
        # both norms; q/k norms and the rotary embedding keep q and k twice more
        e += 2 * h / s
        if d.kinds[i] == "attention":
            e += (3 * (d.heads + d.kv_heads) * d.head_dim / t) if d.qk_norm else 0
    if d.moe[i]:
        k = d.topk
        e += 2 * d.experts / s  # router logits and probabilities
        e += p.moe_load * k * (2 * h + 4 * d.expert_ffn / lay.etp)  # permuted in/out, fc1 out (gate, up), act out
        if d.shared_ffn:
            e += 4 * d.shared_ffn / t
    else:
        e += 4 * d.ffn / t  # fc1 out (gate, up), the activation's output (fc2's input)
    return e


def in_flight(lay: Layout, microbatches: int) -> float:
    """Micro-batches whose activations the first pipeline stage holds at its peak (1F1B: up to PP; the
    interleaved schedule's penalty as in Megatron-LM's compute_activation_memory)."""
    if lay.strategy != "megatron" or lay.pp == 1:
        return 1.0
    if lay.vpp:
        return lay.pp * (1 + (lay.pp - 1) / (lay.pp * lay.vpp))
    return float(min(lay.pp, max(1, microbatches)))


def activation_bytes(d: ModelDims, lay: Layout, p: Pass) -> float:
    """Activations of the pass on the most loaded rank (the first pipeline stage), without the logits.
    A forward without backward keeps one layer's tensors at a time."""
    tokens = p.tokens / max(1, lay.cp) / max(1, lay.sp)
    per_stage = math.ceil(d.layers / lay.pp) if lay.strategy == "megatron" else d.layers
    layers = range(per_stage)
    elems = [layer_activation_elems(d, i, p, lay) for i in layers]
    if not p.backward:
        return max(elems) * tokens * p.act_bytes
    s = lay.tp if (p.sequence_parallel and lay.tp > 1) else 1
    boundary = d.hidden / s  # a checkpointed layer keeps only its input
    if p.recompute == "full":
        if p.recompute_method == "block":
            kept = sum(boundary if j < p.recompute_layers else e for j, e in enumerate(elems))
        else:
            chunk = max(1, p.recompute_layers)
            kept = boundary * math.ceil(per_stage / chunk)
        # during backward one recomputed chunk is live again
        kept += sum(sorted(elems)[-max(1, p.recompute_layers if p.recompute_method != "block" else 1):])
    else:
        kept = sum(elems)
    return kept * tokens * p.act_bytes * in_flight(lay, p.microbatches)


def logits_bytes(d: ModelDims, lay: Layout, p: Pass) -> float:
    """The LM head's output and the fp32 copies the log-prob (and entropy) keep: the bf16 logits, their
    fp32 log-softmax saved for backward and, in backward, the logits' fp32 gradient (the entropy keeps
    one more); with fused log-probs or entropy chunking a chunk of tokens at a time."""
    vocab = padded_vocab(d.vocab, lay.tp) / lay.tp if lay.strategy == "megatron" else d.vocab
    tokens = p.tokens / max(1, lay.cp) / max(1, lay.sp)
    per_token = vocab * (p.act_bytes + 4 + (4 if p.backward else 0))
    entropy = vocab * 4 * (2 if p.backward else 1) if p.entropy else 0.0
    if p.fused_logits:
        return min(tokens, 512) * (per_token + entropy)
    if p.logits_chunk:  # the bf16 logits whole, the fp32 temporaries one chunk at a time
        return tokens * vocab * p.act_bytes + min(tokens, p.logits_chunk) * (per_token - vocab * p.act_bytes + entropy)
    return tokens * (per_token + entropy)


# ------------------------------------------------------------------------------ rollout


def kv_bytes_per_token(d: ModelDims, rollout_tp: int, dtype_bytes: int = 2) -> float:
    """vLLM's KV cache per token on one rank: K and V of each full-attention layer (KV heads split
    over TP, replicated when fewer than TP)."""
    attn_layers = sum(1 for k in d.kinds if k == "attention")
    kv_heads = max(1.0, d.kv_heads / rollout_tp)
    return 2 * attn_layers * kv_heads * d.head_dim * dtype_bytes


def gdn_state_bytes_per_sequence(d: ModelDims, rollout_tp: int, dtype_bytes: int = 2) -> float:
    """A sequence's Gated DeltaNet state in vLLM: the recurrent state (dk x dv per value head) and
    the conv window of each GDN layer."""
    gdn_layers = sum(1 for k in d.kinds if k == "gdn")
    per_layer = d.gdn_value_heads * d.gdn_key_dim * d.gdn_value_dim + d.gdn_conv_dim * (d.gdn_conv - 1)
    return gdn_layers * per_layer / rollout_tp * dtype_bytes


def rollout_weight_bytes(d: ModelDims, rollout_tp: int, expert_ranks: int = 0, dtype_bytes: int = 2) -> float:
    """vLLM's weights on one rank: everything (the vision tower too) split over the rollout TP; with expert
    parallelism the experts are spread over `expert_ranks` (TP*DP) ranks instead."""
    experts = sum(layer_params(d, i).expert for i in range(d.layers))
    dense = total_params(d) + d.vision_params - experts
    return (dense / rollout_tp + experts / max(rollout_tp, expert_ranks)) * dtype_bytes


@dataclass
class Phase:
    """One phase of the step on one device: its terms (name -> bytes)."""

    name: str
    terms: Dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    def largest(self, n: int = 3) -> List[Tuple[str, float]]:
        return sorted(self.terms.items(), key=lambda kv: -kv[1])[:n]


def peak(phases: List[Phase]) -> Phase:
    """The device's peak is its largest phase, not the sum of all."""
    return max(phases, key=lambda ph: ph.total)


def gib(n: float) -> float:
    return n / GIB
