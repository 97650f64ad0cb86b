"""Preflight rules of the data and the reward (`for_training` only): the data files exist, each
row's data_source has a scorer (the custom reward file: `reward_file.py`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from verl_lite.data.dataset import as_file_list, expand
from verl_lite.reward.manager import CODE_SCORER_HINT, CODE_SOURCES, SUPPORTED_SOURCES, has_default_scorer


def _as_list(value: Any) -> List[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def data_file_problems(cfg: Any) -> List[str]:
    """data.train_files (not empty) and data.val_files name files that exist."""
    problems = []
    for key, value in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        files = _as_list(value)
        if key == "data.train_files" and not files:
            problems.append("data.train_files is empty: point it at parquet files")
        for f in files:
            if not os.path.isfile(os.path.expanduser(os.path.expandvars(f))):
                problems.append(f"{key}: {f} does not exist (point {key} at parquet files)")
    return problems


def data_source_problems(cfg: Any) -> List[str]:
    """Rows whose data_source no built-in scorer handles, when no custom reward function is set:
    found here from the data_source column alone, before Ray starts and any model is built."""
    if cfg.custom_reward_function.path:
        return []
    import pyarrow.parquet as pq  # heavy (~0.3 s): read only on the machine that trains

    problems = []
    for key, files in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        for raw in as_file_list(files):
            path = expand(raw)
            try:
                sources = pq.read_table(path, columns=["data_source"]).column(0).to_pylist()
            except Exception:  # a missing or unreadable file, or no such column: the data checks say so
                continue
            unknown: Dict[str, int] = {}
            for source in sources:  # empty or non-string values are the row checks' to report
                if isinstance(source, str) and source and not has_default_scorer(source):
                    unknown[repr(source)] = unknown.get(repr(source), 0) + 1
            if unknown:
                shown = ", ".join(f"{name} ({n} row{'s' if n != 1 else ''})" for name, n in list(unknown.items())[:3])
                code = sorted(repr(s) for s in CODE_SOURCES if repr(s) in unknown)
                hint = (f" ({', '.join(code)}: {CODE_SCORER_HINT})" if code else "")
                problems.append(f"{key}: {raw} has data_source {shown}{' and more' if len(unknown) > 3 else ''}, "
                                f"which no built-in scorer handles (it scores {SUPPORTED_SOURCES}); set "
                                f"custom_reward_function.path to a reward function for them{hint}")
    return problems
