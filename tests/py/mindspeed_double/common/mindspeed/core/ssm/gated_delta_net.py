"""Double of MindSpeed's GatedDeltaNet (mindspeed/core/ssm/gated_delta_net.py), the class its repatch swaps
in for megatron's (the facts table's `gdn_swap`):

- core_r0.16.0 (e4772499): its own class, `GatedDeltaNet(MegatronModule)` (:62), with megatron's
  parameter names (in_proj, conv1d, dt_bias, A_log, out_norm, out_proj; :128-214). Its kernel is the
  module-level `chunk_gated_delta_rule` imported from fla (:37-45), i.e. what MindSpeed's pre-patch put
  behind that name; in deterministic mode mindspeed.core.ssm.chunk_gated_delta_rule's
  torch_chunk_gated_delta_rule (:198-202). causal_conv1d only where fla_npu imports (:47-51), else
  F.conv1d (:427-450); packed (THD) input needs it and is refused in deterministic mode (:286-302).
  q/k l2norm: `naive_l2norm` when MindSpeed's args say use_naive_l2norm, else fla's l2norm (:546-560).
  The attention mask is ignored (":: TODO: Deal with attention_mask").
- core_r0.18.0 (4213c913): `GatedDeltaNet(_MegatronGatedDeltaNet)`, a subclass of megatron 0.18's class
  that only sets `self.gated_delta_rule` to its Triton rule outside deterministic mode and takes its
  Triton l2norm (:26-66); the forward is megatron 0.18's, which takes THD. megatron-core 0.18 does not
  install on this project's Python, so the double subclasses the installed megatron's class and runs
  the same forward as below (megatron 0.16's forward takes no THD and calls module-level names).

Not modelled: context parallelism (MindSpeed's all-to-all from sequence to head split; CP > 1 raises
NotImplementedError here), inference contexts. Computes through the kernel doubles (`_reference`).
"""

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from mindspeed import _stack

_stack.require(__name__)

from megatron.core.ssm import gated_delta_net as _megatron_module  # noqa: E402
from megatron.core.tensor_parallel import get_cuda_rng_tracker  # noqa: E402
from megatron.core.transformer.module import MegatronModule  # noqa: E402
from megatron.core.transformer.spec_utils import build_module  # noqa: E402

from mindspeed.args_utils import get_full_args  # noqa: E402

# megatron's class as the swap found it (this module is imported while the patch registers)
_MegatronGatedDeltaNet = _megatron_module.GatedDeltaNet
SUBCLASS = bool(_stack.FACTS["gdn_swap"]["subclass_of_megatron"])
KERNEL = _stack.FACTS["gdn_swap"]["kernel"]

# the kernel names bound at import, where the table says the real module takes them
if str(KERNEL.get("chunk_gated_delta_rule", "")).startswith("fla."):  # core_r0.16.0: the fla names
    from fla.modules.l2norm import l2norm  # MindSpeed's pre-patch stands these in
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    try:
        import fla_npu  # noqa: F401
        from fla.modules.convolution import causal_conv1d
    except ImportError:
        causal_conv1d = None
    from mindspeed.core.ssm.chunk_gated_delta_rule import torch_chunk_gated_delta_rule
else:  # core_r0.18.0: its own Triton rule and l2norm; the conv is megatron's (fla's, stood in by MegatronAdaptor)
    from mindspeed.core.ssm.npu_chunk_gated_delta_rule import chunk_gated_delta_rule
    from mindspeed.ops.triton.l2norm import l2norm

    try:
        from fla.modules.convolution import causal_conv1d
    except ImportError:
        causal_conv1d = None

    def torch_chunk_gated_delta_rule(*args, cu_seqlens=None, **kwargs):
        """megatron 0.18's torch rule (core_v0.18.0 ssm/gated_delta_net.py:952-974), which takes `cu_seqlens`
        and refuses anything but None, over the installed megatron's (which has no such parameter)."""
        assert cu_seqlens is None, "cu_seqlens is not supported for torch_chunk_gated_delta_rule for now."
        return _megatron_module.torch_chunk_gated_delta_rule(*args, **kwargs)


def naive_l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6) -> torch.Tensor:
    """core_r0.16.0 :54-59: fla's l2norm in torch, cast back to the input dtype."""
    dtype = x.dtype
    return (x * torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)).to(dtype)


