"""Typed config sections for the code below the driver: workers, engines, rollouts.

The driver composes a `DictConfig`; what reaches a worker, an engine or a rollout may be that
node, the `VerlLiteConfig` dataclass (`to_dataclass`), a section of it, or a plain dict (a config
flattened to cross a process boundary, a test, a benchmark). `as_section(cls, value)` turns any of
them into an instance of the schema dataclass `cls`, once, at the boundary; the code after it reads
attributes. Missing keys take the schema's defaults, so every default lives in `schema/` only.

    optim = as_section(OptimConfig, {"lr": 1e-3})   # weight_decay=0.01, clip_grad=1.0, ...
    engine_section = as_section(role_section_class("ref"), cfg.actor_rollout_ref.ref)

Imports omegaconf (it validates the types and resolves interpolations); no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Dict, List, Mapping, Type, TypeVar

from verl_lite.config import schema

T = TypeVar("T")

# The section class of each role's engine settings (strategy, megatron, fsdp_config, ...).
ROLE_SECTIONS: Dict[str, type] = {
    "actor": schema.ActorConfig,
    "ref": schema.RefConfig,
    "critic": schema.CriticConfig,
}


def field_of(section: Any, key: str, default: Any = None) -> Any:
    """A field of a section as it comes, unconverted: a dataclass, an OmegaConf node or a plain mapping
    (`default` where it lacks the key; None stands for an absent section)."""
    if section is None:
        return default
    if isinstance(section, dict):
        return section.get(key, default)
    getter = getattr(section, "get", None)
    if callable(getter):  # DictConfig
        return getter(key, default)
    return getattr(section, key, default)


def role_section_class(role: str) -> type:
    """The schema class of a role's section: actor -> ActorConfig, ref -> RefConfig, critic -> CriticConfig."""
    try:
        return ROLE_SECTIONS[role]
    except KeyError:
        raise ValueError(f"unknown role {role!r}: engines are built for {', '.join(ROLE_SECTIONS)}") from None


def _dataclass_type(annotation: Any) -> Any:
    """The dataclass inside an annotation (`X` or `Optional[X]`), else None (open dicts, scalars)."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    if typing.get_origin(annotation) is typing.Union:
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            return inner[0]
    return None


def unknown_keys(cls: type, value: Mapping[str, Any], prefix: str = "") -> List[str]:
    """One message per key of `value` (nested sections included) that `cls` does not define."""
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    problems = []
    for key, item in value.items():
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            hint = f" (did you mean {prefix + close[0]!r}?)" if close else ""
            problems.append(f"unknown key {prefix + str(key)!r} in {cls.__name__}{hint}; its keys are: {', '.join(valid)}")
            continue
        nested = _dataclass_type(hints[key])
        if nested is not None and isinstance(item, Mapping):
            problems += unknown_keys(nested, item, f"{prefix}{key}.")
    return problems


def as_section(cls: Type[T], value: Any) -> T:
    """`value` as an instance of the schema dataclass `cls`.

    `value` is an instance of `cls` (returned as it is), an OmegaConf node (its interpolations
    resolved against its own config tree first) or a mapping. Keys it lacks take the schema's
    defaults; nested sections are converted too; open dicts (`override_transformer_config`,
    `override_config`, ...) stay dicts. Raises ValueError for keys `cls` does not define (naming
    them and the valid keys), for values of the wrong type, and for a default that refers to
    another section (the ref's megatron layout follows the actor's) when that section is absent.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf import errors as oc_errors

    if isinstance(value, cls):
        return value
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if not isinstance(value, Mapping):
        raise TypeError(f"a {cls.__name__} section must be a {cls.__name__}, a DictConfig or a dict, "
                        f"got {type(value).__name__}")
    problems = unknown_keys(cls, value)
    if problems:
        raise ValueError("; ".join(problems))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), value)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except oc_errors.InterpolationResolutionError as e:
        key = getattr(e, "full_key", "") or "a key"
        raise ValueError(
            f"{cls.__name__}: {key} defaults to another section's value ({str(e).splitlines()[0]}), which a "
            f"section on its own cannot resolve: set {key}, or convert the whole config "
            f"(verl_lite.config.to_dataclass)") from e
    except oc_errors.ValidationError as e:
        raise ValueError(f"{cls.__name__}: {str(e).splitlines()[0]} (key {getattr(e, 'full_key', '?')})") from e

