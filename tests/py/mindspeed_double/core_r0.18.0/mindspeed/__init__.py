"""Contract double of Ascend MindSpeed core_r0.18.0 (4213c913), for CPU tests (../../README.md). Not the
real library. As the real `mindspeed/__init__.py:3`, importing the package imports the separate
MegatronAdaptor package (`megatron_adaptor`, doubled beside it: unverified, its source is not
reachable). The double's code shared by both stacks lives in ../../common/mindspeed."""

import os

STACK = "core_r0.18.0"
IS_CONTRACT_DOUBLE = True
__path__.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common", "mindspeed"))

import megatron_adaptor  # noqa: E402,F401  (mindspeed/__init__.py:3)
