"""Rule rewards, custom reward files, the data_source dispatch and the reward manager's errors."""

import importlib
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import verl_lite.data
from verl_lite.reward import RewardFunctionError, RewardManager, default_compute_score, load_custom_reward_fn
from verl_lite.reward import gsm8k, has_default_scorer
from verl_lite.reward import math as math_reward
from verl_lite.reward.manager import GSM8K_SOURCES, MATH_SOURCES, describe_fn

# ---------------------------------------------------------------------------- gsm8k


def test_gsm8k_strict_takes_the_last_marked_answer_without_commas():
    assert gsm8k.compute_score("first #### 5, then #### 1,234", "1234") == 1.0
    assert gsm8k.compute_score("first #### 1234, then #### 5", "1234") == 0.0


def test_gsm8k_wrong_answer_gets_the_format_score_and_no_answer_gets_zero():
    assert gsm8k.compute_score("#### 71", "72", format_score=0.1) == 0.1
    assert gsm8k.compute_score("I think it is 72", "72", format_score=0.1) == 0.0  # no "####"


def test_gsm8k_flexible_takes_the_last_number_anywhere():
    assert gsm8k.compute_score("3 apples and 4 pears make 7", "7", method="flexible") == 1.0
    # as verl, flexible keeps commas: "1,000" is not "1000"
    assert gsm8k.compute_score("about 1,000", "1000", method="flexible") == 0.0


def test_gsm8k_flexible_answers_a_lone_full_stop_when_nothing_else_matched():
    # as verl: "No idea." yields the answer "." (a wrong answer), not no answer
    assert gsm8k.extract_solution("No idea.", method="flexible") == "."
    assert gsm8k.compute_score("No idea.", "72", method="flexible", format_score=0.1) == 0.1
    assert gsm8k.extract_solution("It is 72 .", method="flexible") == "72"


def test_gsm8k_only_searches_the_last_300_characters():
    # the marked answer sits 301 characters from the end, so it is cut off
    assert gsm8k.compute_score("#### 72" + "x" * 300, "72") == 0.0
    assert gsm8k.compute_score("#### 72" + "x" * 293, "72") == 1.0


def test_gsm8k_compares_a_numeric_ground_truth_as_text():
    assert gsm8k.compute_score("#### 72", 72, score=2.0) == 2.0


def test_gsm8k_unknown_method_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown gsm8k extraction method 'loose'; valid methods: strict, flexible"):
        gsm8k.compute_score("#### 1", "1", method="loose")


# ---------------------------------------------------------------------------- MATH


def test_math_scores_the_last_boxed_answer_after_normalisation():
    assert math_reward.compute_score("so $\\boxed{\\dfrac{1}{2}}$", "\\frac12") == 1.0
    assert math_reward.compute_score("$\\boxed{1/2}$ or rather $\\boxed{3}$", "\\frac{1}{2}") == 0.0


def test_math_last_boxed_answer_balances_braces_and_gives_none_without_one():
    assert math_reward.last_boxed_answer("x $\\boxed{\\sqrt{\\frac{1}{2}}}$ y") == "\\sqrt{\\frac{1}{2}}"
    assert math_reward.last_boxed_answer("the answer is 5") is None
    assert math_reward.last_boxed_answer("\\boxed{5") is None  # never closed


def test_math_normalise_cuts_units_degrees_and_spaces():
    assert math_reward.normalise("90^{\\circ}") == "90"
    assert math_reward.normalise("5 \\text{ cm}") == "5"
    assert math_reward.normalise("k = \\frac 1 2") == "\\frac{1}{2}"


@pytest.mark.parametrize("response", [None, 5, b"\\boxed{5}", "\\boxed{\\sqrt}", "\\boxed{\\frac}"])
def test_math_odd_input_scores_zero_instead_of_raising(response):
    assert math_reward.compute_score(response, "5") == 0.0


def test_math_compares_a_numeric_ground_truth_as_text():
    # verl compares the text answer with the int itself and never matches; verl_lite, as for gsm8k, uses its text
    assert math_reward.compute_score("$\\boxed{72}$", 72) == 1.0
    assert math_reward.compute_score("$\\boxed{0.5}$", 0.5) == 1.0
    assert math_reward.compute_score("$\\boxed{72}$", None) == 0.0


# ---------------------------------------------------------------------------- custom reward files


