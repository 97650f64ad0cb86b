"""Compose the run config: `VerlLiteConfig` defaults plus Hydra-grammar overrides.

`load_config(["data.train_batch_size=64", "+actor_rollout_ref.actor.megatron.override_transformer_config.x=1"])`
returns a resolved OmegaConf `DictConfig` or raises `ConfigError` listing every problem at once:
unknown keys (with the nearest real keys), wrong types (key, value, expected type), settings
removed upstream (with the migration), values outside an enum, unresolvable interpolations.

The grammar is Hydra's (`verl_lite.config.overrides`): `key=value`, `+key=value` to add
a key that does not exist (only inside open sections such as `override_transformer_config`),
`++key=value` to add or replace, `~key` to delete (inside open sections), lists `[a,b]`,
mappings `{a:1}`, quoting, `${...}` interpolations. Applying the overrides is done here rather than
by Hydra's config loader so that one bad override does not hide the next: Hydra stops at the first.

Imports omegaconf (about 0.1 s), and Hydra's parser only for lines beyond plain `key=scalar`;
no torch, ray or transformers.
"""

from __future__ import annotations

import copy
import functools
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import errors as oc_errors

from verl_lite.config import choices, keys, verl_names
from verl_lite.config.generated import verl_keys
from verl_lite.config.overrides import Override, OverrideSyntaxError
from verl_lite.config.overrides import parse as parse_override
from verl_lite.config.resolve import (escaped_interpolation_problem, parent_and_leaf, raw_value, resolve,
                                     unresolved_message)
from verl_lite.config.schema import VerlLiteConfig

logger = logging.getLogger(__name__)

_ABSENT = object()


class ConfigError(ValueError):
    """The overrides do not compose into a valid config. `problems` lists every problem found."""

    def __init__(self, problems: Sequence[str]):
        self.problems: List[str] = list(problems)
        count = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{count} config problem{'s' if count != 1 else ''}:\n{lines}")


def _exists(cfg: DictConfig, key: str) -> bool:
    if OmegaConf.select(cfg, key, default=_ABSENT, throw_on_resolution_failure=False) is not _ABSENT:
        return True
    parent_key, _, leaf = key.rpartition(".")  # a key whose value is an interpolation that fails exists too
    parent = OmegaConf.select(cfg, parent_key, default=None, throw_on_resolution_failure=False) if parent_key else cfg
    return isinstance(parent, DictConfig) and leaf in parent


def _is_interpolation(cfg: DictConfig, key: str) -> bool:
    """Whether `key`'s value, as set so far, is a `${...}` interpolation (not resolved: it may not resolve)."""
    found = parent_and_leaf(cfg, key)
    if found is None or not isinstance(found[0], DictConfig) or found[1] not in found[0]:
        return False
    node = found[0]._get_node(found[1])
    return node is not None and node._is_interpolation()


def _unknown_key_message(key: str, adding: bool) -> str:
    near = keys.suggest(key)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    if adding:
        sections = ", ".join(keys.open_sections())
        return (f"unknown key {key!r}{hint}: adding keys is not supported by verl_lite outside the open sections "
                f"({sections})")
    return f"unknown key {key!r}{hint}"


def _raw_value_of(key: str, value: Any, full_key: str) -> Any:
    """The part of a line's `value` (for `key`) at `full_key`, a key inside it: `x[1]`, `x.a`."""
    tree: Dict[str, Any] = {}
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return raw_value(tree, full_key)


def _wrong_type_message(key: str, value: Any, detail: str) -> str:
    detail = (detail.strip().splitlines() or ["a value of the wrong type"])[0]  # omegaconf adds full_key: lines
    owner = key.split("[", 1)[0]
    info = keys.key_table().get(owner)
    if info is None:
        return f"{key}={value!r}: {detail}"
    if owner != key:  # an item of a list
        return f"{key}={value!r} has the wrong type: {owner} is a {keys.type_name(info.type)} ({detail})"
    expected = keys.type_name(info.type)
    hint = f" (write {key}=[{value}])" if expected.startswith("list") and isinstance(value, str) else ""
    return f"{key}={value!r} has the wrong type: expected {expected}{hint}"


