"""Log-probs, entropy and the sum of squared probabilities from logits split over the vocabulary across
TP ranks (the Megatron engines' output layer is vocabulary-parallel): `verl_lite.engine.logits` with the
max and the sums reduced over the TP group. Megatron is imported inside the functions only.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from verl_lite.engine.logits import log_probs_and_entropy, sum_pi_squared


def vocab_parallel_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, with_entropy: bool, compiled: bool = False,
    chunk_size: Optional[int] = None, checkpoint: bool = False
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """log p(target) and entropy from logits split over the vocabulary across TP ranks
    (`verl_lite.engine.logits`, torch.compile'd with `compiled`: the role's use_torch_compile).

    `logits` (B, R, V/tp) is this rank's slice; padded vocabulary entries (index >= vocab_size)
    are excluded. Sums cross ranks with an all-reduce whose backward is the identity, which is
    right because everything after it is replicated on every TP rank. `chunk_size` and `checkpoint`: the
    role's entropy_from_logits_with_chunking and entropy_checkpointing (every TP rank walks the same chunks,
    so the reductions pair up, in backward's recompute too).
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as reduce

    start = mpu.get_tensor_model_parallel_rank() * logits.shape[-1]
    return log_probs_and_entropy(logits, targets, with_entropy, compiled, vocab_start=start, vocab_size=vocab_size,
                                 reduce_max=_tp_reduce_max, reduce_sum=reduce, chunk_size=chunk_size,
                                 checkpoint=checkpoint)


def _tp_reduce_max(peak: torch.Tensor) -> None:
    """The max over the TP group, in place (the vocabulary-parallel softmaxes' peak)."""
    from megatron.core import parallel_state as mpu

    if mpu.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX,
                                     group=mpu.get_tensor_model_parallel_group())


def vocab_parallel_sum_pi_squared(logits: torch.Tensor, vocab_size: int,
                                  chunk_size: Optional[int] = None) -> torch.Tensor:
    """sum over the vocabulary of softmax(logits)^2 from logits split over the vocabulary across TP
    ranks (verl's vocab_parallel_sum_pi_squared): each rank's sums of exp(z - max) and of its square,
    all-reduced over the TP group (the max too). (B, R, V/tp) -> (B, R), detached."""
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as reduce

    start = mpu.get_tensor_model_parallel_rank() * logits.shape[-1]
    return sum_pi_squared(logits, vocab_start=start, vocab_size=vocab_size, reduce_max=_tp_reduce_max,
                          reduce_sum=reduce, chunk_size=chunk_size)
