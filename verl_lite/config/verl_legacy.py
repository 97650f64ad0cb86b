"""verl's older spellings that verl itself still converts, and keys verl removed, as verl_lite reads them.

- The legacy reward section (`reward_model.*`, `custom_reward_function.*`, `sandbox_fusion.*`, verl's
  verl/trainer/config/legacy_reward_impl.yaml): verl moves each to its `reward.*` key in
  `migrate_legacy_reward_impl` (verl/experimental/reward_loop/reward_loop.py:39-87 at the pinned
  commit; fully_async_main.py:237 calls it; main_ppo stopped calling it in verl 45632b5fa and ignores
  the old keys). verl_lite converts them the same way on every entry point (`LEGACY`), and then
  reads the `reward.*` key as it reads verl's current spelling: what the converted key asks for and
  verl_lite lacks (a reward model, reward workers) is refused by name, naming the conversion.
- DAPO's older spelling `reward_model.overlong_buffer.*` (verl-recipe's dapo_trainer.yaml; its
  main_dapo.py passes `overlong_buffer_cfg=config.reward_model.overlong_buffer` and
  `max_resp_len=config.data.max_response_length` to the reward manager: recipe/dapo/main_dapo.py:155-157
  at verl 2bb42bae6^, before the recipe moved to verl-recipe) is verl's
  `reward.reward_kwargs.overlong_buffer_cfg.*`, with `max_resp_len` following data.max_response_length
  unless the line sets it.
- `<role>.optim.grad_clip` (`+` on verl's line: its yaml has no such key), which verl's OptimizerConfig
  copies to `optim.clip_grad` with a DeprecationWarning.
- `trainer.use_legacy_worker_impl` (removed from verl's config in 044bbba27; before that
  verl/trainer/main_ppo.py:129-191 read it: `disable` = the engine workers, `auto`/`enable` = the
  legacy fsdp_workers/megatron_workers): `disable` is what verl runs at the pinned commit (its only
  workers, docs/workers/engine_workers.rst:224) and what verl_lite does (one engine per role).

`conversion_notes(lines)` gives the line the check prints for each conversion. No omegaconf import.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

MIGRATE = "verl/experimental/reward_loop/reward_loop.py"
DAPO = "verl-recipe recipe/dapo/main_dapo.py:155-157 (verl 2bb42bae6^)"
# verl's legacy key (or section prefix ending in ".") -> (verl's current key, where verl converts it)
LEGACY = {
    "reward_model.num_workers": ("reward.num_workers", f"{MIGRATE}:45-46"),
    "reward_model.reward_manager": ("reward.reward_manager.name", f"{MIGRATE}:50-51"),
    "reward_model.reward_loop_source": ("reward.reward_manager.source", f"{MIGRATE}:52-53"),
    "reward_model.reward_loop_module_path": ("reward.reward_manager.module.path", f"{MIGRATE}:54"),
    "reward_model.reward_loop_class_name": ("reward.reward_manager.module.name", f"{MIGRATE}:55"),
    "custom_reward_function.": ("reward.custom_reward_function.", f"{MIGRATE}:59-60"),
    **{f"reward_model.{key}": (f"reward.reward_model.{key}", f"{MIGRATE}:64-66")
       for key in ("enable", "enable_resource_pool", "n_gpus_per_node", "nnodes")},
    "reward_model.model.path": ("reward.reward_model.model_path", f"{MIGRATE}:67-68"),
    "reward_model.reward_kwargs.": ("reward.reward_kwargs.", f"{MIGRATE}:69-72"),
    "reward_model.rollout.": ("reward.reward_model.rollout.", f"{MIGRATE}:73-77"),
    "sandbox_fusion.": ("reward.sandbox_fusion.", f"{MIGRATE}:81-82"),
    "reward_model.overlong_buffer.": ("reward.reward_kwargs.overlong_buffer_cfg.", DAPO),
    # OptimizerConfig.__post_init__: "`grad_clip` is deprecated, use `clip_grad` instead"
    **{f"{section}.optim.grad_clip": (f"{section}.optim.clip_grad", "verl/workers/config/optimizer.py:58-61")
       for section in ("actor_rollout_ref.actor", "critic")},
}
# legacy keys verl's migration does not move: verl deletes the section after the moves (reward_loop.py:86)
DROPPED = ("reward_model.model.external_lib", "reward_model.model.trust_remote_code")
# the older DAPO spelling's length: main_dapo passed data.max_response_length as max_resp_len
OVERLONG_PREFIX = "reward_model.overlong_buffer."
OVERLONG_LENGTH = "reward_model.reward_kwargs.max_resp_len=${data.max_response_length}"
LENGTH_KEYS = ("reward_model.reward_kwargs.max_resp_len", "reward.reward_kwargs.max_resp_len")

WORKER_IMPL = "trainer.use_legacy_worker_impl"
WORKER_IMPL_SAME = ("disable",)


def current(key: str) -> Tuple[str, Optional[str]]:
    """(verl's current spelling of `key`, where verl converts it); (key, None) for a current key."""
    if key in LEGACY:
        return LEGACY[key]
    for prefix, (target, where) in LEGACY.items():
        if prefix.endswith(".") and key.startswith(prefix):
            return target + key[len(prefix):], where
        if prefix.endswith(".") and key + "." == prefix:  # the section itself (`reward_model.overlong_buffer={...}`)
            return target[:-1], where
    return key, None


def legacy_note(key: str) -> str:
    """" (verl's legacy spelling of X: verl converts it at file:line)" for a legacy key, else ""."""
    if key in DROPPED:
        return (f" (verl's legacy reward section; verl's conversion drops this key: {MIGRATE}:86, it acts only "
                "with a reward model)")
    target, where = current(key)
    return f" (verl's legacy spelling of {target}: verl's conversion, {where})" if where else ""


def worker_impl_problem(key: str, value: object) -> Optional[str]:
    """The refusal of a trainer.use_legacy_worker_impl value that asks for verl's legacy workers."""
    if key.lstrip("+") != WORKER_IMPL or value in WORKER_IMPL_SAME:
        return None
    return (f"{WORKER_IMPL}={value!r}: verl's legacy workers (fsdp_workers / megatron_workers; `auto` and `enable` "
            "chose them, verl/trainer/main_ppo.py:129-191 before verl 044bbba27) are not supported by verl_lite, and "
            "verl removed them too: its only workers are the engine workers (docs/workers/engine_workers.rst:224), "
            "which verl_lite's one engine per role matches; set it to 'disable' or leave the line out")


def implied_lines(lines: Sequence[object]) -> List[str]:
    """Lines a legacy spelling implies: with the older DAPO spelling's penalty on
    (`reward_model.overlong_buffer.enable=True`), max_resp_len = data.max_response_length (main_dapo
    passed it), unless the line sets max_resp_len itself. Applied before the line's own."""
    pairs = [line.lstrip("+").partition("=")[::2] for line in lines if isinstance(line, str)]
    enabled = any((k == OVERLONG_PREFIX + "enable" and v.strip("'\" ").lower() in ("true", "1"))
                  or (k == OVERLONG_PREFIX[:-1] and re.search(r"enable\s*:\s*(?:true|1)\b", v, re.IGNORECASE))
                  for k, v in pairs)
    if enabled and not any(k in LENGTH_KEYS for k, _ in pairs):
        return [OVERLONG_LENGTH]
    return []


def conversion_notes(lines: Sequence[object], read_as) -> List[str]:
    """"X converted to Y (verl's conversion: file:line)" for each line in a legacy spelling that verl_lite
    reads under another key (`read_as(key)`: verl_lite's key for verl's current spelling)."""
    notes = []
    for line in lines:
        if not isinstance(line, str):
            continue
        key = line.lstrip("+").partition("=")[0].strip()
        target, where = current(key)
        ours = read_as(target)
        if where and ours != key:
            shown = target if ours == target else f"{target} (verl_lite's {ours})"
            notes.append(f"{key} converted to {shown} (verl's conversion: {where})")
        if key == WORKER_IMPL and line.partition("=")[2].strip("'\" ") in WORKER_IMPL_SAME:
            notes.append(f"{key}=disable: verl's engine workers, its only workers since 044bbba27; verl_lite runs "
                         "one engine per role the same way")
    if implied_lines(lines):
        notes.append("reward_model.reward_kwargs.max_resp_len follows data.max_response_length (the older DAPO "
                     f"spelling reward_model.overlong_buffer.*: {DAPO})")
    return list(dict.fromkeys(notes))
