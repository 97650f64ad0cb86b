"""verl-format parquet prompts: validation, tokenization and a resumable, seeded batch order.

A row holds `prompt` (chat messages: a list of {role, content}), `data_source` (str),
`reward_model.ground_truth` and optionally `extra_info` (a dict). A bad row is reported with the
file, the row number and the column, before any model is built.

Prompts are tokenized as verl does: the chat template with a generation prompt
(`data.apply_chat_template_kwargs` passed along), for any Hugging Face tokenizer or the shipped
char tokenizer. With `data.apply_chat_template=False` the message contents (or a plain-string
prompt) are encoded as text instead, for base models without a template.

Rows with images (`data.image_key`, verl's layout, `verl_lite.data.multimodal`) are encoded by the
model's processor; each example keeps its images and gives the per-sample `multi_modal_data` and
`multi_modal_inputs` of the batch contract (pixel inputs computed when a batch is built, so a large
set does not hold every image's patches in memory).
"""

from __future__ import annotations

import multiprocessing
import os
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from verl_lite.data import multimodal

REQUIRED_COLUMNS = ("data_source", "reward_model")


class DataError(ValueError):
    """A data file that cannot be used, with the file, row and column in the message."""


def as_file_list(files: Union[str, Sequence[str], None]) -> List[str]:
    if files is None:
        return []
    if isinstance(files, (str, int, float)):  # `data.val_files=1`: Hydra's int, a file named 1
        return [str(files)]
    return [str(f) for f in files]


def expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(os.path.expandvars(path)))


def _check_row(path: str, i: int, row: Dict[str, Any], prompt_key: str, plain_text_ok: bool = False,
               image_key: Optional[str] = None) -> None:
    where = f"data file {path} row {i}"
    messages = row.get(prompt_key)
    if plain_text_ok and isinstance(messages, str) and messages:
        messages = [{"content": messages}]
    if not isinstance(messages, (list, tuple)) or not messages:
        expected = "a non-empty list of chat messages" + (" or a non-empty string" if plain_text_ok else "")
        raise DataError(f"{where}: column '{prompt_key}' must be {expected}, got {messages!r:.80}")
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or "content" not in m or m.get("content") is None:
            raise DataError(f"{where}: column '{prompt_key}' message {j} has no 'content' (expected {{role, content}})")
    if not isinstance(row.get("data_source"), str) or not row["data_source"]:
        raise DataError(f"{where}: column 'data_source' must be a non-empty string, got {row.get('data_source')!r}")
    rm = row.get("reward_model")
    if not isinstance(rm, dict) or rm.get("ground_truth") is None:
        raise DataError(f"{where}: column 'reward_model.ground_truth' is missing or null")
    images = row.get(image_key) if image_key else None
    if images is not None and not isinstance(images, (list, tuple)):
        raise DataError(f"{where}: column '{image_key}' must be a list of images (entries {{bytes}}, {{path}} or "
                        f"paths, verl's layout) or null, got {type(images).__name__}")
    extra = row.get("extra_info")
    if extra is not None and not isinstance(extra, dict):
        raise DataError(f"{where}: column 'extra_info' must be a dict or null, got {type(extra).__name__}")


