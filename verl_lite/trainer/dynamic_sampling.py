"""DAPO's dynamic sampling (`algorithm.filter_groups`), as verl's DAPO recipe runs it: generate
`data.gen_batch_size` prompts (x rollout.n), score them, drop each prompt group whose metric has zero
std over its responses (all right or all wrong: its GRPO advantages are all zero), and generate again
until `data.train_batch_size` groups are kept; the surplus is cut. After `max_num_gen_batches`
rounds (<= 0: no limit) without enough groups the run stops with the counts.

verl's V1 trainer (its default at the pinned commit) streams single prompts instead (gen_batch_size
forced to 1, two refills per dropped group, max_num_gen_batches ignored with a warning); the kept
groups are drawn the same way, only the generation schedule differs. See docs/dapo.md.

Also here: the batch helpers this needs (merging generation batches whose prompts were padded to
different widths) and the preflight rules of the settings.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Sequence, Tuple

from verl_lite.batch import concat, select

logger = logging.getLogger(__name__)

# metrics computed from the token-level tensors; any other name is a key of the reward's extra info
SEQ_METRICS = ("seq_reward", "seq_final_reward")
EXTRA_PREFIX = "_reward_extra/"  # batch keys of the per-response reward extra info (driver-side lists)
OVERLONG_KEYS = ("overlong_reward", "overlong")  # the dapo manager's values with overlong_buffer_cfg.log
PROMPT_WIDTH_KEYS = ("prompts",)
FULL_WIDTH_KEYS = ("input_ids", "attention_mask", "position_ids")


class DynamicSamplingError(RuntimeError):
    """Too few prompt groups with varied rewards within algorithm.filter_groups.max_num_gen_batches."""


def metric_values(batch: Dict[str, Any], metric: str, rewards: Any = None) -> List[float]:
    """The per-response values of `metric`: seq_reward (summed token_level_scores), seq_final_reward
    (summed rewards), or the reward extra info key of that name."""
    if metric == "seq_reward":
        return batch["token_level_scores"].sum(-1).tolist()
    if metric == "seq_final_reward":
        return (rewards if rewards is not None else batch["token_level_scores"]).sum(-1).tolist()
    values = batch.get(EXTRA_PREFIX + metric)
    if values is None or any(v is None for v in values):
        known = sorted(k[len(EXTRA_PREFIX):] for k in batch if k.startswith(EXTRA_PREFIX))
        raise DynamicSamplingError(
            f"algorithm.filter_groups.metric={metric!r}: the reward gives no {metric!r} for "
            f"{'some responses' if values is not None else 'the responses'} (the reward's extra keys: "
            f"{', '.join(known) or 'none'}); a score function returning a number records only acc, and only under "
            "reward_model.reward_manager=dapo; use seq_reward for the score itself")
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise DynamicSamplingError(f"algorithm.filter_groups.metric={metric!r}: its values are not numbers "
                                   f"(e.g. {values[0]!r})") from None


def varied_groups(uids: Sequence[Any], values: Sequence[float]) -> Tuple[List[int], int, int]:
    """(rows of the kept groups in order, groups kept, groups dropped): a group is kept when its
    values differ (np.std > 0) or it has one response, as verl's recipe decides."""
    import numpy as np

    rows_of: "OrderedDict[Any, List[int]]" = OrderedDict()
    for i, uid in enumerate(uids):
        rows_of.setdefault(uid, []).append(i)
    kept_rows: List[int] = []
    kept = 0
    for rows in rows_of.values():
        if len(rows) == 1 or float(np.std([values[i] for i in rows])) > 0:
            kept_rows.extend(rows)
            kept += 1
    return kept_rows, kept, len(rows_of) - kept


