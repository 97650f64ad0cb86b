"""verl's rollout and validation dumps (trainer.rollout_data_dir, trainer.validation_data_dir): each
training step's samples, and each validation's, as JSON lines in `<dir>/<step>.jsonl`, written as verl's
RayPPOTrainer writes them at the pinned commit (verl/trainer/ppo/ray_trainer.py:453-545, :695-705):

- one row per response, its keys in verl's order: `input` (the prompt decoded without special tokens),
  `output` (the response decoded the same way), `gts` (the row's reward_model.ground_truth), `score`
  (the response's summed token-level score, before any KL penalty), `step`, then the reward function's
  extra values (the other keys of the dicts it returned), each where it has a value per row;
  a validation's extra values start with `reward` (the score again, as verl's _validate collects it);
- `step` is the training step: the rollout dump of step N is N.jsonl, a validation after step N
  writes N.jsonl too, one before training 0.jsonl;
- written on a background thread (verl: a one-worker ThreadPoolExecutor) so the step does not wait
  for the disk; a failed write is raised at the next dump or when the run ends (`close`).

verl writes no advantages, returns or log-probs into these files at this commit, and neither does this.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence

from verl_lite.trainer.dynamic_sampling import EXTRA_PREFIX

logger = logging.getLogger(__name__)

# where the fully-async rollout worker's validation hands its dump rows to the driver (not a metric)
DUMP_ROWS_KEY = "_validation_dump_rows"


def _json_default(obj: Any) -> Any:
    """numpy and torch scalars and arrays as numbers and lists; anything else as its text (verl: default=str)."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def dump_rows(inputs: Sequence[str], outputs: Sequence[str], gts: Sequence[Any], scores: Sequence[float],
              extra: Dict[str, Sequence[Any]], step: int) -> List[Dict[str, Any]]:
    """verl's _write_generations rows: input, output, gts, score, step, then each extra key with one value
    per row (a key whose list has another length is left out, as verl leaves it out)."""
    n = len(inputs)
    columns: Dict[str, Sequence[Any]] = {"input": inputs, "output": outputs, "gts": gts, "score": scores,
                                         "step": [step] * n}
    for key, values in extra.items():
        if len(values) == n and key not in columns:
            columns[key] = values
    return [{k: v[i] for k, v in columns.items()} for i in range(n)]


def write_rows(path: str, rows: List[Dict[str, Any]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
    os.replace(tmp, path)  # a reader never sees half a file
    logger.info("dumped generations to %s", path)


def decode_texts(tokenizer: Any, ids: Any, mask: Any) -> List[str]:
    """Each row's kept tokens (mask 1) decoded without special tokens (the padding is never text)."""
    return [tokenizer.decode([t for t, keep in zip(row, m) if keep], skip_special_tokens=True)
            for row, m in zip(ids.tolist(), mask.tolist())]


def sample_rows(tokenizer: Any, batch: Dict[str, Any], scores: Any, step: int,
                reward: bool = False) -> List[Dict[str, Any]]:
    """The dump rows of a scored batch: its left-padded `prompts` (their mask: the first columns of
    `attention_mask`), the response texts the reward scored (`_texts`, else `responses` decoded over
    `response_mask`), `ground_truth`, the reward's extra values (EXTRA_PREFIX keys) and `scores` (B,);
    with `reward`, the scores again as the first extra value (verl's validation rows)."""
    width = batch["prompts"].shape[1]
    inputs = decode_texts(tokenizer, batch["prompts"], batch["attention_mask"][:, :width])
    outputs = batch.get("_texts") or decode_texts(tokenizer, batch["responses"], batch["response_mask"])
    scores = [float(s) for s in (scores.tolist() if hasattr(scores, "tolist") else scores)]
    extra = {"reward": scores} if reward else {}
    extra.update({k[len(EXTRA_PREFIX):]: v for k, v in batch.items() if k.startswith(EXTRA_PREFIX)})
    return dump_rows(inputs, outputs, list(batch["ground_truth"]), scores, extra, step)


class Dumps:
    """The run's dumps: `rollout(step, ...)` per training step when trainer.rollout_data_dir is set,
    `validation(step, ...)` per validation when trainer.validation_data_dir is set; `close` waits for
    the writes still pending and raises the first that failed."""

    def __init__(self, rollout_dir: Optional[str], validation_dir: Optional[str]):
        self.rollout_dir = os.path.abspath(os.path.expanduser(rollout_dir)) if rollout_dir else None
        self.validation_dir = os.path.abspath(os.path.expanduser(validation_dir)) if validation_dir else None
        self._pool: Optional[ThreadPoolExecutor] = None
        self._pending: List[Future] = []

    @classmethod
    def of(cls, trainer_cfg: Any) -> "Dumps":
        return cls(trainer_cfg.rollout_data_dir, trainer_cfg.validation_data_dir)

    def rollout(self, step: int, tokenizer: Any, batch: Dict[str, Any], scores: Any) -> None:
        """Step `step`'s scored batch (prompts, responses, their masks, ground truths, the reward's extra
        values; `scores`: the per-response scores) as verl's _log_rollout_data dumps it."""
        if self.rollout_dir:
            self._submit(self.rollout_dir, step, sample_rows(tokenizer, batch, scores, step))

    def validation(self, step: int, tokenizer: Any, batch: Dict[str, Any], scores: Any) -> None:
        """A validation's scored batch as verl's _validate dumps it (the score again as `reward`)."""
        if self.validation_dir:
            self._submit(self.validation_dir, step, sample_rows(tokenizer, batch, scores, step, reward=True))

    def take_validation(self, step: int, metrics: Dict[str, Any]) -> Dict[str, Any]:
        """The fully-async validation's metrics without the dump rows its rollout worker made
        (DUMP_ROWS_KEY), which are written as step `step`'s validation dump."""
        metrics = dict(metrics)
        rows = metrics.pop(DUMP_ROWS_KEY, None)
        if rows is not None and self.validation_dir:
            self._submit(self.validation_dir, step, rows)
        return metrics

    def _submit(self, directory: str, step: int, rows: List[Dict[str, Any]]) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verl_lite-dump")
        self._pending.append(self._pool.submit(write_rows, os.path.join(directory, f"{step}.jsonl"), rows))
        still = []
        for f in self._pending:  # a failed write surfaces at the next dump, as verl's does
            if f.done():
                f.result()
            else:
                still.append(f)
        self._pending = still

    def close(self) -> None:
        pending, self._pending = self._pending, []
        try:
            for f in pending:
                f.result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
