"""The DAPO, PRIME math, Geometry3K and Search-R1 rule rewards give verl's scores, and
default_compute_score routes every data source verl's does: each case of the pinned-commit tables
of tests/py/data/reward_cases.json (expected values written by tools/gen_reward_cases.py from
verl's own scorers, a seeded fuzz of random strings included) goes through verl_lite and must give
the same value. The code datasets, whose verl scorers run the generated code, are refused with a
message that says how to plug in a sandboxed scorer."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from verl_lite.reward import default_compute_score, geo3k, has_default_scorer, math_dapo, prime_math, qa_em, tora_math
from verl_lite.reward import manager, timelimit

TABLES = json.loads((Path(__file__).parent / "data" / "reward_cases.json").read_text())

# verl's default_compute_score at the pinned commit, name by name (aime* goes by prefix)
VERL_ROUTES = {
    "math_dapo": ("math_dapo", "math", "math_dapo_reasoning"),
    "prime_math": ("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                   "numina_cn_k12", "numina_olympiads"),
    "code": ("codecontests", "apps", "codeforces", "taco"),
    "geo3k": ("hiyouga/geometry3k",),
    "search_r1": ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                  "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"),
}


def cases(table):
    return pytest.mark.parametrize("case", TABLES[table]["cases"], ids=[c["name"] for c in TABLES[table]["cases"]])


@cases("math_dapo")
def test_the_dapo_scorer_gives_verls_dict(case):
    got = math_dapo.compute_score(case["response"], case["ground_truth"],
                                  strict_box_verify=case.get("strict_box_verify", False))
    assert got == case["expected"]  # score, acc and pred


@cases("prime_math")
def test_the_prime_math_scorer_gives_verls_verdict(case):
    assert list(prime_math.check(case["response"], case["ground_truth"])) == case["verl_result"]
    assert prime_math.compute_score(case["response"], case["ground_truth"]) == case["expected"]


@cases("geo3k")
def test_the_geo3k_scorer_gives_verls_score(case):
    assert geo3k.compute_score(case["response"], case["ground_truth"]) == case["expected"]


@cases("search_r1")
def test_the_search_r1_scorer_gives_verls_score(case):
    kwargs = {k: case[k] for k in ("format_score", "score") if k in case}
    assert qa_em.compute_score(case["response"], case["ground_truth"], **kwargs) == case["expected"]


@cases("verl_sources")
def test_the_default_score_routes_each_verl_data_source_as_verl_does(case):
    got = default_compute_score(case["data_source"], case["response"], case["ground_truth"])
    assert got == case["expected"]
    assert type(got) is type(case["expected"])  # a dict stays a dict (DAPO), anything else is a float


@cases("fuzz")
def test_random_strings_score_as_verl_scores_them(case):
    assert default_compute_score(case["data_source"], case["response"], case["ground_truth"]) == case["expected"]


def test_the_tables_cover_every_data_source_verl_routes_to_a_scorer_that_runs_no_code():
    routed = {c["data_source"] for c in TABLES["verl_sources"]["cases"]}
    for family, names in VERL_ROUTES.items():
        if family != "code":
            assert set(names) <= routed, family
    assert any(name.startswith("aime") and name != "aime" for name in routed)
    assert {c["data_source"] for c in TABLES["fuzz"]["cases"]} & set(VERL_ROUTES["prime_math"])


def test_verl_lites_source_lists_are_verls():
    assert manager.DAPO_SOURCES == VERL_ROUTES["math_dapo"] and manager.DAPO_PREFIX == "aime"
    assert manager.PRIME_MATH_SOURCES == VERL_ROUTES["prime_math"]
    assert manager.GEO3K_SOURCES == VERL_ROUTES["geo3k"]
    assert manager.SEARCH_R1_SOURCES == VERL_ROUTES["search_r1"]
    assert manager.CODE_SOURCES == VERL_ROUTES["code"]


@pytest.mark.parametrize("source", [n for f, names in VERL_ROUTES.items() if f != "code" for n in names]
                         + ["aime2024", "aime_2025_I"])
def test_has_default_scorer_says_yes_for_each_routed_source(source):
    assert has_default_scorer(source)
    assert source in manager.SUPPORTED_SOURCES or source.startswith("aime")


@pytest.mark.parametrize("source", VERL_ROUTES["code"])
def test_code_sources_are_refused_saying_they_run_generated_code_and_how_to_plug_a_sandbox_in(source):
    assert not has_default_scorer(source)
    with pytest.raises(NotImplementedError) as err:
        default_compute_score(source, "print(1)", "{}")
    message = str(err.value)
    assert repr(source) in message
    assert "running the generated code" in message and "does not execute model output" in message
    assert "custom_reward_function.path" in message and "custom_reward_function.name" in message
    assert "compute_score(data_source, solution_str, ground_truth, extra_info)" in message
    assert manager.no_default_scorer_reason(source) == message


def test_the_data_preflight_refuses_code_data_with_the_sandbox_hint(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from verl_lite.config import load_config
    from verl_lite.preflight.data import data_source_problems

    path = tmp_path / "code.parquet"
    pq.write_table(pa.table({"data_source": ["apps", "apps", "aime2024"]}), path)
    cfg = load_config([f"data.train_files={path}", f"data.val_files={path}"])
    problems = data_source_problems(cfg)
    assert len(problems) == 2 and all("'apps' (2 rows)" in p for p in problems)
    assert all("does not execute model output" in p and "custom_reward_function.name" in p for p in problems)
    assert "aime2024" not in " ".join(problems)


def test_a_dapo_dict_goes_through_the_reward_manager_as_its_score():
    scores = manager.RewardManager()(["math_dapo", "aime2024"], ["Answer: 5", "Answer: 4"], ["5", "5"])
    assert scores == [1.0, -1.0]


def test_importing_the_scorers_imports_no_sympy_mathruler_or_torch():
    code = ("import sys; import verl_lite.reward.manager, verl_lite.reward.prime_math, verl_lite.reward.geo3k; "
            "from verl_lite.reward import has_default_scorer; assert has_default_scorer('numina_olympiads'); "
            "heavy = sorted({'torch', 'sympy', 'mathruler', 'pylatexenc'} & set(sys.modules)); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------- the time limit


def test_sympy_checks_work_from_a_thread_that_is_not_the_main_one():
    results = []
    thread = threading.Thread(target=lambda: results.append(prime_math.compute_score("So \\boxed{2x+2}", "2(x+1)")))
    thread.start()
    thread.join(60)
    assert results == [1.0]  # sympy proves it: neither normal form matches


def test_a_call_past_its_limit_gives_the_default_and_the_next_call_gets_a_fresh_helper():
    slow = "verl_lite.reward.prime_math:sympy_difference_is_zero"
    # a simplification that takes far longer than a millisecond
    assert timelimit.call(slow, "(sin(x)**2+cos(x)**2)*(x+1)**3-(x**3+3*x**2+3*x+1)", timeout=0.001,
                          default="late") == "late"
    assert timelimit.call(slow, "(x+1)-(1+x)", timeout=60, default="late") is True


def test_the_helper_runs_only_verl_lite_reward_functions():
    with pytest.raises(RuntimeError, match="runs functions of verl_lite.reward"):
        timelimit.call("os:system", "true", timeout=60, default=None)


@pytest.mark.parametrize("text, value", [("1*3.141592653589793", 3.141592653589793), (" 2**3", 8),
                                         ("[1, (2, -3.5)]", [1, (2, -3.5)]), ("7/2", 3.5)])
def test_the_literal_evaluator_gives_what_eval_gives(text, value):
    assert tora_math.evaluate_literal(text) == value == eval(text.lstrip())


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "abs(-1)", "x", "2**10**9", "[1]*10**9", "1 +"])
def test_the_literal_evaluator_refuses_code_names_and_huge_values(text):
    with pytest.raises(Exception):
        tora_math.evaluate_literal(text)


def test_without_a_helper_process_the_check_runs_here_and_warns_once(monkeypatch):
    def no_processes(*args, **kwargs):
        raise PermissionError("no new processes here")

    monkeypatch.setattr(timelimit, "_HELPER", timelimit._Helper())
    monkeypatch.setattr(timelimit.subprocess, "Popen", no_processes)
    slow = "verl_lite.reward.prime_math:sympy_difference_is_zero"
    with pytest.warns(RuntimeWarning, match="cannot start the time-limit helper"):
        assert timelimit.call(slow, "(x+1)-(1+x)", timeout=60, default="late") is True
    assert timelimit.call(slow, "(x+2)-(1+x)", timeout=60, default="late") is False  # no second warning needed
