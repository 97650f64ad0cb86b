"""The Geometry3K reward gives verl's scores on geometry3k-shaped answers: each case of
tests/py/data/geo3k_cases.json (written by tools/gen_geo3k_cases.py from verl's own
verl/utils/reward_score/geo3k.py and default_compute_score, mathruler grading) goes through
verl_lite's scorer and its data-source routing and must give the same value: a table of answer
forms (roots, fractions, decimals, degrees, equations, the <think> format) and a seeded fuzz of
equivalent and wrong forms."""

import json
from pathlib import Path

import pytest

from verl_lite.reward import default_compute_score, geo3k

CASES = json.loads((Path(__file__).parent / "data" / "geo3k_cases.json").read_text(encoding="utf-8"))
ALL = CASES["table"] + CASES["fuzz"]["cases"]


@pytest.mark.parametrize("case", ALL, ids=[c["name"] for c in ALL])
def test_the_geo3k_scorer_and_its_routing_give_verls_score(case):
    assert geo3k.compute_score(case["response"], case["ground_truth"]) == case["expected"]
    assert default_compute_score("hiyouga/geometry3k", case["response"], case["ground_truth"]) == case["routed"]


def test_the_cases_reach_every_score_verl_gives():
    """0 (no format, wrong), 0.1 (format only), 0.9 (right, no format), 1.0 (both), in table and fuzz."""
    for cases in (CASES["table"], CASES["fuzz"]["cases"]):
        assert {c["expected"] for c in cases} == {0.0, 0.1, 0.9, 1.0}
    assert len(CASES["fuzz"]["cases"]) >= 150 and "verl" in CASES["source"]
