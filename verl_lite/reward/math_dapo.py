r"""DAPO-style rule reward (data_source `math_dapo`, `math`, `math_dapo_reasoning`, `aime*`): the
response's `Answer: ...` line, normalised, must equal the normalised ground truth; a response with
no such line falls back to its last `\boxed{...}`, compared as written.

Same extraction, normalisation and scores as verl's `verl/utils/reward_score/math_dapo.py` (the
Minerva normalisation of lm-evaluation-harness), quirks included:

- Only the last 300 characters of the response are read.
- The answer is the text after the last `Answer:` (any case, spaces allowed around the colon, and
  after it even newlines) up to the end of that line. It and the ground truth are normalised: the
  part after the last `=`; substitutions (`an `/`a ` dropped anywhere, so `a banana ` loses its
  `a `; `\$`, `\ ` and spaces dropped; `mbox` read as `text`, `\text{and}` as a comma); unit and
  filler words removed anywhere (`square`, `ways`, `units`, `cm`, `feet`, `degrees`, `\ldots`,
  ...); the text between the first two `$` kept; `\text{}`, `\textbf{}`, `\overline{}` and
  `\boxed{}` unwrapped; `\fracab` and `\sqrta` braced; `$` dropped; the thousands commas of a
  plain integer dropped. A text answer that normalises to `[INVALID]` counts as no answer.
- Without an `Answer:` line, the last `\boxed{...}` of the last 100 of those characters is the
  answer, compared with the ground truth exactly as written (no normalisation: `\boxed{ 5}` does
  not match `5`). With neither, the answer is `[INVALID]`.
- The score is 1.0 when correct and -1.0 otherwise (there is no 0); `compute_score` returns
  verl's dict: {"score": 1.0 or -1.0, "acc": bool, "pred": the normalised or boxed answer, or
  None when `strict_box_verify` finds no box}.

`strict_box_verify=True` reads only the boxed answer (no `Answer:` line); `pause_tokens_index`
(four indices) makes the boxed answer's window start 100 characters before the last index instead
of being the last 100 characters, as verl. Where verl raises on a ground truth that is not text
(an int from a hand-made parquet), this module compares its text.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Sequence, Tuple

_CLIP_CHARS = 300
_BOX_CLIP_CHARS = 100
INVALID = "[INVALID]"
ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n]+)"
_BOXED = "\\boxed{"

# The normalisation's literal replacements, in order (the order matters: "an " goes before "a ").
_SUBSTITUTIONS = (
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
)
# Words and marks removed wherever they occur, in order.
_REMOVED = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
    ",\\!", "{,}", '"', "\\dots",
)
# (pattern, replacement) applied in order after the literal ones.
_REWRITES = tuple((re.compile(p), r) for p, r in (
    (r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$"),  # keep what lies between the first two $
    (r"(\\text\{)(.*?)(\})", "\\2"),
    (r"(\\textbf\{)(.*?)(\})", "\\2"),
    (r"(\\overline\{)(.*?)(\})", "\\2"),
    (r"(\\boxed\{)(.*)(\})", "\\2"),
    (r"(frac)([^{])(.)", "frac{\\2}{\\3}"),  # \frac12 -> \frac{1}{2}
    (r"(sqrt)([^{])", "sqrt{\\2}"),  # \sqrt3 -> \sqrt{3}
))


def last_boxed(text: str) -> Optional[str]:
    r"""The content of the last `\boxed{...}` of `text`, braces balanced; None if there is none or it
    never closes."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(text)):
        if text[end] == "{":
            depth += 1
        elif text[end] == "}":
            depth -= 1
            if depth == 0:
                return text[start + len(_BOXED):end]
    return None


def normalize_final_answer(answer: str) -> str:
    """The Minerva normal form of an answer (see the module docstring)."""
    s = answer.split("=")[-1]
    for old, new in _SUBSTITUTIONS:
        s = s.replace(old, new)
    for word in _REMOVED:
        s = s.replace(word, "")
    for pattern, replacement in _REWRITES:
        s = pattern.sub(replacement, s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def _answer_line(solution: str, ground_truth: str) -> Tuple[bool, str]:
    found = re.findall(ANSWER_PATTERN, solution)
    pred = normalize_final_answer(found[-1] if found else INVALID)
    return pred == normalize_final_answer(ground_truth), pred


def _boxed(solution: str, ground_truth: str, pause_tokens_index: Optional[Sequence[int]]) -> Tuple[bool, Optional[str]]:
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index takes 4 indices, got {len(pause_tokens_index)}")
        window = solution[pause_tokens_index[-1] - _BOX_CLIP_CHARS:]
    else:
        window = solution[-_BOX_CLIP_CHARS:]
    pred = last_boxed(window)
    return pred == ground_truth, pred


def verify(solution: str, ground_truth: str, strict_box_verify: bool = False,
           pause_tokens_index: Optional[Sequence[int]] = None) -> Tuple[bool, Optional[str]]:
    """(correct, pred): the `Answer:` line first, the last boxed answer when there is none."""
    if strict_box_verify:
        return _boxed(solution, ground_truth, pause_tokens_index)
    correct, pred = _answer_line(solution, ground_truth)
    if pred != INVALID:
        return correct, pred
    box_correct, box_pred = _boxed(solution, ground_truth, pause_tokens_index)
    if box_pred is not None:
        return box_correct, box_pred
    return correct, pred


def compute_score(solution_str: str, ground_truth: Any, strict_box_verify: bool = False,
                  pause_tokens_index: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """verl's dict: score 1.0 (correct) or -1.0, acc, pred."""
    correct, pred = verify(str(solution_str)[-_CLIP_CHARS:], str(ground_truth), strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}
