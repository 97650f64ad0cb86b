"""Preflight rules of the data: the data settings verl_lite cannot act on (multi-modal inputs,
validation batches and logged generations, raw chat without a chat template, data.trust_remote_code in
the sync trainer), rows with images for a rollout that would generate without them (read wherever the
files are: on a laptop when they are there, always by `check --training`), and, `for_training` only,
the data files exist and each row's data_source has a scorer (the custom reward file: `reward_file.py`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from verl_lite.config.verl_names import YET
from verl_lite.config.shapes import model_shape
from verl_lite.data.dataset import as_file_list, expand
from verl_lite.models import VLLM_IMAGE_MODEL_TYPES, is_vision_language
from verl_lite.reward.manager import CODE_SCORER_HINT, CODE_SOURCES, SUPPORTED_SOURCES, has_default_scorer


def multi_modal_problems(cfg: Any) -> List[str]:
    """The processor's pixel inputs always travel with each sample."""
    if cfg.data.return_multi_modal_inputs is not True:
        return ["data.return_multi_modal_inputs=False is refused: the actor, ref and critic forward take the "
                "processor's pixel inputs that travel with each sample (verl at the pinned commit reads the "
                "key and acts on it nowhere); remove the line"]
    return []


def data_setting_problems(cfg: Any) -> List[str]:
    """Validation batches, and raw chat messages for prompts that are not templated."""
    problems = []
    if cfg.data.val_batch_size is not None:
        problems.append(f"data.val_batch_size={cfg.data.val_batch_size}: validation batches are {YET}: the whole "
                        "validation set is generated in one call; leave it null")
    if cfg.data.return_raw_chat and not cfg.data.apply_chat_template:
        problems.append("data.return_raw_chat=True with data.apply_chat_template=False: verl's rollout templates the "
                        "raw chat messages, while apply_chat_template=False encodes the prompt text as is; set "
                        "data.return_raw_chat=False for untemplated prompts, or data.apply_chat_template=True")
    return problems


def validation_log_problems(cfg: Any) -> List[str]:
    """How many validation generations are logged: a count >= 0."""
    if int(cfg.trainer.log_val_generations) < 0:
        return [f"trainer.log_val_generations={cfg.trainer.log_val_generations}: the number of validation "
                "samples to log must be >= 0 (0 logs none)"]
    return []


def trust_remote_code_warnings(cfg: Any) -> List[str]:
    """data.trust_remote_code acts in the fully-async driver only, as in verl."""
    if cfg.data.trust_remote_code and not cfg.async_training.enable:
        return ["data.trust_remote_code=True has no effect in the sync trainer, as in verl (its tokenizer "
                "loads with actor_rollout_ref.model.trust_remote_code: set that instead)"]
    return []


def data_file_problems(cfg: Any) -> List[str]:
    """data.train_files (not empty) and data.val_files name files that exist."""
    problems = []
    for key, value in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        files = [] if value == "" else as_file_list(value)
        if key == "data.train_files" and not files:
            problems.append("data.train_files is empty: point it at parquet files")
        for f in files:
            if not os.path.isfile(expand(f)):
                problems.append(f"{key}: {f} does not exist (point {key} at parquet files)")
    return problems


