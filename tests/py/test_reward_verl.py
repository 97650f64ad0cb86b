"""The GSM8K and MATH rule rewards give verl's scores: every case of tests/py/data/reward_cases.json,
whose expected values are what verl v0.9.0's own scorers return (each table's "source" names the
file), goes through verl_lite's scorer and must score the same."""

import json
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


@pytest.mark.parametrize("table", sorted(TABLES))
def test_each_table_names_its_verl_source_and_holds_both_outcomes(table):
    assert TABLES[table]["source"].startswith("verl v0.9.0 ")
    expected = {c["expected"] for c in TABLES[table]["cases"]}
    # a scorer stuck at 0 (or at 1) cannot pass a table that expects both
    assert {0.0, 1.0} <= expected
