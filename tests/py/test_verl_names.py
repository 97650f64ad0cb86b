"""launch/verl_names.tsv covers every name verl's twins of the launcher scripts read.

launch/verl_twin_names.txt is generated from verl's scripts at the pinned commit
(launch/gen_verl_names.py); CI has no verl checkout, so the committed file is what the first tests
read, and the verl_source test regenerates it from verl's repository and compares.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "launch" / "verl_names.tsv"
GENERATED = REPO / "launch" / "verl_twin_names.txt"
HOWS = {"same", "knob", "derived", "passthrough", "env"}


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_verl_names", REPO / "launch" / "gen_verl_names.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table():
    rows = {}
    for line in TABLE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, twins, how, knob, why = line.split("\t")
        assert name not in rows, f"{name} has two rows in {TABLE.name}"
        rows[name] = {"twins": set(twins.split(",")), "how": how, "knob": knob, "why": why}
    return rows


def generated():
    """(launcher script name without .sh, verl name) for each line of the committed file."""
    pairs = []
    for line in GENERATED.read_text().splitlines():
        if line.startswith("#"):
            continue
        script, _twin, name = line.split("\t")
        pairs.append((Path(script).stem, name.split(" ")[0]))
    return pairs


def test_the_generated_file_lists_the_four_twins():
    scripts = {script for script, _ in generated()}
    assert scripts == {"run_qwen3_5_35b", "run_qwen3_5_122b_a10b", "run_qwen3_5_397b",
                       "run_qwen3_vl_30b_a3b_fully_async"}


def test_the_table_has_a_row_for_every_name_a_twin_reads():
    rows = table()
    missing = sorted({name for _, name in generated()} - set(rows))
    assert not missing, f"{TABLE.name} lacks rows for {missing} (verl's scripts read them: {GENERATED.name})"
    wrong = sorted(f"{name} ({script})" for script, name in generated() if script not in rows[name]["twins"])
    assert not wrong, f"{TABLE.name} does not list these scripts for the names their twins read: {wrong}"


def test_every_row_says_how_and_why_and_names_a_launcher_knob():
    knobs = set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", (REPO / "launch" / "knobs.sh").read_text()))
    for name, row in table().items():
        assert row["how"] in HOWS, f"{name}: how={row['how']!r}, expected one of {sorted(HOWS)}"
        assert row["why"].strip(), f"{name} has no reason"
        if row["how"] in ("same", "knob", "derived"):
            assert row["knob"] in knobs, f"{name} -> {row['knob']}, which launch/knobs.sh does not list"
        if row["how"] == "same":
            assert row["knob"] == name


def test_every_honoured_name_has_a_bats_test_of_its_own():
    bats = (REPO / "tests" / "bats" / "verl_names.bats").read_text() + (REPO / "tests" / "bats" / "device_env.bats").read_text()
    titles = re.findall(r'^@test "([^"]*)"', bats, re.M)
    lacking = [name for name in table() if not any(re.match(rf"(\S+ )*{re.escape(name)}\b", t) for t in titles)]
    assert not lacking, f"no bats test starts with these verl names: {lacking}"


def test_names_read_finds_defaults_and_a_positional_and_skips_comments():
    gen = load_generator()
    text = 'ENGINE=${1:-vllm}\n# X=${COMMENTED:-1}\nexport A=${A:-1}\nB=${B:-$HOME/${C:-x}}\nD=${D}\nA2=${A:-2}\n'
    assert gen.names_read(text) == ["ENGINE $1", "A", "B", "C"]


@pytest.mark.verl_source
def test_the_committed_file_is_what_verls_scripts_read_at_the_pinned_commit():
    verl = os.environ.get("VERL_SOURCE", load_generator().DEFAULT_VERL)
    if not Path(verl).is_dir():
        pytest.skip(f"verl's git repository is not at {verl} (set VERL_SOURCE)")
    assert load_generator().generate(verl) == GENERATED.read_text(), (
        f"{GENERATED.name} is stale: run python launch/gen_verl_names.py {verl}")
