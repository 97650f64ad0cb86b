"""GSM8K-style rule reward: the answer after `#### ` must equal the ground truth.

Same extraction and scores as verl's `verl/utils/reward_score/gsm8k.py`, so reward curves compare:
only the last 300 characters are searched (answers come last; the regex stays fast on long text);
strict takes the last `#### <number>` with commas and `$` removed; flexible takes the last number
anywhere, as written (commas kept, as verl; a lone "." is skipped, but when it is all that matched,
as in "No idea.", the answer is "." and scores `format_score`, as verl). No answer scores 0, a
wrong one `format_score`, a correct one `score`.
"""

from __future__ import annotations

import re
from typing import Optional

METHODS = ("strict", "flexible")
_CLIP_CHARS = 300
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> Optional[str]:
    """The answer string the response commits to, or None when it gives none."""
    if method not in METHODS:
        raise ValueError(f"unknown gsm8k extraction method {method!r}; valid methods: {', '.join(METHODS)}")
    tail = solution_str[-_CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    numbers = _NUMBER.findall(tail)
    if not numbers:
        return None
    # the last match that is not a lone ".", or (as verl) the first match when all of them are
    return next((n for n in reversed(numbers) if n != "."), numbers[0])


def compute_score(
    solution_str: str,
    ground_truth,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` if the extracted answer equals `ground_truth` (compared as text), `format_score` if an
    answer was found but differs, 0.0 if none was found."""
    answer = extract_solution(solution_str, method)
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth) else float(format_score)