def merge_batches(batches: List[Dict[str, Any]], pad_token_id: int) -> Dict[str, Any]:
    """One batch from generation batches whose prompts were left-padded to different widths: each is
    left-padded to the widest (pad_token_id in the ids, 0 in the masks and positions)."""
    import torch
    import torch.nn.functional as F


    widest = max(int(b["prompts"].shape[1]) for b in batches)
    keys = list(dict.fromkeys(k for b in batches for k in b))
    padded = []
    for b in batches:
        extra = widest - int(b["prompts"].shape[1])
        out = dict(b)
        n = len(b["uid"])
        for k in keys:
            if k not in out:  # a reward extra key some batch lacks
                out[k] = [None] * n
            elif extra and k in PROMPT_WIDTH_KEYS + FULL_WIDTH_KEYS:
                fill = pad_token_id if k in ("prompts", "input_ids") else 0
                out[k] = F.pad(out[k], (extra, 0), value=fill)
        padded.append(out)
    for k in keys:
        shapes = {tuple(p[k].shape[1:]) for p in padded if isinstance(p[k], torch.Tensor) and p[k].dim() > 1}
        if len(shapes) > 1:
            raise ValueError(f"cannot merge generation batches: {k!r} has shapes {sorted(shapes)}")
    return concat(padded)


class DynamicSampler:
    """Collects train_batch_size prompt groups with varied `metric` from generation rounds."""

    def __init__(self, cfg: Any, pad_token_id: int):
        fg = cfg.algorithm.filter_groups
        self.metric = str(fg.metric)
        self.max_gen = int(fg.max_num_gen_batches)
        self.want = int(cfg.data.train_batch_size)
        self.n = int(cfg.actor_rollout_ref.rollout.n)
        self.pad_token_id = pad_token_id

    def collect(self, generate: Callable[[int], Dict[str, Any]]) -> Tuple[Dict[str, Any], Dict[str, float]]:
        """(the training batch of want * n rows, metrics). `generate(round)` returns one scored
        generation batch; its uids are made unique per round (a prompt drawn twice in one step, across
        an epoch boundary, stays two groups)."""
        kept_parts: List[Dict[str, Any]] = []
        kept = dropped = rounds = 0
        while kept < self.want:
            rounds += 1
            gen = generate(rounds)
            gen["uid"] = [f"{uid}@{rounds}" for uid in gen["uid"]]
            rows, k, d = varied_groups(gen["uid"], metric_values(gen, self.metric))
            kept, dropped = kept + k, dropped + d
            logger.info("dynamic sampling round %d: %d of %d groups kept (%d/%d for the step)", rounds, k, k + d,
                        min(kept, self.want), self.want)
            if rows:
                kept_parts.append(select(gen, rows))
            if kept < self.want and 0 < self.max_gen <= rounds:
                raise DynamicSamplingError(
                    f"dynamic sampling kept {kept} of the {self.want} prompt groups a step needs after "
                    f"{rounds} generation batches (algorithm.filter_groups.max_num_gen_batches={self.max_gen}): "
                    f"{dropped} groups had the same {self.metric} for all {self.n} responses. The data may be too "
                    "hard or too easy for the model; raise max_num_gen_batches, or set it to 0 for no limit")
        batch = merge_batches(kept_parts, self.pad_token_id)
        batch = select(batch, range(self.want * self.n))  # groups are contiguous: the first `want` stay whole
        metrics = {"train/num_gen_batches": rounds, "train/filter_groups/kept_groups": self.want,
                   "train/filter_groups/dropped_groups": dropped,
                   "train/filter_groups/surplus_groups": kept - self.want}
        return batch, metrics


def reward_extra_metrics(batch: Dict[str, Any]) -> Dict[str, float]:
    """Means of the DAPO overlong penalty's logged values (overlong_buffer_cfg.log)."""
    import numpy as np

    out = {}
    for key in OVERLONG_KEYS:
        values = batch.get(EXTRA_PREFIX + key)
        if values:
            out[f"reward_extra/{key}/mean"] = float(np.mean([float(v) for v in values]))
    return out
