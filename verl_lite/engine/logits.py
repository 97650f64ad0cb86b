"""Log-probs of the chosen tokens and their entropy from the logits: the one implementation the
torch and Megatron engines share. The torch engine holds the whole vocabulary; the Megatron engine's
logits are split over the vocabulary across TP ranks, and it passes the reductions over the TP group
(`megatron/vocab.py:vocab_parallel_log_probs`).

`<role>.use_torch_compile` (verl's switch, which wraps its entropy-from-logits in torch.compile): the
two passes over the vocabulary (the sum of exp with the chosen token's logit; the entropy's sum of
p * z) run as torch.compile'd functions with dynamic shapes, so a new batch size or response length
does not recompile; the max and the reductions across TP ranks stay eager between them (a collective
would break the graph). inductor fuses each pass into one loop over the vocabulary, so the (B, R, V)
intermediates of eager mode (the shifted logits' exp, the probabilities) are never materialised.
False (verl_lite's default) runs the same functions eagerly: compiling costs seconds per process,
which dominates tiny CPU runs. On cpu inductor builds C++ kernels (a C++ compiler is needed: the
preflight checks for one). On npu MindSpeed makes torch.compile a no-op; the original is used, as verl
does, and a torch.compile that still hands back the function uncompiled is an error, never a silent
eager run.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable, Dict, Optional, Tuple

import torch

_NEG = -1.0e30  # logit for padded vocabulary entries: exp() underflows to 0, 0 * _NEG stays finite

Reduce = Callable[[torch.Tensor], torch.Tensor]


def sum_exp_and_pick(logits: torch.Tensor, peak: torch.Tensor, local_targets: torch.Tensor,
                     inside: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """sum(exp(z - peak)) over this part of the vocabulary, and z[target] - peak where the target lies in it
    (0 elsewhere). (B, R, V), (B, R, 1), (B, R), (B, R) -> (B, R), (B, R)."""
    shifted = logits - peak
    picked = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1)
    return shifted.exp().sum(dim=-1), picked * inside


def p_dot_z(logits: torch.Tensor, peak: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """sum(p * (z - peak)) over this part of the vocabulary, p = exp(z - peak - lse). -> (B, R)."""
    shifted = logits - peak
    return ((shifted - lse.unsqueeze(-1)).exp() * shifted).sum(dim=-1)


def original_torch_compile() -> Callable:
    """torch.compile as torch ships it. On Ascend, MindSpeed's pre patch turns torch.compile into a
    no-op; verl compiles its entropy with the original there (use_original_torch_compile), as here:
    the original is the one MindSpeed's patch for "torch.compile" keeps (`orig_func`)."""
    manager = getattr(sys.modules.get("mindspeed.patch_utils"), "MindSpeedPatchesManager", None)
    patch = getattr(manager, "patches_info", {}).get("torch.compile")
    original = getattr(patch, "orig_func", None)
    return original if callable(original) else torch.compile


def compile_pass(fn: Callable) -> Callable:
    """`fn` through torch.compile with dynamic shapes; an error if what comes back is not compiled."""
    compiled = original_torch_compile()(fn, dynamic=True)
    if getattr(compiled, "_torchdynamo_orig_callable", None) is not fn:
        raise RuntimeError(f"use_torch_compile=True, but torch.compile returned {fn.__name__} uncompiled here "
                           f"({compiled!r}: torch.compile is patched to a no-op in this process); set "
                           "use_torch_compile=False")
    return compiled


@functools.lru_cache(maxsize=None)
def compiled_kernels() -> Tuple[Callable, Callable]:
    """The two vocabulary passes through torch.compile (built once per process; dynamic shapes)."""
    return compile_pass(sum_exp_and_pick), compile_pass(p_dot_z)


def kernels(compiled: bool) -> Tuple[Callable, Callable]:
    """The two vocabulary passes, compiled or eager; `compiled` is a role's use_torch_compile."""
    if not isinstance(compiled, bool):  # e.g. a ref section built on its own keeps "${...use_torch_compile}"
        raise TypeError(f"use_torch_compile must be True or False, got {compiled!r} (a section built on its own "
                        "cannot follow the actor's value: set it, or convert the whole config)")
    return compiled_kernels() if compiled else (sum_exp_and_pick, p_dot_z)


