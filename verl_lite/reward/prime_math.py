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
- Failing that, ToRA's `math_equal`: equal as text (case and spaces ignored); equal as numbers
  within a relative 1e-4, the ground truth also read as a percentage (x/100 and x*100); a `$`
  price or `%` stripped, a `_base` suffix dropped, `\pi` replaced by pi (and, when either side holds
  `\pi`, by 3.14 on a second try); equal without brackets; intervals, comma lists, `Point(...)`
  and `pmatrix` matrices part by part. Its last step, sympy's `simplify` and `N` on the parsed
  answers, never runs in verl at this commit (it enters the time limit as a context manager, which
  raises, and the raise is swallowed), so it is left out here: answers only it would accept score
  0 in both.
- The score is 1.0 when correct, else 0.0 (verl's scorer returns (correct, format_ok, extracted);
  its default_compute_score keeps the first). `check` returns the triple.

Differences, none of them reached by ordinary answers: verl `eval`s model output where it holds
`\pi` and where a `[...]` answer meets a `pmatrix` ground truth, and sympy-parses a `Matrix(...)`
answer; verl_lite does not execute model output, so it evaluates only Python literals and
arithmetic there (an answer with names in it fails to evaluate, as a malformed one does in verl;
huge powers are refused) and parses a `Matrix(...)` only when it holds nothing but numbers,
operators, single letters, `sqrt` and `pi`. sympy runs in the time-limit helper
(`verl_lite.reward.timelimit`), so it is never imported here and a hang cannot stall the scorer.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from math import isclose
from typing import Any, List, Optional, Tuple

from verl_lite.reward import timelimit
from verl_lite.reward.math import CannotNormalise, normalise as mathd_normalise

SYMPY_TIMEOUT_S = 10.0

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


# ------------------------------------------------------------------------ ToRA's math_equal

_MAX_POWER_EXPONENT = 10_000
_MAX_REPEAT = 1_000_000
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_literal(elt) for elt in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_literal(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _literal(node.left), _literal(node.right)
        if (isinstance(node.op, ast.Pow) and isinstance(left, int) and abs(left) > 1 and isinstance(right, int)
                and right > _MAX_POWER_EXPONENT):
            raise ValueError("power too large to evaluate")
        if isinstance(node.op, ast.Mult) and any(isinstance(a, (str, bytes, list, tuple)) and isinstance(b, int)
                                                 and b > _MAX_REPEAT for a, b in ((left, right), (right, left))):
            raise ValueError("repetition too large to evaluate")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"not a literal: {type(node).__name__}")


def evaluate_literal(text: str) -> Any:
    """What Python's `eval(text)` gives for literals and arithmetic (numbers, strings, tuples,
    lists, + - * / // % **); raises for anything else (names, calls, attributes), as eval raises
    for malformed text. Model output is never executed."""
    return _literal(ast.parse(text.lstrip(" \t"), mode="eval").body)


def _is_digit(value: Any) -> Tuple[bool, Optional[float]]:
    try:
        text = str(value)
        return True, float(text.replace("{,}", "") if "{,}" in text else text.replace(",", ""))
    except ValueError:
        return False, None


def _replace_pi(text: Any, pi: float) -> Any:
    if not (isinstance(text, str) and "\\pi" in text):
        return text
    at = text.find("\\pi")
    while at != -1:
        text = text[:at] + (f"*{pi}" if at > 0 and text[at - 1].isdigit() else f"1*{pi}") + text[at + 3:]
        at = text.find("\\pi", at + 1)
    try:
        return evaluate_literal(text)
    except Exception:
        return text


def _tora_normalize(answer: Any, pi: float) -> Any:
    if isinstance(answer, str) and re.match(r"\$\d+(\.\d+)?", answer):
        return answer[1:]
    if isinstance(answer, str) and (re.match(r"^\d+(\.\d+)?%$", answer) or re.match(r"^\d+(\.\d+)?\\%$", answer)):
        return answer.replace("\\%", "").replace("%", "")
    if isinstance(answer, str) and "_" in answer:  # a base: 101_2 -> 101 (a non-number raises, as verl)
        answer = int(float(answer.split("_")[0]))
    return _replace_pi(answer, pi)


_INTERVALS = ((re.compile(r"^Interval\((.*)\)$"), "[{}]"), (re.compile(r"^Interval\.Ropen\((.*)\)$"), "[{})"),
              (re.compile(r"^Interval\.Lopen\((.*)\)$"), "({}]"), (re.compile(r"^Interval\.open\((.*)\)$"), "({})"))


def format_intervals(prediction: str) -> str:
    """sympy's `Interval(a, b)` (and its open variants) written as `[a, b]`, `[a, b)`, ..."""
    for pattern, shape in _INTERVALS:
        found = pattern.match(prediction)
        if found:
            return shape.format(found.group(1))
    return prediction


_SAFE_MATRIX = re.compile(r"^Matrix\([\w\s.,+\-*/()\[\]]*\)$")
_NAMES = re.compile(r"[A-Za-z_]\w*")