def read_rows(files: Union[str, Sequence[str]], prompt_key: str = "prompt",
              plain_text_ok: bool = False, image_key: Optional[str] = None) -> List[Dict[str, Any]]:
    """Read and validate every row of the given parquet files (`plain_text_ok`: a prompt may be a
    string, for data.apply_chat_template=False)."""
    import pyarrow.parquet as pq

    paths = as_file_list(files)
    if not paths:
        raise DataError("no data files given (set data.train_files to one or more parquet files)")
    rows: List[Dict[str, Any]] = []
    for raw in paths:
        path = expand(raw)
        if not os.path.isfile(path):
            raise DataError(f"data file {raw} does not exist (generate the tiny task with "
                            f"`python -m verl_lite.data.synthetic --out-dir DIR` or point data.train_files at parquet files)")
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise DataError(f"data file {path} is not a readable parquet file ({type(e).__name__}: {e})") from e
        missing = [c for c in (prompt_key,) + REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise DataError(
                f"data file {path}: column '{missing[0]}' is missing (columns present: {', '.join(table.column_names)})"
            )
        for i, row in enumerate(table.to_pylist()):
            _check_row(path, i, row, prompt_key, plain_text_ok, image_key)
            rows.append(row)
    if not rows:
        raise DataError(f"data files {', '.join(paths)} hold no rows")
    return rows


@dataclass
class Example:
    prompt_ids: List[int]
    data_source: str
    ground_truth: Any
    extra_info: Dict[str, Any]
    uid: str
    # the row's images (PIL, resized for data.image_patch_size) and the processor's image processor;
    # None for a text row
    images: Optional[List[Any]] = None
    image_processor: Any = None

    @property
    def multi_modal_data(self) -> Optional[Dict[str, List[Any]]]:
        """What a rollout receives (vLLM's multi_modal_data layout): {"image": [PIL images]}."""
        return {"image": list(self.images)} if self.images else None

    def multi_modal_inputs(self) -> Optional[Dict[str, Any]]:
        """The processor's pixel inputs of the row's images (pixel_values, image_grid_thw) for the actor,
        ref and critic forward; the same tensors the processor made with the prompt ids."""
        if not self.images:
            return None
        out = self.image_processor(images=list(self.images), return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def multi_modal_fields(examples: Sequence[Example]) -> Dict[str, List[Any]]:
    """The per-sample list fields `multi_modal_data` and `multi_modal_inputs` of a batch of examples
    (None entries for text rows); {} when no example has images (a text batch carries no such fields)."""
    if not any(e.images for e in examples):
        return {}
    cache: Dict[int, Any] = {}  # a prompt repeated rollout.n times shares one set of pixel inputs
    inputs = []
    for e in examples:
        if id(e) not in cache:
            cache[id(e)] = e.multi_modal_inputs()
        inputs.append(cache[id(e)])
    return {"multi_modal_data": [e.multi_modal_data for e in examples], "multi_modal_inputs": inputs}


def has_chat_template(tokenizer: Any) -> bool:
    """Whether `apply_chat_template` can work: a Hugging Face tokenizer needs a template; the char
    tokenizer (no `chat_template` attribute) has its own fixed one."""
    return not hasattr(tokenizer, "chat_template") or bool(tokenizer.chat_template)


NO_TEMPLATE_FIX = ("give the tokenizer a chat template (a chat_template entry in tokenizer_config.json or a "
                   "chat_template.jinja file), or set data.apply_chat_template=False to encode the prompt text as is")


def encode_prompt(tokenizer: Any, prompt: Any, apply_chat_template: bool = True,
                  chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> List[int]:
    """Token ids of one prompt (chat messages, or a string when apply_chat_template is False).

    With the template: `apply_chat_template(messages, add_generation_prompt=True, tokenize=True)`,
    whose result is a list of ids (the char tokenizer, older transformers) or a BatchEncoding
    (transformers 5): its `input_ids` are taken. Without: the text is encoded with the tokenizer's
    special tokens (a BOS where the tokenizer adds one)."""
    if not apply_chat_template:
        text = prompt if isinstance(prompt, str) else "".join(str(m["content"]) for m in prompt)
        return [int(i) for i in tokenizer.encode(text, add_special_tokens=True)]
    if not has_chat_template(tokenizer):
        raise DataError(f"the tokenizer {type(tokenizer).__name__} has no chat template: {NO_TEMPLATE_FIX}")
    out = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True,
                                        **dict(chat_template_kwargs or {}))
    ids = out["input_ids"] if isinstance(out, Mapping) else out
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], (list, tuple)):  # a batch of one conversation
        ids = ids[0]
    return [int(i) for i in ids]


_ENCODER: Dict[str, Any] = {}  # the tokenizer and settings of a tokenizing worker process


def _init_encoder(tokenizer: Any, apply_chat_template: bool, chat_template_kwargs: Any) -> None:
    _ENCODER.update(tokenizer=tokenizer, apply=apply_chat_template, kwargs=chat_template_kwargs)