def _build_parameters(self, config, submodules, bias, conv_bias, conv_init, use_qk_l2norm, A_init_range,
                      pg_collection, layer_number) -> None:
    """core_r0.16.0 GatedDeltaNet.__init__ :90-225 (megatron's layout)."""
    assert pg_collection is not None, "pg_collection must be provided for GatedDeltaNet"
    self.layer_number, self.bias, self.conv_bias, self.conv_init = layer_number, bias, conv_bias, conv_init
    self.A_init_range, self.use_qk_l2norm, self.pg_collection = A_init_range, use_qk_l2norm, pg_collection
    self.cp_size = pg_collection.cp.size()
    self.tp_size = pg_collection.tp.size()
    self.sp_size = self.tp_size if config.sequence_parallel else 1
    self.config, self.hidden_size = config, config.hidden_size
    self.act_fn = config.activation_func
    self.activation = self.act_fn.__name__
    self.conv_kernel_dim = config.linear_conv_kernel_dim
    self.key_head_dim, self.value_head_dim = config.linear_key_head_dim, config.linear_value_head_dim
    self.num_key_heads, self.num_value_heads = config.linear_num_key_heads, config.linear_num_value_heads
    self.qk_dim = self.key_head_dim * self.num_key_heads
    self.v_dim = self.value_head_dim * self.num_value_heads
    self.qk_dim_local_tp, self.v_dim_local_tp = self.qk_dim // self.tp_size, self.v_dim // self.tp_size
    self.in_proj_dim = self.qk_dim * 2 + self.v_dim * 2 + self.num_value_heads * 2
    self.in_proj = build_module(submodules.in_proj, self.hidden_size, self.in_proj_dim, config=config,
                                init_method=config.init_method, gather_output=False, bias=bias, skip_bias_add=False,
                                is_expert=False, tp_comm_buffer_name="fc1", tp_group=pg_collection.tp)
    self.conv_dim = self.qk_dim * 2 + self.v_dim
    self.conv_dim_local_tp = self.conv_dim // self.tp_size
    self.conv1d = nn.Conv1d(self.conv_dim_local_tp, self.conv_dim_local_tp, bias=conv_bias,
                            kernel_size=self.conv_kernel_dim, groups=self.conv_dim_local_tp,
                            padding=self.conv_kernel_dim - 1, device=torch.cuda.current_device(),
                            dtype=config.params_dtype)
    setattr(self.conv1d.weight, "tensor_model_parallel", True)
    self.num_v_heads_local_tp = self.num_value_heads // self.tp_size
    self.dt_bias = nn.Parameter(torch.empty(self.num_v_heads_local_tp, dtype=config.params_dtype,
                                            device=torch.cuda.current_device()))
    self.A_log = nn.Parameter(torch.empty(self.num_v_heads_local_tp, dtype=config.params_dtype,
                                          device=torch.cuda.current_device()))
    for p in (self.dt_bias, self.A_log):
        setattr(p, "tensor_model_parallel", True)
    self.gated_delta_rule = torch_chunk_gated_delta_rule if config.deterministic_mode else chunk_gated_delta_rule
    self.out_norm = build_module(submodules.out_norm, config=config, hidden_size=self.value_head_dim,
                                 eps=config.layernorm_epsilon)
    self.out_proj = build_module(submodules.out_proj, self.v_dim, self.hidden_size, config=config,
                                 init_method=config.output_layer_init_method, bias=bias, input_is_parallel=True,
                                 skip_bias_add=True, is_expert=False, tp_comm_buffer_name="fc2",
                                 tp_group=pg_collection.tp)
    if config.perform_initialization:
        with get_cuda_rng_tracker().fork():
            if conv_init is not None:
                nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
            self.dt_bias.data.fill_(1.0)
            self.A_log.data.copy_(torch.log(torch.empty_like(self.A_log).uniform_(*A_init_range)))


def _cu_seqlens(packed_seq_params, total: int) -> torch.Tensor:
    """The padded cu_seqlens are preferred (core_r0.16.0 _resolve_cu_seqlens :592-660, megatron 0.18
    :575-600); the last entry must equal the packed length."""
    cu = packed_seq_params.cu_seqlens_q_padded
    cu = packed_seq_params.cu_seqlens_q if cu is None else cu
    cu = cu.reshape(-1)
    if int(cu[-1]) != total:
        raise ValueError(f"GDN: cu_seqlens_q[-1]={int(cu[-1])} does not match total_sequence_length={total}.")
    return cu


