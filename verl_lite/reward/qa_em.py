"""Search-R1-style exact-match reward (data_source `searchR1_nq`, `searchR1_triviaqa`, ...): the
response's last `<answer>...</answer>` must equal one of the ground truth's answers once both are
normalised as SQuAD's evaluation does.

Same extraction, normalisation and scores as verl's `verl/utils/reward_score/search_r1_like_qa_em.py`:

- The answer is the content of the last `<answer>...</answer>` (newlines included, the shortest
  span for each opening tag), spaces stripped. No closed pair scores 0.
- Normalisation (both sides): lower case, drop ASCII punctuation, drop the words `a`, `an`, `the`,
  collapse white space. `ground_truth["target"]` is one answer or a list of them (a numpy array
  from parquet too).
- A match scores `score` (1.0), divided by 4 when the response holds more than 10 `<answer>` or
  more than 10 `</answer>` tags (so a response cannot win by spraying answers); no match scores
  `format_score` (0.0). `compute_score_subem` instead accepts a normalised answer that contains a
  normalised target, and has no tag penalty.

verl also prints one sample in 64 at random; this module prints nothing. Where verl raises on a
target that is not text (a number), this module compares its text.
"""

from __future__ import annotations

import re
import string
from typing import Any, Iterable, List, Optional

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
MAX_TAGS = 10


def normalize_answer(text: Any) -> str:
    """SQuAD's normal form: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _targets(golden_answers: Any) -> List[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    return list(golden_answers) if isinstance(golden_answers, Iterable) else [golden_answers]


def em_check(prediction: str, golden_answers: Any) -> bool:
    """Whether the normalised prediction equals a normalised golden answer."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(g) == pred for g in _targets(golden_answers))


def subem_check(prediction: str, golden_answers: Any) -> bool:
    """Whether a normalised golden answer is a substring of the normalised prediction."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(g) in pred for g in _targets(golden_answers))


def extract_solution(solution_str: str) -> Optional[str]:
    """The stripped content of the last `<answer>...</answer>`, None if there is none."""
    found = _ANSWER.findall(solution_str)
    return found[-1].strip() if found else None


def compute_score(solution_str: str, ground_truth: Any, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0) -> float:
    """`score` on an exact match (a quarter of it past MAX_TAGS answer tags), `format_score` on a
    mismatch, 0.0 without an answer. `method` is accepted and ignored, as in verl."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0.0
    if not em_check(answer, ground_truth["target"]):
        return float(format_score)
    if solution_str.count("<answer>") > MAX_TAGS or solution_str.count("</answer>") > MAX_TAGS:
        return float(score / 4)
    return float(score)


def compute_score_subem(solution_str: str, ground_truth: Any, method: str = "strict", format_score: float = 0.0,
                        score: float = 1.0) -> float:
    """`score` when a target is a substring of the answer, `format_score` when not, 0.0 without an answer."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0.0
    return float(score) if subem_check(answer, ground_truth["target"]) else float(format_score)
