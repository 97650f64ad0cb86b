r"""ToRA's `math_equal` as verl runs it in PRIME's math reward (verl's
`verl/utils/reward_score/prime_math/grader.py`), the second verdict `prime_math.check` asks for.

Equal as text (case and spaces ignored); equal as numbers within a relative 1e-4, the ground truth
also read as a percentage (x/100 and x*100); a `$` price or `%` stripped, a `_base` suffix dropped,
`\pi` replaced by pi (and, when either side holds `\pi`, by 3.14 on a second try: the caller's);
equal without brackets; intervals, comma lists, `Point(...)` and `pmatrix` matrices part by part.
Its last step, sympy's `simplify` and `N` on the parsed answers, never runs in verl at this commit
(it enters the time limit as a context manager, which raises, and the raise is swallowed), so it is
left out here: answers only it would accept score 0 in both.

Differences, none of them reached by ordinary answers: verl `eval`s model output where it holds
`\pi` and where a `[...]` answer meets a `pmatrix` ground truth, and sympy-parses a `Matrix(...)`
answer; verl_lite does not execute model output, so it evaluates only Python literals and
arithmetic there (`evaluate_literal`: an answer with names in it fails to evaluate, as a malformed
one does in verl; huge powers are refused) and parses a `Matrix(...)` only when it holds nothing but
numbers, operators, single letters, `sqrt` and `pi`, in the time-limit helper
(`verl_lite.reward.timelimit`), so sympy is never imported here.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from math import isclose
from typing import Any, List, Optional, Tuple

from verl_lite.reward import timelimit

# The limit of each sympy step of PRIME's grader (verl's timeout, PRM800K's and ToRA's alike).
SYMPY_TIMEOUT_S = 10.0

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
                if timelimit.call("verl_lite.reward.tora_math:sympy_matrix_matches", prediction, items,
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
