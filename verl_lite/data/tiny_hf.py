"""The tiny Qwen3.5 with a real Hugging Face tokenizer, and a small local sample in GSM8K's layout.

The shipped char tokenizer covers the copy task only. A user's model brings a Hugging Face
tokenizer (byte-level BPE, a chat template, special tokens as ids of their own), and that path is
exercised here without any download:

- `train_tokenizer(texts, vocab_size)`: a byte-level BPE tokenizer trained locally with the
  `tokenizers` library, with Qwen's ChatML special tokens and chat template (`<|im_start|>role\\n
  content<|im_end|>\\n`, generation prompt `<|im_start|>assistant\\n`; EOS `<|im_end|>`, pad
  `<|endoftext|>`, no BOS, as Qwen's instruct tokenizers).
- `make_model_dir(out_dir)`: the tiny Qwen3.5 config with that tokenizer's vocab size and special
  ids, plus the tokenizer files: `verl_lite/assets/tiny-qwen3_5-bpe` is made this way.
- `write_gsm8k_layout(out_dir)`: arithmetic word problems as `train.jsonl` / `test.jsonl` with GSM8K's
  columns (`question`, and an `answer` that ends in `#### <number>`), the input that
  `examples/data_preprocess/gsm8k.py` turns into verl's parquet.

Usage:
  python -m verl_lite.data.tiny_hf model --out-dir verl_lite/assets/tiny-qwen3_5-bpe
  python -m verl_lite.data.tiny_hf gsm8k --out-dir data/gsm8k_local [--train 256 --test 32]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any, Dict, Iterable, List, Optional
from verl_lite.models import read_hf_config, resolve_model_dir

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PAD, IM_START, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, IM_START, EOS)
# verl's GSM8K preprocessing appends this instruction to every question.
GSM8K_INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."
BASE_MODEL = "tiny-qwen3_5"

_NAMES = ("Ann", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana")
_THINGS = ("apples", "books", "coins", "pens", "shells", "stamps")


def arithmetic_problem(rng: random.Random) -> Dict[str, str]:
    """One GSM8K-layout row: a question and an answer with a worked line and `#### n`."""
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, b = rng.randint(2, 40), rng.randint(2, 40)
    if rng.random() < 0.5:
        question = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
        result, work = a + b, f"{a}+{b}"
    else:
        a, b = max(a, b), min(a, b)
        question = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?"
        result, work = a - b, f"{a}-{b}"
    answer = f"{name} has {work} = <<{work}={result}>>{result} {thing}.\n#### {result}"
    return {"question": question, "answer": answer}


def write_gsm8k_layout(out_dir: str, n_train: int = 256, n_test: int = 32, seed: int = 0) -> Dict[str, str]:
    """train.jsonl and test.jsonl in GSM8K's layout under out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split, n, split_seed in (("train", n_train, seed), ("test", n_test, seed + 1)):
        rng = random.Random(split_seed)
        path = os.path.join(out_dir, f"{split}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for _ in range(n):
                f.write(json.dumps(arithmetic_problem(rng)) + "\n")
        paths[split] = path
    return paths


def corpus(n: int = 2000, seed: int = 0) -> List[str]:
    """Texts the asset's tokenizer is trained on: problems, answers and the instruction."""
    rng = random.Random(seed)
    texts = [GSM8K_INSTRUCTION, "user", "assistant", "system"]
    for _ in range(n):
        row = arithmetic_problem(rng)
        texts += [row["question"] + " " + GSM8K_INSTRUCTION, row["answer"]]
    return texts


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512):
    """A byte-level BPE `PreTrainedTokenizerFast` with ChatML special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} cannot hold the 256 byte symbols and "
                         f"{len(SPECIAL_TOKENS)} special tokens (use at least {256 + len(SPECIAL_TOKENS)})")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   additional_special_tokens=[IM_START], chat_template=CHATML_TEMPLATE,
                                   padding_side="left")


def make_model_dir(out_dir: str, vocab_size: int = 512, seed: int = 0) -> str:
    """A model directory: the tiny Qwen3.5 config fitted to a locally trained BPE tokenizer."""
    tokenizer = train_tokenizer(corpus(seed=seed), vocab_size)
    config: Dict[str, Any] = dict(read_hf_config(resolve_model_dir(BASE_MODEL)) or {})
    if not config:
        raise FileNotFoundError(f"the {BASE_MODEL} config that this model copies is missing")
    # Prompts of GSM8K's kind with the instruction and chat markup take ~50 of these tokens.
    ids = {"vocab_size": len(tokenizer), "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
           "bos_token_id": None, "max_position_embeddings": 512}
    config.update(ids)
    if isinstance(config.get("text_config"), dict):
        config["text_config"] = {**config["text_config"], **ids}
    os.makedirs(out_dir, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return out_dir


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_lite.data.tiny_hf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    model = sub.add_parser("model", help="write the tiny Qwen3.5 + BPE tokenizer model directory")
    model.add_argument("--out-dir", required=True)
    model.add_argument("--vocab-size", type=int, default=512)
    data = sub.add_parser("gsm8k", help="write train.jsonl / test.jsonl in GSM8K's layout")
    data.add_argument("--out-dir", required=True)
    data.add_argument("--train", type=int, default=256)
    data.add_argument("--test", type=int, default=32)
    data.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.what == "model":
            print(make_model_dir(args.out_dir, args.vocab_size))
        else:
            for split, path in write_gsm8k_layout(args.out_dir, args.train, args.test, args.seed).items():
                print(f"{split}: {path}")
    except (ValueError, OSError) as e:
        print(f"verl_lite: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
