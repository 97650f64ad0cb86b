"""Double of mindspeed/ops/triton/l2norm.py:292 `l2norm(x, eps=1e-6, output_dtype=None)` (a Triton kernel
with its own autograd in MindSpeed; fla's form here)."""

from mindspeed import _stack

_stack.require(__name__)

from mindspeed.core.ssm import _reference  # noqa: E402


def l2norm(x, eps=1e-6, output_dtype=None):
    y = _reference.l2norm(x, eps=eps)
    return y if output_dtype is None else y.to(output_dtype)