def _forward(self, hidden_states, attention_mask, inference_context=None, packed_seq_params=None,
             sequence_len_offset=None, *, inference_params=None, **kwargs) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    if inference_context is not None or inference_params is not None:
        raise NotImplementedError("GDN does not support inference for now.")
    if self.cp_size > 1:
        raise NotImplementedError("the MindSpeed double does not model GatedDeltaNet's context-parallel all-to-all")
    seq_len, batch, _ = hidden_states.shape
    seq_len = seq_len * self.sp_size
    thd = packed_seq_params is not None and packed_seq_params.qkv_format == "thd"
    cu = None
    if thd:
        if causal_conv1d is None and not SUBCLASS:
            raise RuntimeError("THD (packed sequence) scenario only supports FLA fused operators, "
                               "but FLA is not available. Please install the flash-linear-attention package.")
        assert batch == 1, "Packed sequence expects batch dimension to be 1"
        assert not self.config.deterministic_mode, "Packed sequence does not support deterministic mode."
        cu = _cu_seqlens(packed_seq_params, seq_len)
    qkvzba, _ = self.in_proj(hidden_states)
    qkvzba = qkvzba.transpose(0, 1)
    qkv, gate, beta, alpha = torch.split(
        qkvzba, [self.qk_dim_local_tp * 2 + self.v_dim_local_tp, self.v_dim_local_tp,
                 self.num_value_heads // self.tp_size, self.num_value_heads // self.tp_size], dim=-1)
    gate = gate.reshape(batch, seq_len, -1, self.value_head_dim)
    beta, alpha = beta.reshape(batch, seq_len, -1), alpha.reshape(batch, seq_len, -1)
    if causal_conv1d is None or self.config.deterministic_mode:
        out = F.conv1d(qkv.transpose(1, 2).contiguous(), self.conv1d.weight, self.conv1d.bias,
                       padding=self.conv1d.padding, groups=self.conv_dim_local_tp)
        qkv = self.act_fn(out[..., :seq_len]).transpose(1, 2)
    else:
        qkv, _ = causal_conv1d(x=qkv, weight=self.conv1d.weight.squeeze(1), bias=self.conv1d.bias,
                               activation=self.activation, initial_state=None, output_final_state=False, cu_seqlens=cu)
    query_key, value = torch.split(qkv, [2 * self.qk_dim_local_tp, self.v_dim_local_tp], dim=-1)
    query_key = query_key.reshape(batch, seq_len, -1, self.key_head_dim)
    value = value.reshape(batch, seq_len, -1, self.value_head_dim)
    if self.use_qk_l2norm:
        naive = not SUBCLASS and getattr(get_full_args(), "use_naive_l2norm", False)
        query_key = (naive_l2norm if naive else l2norm)(query_key.contiguous())
    split = self.qk_dim_local_tp // self.key_head_dim
    query, key = torch.split(query_key, [split, split], dim=2)
    if self.num_value_heads // self.num_key_heads > 1:
        repeat = self.num_value_heads // self.num_key_heads
        query, key = query.repeat_interleave(repeat, dim=2), key.repeat_interleave(repeat, dim=2)
    g = -self.A_log.exp() * F.softplus(alpha.float() + self.dt_bias)
    beta = beta.sigmoid()
    core, _ = self.gated_delta_rule(query.contiguous(), key.contiguous(), value.contiguous(), g=g,
                                    beta=beta.contiguous(), initial_state=None, output_final_state=False,
                                    use_qk_l2norm_in_kernel=False, cu_seqlens=cu)
    x = core.reshape(-1, core.shape[-1])
    y = (self.out_norm(x) * self.act_fn(gate.reshape(-1, gate.shape[-1]).float())).to(core.dtype)
    y = y.reshape(batch, seq_len, -1).transpose(0, 1).contiguous()
    return self.out_proj(y)


if SUBCLASS:
    class GatedDeltaNet(_MegatronGatedDeltaNet):
        """core_r0.18.0's subclass: megatron's layer with MindSpeed's Triton rule and l2norm."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # what megatron 0.18's __init__ sets and the installed 0.16 lacks
            self.cp_size = self.pg_collection.cp.size()
            self.qk_dim_local_tp, self.v_dim_local_tp = self.qk_dim // self.tp_size, self.v_dim // self.tp_size
            self.gated_delta_rule = torch_chunk_gated_delta_rule if self.config.deterministic_mode \
                else chunk_gated_delta_rule

        forward = _forward
else:
    class GatedDeltaNet(MegatronModule):
        """core_r0.16.0's own class (not a subclass of megatron's)."""

        def __init__(self, config, submodules, layer_number=None, bias=False, conv_bias=False, conv_init=None,
                     use_qk_l2norm=True, A_init_range=(1, 16), pg_collection=None, name=None, **kwargs):
            super().__init__(config)
            _build_parameters(self, config, submodules, bias, conv_bias, conv_init, use_qk_l2norm, A_init_range,
                              pg_collection, layer_number)

        forward = _forward
