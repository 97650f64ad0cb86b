"""Which config keys the code reads: `track_reads()` records every read of a config key, on the
driver (OmegaConf DictConfig attribute and item access) and below it (attribute reads on the
schema's dataclasses, which carry their dotted path once `to_dataclass` has built them).

Used by tests to make "accepted but ignored" detectable: a key the user set that nothing read
during a run is a key the run ignored. Reads made while composing the config (`compose`) are not
counted; start tracking after `load_config`.

    with track_reads() as reads:
        run(cfg)
    reads.was_read("actor_rollout_ref.actor.optim.lr")

Dataclass reads are exact where the instance carries its path (the tree `to_dataclass` returns,
and copies of it). A section built elsewhere from a dict (a test, a benchmark) records
(class, field) only; `was_read` then counts such a read for every key of that class and field,
which can only hide an unread key, never invent one.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Set, Tuple

from verl_lite.config import schema

PATH_ATTR = "_verl_lite_path"


def _schema_classes() -> list:
    return [obj for obj in vars(schema).values() if isinstance(obj, type) and dataclasses.is_dataclass(obj)]


class Reads:
    def __init__(self) -> None:
        self.paths: Set[str] = set()
        self.fields: Set[Tuple[type, str]] = set()

    def was_read(self, key: str) -> bool:
        """True when `key` (dotted) or a section above it as a whole, or a key below it, was read."""
        if any(p == key or p.startswith(key + ".") for p in self.paths):
            return True
        from verl_lite.config import keys

        info = keys.key_table().get(key)
        if info is not None and (info.owner, info.name) in self.fields:
            return True
        # a read of an open section (a dict) as a whole covers the keys added inside it
        parts = key.split(".")
        return any(".".join(parts[:i]) in self.paths and keys.key_table().get(".".join(parts[:i]), None) is not None
                   and keys.key_table()[".".join(parts[:i])].open for i in range(1, len(parts)))


def tag_paths(obj: Any, prefix: str = "") -> Any:
    """Give each schema dataclass in `obj`'s tree its dotted path (for exact read records)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        object.__setattr__(obj, PATH_ATTR, prefix)
        for f in dataclasses.fields(obj):
            tag_paths(object.__getattribute__(obj, f.name), f"{prefix}{f.name}.")
    return obj


@contextlib.contextmanager
def track_reads() -> Iterator[Reads]:
    from omegaconf import DictConfig

    from verl_lite.config import compose

    reads = Reads()
    originals = []

    def record_dict(node: DictConfig, key: Any) -> None:
        if isinstance(key, str) and not key.startswith("_"):
            try:
                reads.paths.add(node._get_full_key(key))
            except Exception:  # a node detached from its parent: no path to record
                pass

    get_attr, get_item = DictConfig.__getattr__, DictConfig.__getitem__

    def dict_getattr(self, key):
        record_dict(self, key)
        return get_attr(self, key)

    def dict_getitem(self, key):
        record_dict(self, key)
        return get_item(self, key)

    originals += [(DictConfig, "__getattr__", get_attr), (DictConfig, "__getitem__", get_item)]
    DictConfig.__getattr__, DictConfig.__getitem__ = dict_getattr, dict_getitem

    for cls in _schema_classes():
        names = {f.name for f in dataclasses.fields(cls)}
        original = cls.__getattribute__

        def getattribute(self, name, _names=names, _cls=cls, _original=original):
            if name in _names:
                path = _original(self, "__dict__").get(PATH_ATTR)
                if path is not None:
                    reads.paths.add(path + name)
                else:
                    reads.fields.add((_cls, name))
            return _original(self, name)

        originals.append((cls, "__getattribute__", original))
        cls.__getattribute__ = getattribute

    to_dataclass = compose.to_dataclass

    def tagged_to_dataclass(cfg):
        return tag_paths(to_dataclass(cfg))

    originals.append((compose, "to_dataclass", to_dataclass))
    compose.to_dataclass = tagged_to_dataclass
    try:
        yield reads
    finally:
        for owner, name, value in reversed(originals):
            if name == "__getattribute__" and value is object.__getattribute__:
                delattr(owner, name) if "__getattribute__" in owner.__dict__ else None
            else:
                setattr(owner, name, value)
