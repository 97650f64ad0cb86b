"""Tokenizers: a char-level tokenizer for the shipped tiny models, or an HF tokenizer from a local dir.

The char tokenizer covers digits, a little punctuation and lowercase letters (47 ids, fitting the
tiny configs' vocab of 48), so the synthetic task needs no download. Real models use the HF
tokenizer files next to their weights (`AutoTokenizer.from_pretrained(..., local_files_only=True)`).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence
from verl_lite.models import resolve_model_dir

CHAR_TOKENIZER_FILE = "char_tokenizer.json"
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
DEFAULT_CHARS = "0123456789" + " +-=?:#" + "abcdefghijklmnopqrstuvwxyz"


class CharTokenizer:
    """One id per character; ids 0-3 are <pad>, <bos>, <eos>, <unk>.

    Implements the subset of the HF tokenizer API the trainer uses: encode, decode,
    apply_chat_template, batch_decode and the special-token ids.
    """

    def __init__(self, chars: str = DEFAULT_CHARS):
        if len(set(chars)) != len(chars):
            raise ValueError(f"char tokenizer alphabet has repeated characters: {chars!r}")
        self.chars = chars
        self.itos: List[str] = list(SPECIAL_TOKENS) + list(chars)
        self.stoi: Dict[str, int] = {c: i for i, c in enumerate(self.itos)}
        self.pad_token_id, self.bos_token_id, self.eos_token_id, self.unk_token_id = 0, 1, 2, 3
        self.padding_side = "left"

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        ids = [self.stoi.get(c, self.unk_token_id) for c in text]
        return [self.bos_token_id] + ids if add_special_tokens else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i < len(SPECIAL_TOKENS) or i >= len(self.itos):
                if skip_special_tokens:
                    continue
                out.append(self.itos[i] if i < len(self.itos) else "<unk>")
            else:
                out.append(self.itos[i])
        return "".join(out)

    def batch_decode(self, batch: Sequence[Sequence[int]], skip_special_tokens: bool = True) -> List[str]:
        return [self.decode(ids, skip_special_tokens=skip_special_tokens) for ids in batch]

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = True, **_):
        """<bos> followed by the message contents; the char models have no roles."""
        text = "".join(str(m["content"]) for m in messages)
        return [self.bos_token_id] + self.encode(text) if tokenize else text

    def save_pretrained(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, CHAR_TOKENIZER_FILE), "w", encoding="utf-8") as f:
            json.dump({"type": "char", "chars": self.chars}, f)


def load_tokenizer(path: str, trust_remote_code: bool = False):
    """The tokenizer stored in a model directory: char_tokenizer.json, else HF tokenizer files."""
    resolved = resolve_model_dir(path)
    char_file = os.path.join(resolved, CHAR_TOKENIZER_FILE)
    if os.path.isfile(char_file):
        with open(char_file, encoding="utf-8") as f:
            spec = json.load(f)
        return CharTokenizer(spec.get("chars", DEFAULT_CHARS))
    hf_files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if any(os.path.isfile(os.path.join(resolved, name)) for name in hf_files):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(resolved, local_files_only=True, trust_remote_code=trust_remote_code)
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return tok
    raise FileNotFoundError(
        f"no tokenizer in {path!r} (expected {CHAR_TOKENIZER_FILE} or HF tokenizer files such as "
        f"tokenizer.json; set actor_rollout_ref.model.tokenizer_path to a directory that has one)"
    )


def has_chat_template_file(resolved: str) -> bool:
    """Whether a Hugging Face tokenizer directory ships a chat template (read without transformers):
    a `chat_template` entry in tokenizer_config.json, or chat_template.jinja / chat_template.json."""
    if any(os.path.isfile(os.path.join(resolved, n)) for n in ("chat_template.jinja", "chat_template.json")):
        return True
    try:
        with open(os.path.join(resolved, "tokenizer_config.json"), encoding="utf-8") as f:
            return bool(json.load(f).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def tokenizer_problem(path: Optional[str], needs_chat_template: bool = False) -> Optional[str]:
    """None if load_tokenizer(path) will find a tokenizer (with a chat template when
    `needs_chat_template`), else the reason (no heavy imports)."""
    resolved = resolve_model_dir(path or "")
    if os.path.isfile(os.path.join(resolved, CHAR_TOKENIZER_FILE)):
        return None  # the char tokenizer has its own fixed template
    names = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if not any(os.path.isfile(os.path.join(resolved, n)) for n in names):
        return (
            f"no tokenizer in {path!r} (expected {CHAR_TOKENIZER_FILE} or tokenizer.json there; set "
            f"actor_rollout_ref.model.tokenizer_path)"
        )
    if needs_chat_template and not has_chat_template_file(resolved):
        return (
            f"the tokenizer in {path!r} has no chat template (no chat_template in tokenizer_config.json, no "
            f"chat_template.jinja): add one, or set data.apply_chat_template=False to encode the prompt text as is"
        )
    return None
