"""Double of core_r0.16.0's mindspeed/core/ssm/chunk_gated_delta_rule.py: `chunk_gated_delta_rule`
(:247, its Triton rule, fla's form, what the fla name is without fla_npu) and
`torch_chunk_gated_delta_rule` (:431, the pure-torch rule its GatedDeltaNet takes in deterministic
mode; fp32 accepted)."""

from mindspeed import _stack

_stack.require(__name__)

from mindspeed.core.ssm import _reference  # noqa: E402


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, head_first=False):
    bounds = _reference.check_fla_form(q, k, v, g, beta, cu_seqlens, initial_state,
                                       "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.")
    return _reference.rule(__name__ + ":chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                           output_final_state, use_qk_l2norm_in_kernel, bounds, chunk_size)


def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                 output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    bounds = None if cu_seqlens is None else [int(b) for b in cu_seqlens.reshape(-1).tolist()]
    out, final = _reference.rule(__name__ + ":torch_chunk_gated_delta_rule", query, key, value, g, beta, None,
                                 initial_state, output_final_state, use_qk_l2norm_in_kernel, bounds, chunk_size)
    return out, final
