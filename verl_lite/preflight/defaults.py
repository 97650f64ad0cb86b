"""What a run changed from the schema's defaults, for the warnings that say a changed setting has no
effect: the dotted keys of a section that differ from its default, and a section as plain values
(read without touching its fields one by one: a key only compared with its default is not one the run
acts on, and tests/py/test_read_tracking.py tells the two apart).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List


def changed_keys(section: Any, cls: type, prefix: str, skip: tuple = ()) -> List[str]:
    """Dotted keys of a section whose value differs from the schema's default."""
    default = cls()
    return [f"{prefix}.{f.name}" for f in dataclasses.fields(cls)
            if f.name not in skip and getattr(section, f.name) != getattr(default, f.name)]


def plain(section: Any) -> Any:
    """A config section as plain values, without reading its fields one by one."""
    from omegaconf import OmegaConf  # a composed config has loaded it; importing the preflight does not

    if OmegaConf.is_config(section):
        return OmegaConf.to_container(section, resolve=True)
    if dataclasses.is_dataclass(section):
        return {k: plain(v) for k, v in vars(section).items()}
    return section


def dotted(values: Dict[str, Any], key: str) -> Any:
    """The value at a dotted key of plain values."""
    for part in key.split("."):
        values = values[part]
    return values


def differing_keys(value: Any, default: Any, prefix: str) -> List[str]:
    """Dotted keys under `prefix` whose plain value differs from the default (the user set them)."""
    if isinstance(value, dict) and isinstance(default, dict):
        out: List[str] = []
        for k in value:
            out += differing_keys(value[k], default.get(k), f"{prefix}.{k}") if k in default else [f"{prefix}.{k}"]
        return out
    return [] if value == default else [prefix]
