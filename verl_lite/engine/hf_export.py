"""What an engine's checkpoint part holds (verl's `checkpoint.save_contents` / `load_contents`), and
the `hf_model` content: an HF model directory written from the engine's `export_hf_weights()`
stream (safetensors shards, `config.json`, the tokenizer), which transformers' `from_pretrained`
loads, and read back as a source of weights.

- The config written is the one the exported names belong to: a language model's causal-LM config
  (of a vision-language checkpoint, its text model: the engines build and train that alone), a
  value model's token-classification config with one label (the value head as `score`).
- `checkpoint.strict` (verl passes it to mbridge's `save_hf_weights`): the exported names must be
  exactly the state dict of that HF class, built on the meta device from the config (True: the
  save fails naming the missing and extra tensors; False: it writes them and warns).
- Only global rank 0 writes; every rank iterates the stream (it is a collective).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import torch

from verl_lite.checkpoint_files import ALL_CONTENTS, CONTENTS_FILE, CheckpointError, read_contents
from verl_lite.decisions.checkpoint_parts import contents_problem
from verl_lite.data.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

HF_DIR = "huggingface"
SHARD_BYTES = 2 * 1024 ** 3


class Contents:
    """A role's checkpoint section as sets, with the names its error messages use."""

    def __init__(self, section: Any, role: str):
        self.prefix = "critic.checkpoint" if role == "critic" else "actor_rollout_ref.actor.checkpoint"
        self.section = section
        if section is None:  # the ref never saves
            self.save, self.load = set(ALL_CONTENTS), set(ALL_CONTENTS)
            return
        self.save = set(section.save_contents)
        self.load = self.save if section.load_contents is None else set(section.load_contents)

    @property
    def strict(self) -> bool:
        return True if self.section is None else bool(self.section.strict)  # read where it acts: hf_model saves

    def weights_from(self) -> Optional[str]:
        """Where a resume takes the weights: "model" (the engine's files), "hf_model", or None."""
        return "model" if "model" in self.load else "hf_model" if "hf_model" in self.load else None


def is_writer() -> bool:
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()) or \
        torch.distributed.get_rank() == 0


def write_contents(path: str, saved: Set[str], layout: Dict[str, Any]) -> None:
    with open(os.path.join(path, CONTENTS_FILE), "w", encoding="utf-8") as f:
        json.dump({"save_contents": sorted(saved), "layout": layout}, f, indent=1)


def check_loadable(path: str, contents: Contents, role: str, current: Dict[str, Any]) -> Dict[str, Any]:
    """What the part at `path` holds (contents.json); a CheckpointError when load_contents asks for a
    part it lacks, or for files that another engine or parallel layout (`current`) wrote."""
    held = read_contents(path)
    problem = contents_problem(path, held, contents.load, role, contents.prefix, current)
    if problem:
        raise CheckpointError(problem)
    return held


# ---------------------------------------------------------------------------- the HF config and names


def hf_class_and_config(hf_config: Any, model_type: str) -> Tuple[Any, Any]:
    """(transformers auto class, config to write) for an engine's model: a vision-language model's
    image-text-to-text class and its whole config (the engines export the vision tower with the text
    model, under the checkpoint's names), the causal LM's config (a text model), or the
    token-classification config with one label (a critic: its text model)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForTokenClassification

    config = copy.deepcopy(hf_config)
    vision_language = AutoModelForImageTextToText._model_mapping
    if model_type == "language_model" and getattr(config, "vision_config", None) is not None \
            and type(config) in vision_language:
        cls = vision_language[type(config)]
        config.architectures = [cls.__name__]
        return cls, config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is not config:
        config = copy.deepcopy(text)
    auto = AutoModelForCausalLM if model_type == "language_model" else AutoModelForTokenClassification
    mapping = auto._model_mapping
    if type(config) not in mapping:
        what = "causal LM" if model_type == "language_model" else "token-classification model"
        setting = "actor_rollout_ref.actor" if model_type == "language_model" else "critic"
        raise ValueError(f"{setting}.checkpoint.save_contents has hf_model, but transformers has no {what} class "
                         f"for model_type {getattr(config, 'model_type', '?')!r}, so no HF model can hold these "
                         f"weights; remove hf_model from {setting}.checkpoint.save_contents")
    cls = mapping[type(config)]
    config.architectures = [cls.__name__]
    if model_type == "value_model":
        config.num_labels = 1
    return cls, config


def check_hf_model_possible(engine: Any, hf_config: Any) -> None:
    """At engine start, not at the first save: a ValueError when save_contents has hf_model and no HF
    class can hold this engine's weights (a critic of a model without a token-classification class)."""
    section = getattr(engine.engine_config, "checkpoint", None)
    if section is not None and "hf_model" in section.save_contents:
        hf_class_and_config(hf_config, engine.model_type)