def _encode_in_worker(prompt: Any) -> List[int]:
    return encode_prompt(_ENCODER["tokenizer"], prompt, _ENCODER["apply"], _ENCODER["kwargs"])


def encode_prompts(tokenizer: Any, prompts: Sequence[Any], apply_chat_template: bool,
                   chat_template_kwargs: Optional[Mapping[str, Any]], workers: int = 1) -> List[List[int]]:
    """Token ids of every prompt, in order. `workers` > 1 (verl's data.filter_overlong_prompts_workers)
    tokenizes in that many processes, capped at the CPU count as verl caps it; they are forked, so the
    tokenizer is not pickled where fork exists. A progress bar shows on sets of 10k prompts or more."""
    from tqdm import tqdm

    workers = max(1, min(int(workers), os.cpu_count() or 1, len(prompts) or 1))
    bar = dict(total=len(prompts), desc="tokenizing prompts", unit="prompt", disable=len(prompts) < 10_000)
    if workers == 1:
        return [encode_prompt(tokenizer, p, apply_chat_template, chat_template_kwargs) for p in tqdm(prompts, **bar)]
    # fast tokenizers refuse their own threads after a fork (and warn): one thread per process instead,
    # for the pool's lifetime only (the driver's own setting comes back afterwards)
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method), initializer=_init_encoder,
                                 initargs=(tokenizer, apply_chat_template, chat_template_kwargs)) as pool:
            chunk = max(1, len(prompts) // (workers * 8))
            return list(tqdm(pool.map(_encode_in_worker, prompts, chunksize=chunk), **bar))
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


class PromptDataset:
    """Tokenized prompts; prompts longer than max_prompt_length follow data.truncation. All prompts
    are tokenized when the set is loaded, in `workers` processes (data.filter_overlong_prompts_workers)."""

    def __init__(self, files, tokenizer, max_prompt_length: int, prompt_key: str = "prompt",
                 truncation: str = "error", filter_overlong: bool = False, apply_chat_template: bool = True,
                 chat_template_kwargs: Optional[Mapping[str, Any]] = None, workers: int = 1,
                 processor: Any = None, image_key: str = "images", image_patch_size: Optional[int] = None):
        if truncation not in ("error", "left", "right"):
            raise ValueError(f"data.truncation={truncation!r} (choose error, left or right)")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"data.filter_overlong_prompts_workers={workers!r} (a positive number of processes)")
        if apply_chat_template and not has_chat_template(tokenizer):
            raise DataError(f"the tokenizer {type(tokenizer).__name__} has no chat template: {NO_TEMPLATE_FIX}")
        self.examples: List[Example] = []
        rows = list(read_rows(files, prompt_key, plain_text_ok=not apply_chat_template, image_key=image_key))
        with_images = [i for i, row in enumerate(rows) if row.get(image_key)]
        images: Dict[int, List[Any]] = {}
        if with_images:
            if processor is None:
                raise DataError(f"data rows have images (column '{image_key}', e.g. row {with_images[0]}) but the "
                                "model has no processor (preprocessor_config.json): use a vision-language model, or "
                                "drop the image column for a text-only run")
            if truncation != "error" and not filter_overlong:
                raise DataError(f"data.truncation={truncation!r} would cut image placeholders out of a prompt: with "
                                "images use data.truncation=error or data.filter_overlong_prompts=True (as verl)")
            encoded, images = self._encode_with_processor(rows, prompt_key, processor, image_key, image_patch_size,
                                                          chat_template_kwargs)
        else:
            encoded = encode_prompts(tokenizer, [row[prompt_key] for row in rows], apply_chat_template,
                                     chat_template_kwargs, workers)
        image_processor = getattr(processor, "image_processor", None)
        for i, (row, ids) in enumerate(zip(rows, encoded)):
            if len(ids) > max_prompt_length:
                if filter_overlong:
                    continue
                if truncation == "error":
                    raise DataError(
                        f"prompt of row {i} has {len(ids)} tokens > data.max_prompt_length={max_prompt_length} "
                        f"(raise data.max_prompt_length, set data.filter_overlong_prompts=True or data.truncation=left)"
                    )
                ids = ids[-max_prompt_length:] if truncation == "left" else ids[:max_prompt_length]
            self.examples.append(Example(ids, row["data_source"], row["reward_model"]["ground_truth"],
                                         dict(row.get("extra_info") or {}), uid=f"{i}", images=images.get(i),
                                         image_processor=image_processor if i in images else None))
        if not self.examples:
            raise DataError("every prompt was filtered as overlong (raise data.max_prompt_length)")

    @staticmethod
    def _encode_with_processor(rows, prompt_key, processor, image_key, patch_size, chat_template_kwargs):
        """Prompt ids of every row by the processor (images included: the ids hold the image placeholders,
        so data.max_prompt_length and its filtering count them, as verl's filter does), and the rows' images."""
        size = patch_size or getattr(getattr(processor, "image_processor", None), "patch_size", None) or 14
        encoded, images = [], {}
        for i, row in enumerate(rows):
            where = f"data row {i}"
            pictures = [multimodal.resize_for_patches(multimodal.open_image(entry, where), size)
                        for entry in (row.get(image_key) or [])]
            messages = multimodal.build_messages(row[prompt_key], len(pictures), where)
            ids, _ = multimodal.encode(processor, messages, pictures, chat_template_kwargs)
            encoded.append(ids)
            if pictures:
                images[i] = pictures
        return encoded, images

    @classmethod
    def from_config(cls, files: Any, tokenizer: Any, data: Any, processor: Any = None) -> "PromptDataset":
        """The dataset of `files` with the `data.*` settings (the trainer's train and val sets); `processor`:
        the model's multimodal processor (`verl_lite.data.multimodal.load_processor`), None for text models."""
        return cls(files, tokenizer, data.max_prompt_length, data.prompt_key, data.truncation,
                   data.filter_overlong_prompts, data.apply_chat_template, data.apply_chat_template_kwargs,
                   data.filter_overlong_prompts_workers, processor=processor, image_key=data.image_key,
                   image_patch_size=data.image_patch_size)

    def __len__(self) -> int:
        return len(self.examples)


