"""MindSpeed's argument namespace (mindspeed/args_utils.py): parsed once from the real sys.argv.

Only MindSpeed's own options are declared; unknown tokens are kept untyped: `--a-b` -> True,
`--a-b x` -> 'x', and the key is the token minus two characters (so `-x v` gives key '').
Megatron options such as `--context-parallel-size 2` therefore arrive as strings.
"""

import argparse
import sys
from typing import Any, Optional

_ARGS: Optional[argparse.Namespace] = None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--optimization-level", type=int, default=2)
    parser.add_argument("--optimizer-selection", default="fused_adamw")
    parser.add_argument("--use-flash-attn", action="store_true")
    parser.add_argument("--use-flash-attn-npu-batch-invariant", action="store_true")
    parser.add_argument("--use-batch-invariant-ops", action="store_true")
    parser.add_argument("--fp8-reuse-quantized-weight", action="store_true")
    return parser


def get_mindspeed_args() -> argparse.Namespace:
    global _ARGS
    if _ARGS is None:
        args, unknown = _parser().parse_known_args(sys.argv[1:])
        i = 0
        while i < len(unknown):
            token = unknown[i]
            if not token.startswith("-"):
                i += 1
                continue
            key = token[2:].replace("-", "_")
            if i + 1 < len(unknown) and not unknown[i + 1].startswith("-"):
                setattr(args, key, unknown[i + 1])
                i += 2
            else:
                setattr(args, key, True)
                i += 1
        _ARGS = args
    return _ARGS


def get_full_args() -> Any:
    """Megatron's get_args() when megatron.training set it up, else the MindSpeed namespace."""
    try:
        from megatron.training import get_args  # not shipped with megatron-core

        return get_args()
    except (ImportError, AssertionError, AttributeError):
        return get_mindspeed_args()