_UNKNOWN = object()


@functools.lru_cache(maxsize=1)
def _verl_defaults() -> DictConfig:
    """verl's trainer config at the pinned commit as its defaults (verl_keys.DEFAULTS, nested), so that
    its interpolations (`${oc.select:global_profiler.tool,null}`) resolve as verl's Hydra resolves them."""
    tree: Dict[str, Any] = {}
    for key, value in verl_keys.DEFAULTS.items():
        node, parents, leaf = tree, key.split(".")[:-1], key.split(".")[-1]
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node.setdefault(leaf, value)
    return OmegaConf.create(tree)


def _in_other_trainer(key: str, megatron: bool) -> bool:
    """The key's engine section is in verl's other trainer config: `<role>.megatron.*` only in
    ppo_megatron_trainer, `fsdp_config.*` and the critic's `fsdp.*` only in ppo_trainer."""
    dotted = f".{key}."
    if ".megatron." in dotted:
        return not megatron
    return megatron and (".fsdp_config." in dotted or key.startswith("critic.fsdp."))


def _verl_value(key: str, megatron: bool) -> Any:
    """What verl's Hydra finds at `key` when it reads a `+key=...` line in its fsdp trainer config
    (ppo_trainer) or `megatron` one: None where that config lacks the key or holds null, _UNKNOWN where
    the table cannot tell (a key of the fully-async trainer only)."""
    if key not in verl_keys.KEYS or _in_other_trainer(key, megatron):
        return None
    if key not in verl_keys.DEFAULTS:
        return {} if any(k.startswith(key + ".") for k in verl_keys.KEYS) else _UNKNOWN  # a section
    try:
        return OmegaConf.select(_verl_defaults(), key, throw_on_missing=False)
    except oc_errors.OmegaConfBaseException:  # an interpolation into what the table lacks
        return _UNKNOWN


def _verl_add_problem(cfg: DictConfig, override: Override) -> Optional[str]:
    """`+key=value` on a key verl's config already has (not null): verl's Hydra refuses the line ("Could not
    append to config. An item is already at '<key>'"), so verl_lite does too, whatever its own schema holds.
    verl's trainer config is its megatron one when the line's config groups made the actor's strategy
    megatron (--config-name=ppo_megatron_trainer, model_engine=megatron; they apply first)."""
    key, value, line = override.key, override.value, override.line
    if isinstance(value, (dict, list)):
        return None  # Hydra merges a mapping or list into what is there
    strategy = OmegaConf.select(cfg, "actor_rollout_ref.actor.strategy", throw_on_resolution_failure=False)
    verl = _verl_value(key, strategy == "megatron")  # an interpolation not resolved yet reads as verl's default
    if verl is None or verl is _UNKNOWN:
        return None
    shown = OmegaConf.to_container(verl) if isinstance(verl, (DictConfig, ListConfig)) else verl
    return (f"cannot add {key!r}: it already exists in verl's config (= {shown!r}), where `+` fails (\"An item is "
            f"already at '{key}'\"); set it with {line[1:]!r} or add-or-replace it with {'+' + line!r}")


def _key_problem(cfg: DictConfig, override: Override) -> Optional[str]:
    """Why this override may not touch its key, or None if it may."""
    key, value, line = override.key, override.value, override.line
    if override.kind == "add" and key in verl_keys.KEYS:
        problem = _verl_add_problem(cfg, override)  # verl's value decides whether `+` may add it, as in verl's Hydra
        if problem:
            return problem
    table = keys.key_table()
    in_schema = key in table
    section = keys.open_section_of(key)
    if not in_schema and not section:
        legacy = choices.legacy_key_problem(key, value)
        if legacy:
            return legacy
        adding = override.kind in ("add", "force_add")
        verl = verl_names.verl_key_problem(key, value, adding)
        if verl:
            return verl
        return _unknown_key_message(key, adding=adding)
    if override.kind == "delete":
        if in_schema:
            return (
                f"cannot delete {key!r}: it is a verl_lite setting (set it to another value instead; "
                "~key deletes only keys added inside an open section)"
            )
        if not _exists(cfg, key):
            return f"cannot delete {key!r}: it does not exist"
        return None
    if override.kind == "add":
        current = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if current is not None and not isinstance(value, (dict, list)) and key not in verl_keys.KEYS:
            if not verl_names.is_verl_key(key):
                return None  # verl's Hydra adds `+key` where its config lacks the key; verl_lite's has it: a set
            return (
                f"cannot add {key!r}: it already exists (= {current!r}); set it with {line[1:]!r} "
                f"or add-or-replace it with {'+' + line!r}"
            )
        return None
    if override.kind == "force_add":
        return None
    if not in_schema and not _exists(cfg, key) and not verl_names.is_verl_key(key):
        # verl's own keys inside an open section (checkpoint.save_contents) exist in verl: no `+` needed
        return f"{key!r} does not exist yet in {section}; add it with {'+' + line!r}"
    return None