def data_source_problems(cfg: Any) -> List[str]:
    """Rows whose data_source no built-in scorer handles, when no custom reward function is set:
    found here from the data_source column alone, before Ray starts and any model is built."""
    if cfg.custom_reward_function.path:
        return []
    import pyarrow.parquet as pq  # heavy (~0.3 s): read only on the machine that trains

    problems = []
    for key, files in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        for raw in as_file_list(files):
            path = expand(raw)
            try:
                sources = pq.read_table(path, columns=["data_source"]).column(0).to_pylist()
            except Exception:  # a missing or unreadable file, or no such column: the data checks say so
                continue
            unknown: Dict[str, int] = {}
            for source in sources:  # empty or non-string values are the row checks' to report
                if isinstance(source, str) and source and not has_default_scorer(source):
                    unknown[repr(source)] = unknown.get(repr(source), 0) + 1
            if unknown:
                shown = ", ".join(f"{name} ({n} row{'s' if n != 1 else ''})" for name, n in list(unknown.items())[:3])
                code = sorted(repr(s) for s in CODE_SOURCES if repr(s) in unknown)
                hint = (f" ({', '.join(code)}: {CODE_SCORER_HINT})" if code else "")
                problems.append(f"{key}: {raw} has data_source {shown}{' and more' if len(unknown) > 3 else ''}, "
                                f"which no built-in scorer handles (it scores {SUPPORTED_SOURCES}); set "
                                f"custom_reward_function.path to a reward function for them{hint}")
    return problems


def first_image_row(path: str, image_key: str) -> Optional[int]:
    """The first row of a parquet file whose `image_key` column holds an image (None: no such column,
    no such row, or a file not readable here). Reads that column only, batch by batch."""
    import pyarrow.parquet as pq  # heavy (~0.3 s): imported only when a file to read is here

    try:
        f = pq.ParquetFile(path)
        if image_key not in f.schema_arrow.names:
            return None
        start = 0
        for batch in f.iter_batches(columns=[image_key], batch_size=512):
            for i, images in enumerate(batch.column(0).to_pylist()):
                if images:
                    return start + i
            start += batch.num_rows
    except (OSError, ValueError):  # unreadable here (or no parquet): data_file_problems and the run say so
        return None
    return None


def image_rollout_problems(cfg: Any) -> List[str]:
    """data.train_files / val_files rows with images (`data.image_key`, Geometry3K's layout) when the vllm
    rollout would generate without them: it gives images to Qwen3-VL models only
    (rollout/vllm_requests.py `is_vision_language`; Qwen3.5 generates from text there) and would stop at
    the first generation with such a row. Checked where the files are readable; the model's type comes
    from its config.json or its shipped shape (none known: not checked here, `check --training` reads it)."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name != "vllm":
        return []
    shape = model_shape(cfg.actor_rollout_ref.model.path)
    key = str(cfg.data.image_key or "")
    if shape is None or not key:
        return []
    files = [(name, raw) for name, value in (("data.train_files", cfg.data.train_files),
                                            ("data.val_files", cfg.data.val_files))
             for raw in as_file_list(value) if os.path.isfile(expand(raw))]
    found = [(name, raw, row) for name, raw in files
             for row in [first_image_row(expand(raw), key)] if row is not None]
    if not found:
        return []
    model_type = str(shape.hf.get("model_type") or "")
    if model_type in VLLM_IMAGE_MODEL_TYPES:
        return []
    qwen35 = model_type.startswith("qwen3_5")
    why = ("verl trains its Qwen3.5 scripts on Geometry3K, but verl_lite's vLLM rollout gives images to "
           f"{' and '.join(VLLM_IMAGE_MODEL_TYPES)} models only (Qwen3.5 generates from text there: docs/vl.md)"
           if qwen35 else f"the vllm rollout gives images to {' and '.join(VLLM_IMAGE_MODEL_TYPES)} models only")
    fixes = ["use text rows (GSM8K: examples/data_preprocess/gsm8k.py, the Qwen3.5 scripts' default)"
             if qwen35 else "use text rows"]
    if is_vision_language(shape.hf):
        fixes.append("actor_rollout_ref.rollout.name=hf, which generates from the images with transformers' "
                     "model (docs/vl.md)")
    return [f"{name}: {raw} has rows with images (column '{key}', e.g. row {row}) and the model is {model_type} "
            f"with actor_rollout_ref.rollout.name=vllm: {why}, so the run cannot generate from them (its first "
            "generation would stop); "
            f"{', or '.join(fixes)}" for name, raw, row in found]
