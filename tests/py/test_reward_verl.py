"""The GSM8K and MATH rule rewards give verl's scores: every case of tests/py/data/reward_cases.json,
whose expected values are what verl v0.9.0's own scorers return (each table's "source" names the
file), goes through verl_lite's scorer and must score the same. The file's other tables (DAPO,
PRIME math, Geometry3K, Search-R1, from a pinned verl commit) are run by test_reward_sources.py."""

import json
import re
from pathlib import Path

import pytest

from verl_lite.reward import default_compute_score, gsm8k
from verl_lite.reward import math as math_reward

TABLES = json.loads((Path(__file__).parent / "data" / "reward_cases.json").read_text())


def cases(table):
    return pytest.mark.parametrize("case", TABLES[table]["cases"], ids=[c["name"] for c in TABLES[table]["cases"]])


@cases("math")
def test_the_math_scorer_gives_verls_score(case):
    assert math_reward.compute_score(case["response"], case["ground_truth"]) == case["expected"]


@cases("gsm8k")
def test_the_gsm8k_scorer_gives_verls_score(case):
    score = gsm8k.compute_score(case["response"], case["ground_truth"], method=case["method"],
                                format_score=case["format_score"], score=case["score"])
    assert score == case["expected"]


@cases("default_compute_score")
def test_the_default_score_routes_verls_data_sources_as_verl_does(case):
    score = default_compute_score(case["data_source"], case["response"], case["ground_truth"])
    assert score == case["expected"]


# The two verl versions the tables come from: the v0.9.0 release (GSM8K, MATH) and the commit
# tools/gen_reward_cases.py pins (the other scorers; tests/py/test_reward_sources.py runs them).
V0_9_0 = re.compile(r"verl v0\.9\.0 \(commit 483b8a009ba3a97563edee3a19887e4862b8094a\) verl/utils/reward_score/\S+\.py: ")
PINNED = re.compile(r"verl 1dda039b9c63 verl/utils/reward_score/\S+\.py: ")
# verl's DAPO scorer fails with -1, not 0
OUTCOMES = {"math_dapo": {-1.0, 1.0}, "fuzz": {-1.0, 0.0, 1.0}, "verl_sources": {-1.0, 0.0, 1.0}}


def score_of(expected):
    return expected["score"] if isinstance(expected, dict) else expected


@pytest.mark.parametrize("table", sorted(TABLES))
def test_each_table_names_its_verl_source_and_holds_both_outcomes(table):
    assert V0_9_0.match(TABLES[table]["source"]) or PINNED.match(TABLES[table]["source"])
    expected = {score_of(c["expected"]) for c in TABLES[table]["cases"]}
    # a scorer stuck at 0 (or at 1) cannot pass a table that expects both
    assert OUTCOMES.get(table, {0.0, 1.0}) <= expected


def test_the_v0_9_0_tables_stay_and_the_new_ones_come_from_the_pinned_commit():
    released = {name for name, t in TABLES.items() if V0_9_0.match(t["source"])}
    assert released == {"math", "gsm8k", "default_compute_score"}
    assert all(PINNED.match(t["source"]) for name, t in TABLES.items() if name not in released)
