"""Every config key of verl's PPO trainers (fsdp and megatron) and its fully-async trainer at one
pinned commit, loaded from verl_keys.json (written by `python tools/gen_verl_keys.py /path/to/verl`;
do not edit it by hand).

KEYS: every key, sections included. OPEN: keys whose value is null or an empty mapping (verl takes
new keys below them, +key=value). DEFAULTS: verl's default of each scalar or list key
(interpolations as written, e.g. '${...}').
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, FrozenSet

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_keys.json")

with open(TABLE_PATH, encoding="utf-8") as _f:
    _TABLE = json.load(_f)

VERL_COMMIT: str = _TABLE["verl_commit"]
KEYS: FrozenSet[str] = frozenset(_TABLE["keys"])
OPEN: FrozenSet[str] = frozenset(_TABLE["open"])
DEFAULTS: Dict[str, Any] = _TABLE["defaults"]
