"""The reviewed table of verl lines that ask for what verl_lite does (verl_accepted.json, written by
tools/gen_verl_accepted.py): it is exactly what the tool writes, every accepted line composes and
passes the check, and any other value of the same key is still refused by name."""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path

from verl_lite.config.compose import compose_config
from verl_lite.config.generated import verl_accepted, verl_keys
from verl_lite.preflight.run import collect_problems

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import gen_verl_accepted  # noqa: E402

ENTRIES = sorted((key, value) for key, entry in verl_accepted.ACCEPTED.items() for value in entry["values"])


def _line(key, value):
    if isinstance(value, str):
        return f"{key}='{value}'"  # quoted: verl's string "true" stays a string
    if isinstance(value, list):
        return f"{key}={json.dumps(value)}"
    return f"{key}={'null' if value is None else value}"


def _problems(lines, check=False):
    """The composer's problems (an accepted line never reaches the schema), and the preflight's with `check`."""
    cfg, problems = compose_config(["trainer.device=cpu", *lines])
    return problems + (collect_problems(cfg, for_training=False) if check else [])


BASELINE = _problems([])


def test_all_accepted_lines_together_pass_the_whole_check():
    lines = [_line(key, values["values"][-1]) for key, values in verl_accepted.ACCEPTED.items()]
    assert _problems(lines, check=True) == _problems([], check=True)


def test_the_table_is_what_the_tool_writes_from_verl_keys_and_the_reviewed_list():
    assert gen_verl_accepted.OUT.read_text() == gen_verl_accepted.render(gen_verl_accepted.table())
    # every pattern reviewed decides at least one key, and each key has a reason
    for pattern, _, reason in gen_verl_accepted.REVIEWED:
        assert reason and any(fnmatch.fnmatchcase(k, pattern) for k in verl_accepted.ACCEPTED), pattern
    # a value is verl's default or one the review names, never a guess
    for key, entry in verl_accepted.ACCEPTED.items():
        assert key in verl_keys.KEYS
        pattern_values = next(v for p, v, _ in gen_verl_accepted.REVIEWED if fnmatch.fnmatchcase(key, p))
        assert entry["values"] == (pattern_values if pattern_values is not None else [verl_keys.DEFAULTS[key]])


def test_the_keys_the_issue_names_are_taken_at_verls_default():
    for line in ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=1", "actor_rollout_ref.rollout.ignore_eos=False",
                 "actor_rollout_ref.actor.megatron.use_dist_checkpointing=False",
                 "actor_rollout_ref.model.use_fused_kernels=False", "actor_rollout_ref.actor.profiler.enable=False",
                 "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2"):
        assert _problems([line], check=True) == _problems([], check=True), line


def _other(values):
    first = values[0]
    candidates = [not first] if isinstance(first, bool) else [first + 1] if isinstance(first, int) else []
    return next(v for v in candidates + ["something_else", 7] if v not in values)


def test_any_other_value_of_each_key_is_refused_by_name():
    keys = sorted(verl_accepted.ACCEPTED)
    problems = _problems([_line(k, _other(verl_accepted.ACCEPTED[k]["values"])) for k in keys])
    taken = [k for k in keys if not any(p.startswith(k + "=") and "not supported" in p for p in problems)]
    assert not taken, f"other values of these keys are not refused: {taken}"
