r"""Write tests/py/data/geo3k_cases.json: Geometry3K responses scored by verl's own scorer.

Runs verl's `verl.utils.reward_score.geo3k.compute_score` and its `default_compute_score` (data
source "hiyouga/geometry3k") from an installed verl (an editable install of the pinned source is
enough; mathruler, sympy and pylatexenc must be importable) on a table of responses in the shapes
a policy writes for geometry3k's answers (integers, decimals, roots, fractions, degrees, equations)
and on a seeded fuzz of equivalent and wrong forms, with and without the <think> format. A case
verl's grader takes more than CASE_TIMEOUT_S on is left out (verl has no time limit there;
verl_lite gives up after 10 s).

    /path/to/verl/venv/bin/python tools/gen_geo3k_cases.py

CI cannot run verl, so the values are committed; tests/py/test_reward_geo3k.py checks verl_lite's
scorer against them.
"""

from __future__ import annotations

import json
import random
import signal
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Tuple

OUT = Path(__file__).resolve().parents[1] / "tests" / "py" / "data" / "geo3k_cases.json"
CASE_TIMEOUT_S = 20
SEED = 0
FUZZ_CASES = 160

THINK = "<think>Use the figure: the triangle is right-angled.</think> "


def case(name: str, response: str, ground_truth: str) -> Dict[str, Any]:
    return {"name": name, "response": response, "ground_truth": ground_truth}


