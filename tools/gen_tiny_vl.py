"""Write the shipped tiny vision-language model, verl_lite/assets/tiny-qwen3_vl_moe/.

A Qwen3VLMoeForConditionalGeneration config (2 MoE decoder layers of 4 experts, hidden 64, a 2-block
vision tower of hidden 32 with 16-pixel patches merged 2x2), a character-level tokenizer with Qwen's
chat and vision tokens and whole-word tokens for the synthetic image task's colours
(verl_lite/data/synthetic_images.py), Qwen2-VL's image processor settings and a chat template that
writes an image as <|vision_start|><|image_pad|><|vision_end|>. No weights: the model is randomly
initialised from model.init_seed. Nothing is downloaded.

Usage: python tools/gen_tiny_vl.py [--out verl_lite/assets/tiny-qwen3_vl_moe]
"""

from __future__ import annotations

import argparse
import json
import os
import string

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
# whole-word tokens: the synthetic image task's answers (data/synthetic_images.py COLOURS) and counts
WORDS = ["red", "green", "blue", "yellow", "one", "two", "three"]
CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + " \n?.,:!'-=+"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tokenizer_json() -> dict:
    from tokenizers import Tokenizer, models

    vocab = {}
    for tok in SPECIALS + WORDS + list(CHARS):
        vocab.setdefault(tok, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    from tokenizers import pre_tokenizers, decoders
    # added tokens are matched first (specials and the colour words); the rest splits into characters
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.add_tokens([AddedToken(w, single_word=False, normalized=False) for w in WORDS])
    return json.loads(tok.to_str()), vocab


def config(vocab: dict) -> dict:
    return {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"],
        "model_type": "qwen3_vl_moe",
        "image_token_id": vocab["<|image_pad|>"],
        "video_token_id": vocab["<|video_pad|>"],
        "vision_start_token_id": vocab["<|vision_start|>"],
        "vision_end_token_id": vocab["<|vision_end|>"],
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_vl_moe_text",
            "vocab_size": len(vocab),  # every id the model can sample decodes to a token
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "hidden_act": "silu",
            "max_position_embeddings": 1024,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                                "mrope_interleaved": True},
            "attention_bias": False,
            "decoder_sparse_step": 1,
            "moe_intermediate_size": 64,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "mlp_only_layers": [],
            "tie_word_embeddings": False,
            "pad_token_id": vocab["<|endoftext|>"],
            "bos_token_id": None,
            "eos_token_id": vocab["<|im_end|>"],
        },
        "vision_config": {
            "model_type": "qwen3_vl_moe_vision",
            "depth": 2,
            "hidden_size": 32,
            "hidden_act": "gelu_pytorch_tanh",
            "intermediate_size": 64,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        },
        "pad_token_id": vocab["<|endoftext|>"],
        "eos_token_id": vocab["<|im_end|>"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(here, "verl_lite", "assets", "tiny-qwen3_vl_moe"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok, vocab = tokenizer_json()
    files = {
        "config.json": config(vocab),
        "tokenizer.json": tok,
        "tokenizer_config.json": {
            "tokenizer_class": "TokenizersBackend", "backend": "tokenizers",
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "padding_side": "left",
            "model_max_length": 1024, "extra_special_tokens": SPECIALS[1:2] + SPECIALS[3:],
        },
        "preprocessor_config.json": {
            "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen3VLProcessor",
            "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
            "size": {"shortest_edge": 32 * 32, "longest_edge": 128 * 128},
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True,
        },
        "processor_config.json": {"processor_class": "Qwen3VLProcessor"},
    }
    for name, content in files.items():
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2, sort_keys=name != "tokenizer.json")
            f.write("\n")
    with open(os.path.join(args.out, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(CHAT_TEMPLATE)
    print(f"wrote {', '.join(sorted(files) + ['chat_template.jinja'])} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