def log_probs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool, compiled: bool = False,
                          vocab_start: int = 0, vocab_size: Optional[int] = None, reduce_max: Optional[Reduce] = None,
                          reduce_sum: Optional[Reduce] = None, chunk_size: Optional[int] = None,
                          checkpoint: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log p(target) and (with_entropy) the entropy of softmax(logits), both (B, R) float32.

    `logits` (B, R, V_local) hold vocabulary entries [vocab_start, vocab_start + V_local); entries at
    or past `vocab_size` (padding of a TP-split vocabulary) are excluded. `reduce_max` (in place,
    detached) and `reduce_sum` (differentiable) combine the parts across ranks; None = one part.

    `chunk_size` (a role's entropy_from_logits_with_chunking, with entropy_from_logits_chunk_size):
    the B*R tokens go through in chunks of that many, so the (tokens, V) temporaries of one chunk
    exist at a time instead of the whole batch's (the log-prob shares the chunk's log-sum-exp, so it is
    chunked with the entropy). `checkpoint` (entropy_checkpointing; only with the entropy): each
    chunk's computation is recomputed in backward (torch.utils.checkpoint) instead of keeping its
    (tokens, V) intermediates from forward to backward. Both give the same numbers as neither."""
    kw = dict(compiled=compiled, vocab_start=vocab_start, vocab_size=vocab_size, reduce_max=reduce_max,
              reduce_sum=reduce_sum)
    checkpoint = bool(checkpoint) and with_entropy and torch.is_grad_enabled() and logits.requires_grad
    if not chunk_size and not checkpoint:
        return _log_probs_and_entropy(logits, targets, with_entropy, **kw)
    batch, length, local_v = logits.shape
    flat, flat_t = logits.reshape(1, batch * length, local_v), targets.reshape(1, batch * length)
    step = int(chunk_size) if chunk_size else batch * length
    if step < 1:
        raise ValueError(f"entropy_from_logits_chunk_size={chunk_size}: a chunk holds at least 1 token")
    log_probs, entropies = [], []
    for start in range(0, batch * length, step):
        part, part_t = flat[:, start:start + step], flat_t[:, start:start + step]
        if checkpoint:
            import torch.utils.checkpoint as ckpt

            lp, ent = ckpt.checkpoint(_log_probs_and_entropy, part, part_t, with_entropy, use_reentrant=False, **kw)
        else:
            lp, ent = _log_probs_and_entropy(part, part_t, with_entropy, **kw)
        log_probs.append(lp)
        entropies.append(ent)
    log_probs_all = torch.cat(log_probs, dim=1).reshape(batch, length)
    entropy = torch.cat(entropies, dim=1).reshape(batch, length) if with_entropy else None
    return log_probs_all, entropy


def _log_probs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool, compiled: bool = False,
                           vocab_start: int = 0, vocab_size: Optional[int] = None, reduce_max: Optional[Reduce] = None,
                           reduce_sum: Optional[Reduce] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """`log_probs_and_entropy` over the whole of `logits` at once."""
    sum_exp, pdz = kernels(compiled)
    logits = logits.float()
    local_v = logits.shape[-1]
    if vocab_size is not None and vocab_start + local_v > vocab_size:
        index = torch.arange(vocab_start, vocab_start + local_v, device=logits.device)
        logits = logits.masked_fill(index >= vocab_size, _NEG)
    peak = logits.detach().max(dim=-1, keepdim=True).values
    if reduce_max is not None:
        reduce_max(peak)
    local_t = targets - vocab_start
    inside = (local_t >= 0) & (local_t < local_v)
    total, picked = sum_exp(logits, peak, local_t.clamp(0, local_v - 1), inside)
    reduce_sum = reduce_sum or (lambda t: t)
    lse = reduce_sum(total).log()
    log_probs = reduce_sum(picked) - lse
    entropy = lse - reduce_sum(pdz(logits, peak, lse)) if with_entropy else None
    return log_probs, entropy


def sum_pi_squared(logits: torch.Tensor, vocab_start: int = 0, vocab_size: Optional[int] = None,
                   reduce_max: Optional[Reduce] = None, reduce_sum: Optional[Reduce] = None,
                   chunk_size: Optional[int] = None) -> torch.Tensor:
    """sum over the vocabulary of softmax(logits)^2, (B, R) float32, detached: verl's sum_pi_squared
    (actor.calculate_sum_pi_squared), which the optimal token baselines read. Computed as
    sum(exp(z - m)^2) / sum(exp(z - m))^2 with m the max logit, so a vocabulary split over TP ranks
    (`vocab_start`, `vocab_size`, `reduce_max`, `reduce_sum` as in `log_probs_and_entropy`) all-reduces
    each rank's two partial sums, as verl's vocab_parallel_sum_pi_squared. `chunk_size`: that many
    tokens at a time (the role's entropy_from_logits_with_chunking), same numbers."""
    batch, length, local_v = logits.shape
    flat = logits.detach().reshape(batch * length, local_v)
    step = int(chunk_size) if chunk_size else max(batch * length, 1)
    reduce_sum = reduce_sum or (lambda t: t)
    parts = []
    with torch.no_grad():
        for start in range(0, batch * length, step):
            z = flat[start:start + step].float()
            if vocab_size is not None and vocab_start + local_v > vocab_size:
                index = torch.arange(vocab_start, vocab_start + local_v, device=z.device)
                z = z.masked_fill(index >= vocab_size, _NEG)
            peak = z.max(dim=-1, keepdim=True).values
            if reduce_max is not None:
                reduce_max(peak)
            e = (z - peak).exp()
            total, squares = reduce_sum(e.sum(dim=-1)), reduce_sum((e * e).sum(dim=-1))
            parts.append(squares / total.pow(2))
    return (torch.cat(parts) if parts else flat.new_zeros(0, dtype=torch.float32)).reshape(batch, length)


def log_prob_outputs(log_probs: torch.Tensor, entropy: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
    """An engine's forward outputs: {"log_probs"} and, when computed, {"entropy"}."""
    out = {"log_probs": log_probs}
    if entropy is not None:
        out["entropy"] = entropy
    return out
