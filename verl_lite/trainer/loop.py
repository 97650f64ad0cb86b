"""What the synchronous and the fully-async trainers share around their steps: the run's length (and
the LR schedule's), the step counter against it, a note naming the step on any failure, and the stop
request (a SIGINT/SIGTERM lets the current step finish, then the last finished step is saved and the
run stops)."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Optional

from verl_lite.decisions import async_pools

logger = logging.getLogger(__name__)


class StopRequest:
    """Set by a SIGINT/SIGTERM handler; the trainer finishes the current step, saves and stops."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None

    @property
    def requested(self) -> bool:
        return self.signum is not None


def total_steps(cfg: Any, n_prompts: int) -> int:
    """The run's length, as verl's fit loop has it: total_epochs full batches of the training prompts
    (the last partial batch is dropped, as verl's dataloader does), cut at trainer.total_training_steps
    when that is set (verl loops over total_epochs and stops at total_training_steps, whichever
    comes first)."""
    t = cfg.trainer
    if async_pools.streaming(cfg):  # verl's fully-async data.train_batch_size=0: the rollouter's prompt count
        return async_pools.total_train_steps(cfg, n_prompts)
    epochs = (n_prompts // int(cfg.data.train_batch_size)) * int(t.total_epochs)
    cap = cfg.actor_rollout_ref.rollout.total_rollout_steps if cfg.async_training.enable else None
    if cap is not None:  # fully-async with a batch: the rollouter stops after that many prompts
        epochs = min(epochs, int(cap) // int(cfg.data.train_batch_size))
    if t.total_training_steps:
        return min(int(t.total_training_steps), epochs)
    return epochs


def lr_schedule_steps(cfg: Any, n_prompts: int) -> int:
    """The LR schedule's length (cosine, warm-up ratio) of a role whose optim.total_training_steps is
    unset (<= 0), as verl's trainer fills it: trainer.total_training_steps when given (even where
    total_epochs ends the run first), else total_epochs epochs (total_steps)."""
    t = cfg.trainer
    return int(t.total_training_steps) if t.total_training_steps else total_steps(cfg, n_prompts)


class StepLoop:
    """Base of the trainers: subclasses set these attributes and implement `_save` (write a
    checkpoint of `global_step` through `ckpt` and set `saved_step`)."""

    global_step: int = 0
    saved_step: int = 0
    total_steps: int = 0
    stop: StopRequest
    ckpt: Any

    def _save(self) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def during(self, what: str, step: int) -> Iterator[None]:
        """A failure inside the block gets a note naming the step it interrupted (main prints it)."""
        try:
            yield
        except Exception as e:
            e.add_note(f"{what} {step} of {self.total_steps}")
            raise

    def finish_stop(self) -> None:
        """After a stop request: save the last finished step unless it is saved, and say where the
        run can resume from."""
        if not self.stop.requested:
            return
        if self.global_step > self.saved_step:
            with self.during("saving the checkpoint of step", self.global_step):
                self._save()
        logger.warning("stopped by signal %d after step %d of %d; checkpoint %s; run again to resume",
                       self.stop.signum, self.global_step, self.total_steps,
                       self.ckpt.step_dir(self.saved_step) if self.saved_step else "none (no step finished)")
