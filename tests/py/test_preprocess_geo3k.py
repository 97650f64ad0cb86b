"""examples/data_preprocess/geo3k.py: a local copy of hiyouga/geometry3k (a tiny fixture in the
dataset's own parquet layout, images as PNG bytes, made here) becomes verl's rows (the expected rows
are derived by hand from verl's examples/data_preprocess/geo3k.py), with the images intact; the
default reward scores them with verl's geo3k scores; bad input stops with one line naming the file."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from verl_lite.data.dataset import read_rows
from verl_lite.reward import default_compute_score

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "examples" / "data_preprocess" / "geo3k.py"
SUFFIX = (" You FIRST think about the reasoning process as an internal monologue and then provide the final "
          "answer. The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE "
          "put in \\boxed{}.")
# the Hugging Face Image feature's storage, as hiyouga/geometry3k's parquet files hold it
IMAGE_LIST = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def png(width, height, colour):
    buf = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buf, format="PNG")
    return buf.getvalue()


def geometry3k():
    """Two train rows and one test row shaped as the dataset's (the problem starts with <image>)."""
    return {
        "train": [
            {"images": [{"bytes": png(12, 9, (255, 0, 0)), "path": None}],
             "problem": "<image>Find x. Assume that segments that appear to be tangent are tangent.",
             "answer": "3\\sqrt{2}"},
            {"images": [{"bytes": png(8, 8, (0, 0, 255)), "path": None}],
             "problem": "<image>Find the measure of \\angle 2.", "answer": "56"},
        ],
        "test": [
            {"images": [{"bytes": png(10, 6, (0, 128, 0)), "path": None}],
             "problem": "<image>Find the area of the triangle. Round to the nearest tenth.", "answer": "12.5"},
        ],
    }


def write_split(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("images", IMAGE_LIST), ("problem", pa.string()), ("answer", pa.string())])
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path)
    return path


def write_dataset(root, data):
    for split, records in data.items():
        write_split(root / "data" / f"{split}-00000-of-00001.parquet", records)
    # the dataset's third split, which verl's script does not read
    write_split(root / "data" / "validation-00000-of-00001.parquet", data["test"])
    return root


