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

from verl_lite.engine.logits import log_prob_outputs, log_probs_and_entropy, sum_pi_squared

# tokens per chunk of the fused path: verl's FusedLinearForPPO default
FUSED_CHUNK = 512
IMPL_BACKENDS = ("torch",)


def _chunk_log_softmax(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """A chunk's float32 log-softmax (C, V) of hidden @ weight^T / temperature (its logits freed at once)."""
    logits = hidden.float() @ weight.float().t()
    logits /= temperature
    return torch.log_softmax(logits, dim=-1)


def _entropy(log_softmax: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """-sum_j p_j log p_j per row, as a row-wise dot product (no (C, V) product temporary)."""
    return -(probs.unsqueeze(1) @ log_softmax.unsqueeze(2)).view(-1)


class FusedLogProbs(torch.autograd.Function):
    """(N, H) hidden, (V, H) weight, (N,) targets -> (N,) log-probs and (N,) entropy (zeros when not
    asked for), in float32; forward and backward one chunk of tokens at a time. A chunk holds at most
    three (C, V) float32 tensors at once (forward: log-softmax and probabilities; backward: those and
    the logits' gradient built in their place)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, with_entropy, chunk):
        n = hidden.shape[0]
        log_probs = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n, dtype=torch.float32)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            log_softmax = _chunk_log_softmax(hidden[start:end], weight, temperature)
            log_probs[start:end] = log_softmax.gather(-1, targets[start:end].unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy[start:end] = _entropy(log_softmax, log_softmax.exp())
            del log_softmax
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
        with_entropy = ctx.with_entropy and d_entropy is not None
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = min(start + ctx.chunk, hidden.shape[0])
            h = hidden[start:end]
            d_logits = _chunk_log_softmax(h, weight, ctx.temperature)
            probs = d_logits.exp()
            if with_entropy:
                # dH / dz_j = -p_j (log p_j + H), built in the log-softmax's storage
                ent = _entropy(d_logits, probs)
                d_logits.add_(ent.unsqueeze(-1)).mul_(probs).mul_(-d_entropy[start:end].unsqueeze(-1))
            else:
                d_logits.zero_()
            if d_log_probs is not None:
                # d log p(t) / dz = onehot(t) - p
                d_lp = d_log_probs[start:end].unsqueeze(-1)
                d_logits.sub_(probs.mul_(d_lp))
                d_logits.scatter_add_(-1, targets[start:end].unsqueeze(-1), d_lp)
            del probs
            d_logits /= ctx.temperature
            if want_h:
                d_hidden[start:end] = (d_logits @ w32).to(hidden.dtype)
            if want_w:
                d_weight.addmm_(d_logits.t(), h.float())
            del d_logits
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


SUM_PI_SQUARED_FUSED = ("actor_rollout_ref.actor.calculate_sum_pi_squared=True is not supported with "
                        "actor_rollout_ref.model.use_fused_kernels=True (as in verl): the fused log-prob kernels "
                        "never form the logits that sum_pi_squared sums over; set use_fused_kernels=False")


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
                 with_entropy: bool, with_sum_pi_squared: bool = False) -> Dict[str, torch.Tensor]:
        """{"log_probs", "entropy"?, "sum_pi_squared"?} (B, R) of `responses` from `pick`'s tensor over the
        whole sequence (position t predicts token t + 1). sum_pi_squared (over the vocabulary of the
        tempered softmax, as verl) needs the logits: the fused head, which never forms them, refuses it."""
        resp_len = responses.shape[1]
        output = output[:, -resp_len - 1:-1, :]
        temperature = float(temperature or 1.0)
        if self.fused:
            if with_sum_pi_squared:
                raise ValueError(SUM_PI_SQUARED_FUSED)
            return self._fused(module, output, responses, temperature, with_entropy)
        logits = output.float()
        if temperature != 1.0:
            logits = logits / temperature
        out = log_prob_outputs(*log_probs_and_entropy(logits, responses, with_entropy, self.compiled,
                                                      chunk_size=self.chunk_size, checkpoint=self.checkpoint))
        if with_sum_pi_squared:
            out["sum_pi_squared"] = sum_pi_squared(logits, chunk_size=self.chunk_size)
        return out

    @staticmethod
    def _fused(module: torch.nn.Module, hidden: torch.Tensor, responses: torch.Tensor, temperature: float,
               with_entropy: bool) -> Dict[str, torch.Tensor]:
        weight = module.get_output_embeddings().weight
        gathered = hasattr(weight, "full_tensor")
        if gathered:
            # FSDP2 resharded the root module (which holds the LM head) after forward: gather it again, so the
            # head's gradient lands on the unsharded parameter and FSDP's post-backward reduce-scatters it over
            # the data-parallel ranks as for any parameter (a DTensor's full_tensor() would skip that)
            module.unshard()
            weight = module.get_output_embeddings().weight
        out = log_prob_outputs(*fused_log_probs_and_entropy(hidden, weight, responses, temperature, with_entropy))
        if gathered and not torch.is_grad_enabled():
            module.reshard()  # no backward will reshard it
        return out
