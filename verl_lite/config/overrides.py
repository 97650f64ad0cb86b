"""Parse one command-line override in Hydra's grammar.

Launcher overrides are plain `key=scalar` or `key=[a,b]` lines. Those are parsed here with Hydra's
own lexer rules for null, bool, int and float (so `1e-6` is a float, `01` a string, `TRUE` a bool),
which keeps Hydra (~0.1 s to import) off the check's path. Anything else (lists, mappings, quotes,
interpolations, escapes, sweeps, spaces) goes to Hydra's parser, so the grammar is exactly Hydra's;
a test compares both parsers on a corpus of lines.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

# Hydra 1.3 OverrideLexer.g4 token rules, as regular expressions matched against the whole value.
_DIGITS = r"[0-9](?:_?[0-9])*"
_POINT_FLOAT = rf"(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\."
_EXPONENT_FLOAT = rf"(?:{_POINT_FLOAT}|{_DIGITS})[eE][+-]?{_DIGITS}"
_INT = re.compile(r"[+-]?(?:0|[1-9](?:_?[0-9])*)")
_FLOAT = re.compile(rf"[+-]?(?:{_EXPONENT_FLOAT}|{_POINT_FLOAT}|[Ii][Nn][Ff]|[Nn][Aa][Nn])")
_BOOL = re.compile(r"[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]")
_NULL = re.compile(r"[Nn][Uu][Ll][Ll]")
# A line the fast path takes: prefix, a dotted key of Hydra IDs (or list indices), `=`, a value made
# only of characters that cannot start a list, mapping, quote, interpolation, escape or sweep.
_ITEM = r"[A-Za-z0-9_./:+\-@%]"
_SIMPLE = re.compile(
    r"(?P<prefix>\+\+|\+|~)?"
    r"(?P<key>[A-Za-z_][\w\-]*(?:\.(?:[A-Za-z_][\w\-]*|[0-9]+))*)"
    rf"(?:=(?P<value>{_ITEM}*|\[(?:{_ITEM}+(?:,{_ITEM}+)*)?\]))?"
)
KINDS = {"": "set", "+": "add", "++": "force_add", "~": "delete"}


class OverrideSyntaxError(ValueError):
    """A line that is not a single-run override."""


class Override(NamedTuple):
    kind: str  # set | add | force_add | delete
    key: str
    value: Any  # None for `~key`
    line: str
    has_value: bool


def scalar(text: str) -> Any:
    """The value Hydra gives an unquoted scalar made of the fast path's characters."""
    if _NULL.fullmatch(text):
        return None
    if _BOOL.fullmatch(text):
        return text.lower() == "true"
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def parse(line: str) -> Override:
    """Parse one override line; raises OverrideSyntaxError with the reason."""
    match = _SIMPLE.fullmatch(line)
    if match:
        prefix, key, value = match.group("prefix") or "", match.group("key"), match.group("value")
        if value is not None:
            if value.startswith("["):  # a flat list such as [console,jsonl]
                items = [scalar(item) for item in value[1:-1].split(",")] if value != "[]" else []
                return Override(KINDS[prefix], key, items, line, True)
            return Override(KINDS[prefix], key, scalar(value), line, True)
        if prefix == "~":
            return Override("delete", key, None, line, False)
    return _parse_with_hydra(line)


def _parse_with_hydra(line: str) -> Override:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_override(line)
    except HydraException as e:
        raise OverrideSyntaxError(f"cannot parse override {line!r}: {e} (write key=value, +key=value or ~key)") from e
    if parsed.package is not None:
        raise OverrideSyntaxError(f"{line!r}: config packages (@...) are not supported; write key=value")
    if parsed.is_sweep_override():
        raise OverrideSyntaxError(f"{line!r}: sweeps are not supported (this is one run); give a single value")
    if parsed.is_delete():
        kind = "delete"
    elif parsed.is_force_add():
        kind = "force_add"
    elif parsed.is_add():
        kind = "add"
    else:
        kind = "set"
    value = parsed.value()
    return Override(kind, parsed.key_or_group, value, line, kind != "delete" or value is not None)
