"""Images in verl-format rows: the processor, `<image>` placeholders, pixel inputs.

A row with images holds them under `data.image_key` (default `images`) as verl's datasets do: a list
of entries `{"bytes": ...}` (encoded PNG/JPEG), `{"path": ...}` or `{"image": ...}` (a path or bytes),
a path string, or a PIL image. Each `<image>` in the prompt's message contents takes the next image.
The model's processor (its chat template and image processor) turns the messages and images into the
prompt ids, with one `<|image_pad|>` per merged patch, and the pixel inputs (`pixel_values`,
`image_grid_thw`), as verl builds them.

Before the processor each image is resized as verl's `qwen_vl_utils.fetch_image` does with
`data.image_patch_size` (sides a multiple of patch size x 2, between 4 and 16384 such tiles).

transformers' video processors need torchvision; where it is missing (CPU boxes), the processor is
built with its image processor's PIL backend and without videos (`load_processor`).
Imports transformers and PIL inside functions: the data layer stays light to import.
"""

from __future__ import annotations

import io
import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from verl_lite.models import resolve_model_dir

IMAGE_PLACEHOLDER = "<image>"
MERGE = 2  # qwen_vl_utils' SPATIAL_MERGE_SIZE: tiles of (patch size x 2) pixels
MIN_TILES, MAX_TILES = 4, 16384  # qwen_vl_utils' IMAGE_MIN_TOKEN_NUM / IMAGE_MAX_TOKEN_NUM


class MultiModalError(ValueError):
    """An image entry or a placeholder count that cannot be used, with the row in the message."""


def has_processor_files(model_path: str) -> bool:
    d = resolve_model_dir(model_path)
    return any(os.path.isfile(os.path.join(d, f)) for f in ("preprocessor_config.json", "processor_config.json"))


def _processor_class_name(d: str) -> Optional[str]:
    for name in ("processor_config.json", "preprocessor_config.json"):
        try:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                value = json.load(f).get("processor_class")
        except (OSError, ValueError):
            continue
        if value:
            return str(value)
    return None


def load_processor(model_path: str, trust_remote_code: bool = False):
    """The model's multimodal processor, or None when the model directory has none (a text model).

    AutoProcessor first; where that fails for want of torchvision (its video processor), the class named
    in processor_config.json is built from the PIL image processor and the tokenizer, without videos."""
    if not has_processor_files(model_path):
        return None
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    d = resolve_model_dir(model_path)
    try:
        return AutoProcessor.from_pretrained(d, local_files_only=True, trust_remote_code=trust_remote_code)
    except ImportError as e:
        if "torchvision" not in str(e).lower():
            raise
    name = _processor_class_name(d)
    cls = getattr(transformers, name or "", None)
    if cls is None:
        raise MultiModalError(f"the processor of {model_path} ({name!r}) needs torchvision, which is not installed, "
                              "and is not a transformers class that can be built without it (install torchvision)")

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        cls.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)
        self.video_processor = None

    images_only = type(f"{cls.__name__}ImagesOnly", (cls,), {"__init__": __init__})
    template = None
    path = os.path.join(d, "chat_template.jinja")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            template = f.read()
    tokenizer = AutoTokenizer.from_pretrained(d, local_files_only=True, trust_remote_code=trust_remote_code)
    image_processor = AutoImageProcessor.from_pretrained(d, local_files_only=True, backend="pil",
                                                         trust_remote_code=trust_remote_code)
    return images_only(image_processor=image_processor, tokenizer=tokenizer,
                       chat_template=template or getattr(tokenizer, "chat_template", None))


def open_image(entry: Any, where: str):
    """A PIL RGB image from one of verl's image entries."""
    from PIL import Image

    value = entry
    if isinstance(entry, dict):
        for key in ("bytes", "image", "path"):
            if entry.get(key) is not None:
                value = entry[key]
                break
        else:
            raise MultiModalError(f"{where}: image entry {sorted(entry)} has none of bytes, path, image")
    try:
        if isinstance(value, Image.Image):
            image = value
        elif isinstance(value, (bytes, bytearray)):
            image = Image.open(io.BytesIO(bytes(value)))
        elif isinstance(value, (str, os.PathLike)):
            image = Image.open(os.path.expanduser(os.fspath(value)))
        else:
            raise MultiModalError(f"{where}: an image entry must be bytes, a path or a PIL image, got "
                                  f"{type(value).__name__}")
        return image.convert("RGB")
    except OSError as e:
        raise MultiModalError(f"{where}: image cannot be read ({e})") from e


def resize_for_patches(image: Any, patch_size: int):
    """As qwen_vl_utils.fetch_image: sides rounded to multiples of patch_size * 2, the area kept within
    4 .. 16384 such tiles (aspect ratio kept)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize  # no torchvision

    factor = int(patch_size) * MERGE
    h, w = smart_resize(image.height, image.width, factor=factor, min_pixels=MIN_TILES * factor * factor,
                        max_pixels=MAX_TILES * factor * factor)
    return image if (w, h) == image.size else image.resize((w, h))


def build_messages(messages: Sequence[Dict[str, Any]], n_images: int, where: str) -> List[Dict[str, Any]]:
    """The chat messages with each `<image>` of a string content as an {"type": "image"} part (verl's
    _build_messages); the count of placeholders must equal the row's images."""
    out, used = [], 0
    for m in messages:
        content = m["content"]
        if not isinstance(content, str):
            out.append(dict(m))
            used += sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image")
            continue
        parts = []
        for segment in re.split(f"({re.escape(IMAGE_PLACEHOLDER)})", content):
            if segment == IMAGE_PLACEHOLDER:
                parts.append({"type": "image"})
                used += 1
            elif segment:
                parts.append({"type": "text", "text": segment})
        out.append(dict(m, content=parts))
    if used != n_images:
        raise MultiModalError(f"{where}: the prompt has {used} {IMAGE_PLACEHOLDER} placeholders but the row has "
                              f"{n_images} images (one placeholder per image, as verl requires)")
    return out


def encode(processor: Any, messages: Sequence[Dict[str, Any]], images: List[Any],
           chat_template_kwargs: Optional[Dict[str, Any]] = None) -> Tuple[List[int], Dict[str, Any]]:
    """Prompt ids and the per-sample multi_modal_inputs (pixel_values [patches, patch dim],
    image_grid_thw [images, 3]) of one prompt, by the processor, as verl's dataset calls it."""
    raw = processor.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False,
                                        **dict(chat_template_kwargs or {}))
    out = processor(text=[raw], images=images or None, return_tensors="pt")
    ids = [int(i) for i in out["input_ids"][0].tolist()]
    inputs = {k: out[k] for k in ("pixel_values", "image_grid_thw") if k in out}
    return ids, inputs