def _tied(config: Any) -> bool:
    return bool(getattr(config, "tie_word_embeddings", False))


def expected_names(cls: Any, config: Any) -> Set[str]:
    """The state-dict names of `cls` built from `config` on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = cls._from_config(config)
    names = set(model.state_dict())
    if _tied(config):
        names.discard("lm_head.weight")
    return names


def _shown(names: Set[str], limit: int = 8) -> str:
    items = sorted(names)
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


# ---------------------------------------------------------------------------- writing


def save_hf_model(out_dir: str, tensors: Iterator[Tuple[str, torch.Tensor]], hf_config: Any, model_type: str,
                  tokenizer_path: str, trust_remote_code: bool, strict: bool, role: str,
                  model_dir: Optional[str] = None, rename: Optional[Dict[str, str]] = None) -> Optional[str]:
    """Write the HF model dir from the export stream; every rank calls it (the stream is a collective),
    global rank 0 writes. `rename`: name prefixes to change (the torch critic's value_head -> score).
    Returns the directory on the writer, None elsewhere."""
    from safetensors.torch import save_file

    writer = is_writer()
    cls, config = hf_class_and_config(hf_config, model_type)
    tied = _tied(config)
    if writer:
        os.makedirs(out_dir, exist_ok=True)
    shard: Dict[str, torch.Tensor] = {}
    shard_bytes, files, names = 0, [], set()
    total, dtype = 0, None

    def flush() -> None:
        nonlocal shard, shard_bytes
        name = f"part-{len(files):05d}.safetensors"
        save_file(shard, os.path.join(out_dir, name), metadata={"format": "pt"})
        files.append((name, list(shard)))
        shard, shard_bytes = {}, 0

    for name, tensor in tensors:
        for old, new in (rename or {}).items():
            if name.startswith(old):
                name = new + name[len(old):]
        if tied and name == "lm_head.weight":
            continue  # the embedding, as transformers' save_pretrained leaves it out
        names.add(name)
        if not writer:
            continue
        tensor = tensor.detach().to("cpu").contiguous()
        dtype = dtype or tensor.dtype
        shard[name] = tensor
        shard_bytes += tensor.numel() * tensor.element_size()
        total += tensor.numel() * tensor.element_size()
        if shard_bytes >= SHARD_BYTES:
            flush()
    expected = expected_names(cls, config)
    missing, extra = expected - names, names - expected
    if missing or extra:
        what = (f"the {role}'s hf_model export does not match {cls.__name__}: "
                f"{'missing ' + _shown(missing) if missing else ''}{'; ' if missing and extra else ''}"
                f"{'extra ' + _shown(extra) if extra else ''}")
        section = "critic.checkpoint" if role == "critic" else "actor_rollout_ref.actor.checkpoint"
        if strict:
            raise CheckpointError(f"{what} ({section}.strict=True; set it to False to write the tensors the "
                                  "export gives)")
        logger.warning("%s (%s.strict=False: written as exported)", what, section)
    if not writer:
        return None
    if shard or not files:
        flush()
    if len(files) == 1:
        os.replace(os.path.join(out_dir, files[0][0]), os.path.join(out_dir, "model.safetensors"))
    else:
        index = {"metadata": {"total_size": total}, "weight_map": {}}
        for i, (name, keys) in enumerate(files):
            final = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
            os.replace(os.path.join(out_dir, name), os.path.join(out_dir, final))
            index["weight_map"].update({k: final for k in keys})
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump(index, f, indent=1, sort_keys=True)
    if dtype is not None:
        config.dtype = dtype
    config.save_pretrained(out_dir)
    load_tokenizer(tokenizer_path, trust_remote_code).save_pretrained(out_dir)
    if model_dir and os.path.isfile(os.path.join(model_dir, "generation_config.json")):
        shutil.copy(os.path.join(model_dir, "generation_config.json"), out_dir)
    return out_dir


def hf_files(part_dir: str) -> List[str]:
    """The safetensors files of a part's HF copy (a CheckpointError when there are none)."""
    import glob

    files = sorted(glob.glob(os.path.join(part_dir, HF_DIR, "*.safetensors")))
    if not files:
        raise CheckpointError(f"checkpoint {part_dir} has no {HF_DIR}/*.safetensors to load the weights from "
                              "(save_contents had no hf_model)")
    return files
