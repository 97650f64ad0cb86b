"""Log-probs and entropy from the final hidden states and the LM head weight, never holding the whole
(tokens x vocabulary) logits: verl's `model.use_fused_kernels` on the torch engine, and the one place
the torch engine turns a model output into log-probs (`LogProbHead`).

`fused_log_probs_and_entropy` walks the tokens in chunks: a chunk's logits (chunk x V, float32) are
computed, reduced to the target's log-prob and the entropy, and dropped; backward recomputes each
chunk's logits from the saved hidden states and weight (`FusedLogProbs`, a torch.autograd.Function),
so the peak is one chunk's logits and softmax instead of several (tokens x V) tensors. At Qwen3.5's
vocabulary (248320) one 4096-token micro-batch's float32 logits alone are 4.1 GB; a 512-token chunk's
are 0.5 GB (bench/fsdp_memory_bench.py measures it). Temperature divides the logits, as verl's torch
backend does ((h @ W^T) / T). `fused_kernel_options.impl_backend`: torch (this code); verl's triton
kernels are not part of verl_lite (the preflight refuses triton).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from verl_lite.engine.logits import log_prob_outputs, log_probs_and_entropy

# tokens per chunk of the fused path: verl's FusedLinearForPPO default
FUSED_CHUNK = 512
IMPL_BACKENDS = ("torch",)


def _chunk_stats(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float,
                 with_entropy: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """A chunk's float32 logits (C, V), log-softmax (C, V), target log-probs (C,) and entropy (C,)."""
    logits = (hidden.float() @ weight.float().t()) / temperature
    log_softmax = torch.log_softmax(logits, dim=-1)
    picked = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1) if with_entropy else None
    return logits, log_softmax, picked, entropy


class FusedLogProbs(torch.autograd.Function):
    """(N, H) hidden, (V, H) weight, (N,) targets -> (N,) log-probs and (N,) entropy (zeros when not
    asked for), in float32; forward and backward one chunk of tokens at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, with_entropy, chunk):
        n = hidden.shape[0]
        log_probs = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n, dtype=torch.float32)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            _, _, lp, ent = _chunk_stats(hidden[start:end], weight, targets[start:end], temperature, with_entropy)
            log_probs[start:end] = lp
            if ent is not None:
                entropy[start:end] = ent
        ctx.save_for_backward(hidden, weight, targets)
        ctx.temperature, ctx.with_entropy, ctx.chunk = temperature, with_entropy, chunk
        return log_probs, entropy

    @staticmethod
    def backward(ctx, d_log_probs, d_entropy):
        hidden, weight, targets = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        d_hidden = torch.zeros_like(hidden) if want_h else None
        d_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_w else None
        w32 = weight.float()
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = min(start + ctx.chunk, hidden.shape[0])
            h = hidden[start:end]
            _, log_softmax, _, ent = _chunk_stats(h, weight, targets[start:end], ctx.temperature, ctx.with_entropy)
            probs = log_softmax.exp()
            # d log p(t) / dz = onehot(t) - p
            d_logits = probs * (-d_log_probs[start:end].unsqueeze(-1)) if d_log_probs is not None else \
                torch.zeros_like(probs)
            if d_log_probs is not None:
                d_logits.scatter_add_(-1, targets[start:end].unsqueeze(-1), d_log_probs[start:end].unsqueeze(-1))
            # dH / dz_j = -p_j (log p_j + H)
            if ctx.with_entropy and d_entropy is not None:
                d_logits -= probs * (log_softmax + ent.unsqueeze(-1)) * d_entropy[start:end].unsqueeze(-1)
            del probs, log_softmax
            d_logits /= ctx.temperature
            if want_h:
                d_hidden[start:end] = (d_logits @ w32).to(hidden.dtype)
            if want_w:
                d_weight.addmm_(d_logits.t(), h.float())
        return d_hidden, (d_weight.to(weight.dtype) if want_w else None), None, None, None, None


def fused_log_probs_and_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                temperature: float = 1.0, with_entropy: bool = False, chunk: int = FUSED_CHUNK
                                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log p(target) and (with_entropy) the entropy of softmax(hidden @ weight^T / temperature), (B, R)
    float32 from (B, R, H) hidden states, the (V, H) LM head weight and (B, R) targets."""
    batch, length, width = hidden.shape
    log_probs, entropy = FusedLogProbs.apply(hidden.reshape(batch * length, width), weight,
                                             targets.reshape(-1), float(temperature), bool(with_entropy), int(chunk))
    return log_probs.view(batch, length), (entropy.view(batch, length) if with_entropy else None)


class LogProbHead:
    """How the torch engine gets log-probs out of its causal LM for a role: what to ask the model for
    (`model_kwargs`, `pick`) and how to turn that into log-probs and entropy (`__call__`).

    Plain: the model's logits, the response columns sliced out, divided by the temperature, then
    engine/logits.py (with the role's use_torch_compile, entropy_from_logits_with_chunking and
    entropy_checkpointing). Fused (`model.use_fused_kernels`): the model's final hidden states (it is
    asked for no logits: `logits_to_keep` selects none), then `fused_log_probs_and_entropy` with the
    LM head weight."""

    def __init__(self, model_config: Any, role_config: Any):
        self.fused = bool(model_config.use_fused_kernels)
        backend = model_config.fused_kernel_options.impl_backend
        if self.fused and backend not in IMPL_BACKENDS:
            raise ValueError(f"model.fused_kernel_options.impl_backend={backend!r} is not supported by verl_lite: "
                             f"choose one of {', '.join(IMPL_BACKENDS)} (verl's Triton kernels are not part of it)")
        self.compiled = role_config.use_torch_compile
        chunking = bool(role_config.entropy_from_logits_with_chunking)
        self.chunk_size = int(role_config.entropy_from_logits_chunk_size) if chunking else None
        self.checkpoint = bool(role_config.entropy_checkpointing)

    def model_kwargs(self) -> Dict[str, Any]:
        """Extra arguments of the model call: none, or (fused) hidden states and no logits."""
        if not self.fused:
            return {}
        return {"output_hidden_states": True, "logits_to_keep": torch.zeros(0, dtype=torch.long)}

    def pick(self, result: Any) -> torch.Tensor:
        """The tensor of a model output this head reads: logits (B, T, V), or (fused) the final,
        normed hidden states (B, T, H)."""
        return result.hidden_states[-1] if self.fused else result.logits

    def __call__(self, module: torch.nn.Module, output: torch.Tensor, responses: torch.Tensor, temperature: float,
                 with_entropy: bool) -> Dict[str, torch.Tensor]:
        """{"log_probs", "entropy"?} (B, R) of `responses` from `pick`'s tensor over the whole sequence
        (position t predicts token t + 1)."""
        resp_len = responses.shape[1]
        output = output[:, -resp_len - 1:-1, :]
        temperature = float(temperature or 1.0)
        if self.fused:
            weight = module.get_output_embeddings().weight
            return log_prob_outputs(*fused_log_probs_and_entropy(output, weight, responses, temperature, with_entropy))
        logits = output.float()
        if temperature != 1.0:
            logits = logits / temperature
        return log_prob_outputs(*log_probs_and_entropy(logits, responses, with_entropy, self.compiled,
                                                       chunk_size=self.chunk_size, checkpoint=self.checkpoint))
