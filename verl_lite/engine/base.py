"""The engine interface every training backend implements (torch-native, Megatron, MindSpeed).

An engine owns one model (a language model with its LM head, or a value model with a scalar head),
its optimizer and LR schedule. Workers drive it; the trainer never touches a model directly.

Batch contract (all tensors on CPU or the engine's device, left-padded prompts + right-padded
responses, as produced by the rollout):
  input_ids       (B, T) long   prompt + response tokens
  attention_mask  (B, T) long   1 for real tokens
  position_ids    (B, T) long
  responses       (B, R) long   the last R columns of input_ids
  response_mask   (B, R) long   1 for generated tokens up to and including EOS

Micro-batches of one call may differ in rows and columns (dynamic batch size cuts each to the
columns its rows use: `verl_lite.trainer.dynamic_batch`); the responses stay the last R' columns.

Forward outputs, one dict per micro-batch:
  language_model: log_probs (B, R) float32 [, entropy (B, R) when asked]
  value_model:    values (B, R) float32
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from verl_lite.config.schema import ModelConfig, OptimConfig
from verl_lite.config.sections import as_section, role_section_class


class CPUSnapshotUnsupported(NotImplementedError):
    """The engine does not implement `snapshot_to_cpu` / `restore_from_cpu`."""


class UnsupportedModelError(ValueError):
    """An HF config no registered bridge can build, or one its bridge does not cover (raised by the
    Megatron engines, their model bridges and layers)."""

# loss_fn(outputs, micro_batch) -> (loss tensor to backpropagate, metrics dict of floats)
LossFn = Callable[[Dict[str, Any], Dict[str, Any]], Tuple[Any, Dict[str, float]]]


class BaseEngine(abc.ABC):
    """Abstract training engine. Subclasses are registered in `verl_lite.registry`.

    The sections arrive as schema dataclasses, DictConfig nodes or plain dicts and are turned into
    the schema's dataclasses here, once (`verl_lite.config.sections.as_section`):
      model_config   ModelConfig                             the model to build
      engine_config  ActorConfig | RefConfig | CriticConfig  the role's section (megatron, fsdp_config)
      optim_config   OptimConfig, or None for an engine that never steps (the ref)
    """

    model_type: str = "language_model"

    def __init__(self, model_config: Any, engine_config: Any, optim_config: Any, device: str, role: str = "actor"):
        self.model_config: ModelConfig = as_section(ModelConfig, model_config)
        self.engine_config = as_section(role_section_class(role), engine_config)
        self.optim_config: Optional[OptimConfig] = None if optim_config is None else as_section(OptimConfig, optim_config)
        self.device = device
        self.role = role
        self._mode = "eval"

    # -- lifecycle -----------------------------------------------------------------------------

    @abc.abstractmethod
    def initialize(self) -> None:
        """Set up the device mesh / process groups, build the model, optimizer and LR schedule."""

    def train_mode(self) -> None:
        self._mode = "train"

    def eval_mode(self) -> None:
        self._mode = "eval"

    @property
    def mode(self) -> str:
        return self._mode

    # -- compute -------------------------------------------------------------------------------

    @abc.abstractmethod
    def forward_backward(
        self,
        micro_batches: List[Dict[str, Any]],
        loss_fn: Optional[LossFn] = None,
        forward_only: bool = False,
        calculate_entropy: bool = False,
        calculate_sum_pi_squared: bool = False,
    ) -> List[Dict[str, Any]]:
        """Run forward (and backward of `loss_fn`'s loss unless forward_only) on each micro-batch.
        `calculate_sum_pi_squared` (forward_only): also "sum_pi_squared", the sum over the vocabulary
        of the squared token probabilities at each response position (verl's, for the optimal token
        baselines).

        Gradients accumulate across micro-batches; the caller scales each loss. Returns the
        forward outputs (detached, on CPU) with the loss function's metrics under "metrics".
        """

    def micro_batch_multiple(self) -> int:
        """The number of micro-batches of one pass must be a multiple of this (megatron's interleaved
        pipeline schedule); a token-budget split (`verl_lite.trainer.dynamic_batch`) rounds up to it."""
        return 1

    @abc.abstractmethod
    def optimizer_zero_grad(self) -> None: ...

    @abc.abstractmethod
    def optimizer_step(self) -> float:
        """Clip gradients to `optim.clip_grad` (0 = off), step the optimizer; returns the gradient norm
        before clipping. `optim.clip_grad` is the only clip setting (verl 0.9's engines read it alone)."""

    @abc.abstractmethod
    def lr_scheduler_step(self) -> float:
        """Advance the LR schedule; returns the learning rate now in effect."""

    # -- memory --------------------------------------------------------------------------------

    @abc.abstractmethod
    def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
        """Move model parameters / optimizer state / gradients to `device` ("cpu" to offload)."""

    # -- weights -------------------------------------------------------------------------------

    @abc.abstractmethod
    def export_hf_weights(self) -> Iterator[Tuple[str, Any]]:
        """Yield (HF parameter name, full unsharded tensor on CPU) for rollout weight sync, one
        tensor at a time: memory stays bounded by about one parameter (a caller that needs every
        weight at once builds the dict itself, knowingly). Where weights are sharded this is a
        collective: every rank iterates it to the end, and every rank receives every tensor."""

    # -- CPU snapshots (fully-async training) ----------------------------------------------------

    def snapshot_to_cpu(self) -> Any:
        """A copy of this rank's weights on CPU (its local shards: no collective), for `restore_from_cpu`.

        The fully-async train worker keeps the weights it published to the rollouts this way and
        computes old log-probs with them after its own weights have moved on. Engines that cannot
        raise CPUSnapshotUnsupported."""
        raise CPUSnapshotUnsupported(f"{type(self).__name__} keeps no CPU snapshots")

    def restore_from_cpu(self, snapshot: Any) -> None:
        """Put the weights of a `snapshot_to_cpu()` back in place (optimizer state is not touched)."""
        raise CPUSnapshotUnsupported(f"{type(self).__name__} keeps no CPU snapshots")

    def save_hf_model(self, path: str, strict: bool = True) -> Optional[str]:
        """Write the model as an HF model dir at `path` (config.json, safetensors, the tokenizer) that
        transformers' from_pretrained loads; `strict`: the exported names must be exactly the HF
        class's (engine/hf_export.py). A collective; returns the dir on the rank that wrote it."""
        raise NotImplementedError(f"{type(self).__name__} cannot write an HF model")

    @abc.abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """Write under directory `path` what the role's checkpoint.save_contents lists: model,
        optimizer, extra (LR schedule and RNG state), hf_model (`save_hf_model` into huggingface/),
        and contents.json (what was saved, the parallel layout)."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Restore what checkpoint.load_contents lists from what save_checkpoint wrote (tensors only:
        torch.load(weights_only=True)); a listed part the checkpoint lacks, or files cut for another
        parallel layout, is a CheckpointError naming it and the fix."""

    # -- topology ------------------------------------------------------------------------------

    def data_parallel_rank(self) -> int:
        return 0

    def data_parallel_size(self) -> int:
        return 1

    def data_parallel_group(self) -> Any:
        """The process group over which the ranks that compute the loss on different data reduce a
        statistic of the batch (verl's `distributed_masked_mean`), or None when this rank holds the
        whole batch. Peers that hold the same data (Ulysses SP, TP) may be in it: they add the same
        sums and counts, so a mean over the group is the data-parallel mean."""
        return None

    def sequence_parallel_size(self) -> int:
        """Ranks that share each micro-batch, each running a slice of its sequence (Ulysses SP)."""
        return 1

    def is_data_parallel_leader(self) -> bool:
        """True on the rank whose outputs represent its data-parallel shard (TP/PP rank 0, last stage)."""
        return True
