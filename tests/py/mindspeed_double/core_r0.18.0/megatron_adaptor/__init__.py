"""Double of MegatronAdaptor (gitcode Ascend/MegatronAdaptor, core_r0.17.0 branch), which MindSpeed
core_r0.18.0 imports first (mindspeed/__init__.py:3). UNVERIFIED: its source is not reachable; what it
does here is what MindSpeed 0.18's docstrings say it does (npu_enhancement.py:143-144, 198-200):
"MA has already created dummy FLA modules so that Megatron's HAVE_FLA check passes" with
"torch-native FLA operators". The stand-ins compute with the double's reference rule (fp32 allowed,
as torch-native code would)."""

import sys
import types

STAND_INS = {
    "fla.ops.gated_delta_rule": "chunk_gated_delta_rule",
    "fla.modules.l2norm": "l2norm",
    "fla.modules.convolution": "causal_conv1d",
}


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
    from mindspeed.core.ssm import _reference

    bounds = None if cu_seqlens is None else [int(b) for b in cu_seqlens.reshape(-1).tolist()]
    return _reference.rule("megatron_adaptor:chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                           output_final_state, use_qk_l2norm_in_kernel, bounds)


def l2norm(x, dim=-1, eps=1e-6):
    from mindspeed.core.ssm import _reference

    return _reference.l2norm(x, dim=dim, eps=eps)


def causal_conv1d(*args, **kwargs):
    from mindspeed.core.ssm import _reference

    return _reference.causal_conv1d(*args, **kwargs)


def _stand_in() -> None:
    for dotted, name in STAND_INS.items():
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            path = ".".join(parts[:i])
            if path not in sys.modules:
                module = types.ModuleType(path)
                module.__file__ = "megatron_adaptor.dummy_module.py"
                sys.modules[path] = module
                if i > 1:
                    setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], module)
        setattr(sys.modules[dotted], name, globals()[name])


_stand_in()
