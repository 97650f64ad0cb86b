"""Resolving a composed config's `${...}` interpolations, with one problem line per value that does not
resolve: the key, its value as typed, why (a key verl_lite's config lacks, a cycle, a resolver that does
not exist, a value of the wrong type, a syntax error) and what to write instead.

An interpolation of verl's spelling of a key that verl_lite spells otherwise (`${reward.reward_kwargs.x}`,
verl_names.ALIASES) is rewritten to verl_lite's spelling, as the override lines' own keys are.
A value that does not resolve is reset to its default (deleted inside an open section), so the rules
after the composer still see a fully typed config.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import errors as oc_errors

from verl_lite.config import keys, verl_names

# omegaconf's own resolvers (OmegaConf.register_new_resolver is not called by verl_lite, nor by verl's
# trainer config at the pinned commit: verl/trainer/config/*.yaml use oc.select only)
RESOLVERS = ("oc.env", "oc.select", "oc.decode", "oc.create", "oc.deprecated", "oc.dict.keys", "oc.dict.values")
_KEY_NOT_FOUND = re.compile(r"Interpolation key '([^']*)' not found")
_FIX = "give the value itself, or interpolate a key that exists (${section.key})"


def leaf_paths(node: Any, prefix: str = "") -> List[str]:
    """Dotted paths of the leaves under `node` (list items as `key[i]`). A section whose whole value is
    an interpolation (`x=${a.b}` into a mapping) or null is a leaf: it has no keys until it resolves."""
    if isinstance(node, DictConfig):
        children = [(node._get_node(k), f"{prefix}{k}") for k in node.keys()]
    elif isinstance(node, ListConfig):
        children = [(node._get_node(i), f"{prefix.rstrip('.')}[{i}]") for i in range(len(node))]
    else:
        return []
    out: List[str] = []
    for child, path in children:
        if isinstance(child, (DictConfig, ListConfig)) and not child._is_interpolation() and not child._is_none():
            out.extend(leaf_paths(child, path + "."))
        else:
            out.append(path)
    return out


def resolve(cfg: DictConfig, schema: DictConfig, typed: Optional[Dict[str, str]] = None) -> List[str]:
    """Resolve interpolations in place; one problem per value that does not resolve, which is then reset
    to its value in `schema` (the config with no override). `typed` maps a key to the spelling the line
    used, where verl_lite spells it otherwise, so that the message names the key as typed.

    Each round reports and resets the values that fail of themselves: not a default that fails only
    through a value the lines set, nor a value that interpolates another failing one (it resolves once
    that one is reset, or fails on its own next round). Each round resets one value at least, so it ends."""
    problems = _missing_values(cfg, schema, typed or {})  # before resolving: nothing then interpolates a `???`
    defaults = OmegaConf.to_container(schema, resolve=False)
    for _ in range(len(leaf_paths(cfg)) + 1):
        try:
            OmegaConf.resolve(cfg)
            return problems
        except oc_errors.OmegaConfBaseException as e:
            failure = e
        raw = OmegaConf.to_container(cfg, resolve=False)
        bad = [(path, error, raw_value(raw, path)) for path, error in _unresolved(cfg)]
        if not bad:  # the config-wide resolve failed where no single value does: a bug, not a bad line
            raise failure
        bad = [b for b in bad if b[2] != raw_value(defaults, b[0])] or bad
        failing = [b[0] for b in bad]
        bad = [b for b in bad if not any(_interpolates(b[2], other) for other in failing if other != b[0])] or bad
        for path, error, value in bad:
            if _rewrite_verl_spelling(cfg, path, error):
                continue  # resolved again in the next round
            problems.append(unresolved_message(_as_typed(path, typed or {}), value, error))
            _reset(cfg, path, schema)
    OmegaConf.resolve(cfg)  # every value was reset: raises only on a bug (an internal error)
    return problems


def _missing_values(cfg: DictConfig, schema: DictConfig, typed: Dict[str, str]) -> List[str]:
    """Values set to omegaconf's `???`: reset, one problem each."""
    problems = []
    for path in leaf_paths(cfg):
        node = parent_and_leaf(cfg, path)
        if node is not None and OmegaConf.is_missing(node[0], node[1]):
            problems.append(f"{_as_typed(path, typed)} has no value ('???', omegaconf's mark of a value to fill "
                            f"in): give it one, or leave the line out for the default")
            _reset(cfg, path, schema)
    return problems


def _as_typed(path: str, typed: Dict[str, str]) -> str:
    """`path` under the spelling its line used (a key inside a section the line named counts too)."""
    for ours, theirs in typed.items():
        if path == ours or path.startswith(ours + ".") or path.startswith(ours + "["):
            return theirs + path[len(ours):]
    return path


def _interpolates(value: Any, key: str) -> bool:
    text = str(value)
    return "${" + key + "}" in text or "${" + key + "." in text


def _unresolved(cfg: DictConfig) -> List[Tuple[str, oc_errors.OmegaConfBaseException]]:
    found = []
    for path in leaf_paths(cfg):
        try:
            _check_settable(cfg, path, OmegaConf.select(cfg, path, throw_on_resolution_failure=True))
        except oc_errors.OmegaConfBaseException as e:
            found.append((path, e))
    return found