# Ground truths as geometry3k writes them, and responses a policy gives for them.
TABLE = [
    case("an integer, boxed after think", THINK + "So $x = \\boxed{56}$.", "56"),
    case("an integer, boxed, no think", "The answer is \\boxed{56}.", "56"),
    case("a wrong integer", THINK + "\\boxed{65}", "56"),
    case("a decimal", THINK + "The area is \\boxed{12.5}.", "12.5"),
    case("a decimal with a trailing zero", THINK + "\\boxed{12.50}", "12.5"),
    case("a decimal rounded differently", THINK + "\\boxed{12.6}", "12.5"),
    case("a fraction for a decimal", THINK + "\\boxed{\\frac{25}{2}}", "12.5"),
    case("a root, as written", THINK + "\\boxed{3\\sqrt{2}}", "3\\sqrt{2}"),
    case("a root without braces", THINK + "\\boxed{3\\sqrt2}", "3\\sqrt{2}"),
    case("a root with spaces", THINK + "\\boxed{3 \\sqrt { 2 }}", "3\\sqrt{2}"),
    case("an unsimplified root", THINK + "\\boxed{\\sqrt{18}}", "3\\sqrt{2}"),
    case("a root as a decimal", THINK + "\\boxed{4.24}", "3\\sqrt{2}"),
    case("a root times a fraction", THINK + "\\boxed{\\frac{3\\sqrt{2}}{2}}", "\\frac{3}{2}\\sqrt{2}"),
    case("a fraction", THINK + "\\boxed{\\frac{40}{3}}", "\\frac{40}{3}"),
    case("a fraction as a slash", THINK + "\\boxed{40/3}", "\\frac{40}{3}"),
    case("a fraction as dfrac", THINK + "\\boxed{\\dfrac{40}{3}}", "\\frac{40}{3}"),
    case("a fraction as a rounded decimal", THINK + "\\boxed{13.33}", "\\frac{40}{3}"),
    case("an unreduced fraction", THINK + "\\boxed{\\frac{80}{6}}", "\\frac{40}{3}"),
    case("degrees with circ", THINK + "\\boxed{60^\\circ}", "60"),
    case("degrees with braces", THINK + "\\boxed{60^{\\circ}}", "60"),
    case("degrees with the sign", THINK + "\\boxed{60°}", "60"),
    case("degrees in text", THINK + "\\boxed{60 \\text{ degrees}}", "60"),
    case("an equation", THINK + "\\boxed{x = 7}", "7"),
    case("a long equation", THINK + "\\boxed{m\\angle ABC = 70}", "70"),
    case("a unit", THINK + "\\boxed{15 \\text{ cm}}", "15"),
    case("a squared unit", THINK + "\\boxed{96 \\text{ cm}^2}", "96"),
    case("pi", THINK + "\\boxed{4\\pi}", "4\\pi"),
    case("pi as a decimal", THINK + "\\boxed{12.57}", "4\\pi"),
    case("a choice letter for a number", THINK + "\\boxed{B}", "56"),
    case("two boxes, the last right", THINK + "\\boxed{65}, no: \\boxed{56}", "56"),
    case("two boxes, the last wrong", THINK + "\\boxed{56}, no: \\boxed{65}", "56"),
    case("no box", THINK + "x is 56", "56"),
    case("an empty box", THINK + "\\boxed{}", "56"),
    case("an unclosed box", THINK + "\\boxed{56", "56"),
    case("think without closing", "<think>reasoning \\boxed{56}", "56"),
    case("text before think", "Answer: <think>r</think> \\boxed{56}", "56"),
    case("newlines", "<think>\nline\n</think>\n\n\\boxed{56}\n", "56"),
    case("a negative number", THINK + "\\boxed{-3}", "-3"),
    case("a root of a sum", THINK + "\\boxed{\\sqrt{221}}", "\\sqrt{221}"),
    case("two times a root", THINK + "\\boxed{2\\sqrt{221}}", "2 \\sqrt { 221 }"),
    case("a ground truth with spaces", THINK + "\\boxed{4\\sqrt{3}}", "4 \\sqrt { 3 }"),
    case("a mixed number", THINK + "\\boxed{2\\frac{1}{2}}", "2.5"),
    case("thousands separator", THINK + "\\boxed{1,200}", "1200"),
    case("a percentage", THINK + "\\boxed{50\\%}", "50"),
    case("a boxed inside text", THINK + "Therefore $\\text{the answer is } \\boxed{8}$", "8"),
    case("a nested brace", THINK + "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
]


# ---------------------------------------------------------------------------- seeded fuzz

# (ground truth, equivalent forms, wrong forms)
ANSWERS: List[Tuple[str, List[str], List[str]]] = [
    ("56", ["56", "56.0", "56^\\circ", "x=56", "\\frac{112}{2}"], ["65", "5.6", "-56", "56\\sqrt{2}"]),
    ("12.5", ["12.5", "\\frac{25}{2}", "25/2", "12.50"], ["12", "125", "1.25", "\\frac{5}{2}"]),
    ("3\\sqrt{2}", ["3\\sqrt{2}", "3\\sqrt2", "\\sqrt{18}", "3 \\sqrt{2}"], ["4.24", "2\\sqrt{3}", "\\sqrt{2}", "18"]),
    ("\\frac{40}{3}", ["\\frac{40}{3}", "40/3", "\\dfrac{40}{3}", "\\frac{80}{6}"], ["13.33", "\\frac{3}{40}", "40"]),
    ("4\\pi", ["4\\pi", "4 \\pi", "\\pi \\cdot 4"], ["12.57", "4", "\\pi"]),
    ("2 \\sqrt { 221 }", ["2\\sqrt{221}", "\\sqrt{884}", "2 \\sqrt { 221 }"], ["29.73", "\\sqrt{221}", "442"]),
    ("60", ["60", "60^{\\circ}", "60°", "\\angle 1 = 60"], ["30", "120", "6"]),
]
WRAPS = ["\\boxed{{{}}}", "The answer is $\\boxed{{{}}}$.", "So \\boxed{{ {} }}", "\\boxed{{{}}}\n"]
NOISE = ["", " ", "Hence ", "$", "\\text{so}", "\\boxed{7} first, then ", "x", "\n", ".", "}", "{"]


def fuzz_cases(seed: int = SEED, count: int = FUZZ_CASES) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        truth, right, wrong = rng.choice(ANSWERS)
        kind = rng.random()
        if kind < 0.45:
            answer = rng.choice(right)
        elif kind < 0.85:
            answer = rng.choice(wrong)
        else:  # noise inside the box
            answer = rng.choice(right) + rng.choice(NOISE)
        body = rng.choice(NOISE) + rng.choice(WRAPS).format(answer) + rng.choice(NOISE)
        shape = rng.random()
        if shape < 0.5:
            response = "<think>" + rng.choice(["r", "The angles sum to 180.", ""]) + "</think>" + body
        elif shape < 0.8:
            response = body
        else:  # no box at all, or a broken think
            response = rng.choice(["<think>r ", "", "<think></think>"]) + answer + rng.choice(NOISE)
        out.append(case(f"fuzz {i:03d}", response, truth))
    return out


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def scored(cases: List[Dict[str, Any]], geo3k: Any, default_compute_score: Any) -> List[Dict[str, Any]]:
    out = []
    signal.signal(signal.SIGALRM, _alarm)
    for c in cases:
        signal.alarm(CASE_TIMEOUT_S)
        try:
            expected = geo3k.compute_score(c["response"], c["ground_truth"])
            routed = default_compute_score("hiyouga/geometry3k", c["response"], c["ground_truth"])
        except _Timeout:
            print(f"left out (verl took over {CASE_TIMEOUT_S} s): {c['name']}", file=sys.stderr)
            continue
        finally:
            signal.alarm(0)
        out.append(dict(c, expected=float(expected), routed=float(routed)))
    return out


def main() -> int:
    import verl
    from verl.utils.reward_score import default_compute_score, geo3k

    table = {
        "source": (f"verl {verl.__version__} verl/utils/reward_score/geo3k.py compute_score(response, ground_truth) "
                   "as expected; default_compute_score('hiyouga/geometry3k', response, ground_truth) as routed; "
                   f"mathruler {metadata.version('mathruler')}, sympy {metadata.version('sympy')}"),
        "table": scored(TABLE, geo3k, default_compute_score),
        "fuzz": {"seed": SEED, "cases": scored(fuzz_cases(), geo3k, default_compute_score)},
    }
    OUT.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    values = [c["expected"] for c in table["table"] + table["fuzz"]["cases"]]
    print(f"{OUT}: {len(table['table'])} table + {len(table['fuzz']['cases'])} fuzz cases; "
          + ", ".join(f"{v:g}: {values.count(v)}" for v in sorted(set(values))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