def _apply(cfg: DictConfig, override: Override) -> Optional[str]:
    """Apply one parsed override; return a problem instead of raising."""
    key, value, line = override.key, override.value, override.line
    problem = _key_problem(cfg, override)
    if problem:
        return problem
    try:
        if override.kind == "delete":
            current = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
            if override.has_value and value != current:
                return f"cannot delete {key!r}: its value is {current!r}, not {value!r}"
            parent_key, _, leaf = key.rpartition(".")
            parent = OmegaConf.select(cfg, parent_key, throw_on_resolution_failure=False) if parent_key else cfg
            del parent[leaf]
        else:
            force_add = override.kind in ("add", "force_add") or (
                keys.open_section_of(key) != "" and verl_names.is_verl_key(key))
            if key in choices.LIST_CHOICES and isinstance(value, str):
                value = [value]  # `trainer.logger=console`: one name for a list, as verl accepts it
            if _is_interpolation(cfg, key):  # replaced, not resolved (it may not resolve) to merge into
                unset = OmegaConf.select(_schema_config(), key, default=None)  # the section's default, or nothing
                OmegaConf.update(cfg, key, unset, merge=False, force_add=force_add)
            OmegaConf.update(cfg, key, value, merge=True, force_add=force_add)
    except (oc_errors.InterpolationResolutionError, oc_errors.GrammarParseError) as e:
        parts = key.split(".")
        above = next((k for k in (".".join(parts[:i]) for i in range(1, len(parts))) if _is_interpolation(cfg, k)), None)
        if above is not None:  # `data=${x}` then `data.train_batch_size=3`
            return (f"{line!r} cannot be applied: an earlier line set {above} to an interpolation that does not "
                    f"resolve ({str(getattr(e, 'msg', None) or e).splitlines()[0]}); give {above} a mapping instead")
        return unresolved_message(key, value, e)  # `section=${...}`: merging into a section resolves it now
        return unresolved_message(key, value, e)
    except (oc_errors.ConfigKeyError, oc_errors.ConfigAttributeError) as e:
        full_key = getattr(e, "full_key", None) or key
        legacy = choices.legacy_key_problem(full_key, value)
        return legacy or _unknown_key_message(full_key, adding=False)
    except oc_errors.ValidationError as e:
        full_key = getattr(e, "full_key", None) or key
        detail = str(e.msg or e)
        if full_key != key:  # a value inside a mapping or list assigned to a section or list setting
            return _wrong_type_message(full_key, _raw_value_of(key, value, full_key), detail)
        return _wrong_type_message(key, value, detail)
    except (oc_errors.ConfigTypeError, oc_errors.ConfigValueError, oc_errors.KeyValidationError,
            oc_errors.ReadonlyConfigError) as e:  # a mapping merged into a list, a key under a scalar, ...
        detail = (str(e.msg or e).strip().splitlines() or [type(e).__name__])[0]
        if key in keys.key_table():
            return _wrong_type_message(key, value, detail)
        return f"{line!r} cannot be applied: {detail} (give {key} a value of the kind it holds, or ~{key} first)"
    return None


def _choice_values(cfg: DictConfig) -> Dict[str, Any]:
    values = {}
    for key in choices.choice_keys():
        value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if isinstance(value, ListConfig):
            value = list(value)
        values[key] = value
    return values


