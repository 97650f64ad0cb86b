"""Does a trained checkpoint of the tiny VL model use the image? Greedy answers on a shapes set, scored
with the task's scorer, with the images as given, shuffled across rows, and blanked, beside the best
mean score a policy that ignores the image can reach on that set (`blind_bound`).

Usage:
  python examples/vl/ablate_images.py --checkpoint OUT/global_step_300 --data data/tiny_vl_2c/val.parquet
  python examples/vl/ablate_images.py --checkpoint OUT/global_step_300 --data DIR/val.parquet --model tiny-qwen3_vl_moe

A checkpoint of the torch engine (`actor/model.pt`, HF names). Shuffled: row i gets the image of row
p(i) for a fixed permutation p with no fixed point, so each answer stays with a real image of the task
that is not its own; blank: every pixel 0 (the same size). A policy that reads the image scores above
the bound with the images as given and drops to the bound or below with them shuffled or blanked.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any, Dict, List

import torch

from verl_lite.data.multimodal import build_messages, encode, load_processor, open_image
from verl_lite.data.synthetic_images import blind_bound, compute_score, read_rows
from verl_lite.models import resolve_model_dir
from verl_lite.models.hf import vision_special_ids

MAX_NEW_TOKENS = 2  # the example's data.max_response_length


def derangement(n: int, seed: int) -> List[int]:
    """A permutation of range(n) with no fixed point (n >= 2): a shuffled cycle."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    out = [0] * n
    for k, i in enumerate(order):
        out[i] = order[(k + 1) % n]
    return out


def load_model(model: str, checkpoint: str):
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(resolve_model_dir(model), local_files_only=True)
    hf_model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    payload = torch.load(os.path.join(checkpoint, "actor", "model.pt"), weights_only=True, map_location="cpu")
    hf_model.load_state_dict(payload["model"], strict=True)
    return hf_model


@torch.no_grad()
def greedy_scores(hf_model: Any, processor: Any, rows: List[Dict[str, Any]], images: List[Any]) -> List[float]:
    banned = [[i] for i in vision_special_ids(hf_model.config)]  # as the hf rollout: no vision tokens
    scores = []
    for i, (row, image) in enumerate(zip(rows, images)):
        messages = build_messages(row["prompt"], 1, f"row {i}")
        ids, inputs = encode(processor, messages, [image])
        input_ids = torch.tensor([ids])
        out = hf_model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **inputs,
                                max_new_tokens=MAX_NEW_TOKENS, do_sample=False, bad_words_ids=banned,
                                pad_token_id=processor.tokenizer.pad_token_id)
        text = processor.tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
        scores.append(compute_score(row["data_source"], text, row["reward_model"]["ground_truth"]))
    return scores


def ablate(checkpoint: str, data: str, model: str = "tiny-qwen3_vl_moe", seed: int = 0) -> Dict[str, float]:
    from PIL import Image

    rows = read_rows(data)
    if len(rows) < 2:
        raise ValueError(f"{data}: {len(rows)} rows (the shuffle needs at least 2)")
    images = [open_image(r["images"][0], f"{data} row {i}") for i, r in enumerate(rows)]
    perm = derangement(len(rows), seed)
    variants = {"images": images, "shuffled": [images[j] for j in perm],
                "blank": [Image.new("RGB", im.size, (0, 0, 0)) for im in images]}
    hf_model, processor = load_model(model, checkpoint), load_processor(model)
    bound, answer = blind_bound(rows)
    out = {"rows": len(rows), "blind_bound": bound, "blind_answer": answer}
    for name, ims in variants.items():
        scores = greedy_scores(hf_model, processor, rows, ims)
        out[name] = sum(scores) / len(scores)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a global_step_N directory of the torch engine")
    parser.add_argument("--data", required=True, help="a shapes parquet file (verl_lite.data.synthetic_images)")
    parser.add_argument("--model", default="tiny-qwen3_vl_moe")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffle")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.checkpoint, "actor", "model.pt")):
        print(f"verl_lite: no actor/model.pt under {args.checkpoint} (a torch-engine global_step_N directory)",
              file=sys.stderr)
        return 1
    res = ablate(args.checkpoint, args.data, args.model, args.seed)
    print(f"{res['rows']} rows; image-blind bound {res['blind_bound']:.4f} (always {res['blind_answer']!r}); "
          f"greedy mean score: images {res['images']:.4f}, shuffled {res['shuffled']:.4f}, blank {res['blank']:.4f}")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
