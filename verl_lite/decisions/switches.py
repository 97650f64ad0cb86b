"""Switches as users type them: a bool, or a string on a command line or inside an open dict
(`override_transformer_config`, `+key=value`). The one parser every decision, rule and engine uses."""

from __future__ import annotations

from typing import Any, Optional

TRUE_WORDS = ("1", "true", "yes", "on")
AUTO_WORDS = ("", "null", "none", "auto")


def switch(value: Any, default: bool = False) -> bool:
    """`value` as a bool; `default` when it is None (the key is unset)."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in TRUE_WORDS
    return bool(value)


def tri_state(value: Any) -> Optional[bool]:
    """True, False, or None for auto (None, or a string such as "null" or "auto")."""
    if isinstance(value, str) and value.strip().lower() in AUTO_WORDS:
        return None
    return None if value is None else switch(value)
