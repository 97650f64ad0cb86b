r"""Write the pinned-commit tables of tests/py/data/reward_cases.json: the expected value of every case
is what verl's own scorer returns on it.

Copies verl's scorers (`verl/utils/reward_score/`: math_dapo, prime_math, geo3k,
search_r1_like_qa_em and the `default_compute_score` that routes them) and the two helpers they
import (`verl.utils.py_functional`'s timeout, `verl.utils.import_utils`) out of a local verl clone
at VERL_COMMIT with `git show`, imports them from a temporary directory (a one-line stand-in for
`verl.utils.metric`, which the timeout module imports and never uses), and runs them on the cases
below and on a seeded fuzz of random strings. verl's timeout forks (multiprocessing's start method
is set to "fork", Linux's default, as verl runs).

    python tools/gen_reward_cases.py /path/to/verl/clone

Needs the libraries verl's scorers import: sympy, pylatexenc, mathruler. The tables it does not own
(the verl v0.9.0 ones) are kept as they are; CI cannot reach verl, so the values are committed.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

VERL_COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"
SHORT = VERL_COMMIT[:12]
OUT = Path(__file__).resolve().parents[1] / "tests" / "py" / "data" / "reward_cases.json"
SCORE_DIR = "verl/utils/reward_score"
FILES = (
    "verl/utils/import_utils.py",
    "verl/utils/py_functional.py",
    f"{SCORE_DIR}/__init__.py",
    f"{SCORE_DIR}/gsm8k.py",
    f"{SCORE_DIR}/math_reward.py",
    f"{SCORE_DIR}/math_dapo.py",
    f"{SCORE_DIR}/geo3k.py",
    f"{SCORE_DIR}/search_r1_like_qa_em.py",
    f"{SCORE_DIR}/prime_math/__init__.py",
    f"{SCORE_DIR}/prime_math/grader.py",
    f"{SCORE_DIR}/prime_math/math_normalize.py",
)
STANDINS = {
    "verl/__init__.py": "",
    "verl/utils/__init__.py": "",
    # stand-in: py_functional imports it, the timeout never uses it
    "verl/utils/metric/__init__.py": "Metric = object\n",
}

# verl's data_source names per scorer, as its default_compute_score routes them (aime* by prefix).
SOURCES = {
    "math_dapo": ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime_2025", "aime"],
    "prime_math": ["numina_aops_forum", "numina_synthetic_math", "numina_amc_aime", "numina_synthetic_amc",
                   "numina_cn_k12", "numina_olympiads"],
    "geo3k": ["hiyouga/geometry3k"],
    "search_r1": ["searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa",
                  "searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"],
}


def case(name: str, response: str, ground_truth: Any, **extra: Any) -> Dict[str, Any]:
    return {"name": name, "response": response, "ground_truth": ground_truth, **extra}


MATH_DAPO = [
    case("an Answer: line with the right number", "Let me think. Answer: 5", "5"),
    case("an Answer: line with a wrong number", "Let me think. Answer: 6", "5"),
    case("'the answer is' without a colon is no answer", "The answer is 5.", "5"),
    case("answer: in lower case counts", "so answer: 5", "5"),
    case("spaces around the colon count", "ANSWER : 5", "5"),
    case("the answer may follow on the next line", "Answer:\n\n5", "5"),
    case("the part after the last = is the answer", "Answer: x = 5", "5"),
    case("a $-wrapped fraction matches", "Answer: $\\frac{1}{2}$", "\\frac{1}{2}"),
    case("shorthand frac12 is braced", "Answer: \\frac12", "\\frac{1}{2}"),
    case("thousands commas of an integer are dropped", "Answer: 1,000", "1000"),
    case("the word degrees is removed", "Answer: 10 degrees", "10"),
    case("a unit cm is removed", "Answer: 5 cm", "5"),
    case("a boxed answer on the Answer: line is unwrapped", "Answer: \\boxed{5}", "5"),
    case("the last Answer: line wins over an earlier wrong one", "Answer: 3\nAnswer: 5", "5"),
    case("the last Answer: line wins over an earlier right one", "Answer: 5\nAnswer: 3", "5"),
    case("without an Answer: line the last boxed answer counts", "So the result is \\boxed{5}", "5"),
    case("the boxed fallback is not normalised", "So the result is \\boxed{ 5}", "5"),
    case("the last of two boxed answers counts", "\\boxed{5} or rather \\boxed{6}", "5"),
    case("a boxed answer before the last 100 characters is not read", "\\boxed{5}" + " " * 150, "5"),
    case("an Answer: line before the last 300 characters is not read", "Answer: 5\n" + "x" * 400, "5"),
    case("an empty response", "", "5"),
    case("the article a is dropped", "Answer: a banana", "banana"),
    case("text wrapping is dropped", "Answer: \\text{Monday}", "Monday"),
    case("0.5 is not evaluated against a fraction", "Answer: 0.5", "\\frac{1}{2}"),
    case("an Answer: of [INVALID] falls back to the boxed answer", "Answer: [INVALID]\n\\boxed{5}", "5"),
    case("a trailing $ is dropped", "Answer: 5$", "5"),
    case("dollars and $ signs are dropped", "Answer: $5$ dollars", "5"),
    case("a boxed ground truth is unwrapped", "Answer: 5", "\\boxed{5}"),
    case("sqrt3 is braced", "Answer: 2\\sqrt3", "2\\sqrt{3}"),
    case("a trailing period stays and does not match", "Answer: 5.", "5"),
    case("a boxed answer that never closes is no answer", "So \\boxed{5", "5"),
    case("a nested boxed fraction matches as written", "So \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    case("an Answer: line with words around the number", "Answer: 12 points", "12"),
    case("a negative number", "Answer: -3", "-3"),
    case("a wrong sign", "Answer: 3", "-3"),
    case("strict box mode reads only the boxed answer", "Answer: 5", "5", strict_box_verify=True),
    case("strict box mode with a boxed answer", "Answer: 4\n\\boxed{5}", "5", strict_box_verify=True),
]

PRIME_MATH = [
    case("a right boxed integer", "The answer is \\boxed{5}", "5"),
    case("a wrong boxed integer", "The answer is \\boxed{6}", "5"),
    case("a boxed fraction equals the decimal ground truth", "So \\boxed{\\frac{1}{2}}", "0.5"),
    case("dfrac equals frac", "So \\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}"),
    case("sympy: x+1 equals 1+x", "So \\boxed{x+1}", "1+x"),
    case("sympy: 2x+2 equals 2(x+1)", "So \\boxed{2x+2}", "2(x+1)"),
    case("sympy: sqrt 8 equals 2 sqrt 2", "So \\boxed{\\sqrt{8}}", "2\\sqrt{2}"),
    case("a Final answer: line", "Final answer: 12", "12"),
    case("the text after the last = is the answer", "So x = 7", "7"),
    case("3.5 equals 7/2 under sympy", "The value is 3.5", "7/2"),
    case("thousands commas", "So \\boxed{1,000}", "1000"),
    case("a percent sign is dropped", "So \\boxed{50\\%}", "50"),
    case("a text unit is dropped", "So \\boxed{10 \\text{ cm}}", "10"),
    case("a tuple matches with other spacing", "So \\boxed{(1, 2)}", "(1,2)"),
    case("a tuple in the wrong order", "So \\boxed{(2, 1)}", "(1,2)"),
    case("a half-open interval is not the open one", "So \\boxed{[1, 2)}", "(1,2)"),
    case("pi equals pi", "So \\boxed{\\pi}", "\\pi"),
    case("3.14159 is close enough to pi", "So \\boxed{3.14159}", "\\pi"),
    case("2 pi is 6.28 with pi read as 3.14", "So \\boxed{2\\pi}", "6.28"),
    case("a wrong answer in the Step 2: format", "Step 1: add. Step 2: so \\boxed{4}", "5"),
    case("a right answer in the Step 2: format", "Step 1: add. Step 2: so \\boxed{5}", "5"),
    case("no digit in the response", "I do not know", "5"),
    case("an empty response", "", "5"),
    case("fbox counts when there is no boxed", "So \\fbox{5}", "5"),
    case("'answer is' then the sentence ends", "The answer is 5. Thus we are done.", "5"),
    case("the last of two boxed answers counts", "\\boxed{5} or \\boxed{6}", "5"),
    case("an unreduced fraction is not the reduced one", "So \\boxed{\\frac{2}{4}}", "\\frac{1}{2}"),
    case("a base subscript", "So \\boxed{101_2}", "5"),
    case("matching pmatrix ground truths", "So \\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}",
         "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    case("a list against a pmatrix fails (the rows split on a backslash)", "The answer is [1, 2]",
         "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    case("a Point against a tuple fails (the comma-list check comes first)", "answer: Point(1, 2)", "(1, 2)"),
    case("a million is not 10^6 (an integer against a non-integer)", "So \\boxed{1000000}", "10^6"),
    case("a choice in parentheses equals the letter", "So \\boxed{\\text{(A)}}", "A"),
    case("sympy: an expanded square", "So \\boxed{x^2+2x+1}", "(x+1)^2"),
    case("sqrt3 is braced", "So \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}"),
    case("a unit word after the number", "The answer is: 5 meters", "5"),
    case("a slash fraction equals frac", "So \\boxed{3/4}", "\\frac{3}{4}"),
    case("a decimal equals a fraction under sympy", "So \\boxed{0.75}", "\\frac{3}{4}"),
    case("a close but wrong decimal", "So \\boxed{0.7}", "\\frac{3}{4}"),
    case("a number within 1e-4 relative", "So \\boxed{100.001}", "100"),
    case("a percentage read as a fraction", "So \\boxed{0.25}", "25"),
    case("a dollar amount", "So \\boxed{\\$10}", "10"),
    case("two answers in a comma list", "So \\boxed{2, 3}", "3, 2"),
    case("an interval written as sympy's Interval", "answer: Interval(1, 2)", "[1, 2]"),
    case("an answer with pi eval'd as arithmetic", "answer is 2\\pi", "2\\pi"),
    case("a wrong letter", "So \\boxed{\\text{(B)}}", "A"),
]

GEO3K = [
    case("think then the right boxed answer", "<think>reason</think> The answer is \\boxed{3}", "3"),
    case("the right boxed answer without think", "The answer is \\boxed{3}", "3"),
    case("think then a wrong boxed answer", "<think>reason</think> The answer is \\boxed{4}", "3"),
    case("neither format nor answer", "three", "3"),
    case("a boxed fraction equals the decimal", "<think>a</think>\\boxed{\\frac{1}{2}}", "0.5"),
    case("a boxed root", "\\boxed{2\\sqrt{3}}", "2\\sqrt{3}"),
    case("sympy: x+1 equals 1+x", "\\boxed{x+1}", "1+x"),
    case("the last boxed answer counts", "<think>a</think>\\boxed{3} no, \\boxed{5}", "3"),
    case("newlines inside think and after", "<think>\nline one\nline two\n</think>\n\\boxed{5}\n", "5"),
    case("think but no boxed answer", "<think>x</think> it is 5", "5"),
    case("spaces inside the box are stripped", "\\boxed{ 5 }", "5"),
    case("degrees are dropped", "\\boxed{60^\\circ}", "60"),
    case("text wrapping is dropped", "\\boxed{\\text{A}}", "A"),
    case("text before think breaks the format", "Sure. <think>a</think> \\boxed{5}", "5"),
    case("an unclosed think breaks the format", "<think>a \\boxed{5}", "5"),
    case("3.0 equals 3", "\\boxed{3.0}", "3"),
    case("thousands commas", "\\boxed{1,000}", "1000"),
    case("dfrac equals shorthand frac", "\\boxed{\\dfrac{3}{4}}", "\\frac34"),
    case("7/2 equals 3.5", "\\boxed{7/2}", "3.5"),
    case("an unreduced fraction is not the reduced one", "\\boxed{2/4}", "1/2"),
    case("an empty response", "", "5"),
    case("a unit is dropped", "\\boxed{15 cm}", "15"),
    case("a short left side of = is dropped", "\\boxed{x=5}", "5"),
    case("a boxed inside a boxed", "\\boxed{\\boxed{5}}", "5"),
    case("two think blocks then the answer", "<think>a</think><think>b</think>\\boxed{4}", "4"),
    case("a wrong number without think", "\\boxed{12}", "21"),
    case("an angle in degrees against a plain number", "<think>a</think>\\boxed{30^{\\circ}}", "30"),
]


def qa(*targets: str) -> Dict[str, List[str]]:
    return {"target": list(targets)}


SEARCH_R1 = [
    case("the right answer in tags", "<answer>Paris</answer>", qa("Paris")),
    case("a wrong answer in tags", "<answer>London</answer>", qa("Paris")),
    case("no answer tags", "Paris", qa("Paris")),
    case("articles are dropped", "<answer>The Eiffel Tower</answer>", qa("Eiffel Tower")),
    case("punctuation is dropped", "<answer>Paris!</answer>", qa("Paris")),
    case("case is ignored", "<answer>PARIS</answer>", qa("paris")),
    case("any of several targets", "<answer>new york city</answer>", qa("NYC", "New York City")),
    case("the last answer counts (right)", "<answer>London</answer> wait <answer>Paris</answer>", qa("Paris")),
    case("the last answer counts (wrong)", "<answer>Paris</answer> wait <answer>London</answer>", qa("Paris")),
    case("a target given as one string", "<answer>Paris</answer>", {"target": "Paris"}),
    case("an unclosed tag is no answer", "<answer>Paris", qa("Paris")),
    case("newlines around the answer are stripped", "<answer>\nParis\n</answer>", qa("Paris")),
    case("exact match, not substring", "<answer>Paris, France</answer>", qa("Paris")),
    case("12 tags quarter the score", "<answer>x</answer>" * 11 + "<answer>Paris</answer>", qa("Paris")),
    case("11 tags quarter the score", "<answer>x</answer>" * 10 + "<answer>Paris</answer>", qa("Paris")),
    case("10 tags do not", "<answer>x</answer>" * 9 + "<answer>Paris</answer>", qa("Paris")),
    case("an empty answer matches an empty target", "<answer></answer>", qa("")),
    case("an answer of only articles matches another", "<answer> a </answer>", qa("the")),
    case("a mismatch scores format_score", "<answer>London</answer>", qa("Paris"), format_score=0.1),
    case("a match scores score", "<answer>Paris</answer>", qa("Paris"), score=2.0),
    case("white space collapses", "<answer>New   York</answer>", qa("new york")),
    case("accents are kept", "<answer>Zürich</answer>", qa("zurich")),
    case("a hyphen is punctuation", "<answer>Jean-Paul</answer>", qa("JeanPaul")),
    case("an Answer: line is not a tag", "Answer: Paris", qa("Paris")),
    case("many opening tags before one closing one", "<answer>" * 11 + "Paris</answer>", qa("Paris")),
    case("a year", "<think>hm</think><answer>1945</answer>", qa("1945")),
    case("a wrong year", "<answer>1944</answer>", qa("1945")),
]


def routing_cases() -> List[Dict[str, Any]]:
    """One right and one wrong response per verl data source name, each shaped so that another
    scorer would give another value (a DAPO dict, geo3k's 0.9, PRIME's unboxed `answer is`)."""
    shapes = {
        "math_dapo": (("Answer: 5", "5"), ("Answer: 6", "5")),
        "prime_math": (("The answer is 5", "5"), ("The answer is 6", "5")),
        "geo3k": (("So \\boxed{5}", "5"), ("<think>t</think> So \\boxed{6}", "5")),
        "search_r1": (("<answer>Paris</answer>", qa("Paris")), ("<answer>Lyon</answer>", qa("Paris"))),
    }
    out = []
    for family, names in SOURCES.items():
        for source in names:
            for outcome, (response, truth) in zip(("right", "wrong"), shapes[family]):
                out.append({"name": f"{source} ({outcome})", "data_source": source, "response": response,
                            "ground_truth": truth})
    out.append({"name": "openai/gsm8k", "data_source": "openai/gsm8k", "response": "#### 5", "ground_truth": "5"})
    out.append({"name": "HuggingFaceH4/MATH-500", "data_source": "HuggingFaceH4/MATH-500",
                "response": "\\boxed{5}", "ground_truth": "5"})
    return out


FUZZ_TOKENS = ["5", "12", "0", "-", "3", ".", ",", " ", "\n", "=", "$", "x", "a", "the", "\\boxed{", "{", "}",
               "\\frac{1}{2}", "\\frac", "\\sqrt", "\\pi", "^", "(", ")", "[", "]", "/", "%", "Answer:", "answer is",
               "is ", "<answer>", "</answer>", "<think>", "</think>", "\\text{", "cm", "Paris", "Step 2:", "\\fbox{"]
FUZZ_TRUTHS = {
    "math_dapo": ["5", "12", "\\frac{1}{2}", "-3", "x"],
    "prime_math": ["5", "12", "\\frac{1}{2}", "(1,2)", "3.5", "x+1"],
    "geo3k": ["5", "12", "\\frac{1}{2}", "2\\sqrt{3}"],
    "search_r1": [qa("Paris"), qa("5", "five"), qa("the x")],
}
FUZZ_PER_FAMILY = 40


def fuzz_cases(seed: int = 0) -> List[Dict[str, Any]]:
    """Random strings mixing digits, boxes, Answer: lines and tags; every third one holds the
    ground truth in its family's answer shape, so that both outcomes occur."""
    rng = random.Random(seed)
    shaped = {"math_dapo": "Answer: {}", "prime_math": "\\boxed{{{}}}", "geo3k": "<think>t</think>\\boxed{{{}}}",
              "search_r1": "<answer>{}</answer>"}
    out = []
    for family, names in SOURCES.items():
        for i in range(FUZZ_PER_FAMILY):
            truth = rng.choice(FUZZ_TRUTHS[family])
            text = "".join(rng.choice(FUZZ_TOKENS) for _ in range(rng.randint(0, 14)))
            if i % 3 == 0:
                answer = truth["target"][0] if isinstance(truth, dict) else truth
                text += shaped[family].format(answer) + "".join(rng.choice([" ", ".", "\n", ""]) for _ in range(2))
            out.append({"name": f"{family} fuzz {i:02d}", "data_source": rng.choice(names), "response": text,
                        "ground_truth": truth})
    return out