@functools.lru_cache(maxsize=1)
def _schema_config() -> DictConfig:
    """The schema as an OmegaConf config, built once: each compose works on a deep copy (a fifth of
    the time of building it from the dataclasses again)."""
    return OmegaConf.structured(VerlLiteConfig)


def _last_of_each_key(lines: List[Any]) -> List[Any]:
    """The lines with a plain `key=value` dropped where a later plain line sets the same key: the last
    one wins, as in Hydra, so a verl key verl_lite lacks is judged by the value the run ends up with."""
    def plain_key(line: Any) -> Optional[str]:
        plain = isinstance(line, str) and "=" in line and line[:1] not in "+~-"
        return line.partition("=")[0].strip() if plain else None

    keys_of = [plain_key(line) for line in lines]
    last = {key: i for i, key in enumerate(keys_of) if key is not None}
    return [line for i, (line, key) in enumerate(zip(lines, keys_of)) if key is None or last[key] == i]


def compose_config(overrides: Sequence[str] = ()) -> Tuple[DictConfig, List[str]]:
    """Build the config and list its problems without raising (the check reports both)."""
    cfg = copy.deepcopy(_schema_config())
    # verl's config groups (model_engine=..., --config-name=...) apply first, as in Hydra
    groups, rest, problems = verl_names.split_options(overrides)
    typed: Dict[str, str] = {}  # verl_lite's key -> verl's spelling the line used, for the messages
    for line in _last_of_each_key([*groups, *rest]):
        if not isinstance(line, str):
            problems.append(f"override {line!r} is not a string")
            continue
        if line.startswith("--"):
            problems.append(f"unexpected option {line!r}: verl_lite takes key=value overrides only")
            continue
        try:
            override = parse_override(line)
        except OverrideSyntaxError as e:
            problems.append(str(e))
            continue
        if not override.key:
            problems.append(f"override {line!r} names no key: write key=value, +key=value or ~key")
            continue
        problem = _verl_add_problem(cfg, override) if override.kind == "add" else None
        if problem:  # `+` on a key verl's config has: verl's Hydra refuses the line before reading it
            problems.append(problem)
            continue
        if verl_names.same_as_verl_lite(override.key, override.value):
            continue  # verl's line asks for what verl_lite does (config/generated/verl_accepted.json)
        ours = verl_names.alias(override.key, override.value)
        if ours != override.key and ours not in keys.key_table() and not keys.open_section_of(ours):
            # a key inside an aliased section that verl_lite lacks: refused under the name the user typed
            problem = verl_names.verl_key_problem(override.key, override.value)
            if problem:
                problems.append(problem)
                continue
        if override.kind == "add" and verl_names.legacy_add(override.key):
            override = override._replace(kind="set")  # `+` on a legacy key verl's yaml lacks: verl converts it
        if ours != override.key:
            typed[ours] = override.key
        override = override._replace(key=ours, value=verl_names.value_alias(ours, override.value))
        problem = (escaped_interpolation_problem(override.key, override.value)
                   or verl_names.value_problem(override.key, override.value) or _apply(cfg, override))
        if problem:
            problems.append(problem)

    problems.extend(resolve(cfg, _schema_config(), typed))
    device = OmegaConf.select(cfg, "trainer.device", default=None, throw_on_resolution_failure=False)
    normalized = choices.normalize_device_name(device)
    if normalized != device and normalized in choices.DEVICES:
        cfg.trainer.device = normalized
    problems.extend(choices.choice_problems(_choice_values(cfg)))
    return cfg, list(dict.fromkeys(problems))  # a line given twice is one problem


def load_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The composed, resolved config; raises `ConfigError` listing every problem."""
    cfg, problems = compose_config(overrides)
    if problems:
        raise ConfigError(problems)
    return cfg


def to_dataclass(cfg: DictConfig) -> VerlLiteConfig:
    """The plain `VerlLiteConfig` object for a composed config (open sections stay dicts)."""
    return OmegaConf.to_object(cfg)  # type: ignore[return-value]