def _safe_matrix_text(text: str) -> bool:
    if not _SAFE_MATRIX.match(text) or "_" in text or re.search(r"[A-Za-z]\s*\.", text):
        return False
    return all(name in ("Matrix", "sqrt", "pi") or len(name) == 1 for name in _NAMES.findall(text))


def sympy_matrix_matches(prediction: str, items: List[str], include_percentage: bool, tolerance: float) -> bool:
    """Whether sympy's `Matrix(...)` parse of `prediction` matches the pmatrix entries; runs in the
    time-limit helper."""
    from sympy.parsing.sympy_parser import parse_expr

    try:
        matrix = parse_expr(prediction)
        return len(matrix) == len(items) and all(
            [math_equal(entry, item, include_percentage, tolerance) for item, entry in zip(items, matrix)])
    except Exception:
        return False


def _all_equal(pairs, include_percentage: bool, tolerance: float) -> bool:
    return all([math_equal(p, r, include_percentage, tolerance) for p, r in pairs])  # every pair runs, as verl


def math_equal(prediction: Any, reference: Any, include_percentage: bool = True, tolerance: float = 1e-4,
               pi: float = math.pi) -> bool:
    """ToRA's `math_equal` as verl runs it (see the module docstring); raises where verl's does."""
    prediction, reference = _tora_normalize(prediction, pi), _tora_normalize(reference, pi)
    if isinstance(prediction, str) and len(prediction) > 1000:
        prediction = prediction[:1000]
    if isinstance(prediction, str) and isinstance(reference, str):
        if (prediction.strip().lower() == reference.strip().lower()
                or prediction.replace(" ", "") == reference.replace(" ", "")):
            return True
    try:
        pred_is_number, pred_number = _is_digit(prediction)
        ref_is_number, ref_number = _is_digit(reference)
        if pred_is_number and ref_is_number:
            targets = [ref_number / 100, ref_number, ref_number * 100] if include_percentage else [ref_number]
            for target in targets:
                try:
                    if isclose(target, pred_number, rel_tol=tolerance):
                        return True
                except Exception:
                    continue
            return False
    except Exception:
        pass
    if not prediction and prediction not in [0, False]:
        return False

    reference, prediction = str(reference).strip(), str(prediction).strip()
    prediction = format_intervals(prediction)
    pred_str, ref_str = prediction, reference
    if ((prediction.startswith("[") and prediction.endswith("]") and not reference.startswith("("))
            or (prediction.startswith("(") and prediction.endswith(")") and not reference.startswith("["))):
        pred_str, ref_str = pred_str.strip("[]()"), ref_str.strip("[]()")
    for bracket in "{}()":
        pred_str, ref_str = pred_str.replace(bracket, ""), ref_str.replace(bracket, "")
    if pred_str == ref_str:
        return True

    if (prediction and reference and prediction[0] in "([" and prediction[-1] in ")]"
            and prediction[0] == reference[0] and prediction[-1] == reference[-1]):
        pred_parts, ref_parts = prediction[1:-1].split(","), reference[1:-1].split(",")
        if len(pred_parts) == len(ref_parts) and _all_equal(zip(pred_parts, ref_parts), include_percentage, tolerance):
            return True
    if "," in prediction and "," in reference:
        pred_parts = [part.strip() for part in prediction.split(",")]
        ref_parts = [part.strip() for part in reference.split(",")]
        if len(pred_parts) == len(ref_parts):
            return _all_equal(zip(pred_parts, ref_parts), include_percentage, tolerance)
    if prediction.startswith("Point") and reference[0] == "(" and reference[-1] == ")":
        pred_parts = prediction[prediction.find("(") + 1:-1].split(",")
        ref_parts = reference[1:-1].split(",")
        if len(pred_parts) == len(ref_parts) and _all_equal(zip(pred_parts, ref_parts), include_percentage, tolerance):
            return True
    if r"\begin{pmatrix}" in reference and prediction.startswith("Matrix"):
        if _safe_matrix_text(prediction):
            items = reference.split()[1:-1:2]
            try:
                if timelimit.call("verl_lite.reward.prime_math:sympy_matrix_matches", prediction, items,
                                  include_percentage, tolerance, timeout=SYMPY_TIMEOUT_S, default=False):
                    return True
            except RuntimeError:
                pass
    elif r"\begin{pmatrix}" in reference and prediction.startswith("[") and prediction.endswith("]"):
        if isinstance(evaluate_literal(prediction), list):  # raises on a malformed answer, as verl's eval
            try:
                rows = (reference.removeprefix(r"\\begin{pmatrix}").removeprefix(r"\begin{pmatrix}")
                        .removesuffix(r"\\end{pmatrix}").removesuffix(r"\end{pmatrix}")).split("\\")
                rows = [row.split("&") if "&" in row else row for row in rows]
                matrix = evaluate_literal(prediction)
                if len(matrix) == len(rows) and _all_equal(((p, r) for r, p in zip(rows, matrix)),
                                                           include_percentage, tolerance):
                    return True
            except Exception:
                pass
    return False  # verl's symbolic step: never reached at this commit (see the module docstring)


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
