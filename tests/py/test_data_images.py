"""Rows with images for a rollout that cannot generate from them: Geometry3K rows (verl's layout, as
examples/data_preprocess/geo3k.py writes them) with a Qwen3.5 model on the vllm rollout are refused by
the preflight with the reason and the fixes, wherever the files are readable; the rows, models and
rollouts that can run are not. The parquet files are written here (no download)."""

from __future__ import annotations

import io
import json

import pytest

from verl_lite.config.compose import compose_config
from verl_lite.preflight import data
from verl_lite.preflight.run import collect_problems

QWEN35 = "/nonexistent/Qwen3.5-35B-A3B"  # not readable here: the shipped shape says qwen3_5_moe
QWEN3_VL = "/nonexistent/Qwen3-VL-30B-A3B-Instruct"


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _write(path, images_per_row):
    """A Geometry3K-format parquet: verl's columns, `images` a list of {bytes, path} per row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for i, n in enumerate(images_per_row):
        rows.append({
            "data_source": "hiyouga/geometry3k",
            "prompt": [{"role": "user", "content": "<image>" * n + f"Find x in figure {i}."}],
            "images": [{"bytes": _png(), "path": None} for _ in range(n)],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "3"},
            "extra_info": {"split": "train", "index": i},
        })
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def _gsm8k(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{
        "data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1 + 2?"}],
        "reward_model": {"style": "rule", "ground_truth": "3"}}]), str(path))
    return str(path)


def _cfg(model, train, val=None, rollout="vllm", *extra):
    overrides = [f"actor_rollout_ref.model.path={model}", f"actor_rollout_ref.rollout.name={rollout}",
                 f"data.train_files={train}", *extra]
    if val is not None:
        overrides.append(f"data.val_files={val}")
    cfg, problems = compose_config(overrides)
    assert problems == []
    return cfg


def test_geometry3k_rows_with_qwen3_5_on_vllm_are_refused_with_the_reason_and_the_fixes(tmp_path):
    train = _write(tmp_path / "train.parquet", [0, 1, 1])
    problems = data.image_rollout_problems(_cfg(QWEN35, train, _gsm8k(tmp_path / "test.parquet")))
    assert problems == [
        f"data.train_files: {train} has rows with images (column 'images', e.g. row 1) and the model is qwen3_5_moe "
        "with actor_rollout_ref.rollout.name=vllm: verl trains its Qwen3.5 scripts on Geometry3K, but verl_lite's "
        "vLLM rollout gives images to qwen3_vl and qwen3_vl_moe models only (Qwen3.5 generates from text there: "
        "docs/vl.md), so the run cannot generate from them (its first generation would stop); use text rows "
        "(GSM8K: examples/data_preprocess/gsm8k.py, the Qwen3.5 scripts' default)"]


def test_validation_rows_with_images_are_refused_too_and_a_custom_image_key_is_read(tmp_path):
    train, val = _gsm8k(tmp_path / "train.parquet"), _write(tmp_path / "test.parquet", [1])
    problems = data.image_rollout_problems(_cfg(QWEN35, train, val))
    assert len(problems) == 1 and problems[0].startswith(f"data.val_files: {val} has rows with images")
    # data.image_key names the column: under another name, `images` is not read as the images
    assert data.image_rollout_problems(_cfg(QWEN35, train, val, "vllm", "data.image_key=pictures")) == []


@pytest.mark.parametrize("images", [[0, 0], None], ids=["empty image lists", "no images column"])
def test_text_rows_run(tmp_path, images):
    train = _write(tmp_path / "t.parquet", images) if images else _gsm8k(tmp_path / "t.parquet")
    assert data.image_rollout_problems(_cfg(QWEN35, train)) == []


def test_the_hf_rollout_and_qwen3_vl_on_vllm_generate_from_the_images(tmp_path):
    train = _write(tmp_path / "train.parquet", [1])
    assert data.image_rollout_problems(_cfg(QWEN35, train, None, "hf")) == []
    assert data.image_rollout_problems(_cfg(QWEN3_VL, train)) == []


def _model_dir(tmp_path, hf):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(hf))
    return str(model)


def test_a_checkpoint_with_a_vision_tower_is_offered_the_hf_rollout_a_text_model_is_not(tmp_path):
    train = _write(tmp_path / "train.parquet", [1])
    vl = _model_dir(tmp_path, {"model_type": "qwen3_5", "vision_config": {"depth": 2}, "text_config": {}})
    [problem] = data.image_rollout_problems(_cfg(vl, train))
    assert "the model is qwen3_5 " in problem
    assert problem.endswith("or actor_rollout_ref.rollout.name=hf, which generates from the images with "
                            "transformers' model (docs/vl.md)")
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    [problem] = data.image_rollout_problems(_cfg(vl, train))
    assert ("the vllm rollout gives images to qwen3_vl and qwen3_vl_moe models only" in problem
            and problem.endswith("; use text rows"))


def test_a_file_not_here_is_left_to_the_training_machine_whose_check_reads_it(tmp_path):
    missing = str(tmp_path / "elsewhere" / "train.parquet")
    laptop = _cfg(QWEN35, missing, None, "vllm", "trainer.device=npu")
    assert not [p for p in collect_problems(laptop, for_training=False) if "rows with images" in p]
    assert any(p.startswith(f"data.train_files: {missing} does not exist")
               for p in collect_problems(laptop, for_training=True))
    # on the machine that trains, the file is there and the check refuses it, in either mode
    (tmp_path / "elsewhere").mkdir()
    _write(tmp_path / "elsewhere" / "train.parquet", [1])
    for for_training in (False, True):
        assert [p for p in collect_problems(laptop, for_training=for_training) if "rows with images" in p] == [
            data.image_rollout_problems(laptop)[0]]


def test_an_unknown_model_is_not_judged_here(tmp_path):
    train = _write(tmp_path / "train.parquet", [1])
    assert data.image_rollout_problems(_cfg("/nonexistent/some-model", train)) == []