def write(tmp_path, body, name="my_reward.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_load_custom_reward_fn_returns_the_named_function(tmp_path):
    path = write(tmp_path, """
        def length_score(data_source, solution_str, ground_truth, extra_info=None):
            return len(solution_str) / 10
    """)
    fn = load_custom_reward_fn(path, "length_score")
    assert fn("d", "abcd", "x") == 0.4  # 4 characters / 10


def test_missing_custom_reward_file_names_the_path_and_the_config_key(tmp_path):
    missing = str(tmp_path / "nope.py")
    with pytest.raises(FileNotFoundError, match=r"nope\.py.*custom_reward_function\.path"):
        load_custom_reward_fn(missing, "compute_score")


def test_missing_custom_reward_function_lists_the_callables_the_file_defines(tmp_path):
    path = write(tmp_path, """
        from os.path import join  # imported, so not listed
        THRESHOLD = 3
        def score_a(**kw): return 1.0
        def score_b(**kw): return 0.0
        def _private(): pass
    """)
    with pytest.raises(AttributeError) as err:
        load_custom_reward_fn(path, "compute_score")
    message = str(err.value)
    assert "'compute_score' is not defined in " + path in message
    assert "callables the file defines: score_a, score_b;" in message
    assert "custom_reward_function.name" in message


def test_a_custom_reward_file_that_fails_to_run_names_the_file(tmp_path):
    path = write(tmp_path, "raise ImportError('needs sympy')\n")
    with pytest.raises(RuntimeError, match=r"my_reward\.py.*failed while running: ImportError: needs sympy"):
        load_custom_reward_fn(path, "compute_score")


# ---------------------------------------------------------------------------- dispatch


def test_default_score_dispatches_both_gsm8k_names():
    assert default_compute_score("openai/gsm8k", "#### 72", "72") == 1.0
    assert default_compute_score("gsm8k", "#### 71", "72") == 0.0


def test_default_score_sends_verl_lite_sources_to_the_synthetic_module(monkeypatch):
    calls = []
    # the image tasks' module imports the real synthetic module: load it before the fake stands in for it
    importlib.import_module("verl_lite.data.synthetic_images")
    fake = types.ModuleType("verl_lite.data.synthetic")
    fake.compute_score = lambda *args: calls.append(args) or 0.25
    monkeypatch.setitem(sys.modules, "verl_lite.data.synthetic", fake)
    monkeypatch.setattr(verl_lite.data, "synthetic", fake, raising=False)
    assert default_compute_score("verl_lite/reverse", "cba", "cba", {"n": 3}) == 0.25
    assert calls == [("verl_lite/reverse", "cba", "cba", {"n": 3})]


@pytest.mark.parametrize("source", MATH_SOURCES)
def test_default_score_dispatches_the_math_datasets_to_the_math_rule(source):
    assert default_compute_score(source, "$\\boxed{0.5}$", "\\frac{1}{2}") == 1.0
    assert default_compute_score(source, "#### 72", "72") == 0.0  # a gsm8k answer is no boxed answer


def test_an_unknown_data_source_names_it_the_supported_ones_and_the_custom_key():
    with pytest.raises(NotImplementedError) as err:
        default_compute_score("my/olympiad", "x", "y")
    message = str(err.value)
    assert "'my/olympiad'" in message
    assert ("supported: openai/gsm8k, gsm8k, lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, "
            "HuggingFaceH4/MATH-500, math_dapo, math, math_dapo_reasoning, numina_aops_forum, ") in message
    assert ("hiyouga/geometry3k, searchR1_nq, searchR1_triviaqa, searchR1_popqa, searchR1_hotpotqa, "
            "searchR1_2wikimultihopqa, searchR1_musique, searchR1_bamboogle, aime* (DAPO), "
            "verl_lite/* (synthetic tasks)") in message
    assert "custom_reward_function.path" in message


def test_has_default_scorer_says_yes_exactly_where_default_compute_score_scores():
    for source in GSM8K_SOURCES + MATH_SOURCES + ("verl_lite/reverse",):
        assert has_default_scorer(source)
        default_compute_score(source, "1", "1")  # and it does not raise
    for source in ("my/olympiad", "lighteval/math", "openai/gsm8k ", "Math_dapo", "apps", "", None, 3):
        assert not has_default_scorer(source)
        with pytest.raises(NotImplementedError):
            default_compute_score(source, "1", "1")


def test_has_default_scorer_needs_no_heavy_import():
    code = ("import sys; from verl_lite.reward.manager import has_default_scorer; "
            "assert has_default_scorer('HuggingFaceH4/MATH-500'); "
            "heavy = sorted({'torch', 'pandas', 'pyarrow', 'verl_lite.data'} & set(sys.modules)); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- manager


def raising_fn(data_source, solution_str, ground_truth, extra_info=None):
    if data_source == "my/data":
        raise KeyError("answer")
    return 0.0


def test_manager_scores_each_sample_with_the_default_rule_rewards():
    manager = RewardManager()
    scores = manager(["openai/gsm8k", "gsm8k"], ["#### 3", "#### 4"], ["3", "5"], [None, None])
    assert scores == [1.0, 0.0]


def test_manager_passes_every_field_by_keyword():
    seen = []
    manager = RewardManager(lambda **kw: seen.append(kw) or 1)
    assert manager(["d"], ["resp"], ["gt"], [{"i": 0}]) == [1.0]
    assert seen == [{"data_source": "d", "solution_str": "resp", "ground_truth": "gt", "extra_info": {"i": 0}}]


def test_a_raising_reward_function_is_reported_with_the_function_and_the_sample():
    response = "y" * 100
    with pytest.raises(RewardFunctionError) as err:
        RewardManager(raising_fn)(["ok", "my/data"], ["x", response], ["1", "2"], [None, None])
    message = str(err.value)
    assert f"{raising_fn.__module__}:raising_fn" in message
    assert "on sample 1 (data_source='my/data'" in message
    assert "response='" + "y" * 80 + "...'" in message  # an 80-character preview
    assert "raised KeyError: 'answer'" in message
    assert isinstance(err.value.__cause__, KeyError)


def test_a_function_from_a_custom_file_is_named_by_file_and_name(tmp_path):
    path = write(tmp_path, """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return 1 / 0
    """)
    fn = load_custom_reward_fn(path, "compute_score")
    assert describe_fn(fn) == f"{path}:compute_score"
    with pytest.raises(RewardFunctionError, match=r"my_reward\.py:compute_score on sample 0 .*ZeroDivisionError"):
        RewardManager(fn)(["d"], ["r"], ["g"], [None])


def test_a_non_numeric_return_names_the_function_the_sample_and_the_type():
    def text_score(**kw):
        return "1.0"

    with pytest.raises(RewardFunctionError, match=r"text_score on sample 0 \(data_source='d'.*returned str"):
        RewardManager(text_score)(["d"], ["r"], ["g"], [None])


def test_a_dict_return_uses_its_score_key_and_must_have_one():
    assert RewardManager(lambda **kw: {"score": 0.5, "acc": True})(["d"], ["r"], ["g"]) == [0.5]
    with pytest.raises(RewardFunctionError, match=r"returned a dict without a 'score' key \(keys: \['acc'\]\)"):
        RewardManager(lambda **kw: {"acc": True})(["d"], ["r"], ["g"])


def test_numpy_numbers_are_accepted_and_nan_is_rejected():
    assert RewardManager(lambda **kw: np.float32(0.5))(["d"], ["r"], ["g"]) == [0.5]
    assert RewardManager(lambda **kw: np.array(0.25))(["d"], ["r"], ["g"]) == [0.25]
    with pytest.raises(RewardFunctionError, match="returned nan; rewards must be finite"):
        RewardManager(lambda **kw: float("nan"))(["d"], ["r"], ["g"])


def test_inputs_of_different_lengths_are_rejected():
    with pytest.raises(ValueError, match=r"differ in length: .*'ground_truths': 1"):
        RewardManager()(["gsm8k", "gsm8k"], ["a", "b"], ["1"])


def test_from_custom_without_a_path_uses_the_default_rule_rewards(tmp_path):
    assert RewardManager.from_custom(None).score_fn is default_compute_score
    path = write(tmp_path, "def compute_score(**kw):\n    return 0.75\n")
    assert RewardManager.from_custom(path)(["d"], ["r"], ["g"]) == [0.75]


def test_importing_the_reward_package_does_not_import_torch():
    code = "import sys, verl_lite.reward; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_async_compute_score_is_awaited_concurrently_and_bounded(tmp_path, monkeypatch):
    import verl_lite.reward.manager as manager

    path = tmp_path / "async_reward.py"
    path.write_text(
        "import asyncio\n"
        "running = {'now': 0, 'most': 0}\n"
        "async def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    running['now'] += 1\n"
        "    running['most'] = max(running['most'], running['now'])\n"
        "    await asyncio.sleep(0.01)\n"
        "    running['now'] -= 1\n"
        "    return {'score': float(solution_str == ground_truth)}\n")
    monkeypatch.setattr(manager, "MAX_CONCURRENT_SCORES", 3)
    rm = RewardManager.from_custom(str(path))
    scores = rm(["s"] * 8, ["a", "b"] * 4, ["a"] * 8)
    assert scores == [1.0, 0.0] * 4
    running = rm.score_fn.__globals__["running"]
    assert running["most"] == 3  # concurrent, and never more than the bound


def test_an_async_compute_score_that_raises_names_its_sample(tmp_path):
    path = tmp_path / "async_bad.py"
    path.write_text("async def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    if solution_str == 'boom':\n"
                    "        raise KeyError('judge down')\n"
                    "    return 1.0\n")
    with pytest.raises(RewardFunctionError, match=r"on sample 1 .*response='boom'.* raised KeyError: 'judge down'"):
        RewardManager.from_custom(str(path))(["s", "s"], ["ok", "boom"], ["x", "x"])
