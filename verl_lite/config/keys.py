"""The key table of the structured config: every dotted key, its type and default, and the open
sections that accept new keys with `+key=value`.

Walks the dataclasses in `schema/` once (a few ms) so that config errors can name the expected
type and suggest the nearest real key without building an OmegaConf object.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from typing import Any, Dict, List, NamedTuple, Tuple

from verl_lite.config import schema


class KeyInfo(NamedTuple):
    path: str
    type: Any  # the annotation, resolved
    default: Any  # dataclasses.MISSING for nested sections
    section: bool  # a dataclass node (has sub-keys)
    open: bool  # a Dict[str, Any] that takes new keys with +key=value
    owner: type  # the dataclass that declares the field
    name: str  # the field name in `owner`


def _walk_instance(obj: Any, prefix: str, out: Dict[str, KeyInfo]) -> None:
    """Record the fields of a dataclass instance; defaults come from the instance, so nested
    sections keep their own (critic.optim has lr=1e-5, the actor's has 1e-6)."""
    cls = type(obj)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(tp):
            out[path] = KeyInfo(path, tp, dataclasses.MISSING, True, False, cls, f.name)
            _walk_instance(value, path + ".", out)
            continue
        is_open = typing.get_origin(tp) in (dict, Dict)
        out[path] = KeyInfo(path, tp, value, False, is_open, cls, f.name)


@functools.lru_cache(maxsize=None)
def key_table() -> Dict[str, KeyInfo]:
    """All dotted keys of `VerlLiteConfig`, sections included, in declaration order."""
    out: Dict[str, KeyInfo] = {}
    _walk_instance(schema.VerlLiteConfig(), "", out)
    return out


@functools.lru_cache(maxsize=None)
def open_sections() -> Tuple[str, ...]:
    """Dotted paths of the sections where `+key=value` may add keys."""
    return tuple(p for p, info in key_table().items() if info.open)


def open_section_of(key: str) -> str:
    """The open section that contains `key` (strictly inside it), or "" if none."""
    for section in open_sections():
        if key.startswith(section + "."):
            return section
    return ""


def type_name(tp: Any) -> str:
    """A short, user-facing name for an annotation: int, float, bool, str, list of str, ..."""
    if tp is Any:
        return "any value"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        names = " or ".join(type_name(a) for a in inner)
        return f"{names} or null" if len(inner) < len(args) else names
    if origin in (list, List):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (dict, Dict):
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return f"section ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


def suggest(key: str, limit: int = 3) -> List[str]:
    """Real keys close to a misspelled or misplaced `key`, best first.

    1. Keys ending in the same specific name (a key typed in the wrong section, such as
       `actor_rollout_ref.actor.tensor_model_parallel_size`). A one-word name (`enable`, `path`,
       `type`) is not specific: `algorithm.filter_groups.enable` does not mean `critic.enable`.
    2. When the parent section exists: its fields within a typo of the last name (similarity >= 0.85:
       `n_gpu_per_node` -> `n_gpus_per_node`, but not a token budget -> a sample count).
    3. Otherwise: difflib over the full dotted names (a typo in a section name).
    Hints point only at a key that means the same thing; none is better than a wrong one.
    """
    table = key_table()
    parent, _, last = key.rpartition(".")
    same_name = [k for k in table if "_" in last and k.rsplit(".", 1)[-1] == last and k != key]
    ranked = sorted(same_name, key=lambda k: difflib.SequenceMatcher(None, key, k).ratio(), reverse=True)
    if parent in table and table[parent].section:
        children = [k.rsplit(".", 1)[-1] for k in table if k.rpartition(".")[0] == parent]
        close = [f"{parent}.{c}" for c in difflib.get_close_matches(last, children, n=limit, cutoff=0.85)]
    else:
        close = difflib.get_close_matches(key, list(table), n=limit, cutoff=0.75)
    ranked.extend(k for k in close if k not in ranked)
    return ranked[:limit]
