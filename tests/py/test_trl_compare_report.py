"""bench/trl_compare.py's table: each ratio is one system's tokens/s over its base's in the same
round (TRL, and TRL with verl_lite's chunk for the equal-kernels column), the median of the rounds;
and --from-json prints a saved run's table again without running anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import trl_compare  # noqa: E402

# tokens per step of each system in rounds 0, 1, 2 (every step takes 1 s, so tokens/s = tokens)
TOKENS = {"verl_lite": [300, 200, 330], "trl": [100, 100, 110], "trl_chunk_auto": [250, 160, 300]}


def _runs(warmup: int = 1):
    runs = []
    for system, per_round in TOKENS.items():
        for rnd, tokens in enumerate(per_round):
            steps = [{"s": 1.0, "tokens": tokens, "gen_s": 0.5, "score": 0.0} for _ in range(warmup + 3)]
            steps[0]["tokens"] = 1  # the warm-up step, dropped
            runs.append({"system": system, "response_length": 3, "round": rnd, "load_before": [1.0],
                         "load_after": [1.0], "steps": steps})
    return runs


def test_ratios_pair_each_round_with_its_base_and_take_the_median(capsys):
    rows = trl_compare.report(_runs(), list(TOKENS), [3], warmup=1, threads=1)
    mine = next(r for r in rows if r["system"] == "verl_lite")
    assert mine["round_ratios_vs_trl"] == pytest.approx([3.0, 2.0, 3.0])
    assert mine["ratio_vs_trl"] == pytest.approx(3.0)
    assert mine["round_ratios_vs_trl_chunk_auto"] == pytest.approx([1.2, 1.25, 1.1])
    assert mine["ratio_vs_trl_chunk_auto"] == pytest.approx(1.2)
    trl_row = next(r for r in rows if r["system"] == "trl_chunk_auto")
    assert "ratio_vs_trl_chunk_auto" not in trl_row and trl_row["ratio_vs_trl"] == pytest.approx(2.5)
    table = capsys.readouterr().out
    assert "| verl_lite | 3 | 1.000 | 300 | 600 | 277 | 3.00x | 3.00 2.00 3.00 | 1.20x | 1.20 1.25 1.10 |" in table


def test_without_trl_chunk_auto_the_table_has_no_equal_kernels_column(capsys):
    runs = [r for r in _runs() if r["system"] != "trl_chunk_auto"]
    rows = trl_compare.report(runs, ["verl_lite", "trl"], [3], warmup=1, threads=1)
    assert all("ratio_vs_trl_chunk_auto" not in r for r in rows)
    assert "equal kernels" not in capsys.readouterr().out


def test_from_json_prints_the_saved_runs_table(tmp_path):
    saved = tmp_path / "run.json"
    settings = {"systems": ",".join(TOKENS), "response_lengths": "3", "warmup": 1, "threads": 1}
    saved.write_text(json.dumps({"settings": settings, "runs": _runs(), "summary": []}))
    out = subprocess.run([sys.executable, str(REPO / "bench/trl_compare.py"), "--from-json", str(saved)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| verl_lite | 3 | 1.000 | 300 |" in out.stdout and "1.20x | 1.20 1.25 1.10 |" in out.stdout
