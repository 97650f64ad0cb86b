"""Double of core_r0.16.0's AscendC GDN entry, mindspeed/core/ssm/ops/flash_gated_delta_rule.py:281
(`flash_gated_delta_rule`, fla's form: q/k/v [B, T, H, K|V], g/beta [B, T, H]; needs fla_npu,
:359-363; fp32 refused, :367-368; cu_seqlens with batch 1, :387-399). Computes `_reference.rule`.
Exists only on stacks whose MindSpeed ships it (the facts table)."""

from mindspeed import _stack

_stack.require(__name__)

try:
    import fla_npu
except ImportError:
    fla_npu = None

from mindspeed.core.ssm import _reference


def flash_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, head_first=False):
    if fla_npu is None:
        raise ValueError("fla_npu is not installed. "
                         "Please ensure that the ascendc operators are successfully compiled and installed.")
    bounds = _reference.check_fla_form(q, k, v, g, beta, cu_seqlens, initial_state,
                                       "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.")
    return _reference.rule(__name__ + ":flash_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                           output_final_state, use_qk_l2norm_in_kernel, bounds, chunk_size)