def _check_settable(cfg: DictConfig, path: str, value: Any) -> None:
    """Raise what OmegaConf.resolve raises when it writes `value`, the interpolation at `path` resolved,
    over it (omegaconf/_impl.py:_resolve_container_value): a list setting given `${...}` of a string,
    a value omegaconf cannot hold (`${oc.decode:'[1,2]'}` into a scalar). Tried on a copy of the node."""
    node = parent_and_leaf(cfg, path)
    if node is None:
        return
    child = node[0]._get_node(node[1])
    if child is None or not child._is_interpolation():
        return
    if isinstance(value, (DictConfig, ListConfig)) and not isinstance(child, (DictConfig, ListConfig)):
        return  # a section into a plain value: omegaconf puts it in the parent, whose type the lookup checked
    copy.deepcopy(child)._set_value(value)  # a node's copy keeps its parent, not a copy of it


def _missing_key(error: BaseException) -> Optional[str]:
    match = _KEY_NOT_FOUND.search(str(getattr(error, "msg", error)))
    return match.group(1) if match else None


def _rewrite_verl_spelling(cfg: DictConfig, path: str, error: BaseException) -> bool:
    """`${<verl key>}` where verl_lite spells the key otherwise: write verl_lite's key into the value."""
    missing = _missing_key(error)
    if missing is None or missing.startswith("."):
        return False
    ours = verl_names.alias(missing)
    if ours == missing or OmegaConf.select(cfg, ours, default=None, throw_on_resolution_failure=False) is None:
        return False
    node = parent_and_leaf(cfg, path)
    if node is None:
        return False
    parent, leaf = node
    value = parent._get_node(leaf)._value()
    if not isinstance(value, str) or "${" + missing + "}" not in value:
        return False
    parent[leaf] = value.replace("${" + missing + "}", "${" + ours + "}")
    return True


def unresolved_message(path: str, raw: Any, error: BaseException) -> str:
    """One line: the key, its value as typed, why it does not resolve and what to write instead."""
    reason = (str(getattr(error, "msg", None) or error).strip().splitlines() or [type(error).__name__])[0]
    reason = reason.split(". value: ", 1)[0]  # omegaconf appends the whole section it could not assign
    head = f"{path}={raw!r} does not resolve"
    missing = _missing_key(error)
    if missing is not None:
        table = keys.key_table()
        near = [k for k in keys.suggest(missing.lstrip(".")) if not table[k].section]
        hint = f" (did you mean ${{{near[0]}}}?)" if near else ""
        return f"{head}: {missing!r} is not a key of verl_lite's config{hint}; {_FIX}"
    if isinstance(error, oc_errors.ValidationError):  # the resolved value does not fit the key's type
        info = keys.key_table().get(path.split("[", 1)[0])
        if info is None:  # a key inside an open section: omegaconf holds scalars, lists and mappings
            return f"{head}: {reason}; give the value itself (a scalar, [a,b] or {{a:1}})"
        return (f"{head} to a value of the right type (expected {keys.type_name(info.type)}; {reason}); "
                "give a value of that type")
    if isinstance(error, oc_errors.UnsupportedInterpolationType):
        return f"{head}: {reason}; the resolvers here are {', '.join(RESOLVERS)}"
    if isinstance(error, oc_errors.GrammarParseError):
        return f"{head}: not a valid interpolation ({reason}); write ${{section.key}}"
    if "Recursive interpolation" in reason or isinstance(error, oc_errors.ConfigCycleDetectedException):
        return f"{head}: the interpolations form a cycle (a key that refers back to itself); {_FIX}"
    if isinstance(error, oc_errors.InterpolationToMissingValueError):
        return f"{head}: it interpolates a key that has no value (???); {_FIX}"
    return f"{head}: {reason}; {_FIX}"


def escaped_interpolation_problem(key: str, value: Any) -> Optional[str]:
    """A literal `${...}` (escaped `\\${...}`) anywhere in the value: refused. The config is resolved once,
    in place, before the checks (omegaconf/_impl.py writes the resolved text back into the node), and the
    unescaped text would then be read as an interpolation by whatever reads the key."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, (dict, list)):
            problem = escaped_interpolation_problem(key, item)
            if problem:
                return problem
        elif isinstance(item, str) and "\\${" in item:
            return (f"{key}={value!r}: a literal '${{...}}' (escaped as \\${{...}}) is not supported by verl_lite: the "
                    "config is resolved once before the checks and the text would read as an interpolation again; "
                    "write the value without '${'")
    return None


def parent_and_leaf(cfg: DictConfig, path: str) -> Optional[Tuple[Any, Any]]:
    """The container holding `path` and the leaf's key in it (an int for a list item)."""
    match = re.fullmatch(r"(.*)\[(\d+)\]", path)
    if match:
        parent_key, leaf = match.group(1), int(match.group(2))
    else:
        parent_key, _, leaf = path.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, throw_on_resolution_failure=False) if parent_key else cfg
    return (parent, leaf) if isinstance(parent, (DictConfig, ListConfig)) else None


def _reset(cfg: DictConfig, path: str, schema: DictConfig) -> None:
    """Put back the schema's value of `path` (a section's whole default too), or delete an added key."""
    table: Dict[str, Any] = keys.key_table()
    owner = path if path in table else path.split("[", 1)[0]  # an element of a list: the whole list setting
    if owner in table:
        OmegaConf.update(cfg, owner, OmegaConf.select(schema, owner), merge=False)
        return
    node = parent_and_leaf(cfg, path)
    if node is not None and isinstance(node[0], DictConfig):
        del node[0][node[1]]
        return
    parent, _, leaf = owner.rpartition(".")
    container = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False) if parent else cfg
    del container[leaf]  # a list inside an open section


def raw_value(container: Any, path: str) -> Any:
    node = container
    for part in path.replace("[", ".").replace("]", "").split("."):
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return None
    return node
