"""Double of core_r0.18.0's mindspeed/core/ssm/npu_chunk_gated_delta_rule.py:279 `chunk_gated_delta_rule`
(its Triton rule, fla's form: q/k/v [B, T, H, K|V], g/beta [B, T, H]; fp32 refused and batch 1 with
cu_seqlens in `_validate_inputs`, :239-270). Computes `_reference.rule`."""

from mindspeed import _stack

_stack.require(__name__)

from mindspeed.core.ssm import _reference  # noqa: E402


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, head_first=False):
    bounds = _reference.check_fla_form(q, k, v, g, beta, cu_seqlens, initial_state,
                                       "ChunkGatedDeltaRuleFunction does not support float32. Please use "
                                       "float16/bfloat16.")
    return _reference.rule(__name__ + ":chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                           output_final_state, use_qk_l2norm_in_kernel, bounds, chunk_size)
