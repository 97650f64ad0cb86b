"""Secrets in output: env vars whose names contain KEY, TOKEN (not TOKENIZER), SECRET or PASSWORD
have their values (4+ characters) printed as <masked> wherever they appear: the preflight's output,
the trainer's log records, the final error line and last_error.txt (docs/reliability.md)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from typing import Dict, Iterator, List, Mapping, Optional

# TOKEN but not TOKENIZER: TOKENIZERS_PARALLELISM is a switch, not a credential.
SECRET_NAME = re.compile(r"KEY|TOKEN(?!IZER)|SECRET|PASSWORD", re.IGNORECASE)
MASK = "<masked>"


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def secret_values(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """Values of secret-named env vars, longest first; 4+ characters, so that a flag such as 1 or
    true is not masked all over the output."""
    env = os.environ if environ is None else environ
    return sorted({v for k, v in env.items() if is_secret(k) and len(v) >= 4}, key=len, reverse=True)


def redact(text: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """`text` with every secret env value replaced by <masked>."""
    for value in secret_values(environ):
        text = text.replace(value, MASK)
    return text


def mask_env(env: Mapping[str, str]) -> Dict[str, str]:
    return {k: (MASK if is_secret(k) else v) for k, v in env.items()}


class RedactSecrets(logging.Filter):
    """A handler filter that masks secret env values in every record it formats."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


@contextlib.contextmanager
def redacted_logs() -> Iterator[None]:
    """Mask secrets in every record the root logger's handlers format, for the duration."""
    handlers = list(logging.getLogger().handlers)
    flt = RedactSecrets()
    for h in handlers:
        h.addFilter(flt)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(flt)
