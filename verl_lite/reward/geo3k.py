r"""Geometry3K rule reward (data_source `hiyouga/geometry3k`): 0.9 for a correct last `\boxed{...}`
answer plus 0.1 for the `<think>...</think> ... \boxed{...}` format.

Same scores as verl's `verl/utils/reward_score/geo3k.py`, which grades with the `mathruler`
library; so does this module (`mathruler.grader.extract_boxed_content` and `grade_answer`: the
PRM800K grader, which compares normalised strings, then asks sympy whether the difference
simplifies to 0).

- Accuracy: the content of the last `\boxed{` up to its balanced `}`, spaces stripped ("None"
  when there is none), graded against the ground truth by `mathruler.grader.grade_answer`.
- Format: the whole response matches `<think>.*</think>.*\boxed\{.*\}.*` (newlines included).
- The score is `(1 - format_score) * accuracy + format_score * format`, so 0.0, 0.1, 0.9 or 1.0
  with verl's `format_score=0.1`. `use_boxed=False` grades the whole response instead.

The grading runs in the time-limit helper (`verl_lite.reward.timelimit`), so mathruler and sympy
are imported there, not in the scoring process, and a sympy simplification that runs past
GRADE_TIMEOUT_S seconds counts as a wrong answer (verl has no limit here and would wait). Where
verl raises on a ground truth that is not text, this module grades its text.
"""

from __future__ import annotations

import re
from typing import Any

from verl_lite.reward import timelimit

GRADE_TIMEOUT_S = 10.0
_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def format_reward(predict_str: str) -> float:
    r"""1.0 when the response is `<think>...</think>`, then text holding a `\boxed{...}`; else 0.0."""
    return 1.0 if _FORMAT.fullmatch(predict_str) else 0.0


def grade(predict_str: str, ground_truth: str, use_boxed: bool) -> bool:
    """mathruler's verdict on the (boxed) answer; runs in the time-limit helper."""
    from mathruler.grader import extract_boxed_content, grade_answer

    answer = extract_boxed_content(predict_str) if use_boxed else predict_str
    return bool(grade_answer(answer, ground_truth))


def acc_reward(predict_str: str, ground_truth: Any, use_boxed: bool = True) -> float:
    """1.0 when mathruler grades the answer correct, else 0.0."""
    correct = timelimit.call("verl_lite.reward.geo3k:grade", predict_str, str(ground_truth), use_boxed,
                             timeout=GRADE_TIMEOUT_S, default=False)
    return 1.0 if correct else 0.0


def compute_score(predict_str: str, ground_truth: Any, use_boxed: bool = True, format_score: float = 0.1) -> float:
    """`(1 - format_score) * accuracy + format_score * format`."""
    return (1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed) + format_score * format_reward(
        predict_str
    )
