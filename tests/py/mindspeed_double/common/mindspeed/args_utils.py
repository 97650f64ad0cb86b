"""MindSpeed's argument namespace (mindspeed/args_utils.py, identical at core_r0.16.0 e4772499 and
core_r0.18.0 4213c913): parsed once from the real sys.argv.

Only MindSpeed's own options are declared (parse_known_args, allow_abbrev=False); unknown tokens are
kept untyped (`parser_unknown_args`, args_utils.py:22-37): a token starting with "-" opens a key,
`--k=v` splits at the first "=", following non-dash tokens are collected, and `add_args` (:12-19)
turns no value into True, one into a scalar and several into a list; the key is the token minus two
characters with "-" -> "_" (so `-x v` gives key ''). Megatron options such as
`--context-parallel-size 2` therefore arrive as strings.
"""

import argparse
import sys
from typing import Any, Dict, List, Optional

_ARGS: Optional[argparse.Namespace] = None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--optimization-level", type=int, default=2)
    parser.add_argument("--optimizer-selection", default="fused_adamw")
    parser.add_argument("--use-flash-attn", action="store_true")
    from mindspeed import _stack

    if _stack.flag("--use-flash-attn-npu-batch-invariant"):
        parser.add_argument("--use-flash-attn-npu-batch-invariant", action="store_true")
        parser.add_argument("--use-batch-invariant-ops", action="store_true")
    if _stack.flag("--fp8-reuse-quantized-weight"):
        parser.add_argument("--fp8-reuse-quantized-weight", action="store_true")
    if _stack.flag("--use-naive-l2norm"):
        parser.add_argument("--use-naive-l2norm", action="store_true")
    return parser


def _add(args: Dict[str, Any], key: Optional[str], value: Optional[List[str]]) -> None:
    if key is not None:
        args[key[2:].replace("-", "_")] = True if value is None else (value[0] if len(value) == 1 else value)


def parser_unknown_args(args: Dict[str, Any], unknown: List[str]) -> Dict[str, Any]:
    key, value = None, None
    for token in unknown:
        if token.startswith("-"):
            _add(args, key, value)
            parts = token.split("=", maxsplit=1)
            key, value = (token, None) if len(parts) == 1 else (parts[0], [parts[1]])
        elif value is None:
            value = [token]
        else:
            value.append(token)
    _add(args, key, value)
    return args


def get_mindspeed_args() -> argparse.Namespace:
    global _ARGS
    if _ARGS is None:
        args, unknown = _parser().parse_known_args(sys.argv[1:])
        _ARGS = argparse.Namespace(**parser_unknown_args(vars(args), unknown))
    return _ARGS


def get_full_args() -> Any:
    """Megatron's get_args() when megatron.training set it up, else the MindSpeed namespace."""
    try:
        from megatron.training import get_args  # not shipped with megatron-core

        return get_args()
    except (ImportError, AssertionError, AttributeError):
        return get_mindspeed_args()
