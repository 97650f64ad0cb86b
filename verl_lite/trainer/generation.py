"""The synchronous driver's generation batches: prompt rows made from dataset examples (rollout.n
copies each), which of their fields stay on the driver and which each worker call is sent, the
generate call on its way (sent during the previous step's update unless VERL_LITE_GENERATE_AHEAD=0),
and its answer taken back with the driver's fields and timings.

Per-row Python values (the uid, data source, ground truth and extra info: LIST_KEYS) stay on the
driver, which scores and groups by them; workers get tensors only. The images follow the batch
contract (docs/vl.md): multi_modal_data (the PIL images) goes to the rollout only, multi_modal_inputs
(the processor's pixel inputs) to the rollout, actor, ref and critic."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, NamedTuple, Optional, Sequence

from verl_lite.batch import Batch, left_pad
from verl_lite.data.dataset import multi_modal_fields

LIST_KEYS = ("uid", "data_source", "ground_truth", "extra_info")
PROMPT_KEYS = ("input_ids", "attention_mask")
MM_KEYS = ("multi_modal_data", "multi_modal_inputs")


def prompt_batch(examples: Sequence[Any], n: int, pad_token_id: int) -> Batch:
    """`n` left-padded rows of each example's prompt, with the driver's per-row fields and the images."""
    rep = [e for e in examples for _ in range(n)]
    batch: Batch = left_pad([e.prompt_ids for e in rep], pad_token_id)
    batch["uid"] = [e.uid for e in rep]
    batch["data_source"] = [e.data_source for e in rep]
    batch["ground_truth"] = [e.ground_truth for e in rep]
    batch["extra_info"] = [e.extra_info for e in rep]
    batch.update(multi_modal_fields(rep))  # images: multi_modal_data / multi_modal_inputs per sample
    return batch


def prompts_of(gen: Batch) -> Batch:
    """The prompt rows a generation batch was made from (left-padded ids, their mask, the list keys),
    as prompt_batch built them; under dynamic sampling the batch that was kept."""
    width = gen["prompts"].shape[1]
    prompts: Batch = {"input_ids": gen["prompts"], "attention_mask": gen["attention_mask"][:, :width]}
    prompts.update({k: gen[k] for k in LIST_KEYS + MM_KEYS if k in gen})
    return prompts


def worker_fields(batch: Batch, keys: Optional[Sequence[str]] = None) -> Batch:
    """The fields of `batch` a worker needs: `keys` (and the image fields the batch has: the rollout's
    input), or all but the per-row lists the driver keeps and the images (the pixel inputs go)."""
    if keys is not None:
        return {k: batch[k] for k in tuple(keys) + MM_KEYS if k in batch}
    return {k: v for k, v in batch.items()
            if k not in LIST_KEYS and k != "multi_modal_data" and not k.startswith("_")}


GENERATE_AHEAD_ENV = "VERL_LITE_GENERATE_AHEAD"


def generate_ahead_enabled() -> bool:
    """VERL_LITE_GENERATE_AHEAD=0 turns off sending the next step's generation during the update (a
    diagnostic: the results are the same either way; only the time a step takes changes)."""
    value = os.environ.get(GENERATE_AHEAD_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{GENERATE_AHEAD_ENV}={value!r} is not 0 or 1 (1, the default, sends the next step's "
                         f"generation during the update; 0 waits for the update first)")
    return value == "1"


class Generation(NamedTuple):
    """A generate call on its way: the prompt batch it was made from, the call, when it was sent."""
    prompts: Batch
    call: Any
    sent: float


def submit_generation(actor_wg: Any, prompts: Batch, response_length: int, sampling: Dict[str, Any],
                      log_probs: bool, ref_log_probs: bool) -> Generation:
    """The generate call of `prompts`, sent to the actor group (in-process it runs here); with
    `log_probs` / `ref_log_probs` the actor / ref score the responses in the same call."""
    sent = time.perf_counter()
    call = actor_wg.dp_submit("generate_sequences", worker_fields(prompts, PROMPT_KEYS), response_length, sampling,
                              log_probs=log_probs, ref_log_probs=ref_log_probs)
    return Generation(prompts, call, sent)


def answer(pending: Generation, timing: Dict[str, float], ahead: bool = False) -> Batch:
    """The generation's answer with its prompts' per-row fields; its seconds added to timing's gen,
    old_log_prob and cpu/gen. `ahead`: it was sent during the previous step's update, so its time is
    the worker's own generation seconds, not the wait for it."""
    gen = pending.call.batch()
    worker_timing = gen.pop("timing_s")
    old_log_prob = worker_timing["old_log_prob"]
    timing["cpu/gen"] = timing.get("cpu/gen", 0.0) + worker_timing.get("gen_cpu", 0.0)
    timing["old_log_prob"] = timing.get("old_log_prob", 0.0) + old_log_prob
    took = worker_timing["gen"] if ahead else time.perf_counter() - pending.sent - old_log_prob
    timing["gen"] = timing.get("gen", 0.0) + took
    for k in LIST_KEYS:
        gen[k] = pending.prompts[k]
    return gen
