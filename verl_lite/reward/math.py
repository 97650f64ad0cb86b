r"""MATH-style rule reward: the response's last `\boxed{...}` answer must equal the ground truth
once both are normalised as the MATH benchmark's `is_equiv` does.

Same extraction, normalisation and scores as verl's `verl/utils/reward_score/math_reward.py`, so
reward curves compare, quirks included:

- The answer is the content of the last `\boxed{...}`, braces balanced (`\boxed{\frac{1}{2}}`
  gives `\frac{1}{2}`). If the response holds `\boxed ` with a space anywhere, the answer is
  instead the text after the last `\boxed ` up to the next `$` (`\boxed 5$` gives `5`, and
  `\boxed {5}` gives `{5}`, which matches no plain `5`). `\fbox{...}` never scores: verl finds it
  but only unwraps `\boxed`. No boxed answer, or one whose braces never close, scores 0.
- Normalisation (both sides): drop newlines, `\!`, `\left`, `\right` (`\rightarrow` too loses
  its `\right`), degrees (`^\circ`, `^{\circ}`), `\$`, `\%` and spaces; `\\` becomes `\`;
  `tfrac`/`dfrac` become `frac`; units after one `\text{ ` (with a space) are cut off; a leading
  `.` and ` .`/`{.` gain a `0`; the left side of one `=` is dropped when it has at most two
  characters, spaces counted (`k = 5`, `k=5`; not `xy = 5`); `\sqrt2` becomes `\sqrt{2}`,
  `\frac12` and `\frac1{2}` become `\frac{1}{2}`; an answer that is exactly `0.5` (or `.5`)
  becomes `\frac{1}{2}`; one that is exactly `a/b` with plain integers becomes `\frac{a}{b}`.
  Nothing else is evaluated: `0.25` does not match `\frac{1}{4}`, `2` does not match `2.0`, and a
  plain `$` stays.
- When a side cannot be normalised (two `\text{ ` units, a `\sqrt` or `\frac` at the very end),
  the raw strings are compared instead.

A correct answer scores 1.0, anything else 0.0; no input makes it raise. Where verl compares a
non-string ground truth (an int from a hand-made parquet) with the text answer and so never
matches, this module compares its text, as `verl_lite.reward.gsm8k` does.
"""

from __future__ import annotations

from typing import Any, List, Optional

_BOXED = "\\boxed"
_BOXED_SPACE = "\\boxed "
_UNITS = "\\text{ "
# Literal replacements of the normalisation, in the order they are applied (the order matters:
# `\\` becomes `\` before `\%` and `\$` are dropped).
_EARLY_REPLACEMENTS = (
    ("\n", ""),
    ("\\!", ""),
    ("\\\\", "\\"),
    ("tfrac", "frac"),
    ("dfrac", "frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\$", ""),
)
_PERCENT_REPLACEMENTS = (("\\\\%", ""), ("\\%", ""), (" .", " 0."), ("{.", "{0."))


class CannotNormalise(ValueError):
    """The answer has a shape the normalisation cannot handle (is_equiv then compares it as written)."""


def last_boxed_answer(text: str) -> Optional[str]:
    r"""The content of the last `\boxed{...}` in `text` (or after the last `\boxed `), None if none."""
    if _BOXED_SPACE in text:
        return text.rsplit(_BOXED_SPACE, 1)[1].split("$", 1)[0]
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    brace = start + len(_BOXED)
    if text[brace:brace + 1] != "{":
        return None
    depth = 0
    for end in range(brace, len(text)):
        char = text[end]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1:end]
    return None


def _cut_units(s: str) -> str:
    if _UNITS not in s:
        return s
    parts = s.split(_UNITS)
    if len(parts) != 2:
        raise CannotNormalise
    return parts[0]


def _brace_sqrt_arguments(s: str) -> str:
    r"""`\sqrt2` -> `\sqrt{2}` (one character is the argument)."""
    head, *rest = s.split("\\sqrt")
    out = [head]
    for piece in rest:
        if not piece:
            raise CannotNormalise
        out.append("\\sqrt" + (piece if piece[0] == "{" else "{" + piece[0] + "}" + piece[1:]))
    return "".join(out)


def _brace_frac_arguments(s: str) -> str:
    r"""`\frac12` -> `\frac{1}{2}`, `\frac1{72}` -> `\frac{1}{72}`; `s` is left alone when a
    `\frac` has fewer than two characters after it."""
    head, *rest = s.split("\\frac")
    out: List[str] = [head]
    for piece in rest:
        if not piece:
            raise CannotNormalise
        if piece[0] == "{":
            out.append("\\frac" + piece)
        elif len(piece) < 2:
            return s
        elif piece[1] == "{":
            out.append("\\frac{" + piece[0] + "}" + piece[1:])
        else:
            out.append("\\frac{" + piece[0] + "}{" + piece[1] + "}" + piece[2:])
    return "".join(out)


def _canonical_int(text: str) -> bool:
    """Whether `text` is an integer written as Python writes it (no sign +, no leading zeros)."""
    try:
        return str(int(text)) == text
    except ValueError:
        return False


def _slash_to_frac(s: str) -> str:
    parts = s.split("/")
    if len(parts) == 2 and all(_canonical_int(p) for p in parts):
        return "\\frac{" + parts[0] + "}{" + parts[1] + "}"
    return s


def normalise(answer: str) -> str:
    """The MATH benchmark's normal form of an answer; raises CannotNormalise for the shapes it cannot
    handle: two `\\text{ ` units, a `\\sqrt` or `\\frac` with nothing after it."""
    s = answer
    for old, new in _EARLY_REPLACEMENTS:
        s = s.replace(old, new)
    s = _cut_units(s)
    for old, new in _PERCENT_REPLACEMENTS:
        s = s.replace(old, new)
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _brace_sqrt_arguments(s)
    s = s.replace(" ", "")
    s = _brace_frac_arguments(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def is_equiv(answer: str, ground_truth: str) -> bool:
    """Whether the two answers are equal after normalisation (as written, if either cannot be)."""
    try:
        return normalise(answer) == normalise(ground_truth)
    except CannotNormalise:
        return answer == ground_truth


def compute_score(solution_str: Any, ground_truth: Any) -> float:
    r"""1.0 if the last `\boxed{...}` answer of `solution_str` equals `ground_truth`, else 0.0."""
    if not isinstance(solution_str, str) or ground_truth is None:
        return 0.0
    answer = last_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    return 1.0 if is_equiv(answer, str(ground_truth)) else 0.0
