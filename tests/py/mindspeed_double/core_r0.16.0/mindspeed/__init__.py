"""Contract double of Ascend MindSpeed core_r0.16.0 (e4772499), for CPU tests (../../README.md). Not the
real library. The real `mindspeed/__init__.py` is a docstring; the double's code shared by both
stacks lives in ../../common/mindspeed, joined to this package's path."""

import os

STACK = "core_r0.16.0"
IS_CONTRACT_DOUBLE = True
__path__.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common", "mindspeed"))
