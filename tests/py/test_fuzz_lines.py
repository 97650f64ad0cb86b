"""Fuzzing the command line: no line, however bad, ends `python -m verl_lite.check` in a traceback.

Each case is a few override lines made from verl's keys (config/generated/verl_keys.json: every key of
verl's trainers with its default) and verl_lite's own, with values of the right type, the wrong type,
null, lists, mappings, strings with special characters, quoted strings, `${...}` interpolations of
existing, missing, self-referencing and cyclic keys, resolvers, `+`/`++`/`~` prefixes, keys verl lacks,
empty values, `key=` with no value and keys given twice; then the lines of verl's example runs
(verl_corpus/runs.json) with random mutations. Every case runs the check's entry point in-process
(`verl_lite.check.main`) and must answer with exit 0, or exit 1 with one line per problem, at least one
of them naming a key (or the text) of a line it was given; never an uncaught exception, a traceback or
the "internal error" line.

The seeds are fixed, so a failure reproduces: the message gives the seed and the lines. More cases:
`VERL_LITE_FUZZ_CASES=20000 python -m pytest tests/py/test_fuzz_lines.py` (each group gets that many).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, List, Sequence, Tuple

import pytest

from verl_lite import check
from verl_lite.config import keys as vl_keys
from verl_lite.config.generated import verl_keys

CORPUS = Path(__file__).resolve().parent / "verl_corpus" / "runs.json"
CASES = int(os.environ.get("VERL_LITE_FUZZ_CASES", "0")) or None

VERL_KEYS = sorted(verl_keys.KEYS)
VERL_LEAVES = sorted(verl_keys.DEFAULTS)
OUR_KEYS = sorted(k for k, info in vl_keys.key_table().items() if not info.section)
OPEN_SECTIONS = sorted(set(verl_keys.OPEN) | set(vl_keys.open_sections()))
NEW_NAMES = ["foo", "x", "overlong_buffer", "enable", "lr", "0", "a-b", "_", "mode"]
STRANGE = ["a b", "x'y", 'x"y', "a,b", "a=b", "a:b", "$x", "$", "%d", "\\", "\\n", "ü", "\t", " ", "#c", "a]",
           "[a", "{a", "a}", "*", "?", "@x", "~", "a\nb", "'", '"', "/path/with space", "é.parquet", "0x10",
           "1_000", "1e", ".5", "-0", "+1", "inf", "-nan", "NULL", "True", "yes", "off"]
RESOLVERS = ["oc.env:HOME", "oc.env:VERL_LITE_NO_SUCH_VAR", "oc.env:VERL_LITE_NO_SUCH_VAR,3",
             "oc.select:trainer.nnodes,1", "oc.select:no.such,null", "oc.decode:'[1,2]'", "oc.create:{a:1}",
             "oc.dict.keys:trainer", "oc.dict.values:trainer", "now:%H", "no_such_resolver:1", "oc.deprecated:x",
             "oc.env:", "oc.select:", "eval:1+1"]


def _default_of(key: str) -> Any:
    if key in verl_keys.DEFAULTS:
        return verl_keys.DEFAULTS[key]
    info = vl_keys.key_table().get(key)
    return None if info is None or info.default is vl_keys.dataclasses.MISSING else info.default


def _text(value: Any) -> str:
    """A Python value written as an override value (Hydra's grammar)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _any_key(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(VERL_LEAVES)
    if roll < 0.65:
        return rng.choice(OUR_KEYS)
    if roll < 0.75:
        return rng.choice(VERL_KEYS)  # sections too
    if roll < 0.88:
        return f"{rng.choice(OPEN_SECTIONS)}.{rng.choice(NEW_NAMES)}"
    if roll < 0.95:
        base = rng.choice(VERL_KEYS)
        return f"{base}.{rng.choice(NEW_NAMES)}" if rng.random() < 0.5 else base.replace(".", "._", 1)
    return rng.choice(["nosuch", "a.b.c", "trainer.", ".trainer", "trainer..nnodes", "1a", "a b", "trainer[0]",
                       "data.train_files.0", "trainer.logger[1]", "-x", "--x", "=", ""])


def _interpolation(rng: random.Random, key: str, keys_in_case: Sequence[str]) -> str:
    roll = rng.random()
    if roll < 0.25:
        return "${" + rng.choice(VERL_KEYS) + "}"  # may exist in verl_lite or not
    if roll < 0.35:
        return "${" + rng.choice(OUR_KEYS) + "}"
    if roll < 0.45:
        return "${" + key + "}"  # itself
    if roll < 0.55 and keys_in_case:
        return "${" + rng.choice(keys_in_case) + "}"  # another line's key (cycles when it points back)
    if roll < 0.62:
        return "${reward_model.overlong_buffer}"  # verl-recipe's DAPO configs
    if roll < 0.72:
        return "${" + rng.choice(RESOLVERS) + "}"
    if roll < 0.8:
        return "${." + rng.choice(NEW_NAMES + ["nnodes", "lr", "enable"]) + "}"  # relative
    if roll < 0.85:
        return "${.." + rng.choice(NEW_NAMES) + "}"
    if roll < 0.9:
        return "x_${" + rng.choice(OUR_KEYS) + "}_y"  # inside a string
    return rng.choice(["${", "${}", "${a", "${${trainer.device}}", "$${trainer.nnodes}", "${oc.env:${x}}",
                       "${ trainer.nnodes }", "${trainer.nnodes}${trainer.nnodes}", "'${trainer.nnodes}'"])


def _value(rng: random.Random, key: str, keys_in_case: Sequence[str]) -> str:
    default = _default_of(key)
    roll = rng.random()
    if roll < 0.2:
        return _text(default)  # the right type
    if roll < 0.3 and isinstance(default, (int, float)) and not isinstance(default, bool):
        return _text(rng.choice([0, -1, 1, 2 ** 40, default * 2, -default, 0.5, 1e-30, float("nan")]))
    if roll < 0.4:
        return rng.choice(["null", "true", "false", "0", "1", "-1", "1.5", "1e-6", "abc", "''", '""', "[]", "{}"])
    if roll < 0.5:
        items = [rng.choice(["a", "1", "null", "true", "1.5", "'x y'", "[1]", "{a:1}"]) for _ in range(rng.randint(0, 3))]
        return "[" + ",".join(items) + "]"
    if roll < 0.55:
        return "{" + ",".join(f"{rng.choice(NEW_NAMES)}:{rng.choice(['1', 'a', 'null', '[1]'])}"
                              for _ in range(rng.randint(0, 2))) + "}"
    if roll < 0.65:
        s = rng.choice(STRANGE)
        return rng.choice([s, f"'{s}'", f'"{s}"', f"'{s}", s + s])
    if roll < 0.85:
        return _interpolation(rng, key, keys_in_case)
    if roll < 0.9:
        return ""
    return rng.choice(["1,2", "a b", "x=y", "[1,2", "{a:", "'a'b", "\\'", "choice(1,2)", "range(3)", "1..2",
                       "glob(*)", "interval(0,1)", "shuffle([1,2])", "sort([2,1])", "int(3)", "str(3)"])


def _line(rng: random.Random, keys_in_case: List[str]) -> str:
    key = _any_key(rng)
    keys_in_case.append(key)
    value = _value(rng, key, keys_in_case)
    roll = rng.random()
    if roll < 0.03:
        return key  # no `=`
    if roll < 0.06:
        return f"{key}="  # no value
    prefix = rng.choices(["", "+", "++", "~"], weights=[70, 12, 10, 8])[0]
    if prefix == "~" and rng.random() < 0.5:
        return f"~{key}"
    return f"{prefix}{key}={value}"


def random_case(rng: random.Random) -> List[str]:
    keys_in_case: List[str] = []
    lines = [_line(rng, keys_in_case) for _ in range(rng.randint(1, 4))]
    roll = rng.random()
    if roll < 0.1:
        lines.append(rng.choice(lines))  # a line twice
    elif roll < 0.2 and len(keys_in_case) >= 2:  # a cycle between two keys
        a, b = keys_in_case[:2]
        lines += [f"{a}=${{{b}}}", f"{b}=${{{a}}}"]
    elif roll < 0.25:
        lines.append(rng.choice(["model_engine=megatron", "--config-name=ppo_megatron_trainer", "--config-name",
                                 "--config-name=nope", "-cn", "--config-path=/x", "model_engine=nope",
                                 "hydra.run.dir=x", "+model_engine=fsdp"]))
    rng.shuffle(lines)
    return lines


def _corpus_argvs() -> List[List[str]]:
    runs = json.loads(CORPUS.read_text(encoding="utf-8"))
    return [[a for a in run["argv"] if isinstance(a, str)] for run in runs]


def mutated_corpus_case(rng: random.Random, argvs: List[List[str]]) -> List[str]:
    """One of verl's example runs with 1-3 of its lines changed: a new value, a prefix added or taken
    off, the line dropped, doubled, cut short or made an interpolation of another of its keys."""
    lines = list(rng.choice(argvs))
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        key, eq, value = lines[i].lstrip("+~").partition("=")
        op = rng.randrange(9)
        if op == 0:
            lines[i] = f"{lines[i][:len(lines[i]) - len(value)]}{_value(rng, key, [key])}"
        elif op == 1:
            lines[i] = rng.choice(["+", "++", "~", ""]) + lines[i].lstrip("+~")
        elif op == 2:
            del lines[i]
        elif op == 3:
            lines.insert(i, lines[i])
        elif op == 4:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        elif op == 5:
            other = rng.choice(lines).lstrip("+~").partition("=")[0]
            lines[i] = f"{key}=${{{other}}}"
        elif op == 6:
            lines[i] = f"{key}.{rng.choice(NEW_NAMES)}{eq}{value}"
        elif op == 7:
            lines[i] = f"{key}={_interpolation(rng, key, [key])}"
        else:
            lines.append(_line(rng, []))
    return lines


def run_check(lines: Sequence[str]) -> Tuple[Any, str, str]:
    """(exit status or the uncaught exception, stdout, stderr) of `verl_lite.check.main(lines)`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status: Any = check.main(list(lines))
        except BaseException as e:  # noqa: BLE001 - the test's verdict: anything escaping main is the bug
            status = e
    return status, out.getvalue(), err.getvalue()


def _names(line: str) -> List[str]:
    """What a message may name to point at this line: its key (as typed, without prefix, and its last
    parts), the section it is in, or the line itself."""
    key = line.lstrip("+~").partition("=")[0]
    parts = key.split(".")
    parent = [".".join(parts[:-1])] if len(parts) > 2 else []  # the section a new key goes into
    names = {line, repr(line), key, *parent, *(".".join(parts[i:]) for i in range(1, len(parts)))}
    return [n for n in names if len(n) > 1] or [line]


def verdict(lines: Sequence[str], names_a_key: bool = True) -> str:
    """'' when the check's answer to `lines` is well-formed; else what is wrong with it. With `--training`
    the default data and model paths are checked too, so a problem need not name a key of the lines."""
    status, out, err = run_check(lines)
    if isinstance(status, BaseException):
        return f"uncaught {type(status).__name__}: {status}"
    if "internal error" in err:
        return f"internal error:\n{err[:600]}"
    if "Traceback" in out + err:
        return f"traceback:\n{err[-2000:]}"
    if status == 0:
        return "" if "OK" in out else f"exit 0 without OK:\n{out[-500:]}"
    if status != 1:
        return f"exit {status}"
    body = err.splitlines()
    if not body or not re.match(r"verl_lite\.check: \d+ problems?:$", body[0]):
        return f"exit 1 without the problem header:\n{err[-1000:]}"
    problems = body[1:]
    if not problems or any(not p.startswith("  - ") for p in problems):
        return f"a problem spread over several lines or none listed:\n{err[-1500:]}"
    names = [n for line in lines for n in _names(line)]
    if names_a_key and not any(n in p for p in problems for n in names) and not _consequences(lines, problems):
        return f"no problem names a key of the lines:\n{err[-1500:]}"
    return ""


def _consequences(lines: Sequence[str], problems: List[str]) -> bool:
    """Whether the lines compose without a problem and each problem of the preflight names a key (of the
    settings the lines' values clash with: `trainer.nnodes=3` makes data.train_batch_size=32 indivisible)."""
    from verl_lite.config.compose import compose_config

    known = set(vl_keys.key_table()) | verl_keys.KEYS
    named = all(any(k in known for k in re.findall(r"[a-z_]+(?:\.[a-z_0-9]+)+", p)) for p in problems)
    return named and not compose_config([line for line in lines if line != "--training"])[1]


def _failures(cases: Iterator[Tuple[int, List[str]]], names_a_key: bool = True) -> List[str]:
    found = []
    for seed, lines in cases:
        problem = verdict(lines, names_a_key)
        if problem:
            found.append(f"seed {seed}: {lines!r}\n  {problem}")
    return found


def _random_cases(count: int) -> Iterator[Tuple[int, List[str]]]:
    for seed in range(count):
        yield seed, random_case(random.Random(seed))


def _corpus_cases(count: int) -> Iterator[Tuple[int, List[str]]]:
    argvs = _corpus_argvs()
    for seed in range(count):
        yield seed, mutated_corpus_case(random.Random(10_000 + seed), argvs)


def test_random_lines_never_raise():
    failures = _failures(_random_cases(CASES or 300))
    assert not failures, f"{len(failures)} bad answers:\n" + "\n".join(failures[:20])


def test_random_lines_for_training_never_raise():
    # the rules of the machine that trains read paths, files and packages: tracebacks hide there too
    cases = ((seed, ["--training", *lines]) for seed, lines in _random_cases(CASES or 40))
    failures = _failures(cases, names_a_key=False)
    assert not failures, f"{len(failures)} bad answers:\n" + "\n".join(failures[:20])


def test_mutated_verl_runs_never_raise():
    failures = _failures(_corpus_cases(CASES or 60))
    assert not failures, f"{len(failures)} bad answers:\n" + "\n".join(failures[:20])


# verl-recipe's DAPO config (recipe/dapo/config/dapo_trainer.yaml) points the reward's overlong buffer at its
# own `reward_model.overlong_buffer` section, which verl_lite's config lacks: omegaconf's traceback before.
RECIPE_LINE = "reward.reward_kwargs.overlong_buffer_cfg=${reward_model.overlong_buffer}"


def test_an_interpolation_of_a_missing_key_is_one_line_naming_the_key_and_the_fix():
    status, out, err = run_check([RECIPE_LINE, "data.train_batch_size=64"])
    assert status == 1, out + err
    assert err.splitlines() == [
        "verl_lite.check: 1 problem:",
        "  - reward.reward_kwargs.overlong_buffer_cfg='${reward_model.overlong_buffer}' does not resolve: "
        "'reward_model.overlong_buffer' is not a key of verl_lite's config; give the value itself, or "
        "interpolate a key that exists (${section.key})"]


@pytest.mark.parametrize("lines, expected", [
    (["trainer.total_epochs=${trainer.total_epochs}"],
     "trainer.total_epochs='${trainer.total_epochs}' does not resolve: the interpolations form a cycle"),
    (["trainer.total_epochs=${trainer.save_freq}", "trainer.save_freq=${trainer.total_epochs}"],
     "does not resolve: the interpolations form a cycle"),
    (["trainer.project_name=${no_such:1}"],
     "trainer.project_name='${no_such:1}' does not resolve: Unsupported interpolation type no_such; the resolvers"),
    (["trainer.nnodes=${trainer.device}"],
     "trainer.nnodes='${trainer.device}' does not resolve to a value of the right type (expected int;"),
    (["critic.optim.betas=x_${data.gen_batch_size}_y"],
     "critic.optim.betas='x_${data.gen_batch_size}_y' does not resolve to a value of the right type "
     "(expected list of float;"),
    (["actor_rollout_ref.rollout.name=???"], "actor_rollout_ref.rollout.name has no value ('???'"),
    (["trainer.project_name=\\${x}"], "trainer.project_name='\\\\${x}': a literal '${...}'"),
    (["actor_rollout_ref.actor.profiler.ranks=['x y',[1]]"],
     "actor_rollout_ref.actor.profiler.ranks[0]='x y' has the wrong type: actor_rollout_ref.actor.profiler.ranks "
     "is a list of int"),
    (["trainer.logger={a:{b:[1]}}"], "trainer.logger={'a': {'b': [1]}} has the wrong type: expected list of str"),
    (["+={}"], "override '+={}' names no key: write key=value"),
    # found by the fuzz run with --training: a KeyError in the memory rule, a TypeError reading the data files
    (["--training", "trainer.device_name="], "trainer.device_name='' is not supported: choose one of"),
    (["--training", "data.val_files=1"], "data.val_files: 1 does not exist"),
    (["data=${.foo}"], "data='${.foo}' does not resolve: 'foo' is not a key of verl_lite's config"),
    (["data=${x}", "data.train_batch_size=3"],
     "'data.train_batch_size=3' cannot be applied: an earlier line set data to an interpolation that does not "
     "resolve"),
])
def test_each_kind_of_bad_value_is_named(lines, expected):
    status, out, err = run_check(lines)
    assert status == 1 and verdict(lines) == "", out + err
    assert expected in err, err


def test_a_value_that_depends_on_a_bad_one_is_not_reported_twice():
    # default_local_dir's default interpolates project_name: it resolves again once project_name is reset
    status, _, err = run_check(["trainer.project_name=${nope}"])
    assert status == 1 and "trainer.default_local_dir" not in err and "trainer.project_name='${nope}'" in err, err


def test_an_interpolation_of_verls_spelling_of_a_key_is_taken_as_verl_lites_key():
    # verl writes `reward.reward_kwargs`, verl_lite `reward_model.reward_kwargs` (verl_names.ALIASES)
    from verl_lite.config.compose import compose_config

    cfg, problems = compose_config(["reward.reward_kwargs.overlong_buffer_cfg.len=7",
                                    "data.max_response_length=${reward.reward_kwargs.overlong_buffer_cfg.len}"])
    assert problems == [] and cfg.data.max_response_length == 7


def _boom(*_args, **_kwargs):
    raise KeyError("x")


@pytest.mark.parametrize("entry", ["verl_lite.check", "verl_lite.main"])
def test_an_internal_error_is_one_line_asking_to_report_it(entry, monkeypatch, capsys):
    module = __import__(entry, fromlist=["main"])
    monkeypatch.setattr(module, "compose_and_check", _boom)
    assert module.main(["trainer.nnodes=1"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{entry}: internal error: KeyError: 'x' at verl_lite/"), err
    assert err.rstrip().endswith("while checking `trainer.nnodes=1`; please report it with the command line "
                                 "(HYDRA_FULL_ERROR=1 shows the traceback)"), err
    assert "Traceback" not in err
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    assert module.main(["trainer.nnodes=1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'x'" in err and "internal error" in err


def test_main_refuses_the_line_before_torch_or_ray(run_module, tmp_path):
    code = ("import sys; from verl_lite import main; rc = main.main(sys.argv[1:]); "
            "print('loaded:', sorted(m for m in ('torch', 'ray') if m in sys.modules)); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, RECIPE_LINE, f"trainer.default_local_dir={tmp_path}"],
                          capture_output=True, text=True, cwd=str(Path(__file__).resolve().parents[2]), timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "loaded: []" in done.stdout
    assert "Traceback" not in done.stderr
    assert "reward.reward_kwargs.overlong_buffer_cfg='${reward_model.overlong_buffer}' does not resolve" in done.stderr
    cli = run_module("verl_lite.check", RECIPE_LINE)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr and "does not resolve" in cli.stderr
