r"""PRIME's math reward (data_source `numina_aops_forum`, `numina_synthetic_math`, `numina_amc_aime`,
`numina_synthetic_amc`, `numina_cn_k12`, `numina_olympiads`): the answer the response commits to
must equal the ground truth as PRM800K's grader or, failing that, ToRA's `math_equal` judges it.

Same extraction, grading and scores as verl's `verl/utils/reward_score/prime_math/` (`__init__.py`,
`grader.py`, `math_normalize.py`), quirks included:

- Extraction (`match_answer`): the text after the last `answer:` / `answer is` / `answers are`
  (any case), then before the last `is answer` / `is the answer` / ...; then the content of the
  last `\boxed` (or, without one, `\fbox`) from its first `{` to the balanced `}`; then the text
  before the last `. `; then the text after the last `be `, `is `, `are `, `=`, `: `, `get ` (or
  those words before a newline). A response whose extracted text has no digit is unmatched, but
  is graded all the same (verl ignores the flag).
- PRM800K's `grade_answer`: equal after the MATH benchmark's normalisation (the one
  `verl_lite.reward.math` applies); or equal after PRM800K's own (units, `$`, `%`, `\text{}` and
  `million` dropped or rewritten, LaTeX turned into text by `pylatexenc`, lower case, an integer
  written plainly); or, element by element for tuples and intervals, sympy simplifies the
  difference to 0 (not for unreduced fractions, not between an integer and a non-integer, not for
  expressions with more than two letters or nested powers; 10 seconds at most each).
- Failing that, ToRA's `math_equal` (`verl_lite.reward.tora_math`), with `\pi` read as pi and, when
  either side holds `\pi`, as 3.14 on a second try.
- The score is 1.0 when correct, else 0.0 (verl's scorer returns (correct, format_ok, extracted);
  its default_compute_score keeps the first). `check` returns the triple.

verl_lite never executes model output where verl `eval`s it (tora_math.py says where). sympy runs in
the time-limit helper (`verl_lite.reward.timelimit`), so it is never imported here and a hang cannot
stall the scorer.
"""

from __future__ import annotations

import math
import re
from typing import Any, List, Optional, Tuple

from verl_lite.reward import timelimit
from verl_lite.reward.math import CannotNormalise, normalise as mathd_normalise
from verl_lite.reward.tora_math import SYMPY_TIMEOUT_S, math_equal

# ------------------------------------------------------------------------------------- extraction


def _last_boxed_content(text: str) -> Optional[str]:
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
        if start < 0:
            return None
    depth, left = 0, None
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
            if left is None:
                left = i
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[left + 1:i].strip() if left is not None else None
    return None


def _drop_trailing_newline(text: str) -> str:
    return text[:-2] if text.endswith("\n") else text  # verl cuts two characters here


def match_answer(response: str) -> Tuple[bool, str]:
    """(matched, the answer text the response commits to); see the module docstring."""
    matched = False
    for marker in ("answer:", "answer is", "answers are"):
        at = response.lower().rfind(marker)
        if at != -1:
            matched = True
            response = _drop_trailing_newline(response[at + len(marker):].strip())
    for marker in ("is answer", "is the answer", "are answers", "are the answers"):
        at = response.lower().rfind(marker)
        if at != -1:
            matched = True
            response = _drop_trailing_newline(response[:at].strip())
    boxed = _last_boxed_content(response)
    if boxed:
        matched = True
        response = boxed
    if ". " in response:
        response = response[:response.lower().rfind(". ")].strip()
    for marker in ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n"):
        at = response.lower().rfind(marker)
        if at != -1:
            matched = True
            response = _drop_trailing_newline(response[at + len(marker):].strip())
    return matched and any(c.isdigit() for c in response), response


# ---------------------------------------------------------------------- PRM800K's grade_answer

_TEXT_WRAPPED = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month",
          "year", "foot", "feet", "inch", "yard", "liter")
_UNIT_PATTERNS = tuple(re.compile(f"{unit}(es)?(s)? *(\\^[0-9]+)?") for unit in _UNITS)
_THOUSANDS_COMMA = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
_MIXED_NUMBER = re.compile(r"([0-9]) +([0-9])")
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_BAD_SUBSTRINGS = ("^{", "^(")  # sympy might hang on these
_BAD_REGEXES = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_TUPLE_CHARS = "()[]"
# pylatexenc's text for these, as the names sympy reads
_UNICODE_NAMES = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))


def mathd_normalize(answer: Optional[str]) -> Optional[str]:
    """The MATH benchmark's normal form (an enclosing `\\text{}` dropped first); the answer as it
    stands where that normalisation fails."""
    if answer is None:
        return None
    answer = answer.strip()
    wrapped = _TEXT_WRAPPED.search(answer)
    if wrapped is not None:
        answer = wrapped.group("text").strip()
    try:
        return mathd_normalise(answer)
    except CannotNormalise:
        return answer


