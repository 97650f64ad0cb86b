"""Double of core_r0.16.0's mindspeed/core/ssm/ops/npu_causal_conv1d.py:195 `causal_conv1d` (fla's form;
the NPU op underneath). Computes `_reference.causal_conv1d`."""

from mindspeed import _stack

_stack.require(__name__)

from mindspeed.core.ssm import _reference  # noqa: E402


def causal_conv1d(x, weight, bias=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                  activation="silu"):
    return _reference.causal_conv1d(x, weight, bias, initial_state, output_final_state, cu_seqlens, activation)
