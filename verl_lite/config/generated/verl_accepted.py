"""verl keys verl_lite has no setting for, with the values that ask for exactly what verl_lite does,
loaded from verl_accepted.json (written by `python tools/gen_verl_accepted.py`, where each decision
is reviewed with its reason; do not edit the JSON by hand).

ACCEPTED: {verl key: {"values": [accepted values], "reason": why each means what verl_lite does}}.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

TABLE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_accepted.json")

with open(TABLE_PATH, encoding="utf-8") as _f:
    ACCEPTED: Dict[str, Dict[str, Any]] = json.load(_f)["accepted"]