def _latex_to_text(expr: str) -> str:
    from pylatexenc import latex2text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for char, name in _UNICODE_NAMES:
        expr = expr.replace(char, name)
    return expr.strip()


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _is_int(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except Exception:
        return False


def _strip_thousands_commas(expr: str) -> str:
    while True:
        stripped = _THOUSANDS_COMMA.sub(r"\1\3\4", expr)
        if stripped == expr:
            return stripped
        expr = stripped


def _str_is_int(text: str) -> bool:
    try:
        x = float(_strip_thousands_commas(text))
        return abs(x - int(round(x))) <= 1e-7
    except Exception:
        return False


def prm800k_normalize(expr: Optional[str]) -> Optional[str]:
    """PRM800K's normal form of an answer (see the module docstring)."""
    if expr is None:
        return None
    wrapped = _TEXT_WRAPPED.search(expr)
    if wrapped is not None:
        expr = wrapped.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(old, new)
    for unit in _UNIT_PATTERNS:
        expr = unit.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(",\\\\! *", "", expr)
    if _is_float(expr) and _is_int(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        import pylatexenc.latex2text  # noqa: F401  (lazy; imported here so that a missing one raises)

        try:
            expr = _latex_to_text(expr)
        except Exception:  # verl keeps the answer as it is when pylatexenc fails on it
            pass
    expr = re.sub("- *", "-", expr)  # mixed numbers with a minus sign
    expr = _MIXED_NUMBER.sub(r"\1+\2", expr)  # 7 3/4 -> 7+3/4
    expr = expr.lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def should_allow_eval(expr: str) -> bool:
    """Whether sympy may try `expr`: at most two distinct letters (`sqrt`, `frac` aside), no `^{`,
    `^(`, nested or many-digit powers."""
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or any(bad in expr for bad in _BAD_SUBSTRINGS):
        return False
    return all(bad.search(expr) is None for bad in _BAD_REGEXES)


def sympy_difference_is_zero(expr: str) -> bool:
    """Whether sympy simplifies `expr` to 0; runs in the time-limit helper."""
    from sympy import simplify
    from sympy.parsing import sympy_parser

    try:
        parsed = sympy_parser.parse_expr(
            expr.replace("^", "**"),
            transformations=sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,))
        return bool(simplify(parsed) == 0)
    except Exception:
        return False


def are_equal_under_sympy(ground_truth: str, given: str) -> bool:
    """Whether sympy finds the two (normalised) answers equal, within SYMPY_TIMEOUT_S seconds."""
    expr = f"({ground_truth})-({given})"
    if not should_allow_eval(expr):
        return False
    try:
        return bool(timelimit.call("verl_lite.reward.prime_math:sympy_difference_is_zero", expr,
                                   timeout=SYMPY_TIMEOUT_S, default=False))
    except RuntimeError:  # the helper died: verl's child process failing counts as not equal too
        return False


def split_tuple(expr: str) -> List[str]:
    """The elements of a tuple or interval `(a, b)`, `[a, b)`, ...; `[expr]` for anything else."""
    expr = _strip_thousands_commas(expr)
    if not expr:
        return []
    if (len(expr) > 2 and expr[0] in _TUPLE_CHARS and expr[-1] in _TUPLE_CHARS
            and all(ch not in expr[1:-1] for ch in _TUPLE_CHARS)):
        return [elem.strip() for elem in expr[1:-1].split(",")]
    return [expr]


def grade_answer(given_answer: Optional[str], ground_truth: str) -> bool:
    """PRM800K's verdict: equal normal forms, or sympy finds each element equal."""
    if given_answer is None:
        return False
    if mathd_normalize(ground_truth) == mathd_normalize(given_answer):
        return True
    truth, given = prm800k_normalize(ground_truth), prm800k_normalize(given_answer)
    if truth == given:
        return True
    if not given:
        return False
    truth_elems, given_elems = split_tuple(truth), split_tuple(given)
    if len(truth_elems) != len(given_elems) or (
            len(truth_elems) > 1 and (truth[0] != given[0] or truth[-1] != given[-1])):
        return False
    for truth_elem, given_elem in zip(truth_elems, given_elems):
        if _FRACTION.search(truth_elem) and _FRACTION.search(given_elem):
            correct = truth_elem == given_elem  # an unreduced fraction is not the reduced one
        elif _str_is_int(truth_elem) != _str_is_int(given_elem):
            correct = False  # an integer answer must match as written
        else:
            correct = are_equal_under_sympy(truth_elem, given_elem)
        if not correct:
            return False
    return True


# ---------------------------------------------------------------------------------- the score


def check(model_output: Any, ground_truth: Any) -> Tuple[bool, bool, str]:
    """verl's (correct, format_ok, extracted answer); format_ok is True for a correct answer, else
    whether the response holds `Step 2:` and `\\box`."""
    model_output, ground_truth = str(model_output), str(ground_truth)
    _, extracted = match_answer(model_output)
    format_ok = "Step 2:" in model_output and "\\box" in model_output
    if grade_answer(extracted, ground_truth):
        return True, True, extracted
    try:
        if "\\pi" in extracted or "\\pi" in ground_truth:
            correct = any([math_equal(extracted, ground_truth, pi=pi) for pi in (math.pi, 3.14)])
        else:
            correct = math_equal(extracted, ground_truth)
    except Exception:
        correct = False
    return bool(correct), format_ok, extracted


def compute_score(model_output: Any, ground_truth: Any) -> float:
    """1.0 when the response's answer is graded equal to `ground_truth`, else 0.0."""
    return 1.0 if check(model_output, ground_truth)[0] else 0.0