def run_script(*args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def expected_rows(data, split):
    return [
        {
            "data_source": "hiyouga/geometry3k",
            "prompt": [{"role": "user", "content": ex["problem"] + SUFFIX}],
            "images": ex["images"],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": ex["answer"]},
            "extra_info": {"split": split, "index": i, "answer": ex["answer"], "question": ex["problem"]},
        }
        for i, ex in enumerate(data[split])
    ]


@pytest.fixture
def converted(tmp_path):
    data = geometry3k()
    src = write_dataset(tmp_path / "raw", data)
    out = tmp_path / "out"
    result = run_script("--local_dataset_path", src, "--local_save_dir", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return data, out, result


def test_each_split_becomes_verls_rows_with_the_images_column_by_column(converted):
    data, out, result = converted
    for split in ("train", "test"):
        table = pq.read_table(out / f"{split}.parquet")
        expected = expected_rows(data, split)
        assert table.column_names == ["data_source", "prompt", "images", "ability", "reward_model", "extra_info"]
        for column in table.column_names:
            assert table.column(column).to_pylist() == [row[column] for row in expected], column
        assert f"wrote {len(expected)} rows to {out / f'{split}.parquet'}" in result.stdout
    assert not (out / "validation.parquet").exists()


def test_the_images_open_to_the_pixels_of_the_dataset(converted):
    data, out, _ = converted
    for split in ("train", "test"):
        for row, ex in zip(pq.read_table(out / f"{split}.parquet").to_pylist(), data[split]):
            got = Image.open(io.BytesIO(row["images"][0]["bytes"]))
            want = Image.open(io.BytesIO(ex["images"][0]["bytes"]))
            assert (got.size, got.mode, got.tobytes()) == (want.size, want.mode, want.tobytes())
            assert row["prompt"][0]["content"].count("<image>") == len(row["images"]) == 1


def test_verl_lite_reads_the_rows_and_scores_them_with_verls_geo3k_scores(converted):
    _, out, _ = converted
    rows = read_rows([str(out / "train.parquet"), str(out / "test.parquet")])
    assert [r["data_source"] for r in rows] == ["hiyouga/geometry3k"] * 3
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        assert isinstance(row["images"][0]["bytes"], bytes)
        # the answer in the form the instruction asks for: reasoning in <think>, the answer boxed
        right = f"<think>Use the figure.</think> The answer is \\boxed{{{truth}}}."
        wrong = f"<think>Use the figure.</think> The answer is \\boxed{{{truth}+1}}."
        assert default_compute_score(row["data_source"], right, truth, row["extra_info"]) == 1.0
        assert default_compute_score(row["data_source"], wrong, truth, row["extra_info"]) == pytest.approx(0.1)
        assert default_compute_score(row["data_source"], f"\\boxed{{{truth}}}", truth) == pytest.approx(0.9)


def test_json_lines_with_image_files_are_read_too(tmp_path):
    (tmp_path / "raw").mkdir()
    figure = tmp_path / "raw" / "0.png"
    figure.write_bytes(png(4, 4, (1, 2, 3)))
    for split in ("train", "test"):
        record = {"images": [{"path": str(figure)}], "problem": "<image>Find y.", "answer": "7"}
        (tmp_path / "raw" / f"{split}.jsonl").write_text(json.dumps(record) + "\n")
    result = run_script("--local_dataset_path", tmp_path / "raw", "--local_save_dir", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    row = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()[0]
    assert row["images"] == [{"path": str(figure)}]
    assert row["prompt"][0]["content"] == "<image>Find y." + SUFFIX


# ---------------------------------------------------------------------------- bad input


def assert_fails_with(tmp_path, src, message):
    out = tmp_path / "out"
    result = run_script("--local_dataset_path", src, "--local_save_dir", out, cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, [f"error: {message}"], "")
    assert not out.exists()  # nothing is written before every split has been read


def test_a_missing_dataset_directory_is_named_and_nothing_is_downloaded(tmp_path):
    missing = tmp_path / "not_downloaded"
    assert_fails_with(tmp_path, missing, f"--local_dataset_path {missing} is not a directory; "
                                         "pass the directory holding the local copy of hiyouga/geometry3k")


def test_a_file_without_the_images_column_names_it(tmp_path):
    src = write_dataset(tmp_path / "raw", geometry3k())
    bad = src / "data" / "test-00000-of-00001.parquet"
    pq.write_table(pa.table({"problem": ["<image>Find x."], "answer": ["2"]}), bad)
    assert_fails_with(tmp_path, src, f"{bad} has no column 'images' (columns: problem, answer); expected the "
                                     "columns images, problem, answer")


def test_placeholders_that_do_not_match_the_images_name_the_row(tmp_path):
    data = geometry3k()
    data["train"][1]["problem"] = "Find the measure of \\angle 2."  # the <image> left out
    src = write_dataset(tmp_path / "raw", data)
    assert_fails_with(tmp_path, src, f"{src / 'data' / 'train-00000-of-00001.parquet'} row 1: the problem holds 0 "
                      "<image> placeholder(s) and the row 1 image(s); the processor puts image i at the i-th "
                      "<image>, so the counts must match")


@pytest.mark.parametrize("entry, problem", [
    ({"bytes": b"not a png", "path": None}, "image 0 holds bytes that are no image PIL reads"),
    ({"bytes": None, "path": None}, "image 0 is {'bytes': None, 'path': None}; expected an entry with image "
                                    "bytes ('bytes') or a file ('path')"),
])
def test_an_image_entry_that_is_no_image_names_the_row(tmp_path, entry, problem):
    data = geometry3k()
    data["test"][0]["images"] = [entry]
    src = write_dataset(tmp_path / "raw", data)
    out = tmp_path / "out"
    result = run_script("--local_dataset_path", src, "--local_save_dir", out, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == "" and not out.exists()
    assert result.stderr.startswith(f"error: {src / 'data' / 'test-00000-of-00001.parquet'} row 0: {problem}")
    assert len(result.stderr.splitlines()) == 1
