"""examples/data_preprocess/gsm8k.py and math.py: a local copy of the dataset, in the Hugging Face
layout or as JSON lines, becomes verl's parquet rows (the expected rows below are derived by hand
from verl's preprocessing scripts), which verl_lite reads and scores; bad input stops with one line
naming the file, and exit status 1."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_lite.data.dataset import read_rows
from verl_lite.reward import default_compute_score

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "examples" / "data_preprocess"

GSM8K_SUFFIX = ' Let\'s think step by step and output the final answer after "####".'
MATH_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."

GSM8K = {
    "train": [
        {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
         "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"},
        {"question": "A car costs $1,200 and a bike $34. What do both cost?",
         "answer": "1,200 + 34 = <<1200+34=1234>>1,234\n#### 1,234"},
        {"question": "It is 2 degrees and falls by 7. What is it now?",
         "answer": "2 - 7 = -5\n#### -5\n(not #### 9: the first marked answer counts)"},
    ],
    "test": [
        {"question": "What is 6 times 7?", "answer": "6 * 7 = <<6*7=42>>42\n#### 42"},
    ],
}
GSM8K_GROUND_TRUTHS = {"train": ["7", "1234", "-5"], "test": ["42"]}

MATH = {  # columns in the order of MATH-lighteval's files
    "train": [
        {"problem": "What is $\\frac{2}{4}$ in lowest terms?", "level": "Level 1",
         "solution": "Divide both by 2: $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.", "type": "Prealgebra"},
        {"problem": "Solve $x + 1 = 4$.", "level": "Level 2",
         "solution": "At first $\\boxed{2}$? No: $x = 4 - 1 = \\boxed{3}$.", "type": "Algebra"},
        {"problem": "What is $\\sqrt{8}/\\sqrt{4}$?", "level": "Level 3",
         "solution": "It is $\\boxed{\\sqrt{2}}$ since $\\sqrt{8} = 2\\sqrt{2}$.", "type": "Algebra"},
    ],
    "test": [
        {"problem": "What is $2 + 3$?", "level": "Level 1", "solution": "The sum is $\\boxed 5$.",
         "type": "Prealgebra"},
    ],
}
MATH_GROUND_TRUTHS = {"train": ["\\frac{1}{2}", "3", "\\sqrt{2}"], "test": ["5"]}


def gsm8k_expected(split):
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": ex["question"] + GSM8K_SUFFIX}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"split": split, "index": i, "answer": ex["answer"], "question": ex["question"]},
        }
        for i, (ex, truth) in enumerate(zip(GSM8K[split], GSM8K_GROUND_TRUTHS[split]))
    ]


def math_expected(split):
    return [
        {
            "level": ex["level"],
            "type": ex["type"],
            "data_source": "DigitalLearningGmbH/MATH-lighteval",
            "prompt": [{"role": "user", "content": ex["problem"] + MATH_SUFFIX}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {"split": split, "index": i},
        }
        for i, (ex, truth) in enumerate(zip(MATH[split], MATH_GROUND_TRUTHS[split]))
    ]


SCRIPT_DATA = {"gsm8k.py": (GSM8K, gsm8k_expected, "main"), "math.py": (MATH, math_expected, "data")}


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_parquet(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def write_dataset(root, layout, data, config_dir):
    """The splits of `data` under `root`: as the Hugging Face dataset lays them out, or as JSON lines."""
    for split, records in data.items():
        if layout == "hf":
            write_parquet(root / config_dir / f"{split}-00000-of-00001.parquet", records)
        else:
            write_jsonl(root / f"{split}.jsonl", records)
    return root


def run_script(script, *args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def convert(tmp_path, script, layout):
    data, _, config_dir = SCRIPT_DATA[script]
    src = write_dataset(tmp_path / "raw", layout, data, config_dir)
    out = tmp_path / "out"
    result = run_script(script, "--local_dataset_path", src, "--local_save_dir", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return out, result


# ---------------------------------------------------------------------------- rows as verl writes them


@pytest.mark.parametrize("layout", ["hf", "jsonl"])
@pytest.mark.parametrize("script", ["gsm8k.py", "math.py"])
def test_each_split_becomes_verls_rows_column_by_column(tmp_path, script, layout):
    _, expected_rows, _ = SCRIPT_DATA[script]
    out, result = convert(tmp_path, script, layout)
    for split in ("train", "test"):
        table = pq.read_table(out / f"{split}.parquet")
        expected = expected_rows(split)
        assert table.column_names == list(expected[0])
        for column in table.column_names:
            assert table.column(column).to_pylist() == [row[column] for row in expected], column
        assert f"wrote {len(expected)} rows to {out / f'{split}.parquet'}" in result.stdout


def test_math_also_writes_the_first_row_of_each_split_as_json_as_verl_does(tmp_path):
    out, _ = convert(tmp_path, "math.py", "hf")
    for split in ("train", "test"):
        assert json.loads((out / f"{split}_example.json").read_text()) == math_expected(split)[0]


def test_the_deprecated_local_dir_option_still_names_the_output_directory(tmp_path):
    src = write_dataset(tmp_path / "raw", "jsonl", GSM8K, "main")
    result = run_script("gsm8k.py", "--local_dataset_path", src, "--local_dir", tmp_path / "old", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Argument 'local_dir' is deprecated" in result.stdout
    assert pq.read_table(tmp_path / "old" / "train.parquet").num_rows == 3


@pytest.mark.parametrize("script", ["gsm8k.py", "math.py"])
def test_verl_lite_reads_the_rows_and_scores_the_reference_answers_right_and_others_wrong(tmp_path, script):
    out, _ = convert(tmp_path, script, "jsonl")
    rows = read_rows([str(out / "train.parquet"), str(out / "test.parquet")])
    assert len(rows) == 4
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        if script == "gsm8k.py":  # the dataset's reasoning, then the answer after "####" as the prompt asks
            reasoning = row["extra_info"]["answer"].split("####")[0]
            reference, wrong = f"{reasoning}#### {truth}", f"{reasoning}#### {int(truth) + 1}"
        else:  # the reference solution of that row, which ends in a boxed answer
            source = MATH[row["extra_info"]["split"]][row["extra_info"]["index"]]
            reference = f"Let me think step by step. {source['solution']}"
            wrong = f"Let me think step by step. The answer is $\\boxed{{{truth}+1}}$."
        assert default_compute_score(row["data_source"], reference, truth, row["extra_info"]) == 1.0
        assert default_compute_score(row["data_source"], wrong, truth, row["extra_info"]) == 0.0


# ---------------------------------------------------------------------------- bad input


def json_error(line):
    try:
        json.loads(line)
    except json.JSONDecodeError as e:
        return str(e)
    raise AssertionError(f"{line!r} is valid JSON")


def assert_fails_with(tmp_path, script, src, message):
    out = tmp_path / "out"
    result = run_script(script, "--local_dataset_path", src, "--local_save_dir", out, cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, [f"error: {message}"], "")
    assert not out.exists()  # nothing is written before every split has been read


@pytest.mark.parametrize("script, source", [("gsm8k.py", "openai/gsm8k"),
                                            ("math.py", "DigitalLearningGmbH/MATH-lighteval")])
def test_a_missing_dataset_directory_is_named_and_nothing_is_downloaded(tmp_path, script, source):
    missing = tmp_path / "not_downloaded"
    assert_fails_with(tmp_path, script, missing, f"--local_dataset_path {missing} is not a directory; "
                                                 f"pass the directory holding the local copy of {source}")


def test_no_dataset_path_at_all_says_that_nothing_is_downloaded(tmp_path):
    result = run_script("math.py", "--local_save_dir", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: --local_dataset_path is required: this script never downloads; copy the Hugging Face "
        "dataset DigitalLearningGmbH/MATH-lighteval to a directory first and pass that directory"]


def test_a_directory_without_the_split_names_the_layouts_it_accepts(tmp_path):
    src = tmp_path / "raw"
    write_jsonl(src / "train.jsonl", GSM8K["train"])
    assert_fails_with(tmp_path, "gsm8k.py", src, f"{src} holds no test split; expected test.jsonl, test.parquet "
                      "or main/test-*.parquet (the layout of the Hugging Face dataset openai/gsm8k)")


def test_a_split_in_two_layouts_is_refused_instead_of_guessed(tmp_path):
    src = write_dataset(tmp_path / "raw", "hf", MATH, "data")
    write_jsonl(src / "train.jsonl", MATH["train"])
    assert_fails_with(tmp_path, "math.py", src, f"{src} holds the train split twice ({src / 'train.jsonl'} and "
                      f"{src / 'data' / 'train-00000-of-00001.parquet'}); keep one of them")


@pytest.mark.parametrize("script, kept, missing, expected", [
    ("gsm8k.py", "question", "answer", "question, answer"),
    ("math.py", "problem", "solution", "problem, solution (level and type are kept as they are)"),
])
def test_a_parquet_file_without_a_column_names_the_file_the_column_and_the_expected_ones(
        tmp_path, script, kept, missing, expected):
    data, _, config_dir = SCRIPT_DATA[script]
    src = write_dataset(tmp_path / "raw", "hf", data, config_dir)
    bad = write_parquet(src / config_dir / "test-00000-of-00001.parquet", [{kept: "x"}])
    assert_fails_with(tmp_path, script, src,
                      f"{bad} has no column '{missing}' (columns: {kept}); expected the columns {expected}")


def test_a_malformed_jsonl_line_names_the_file_and_the_line(tmp_path):
    src = write_dataset(tmp_path / "raw", "jsonl", GSM8K, "main")
    bad = src / "train.jsonl"
    bad.write_text(json.dumps(GSM8K["train"][0]) + "\n\n{question: 1}\n")
    assert_fails_with(tmp_path, "gsm8k.py", src, f"{bad} line 3 is not valid JSON ({json_error('{question: 1}')}); "
                      "each line must be one JSON object with the columns question, answer")


@pytest.mark.parametrize("line, problem", [
    ('["a list"]', "is a JSON list, not an object"),
    ('{"question": "q"}', "has no 'answer'"),
])
def test_a_jsonl_line_that_is_no_example_names_the_file_and_the_line(tmp_path, line, problem):
    src = write_dataset(tmp_path / "raw", "jsonl", GSM8K, "main")
    bad = src / "test.jsonl"
    bad.write_text(line + "\n")
    assert_fails_with(tmp_path, "gsm8k.py", src,
                      f"{bad} line 1 {problem}; each line must be one JSON object with the columns question, answer")


def test_a_gsm8k_answer_without_a_marked_number_names_the_line(tmp_path):
    src = write_dataset(tmp_path / "raw", "jsonl", GSM8K, "main")
    bad = write_jsonl(src / "train.jsonl", GSM8K["train"][:1] + [{"question": "q", "answer": "It is 5."}])
    assert_fails_with(tmp_path, "gsm8k.py", src,
                      f"{bad} line 2: the answer has no '#### <number>' to take the ground truth from")


def test_a_math_solution_without_a_boxed_answer_names_the_row(tmp_path):
    src = write_dataset(tmp_path / "raw", "hf", MATH, "data")
    no_box = dict(MATH["test"][0], solution="The sum is $\\fbox{5}$.")  # verl unwraps only \boxed
    bad = write_parquet(src / "data" / "test-00000-of-00001.parquet", MATH["test"] + [no_box])
    assert_fails_with(tmp_path, "math.py", src,
                      f"{bad} row 1: the solution has no \\boxed{{...}} answer to take the ground truth from")