@dataclass
class SamplerState:
    """Where the batch order stands: enough to resume with the identical order."""

    epoch: int = 0
    cursor: int = 0
    seed: int = 1
    shuffle: bool = True
    extra: Dict[str, Any] = field(default_factory=dict)


class BatchSampler:
    """Seeded per-epoch permutation; drops the last partial batch, as verl's dataloader does."""

    def __init__(self, n: int, batch_size: int, seed: int = 1, shuffle: bool = True):
        if batch_size > n:
            raise DataError(f"data.train_batch_size={batch_size} exceeds the {n} prompts in data.train_files")
        self.n, self.batch_size = n, batch_size
        self.state = SamplerState(seed=seed, shuffle=shuffle)
        self._cached: Tuple[Any, List[int]] = (None, [])  # (seed, shuffle, epoch) -> that epoch's order

    @property
    def batches_per_epoch(self) -> int:
        return self.n // self.batch_size

    def _order(self, epoch: int) -> List[int]:
        # One shuffle per epoch (the permutation is a function of seed, shuffle and epoch only).
        key = (self.state.seed, self.state.shuffle, epoch)
        if self._cached[0] != key:
            order = list(range(self.n))
            if self.state.shuffle:
                random.Random(self.state.seed * 100003 + epoch).shuffle(order)
            self._cached = (key, order)
        return self._cached[1]

    def next_batch(self) -> Optional[List[int]]:
        """Indices of the next batch, or None at the end of the epoch (which then advances)."""
        if self.state.cursor + self.batch_size > self.n:
            self.state.epoch += 1
            self.state.cursor = 0
            return None
        order = self._order(self.state.epoch)
        idx = order[self.state.cursor:self.state.cursor + self.batch_size]
        self.state.cursor += self.batch_size
        return idx

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.state.epoch, "cursor": self.state.cursor, "seed": self.state.seed,
                "shuffle": self.state.shuffle}

    def load_state_dict(self, d: Dict[str, Any]) -> None:
        self.state.epoch, self.state.cursor = int(d["epoch"]), int(d["cursor"])
        self.state.seed, self.state.shuffle = int(d["seed"]), bool(d["shuffle"])