def extract(clone: str, root: Path) -> None:
    for path, text in STANDINS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for path in FILES:
        blob = subprocess.run(["git", "-C", clone, "show", f"{VERL_COMMIT}:{path}"], check=True,
                              capture_output=True).stdout
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(blob)


def build(clone: str) -> Dict[str, Any]:
    multiprocessing.set_start_method("fork", force=True)
    with tempfile.TemporaryDirectory() as tmp:
        extract(clone, Path(tmp))
        sys.path.insert(0, tmp)
        try:
            from verl.utils import reward_score
            from verl.utils.reward_score import geo3k, math_dapo, prime_math, search_r1_like_qa_em

            quiet = contextlib.redirect_stdout(io.StringIO())  # verl prints samples and sympy errors
            with quiet:
                return tables(reward_score, math_dapo, prime_math, geo3k, search_r1_like_qa_em)
        finally:
            sys.path.remove(tmp)


def tables(reward_score, math_dapo, prime_math, geo3k, qa_em) -> Dict[str, Any]:
    def source(path: str, call: str) -> str:
        return f"verl {SHORT} {SCORE_DIR}/{path}: {call}"

    dapo = [dict(c, expected=math_dapo.compute_score(c["response"], c["ground_truth"],
                                                     strict_box_verify=c.get("strict_box_verify", False)))
            for c in MATH_DAPO]
    prime = []
    for c in PRIME_MATH:
        correct, format_ok, extracted = prime_math.compute_score(c["response"], c["ground_truth"])
        prime.append(dict(c, expected=float(correct), verl_result=[bool(correct), bool(format_ok), extracted]))
    geo = [dict(c, expected=geo3k.compute_score(c["response"], c["ground_truth"])) for c in GEO3K]
    search = []
    for c in SEARCH_R1:
        kwargs = {k: c[k] for k in ("format_score", "score") if k in c}
        search.append(dict(c, expected=qa_em.compute_score(c["response"], c["ground_truth"], **kwargs)))

    def routed(cases):
        return [dict(c, expected=reward_score.default_compute_score(c["data_source"], c["response"],
                                                                    c["ground_truth"])) for c in cases]

    return {
        "math_dapo": {"source": source("math_dapo.py", "compute_score(response, ground_truth[, strict_box_verify])"
                                       " -> {score, acc, pred}"), "cases": dapo},
        "prime_math": {"source": source("prime_math/__init__.py", "compute_score(response, ground_truth) -> "
                                        "(correct, format_ok, extracted); expected is float(correct)"),
                       "cases": prime},
        "geo3k": {"source": source("geo3k.py", "compute_score(response, ground_truth)"), "cases": geo},
        "search_r1": {"source": source("search_r1_like_qa_em.py",
                                       "compute_score(response, ground_truth[, format_score, score])"),
                      "cases": search},
        "verl_sources": {"source": source("__init__.py", "default_compute_score(data_source, response, ground_truth)"
                                          ", every data source name it routes to a scorer that runs no code"),
                         "cases": routed(routing_cases())},
        "fuzz": {"source": source("__init__.py", "default_compute_score(data_source, response, ground_truth) on "
                                  "seeded random strings (tools/gen_reward_cases.py fuzz_cases)"),
                 "cases": routed(fuzz_cases())},
    }


def main(argv: List[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0], "\n\nusage: python tools/gen_reward_cases.py /path/to/verl/clone",
              file=sys.stderr)
        return 2
    new = build(argv[0])
    current = json.loads(OUT.read_text()) if OUT.exists() else {}
    current.update(new)
    OUT.write_text(json.dumps(current, indent=1) + "\n")
    print(f"{OUT}: " + ", ".join(f"{name} {len(t['cases'])}" for name, t in new.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
