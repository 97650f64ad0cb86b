"""The MindSpeed contract double itself, for each documented stack: its rules hold without megatron
(rules 1, 2, 5, 10 of shared/notes/mindspeed.md), and what it offers is what the facts table, read from
the stack's pinned source, says (modules, flags, the fla names, the GatedDeltaNet swap). Rules 3, 4, 6,
7, 8 need megatron and are checked in test_mindspeed_engine.py's failure scenario.

The double is imported in this process only inside the `double` fixture, which removes it from
sys.path and sys.modules afterwards, so no other test sees a `mindspeed` package.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from ascend_doubles import STACKS, double_dir

from verl_lite.config.generated import ascend_facts

DOUBLE_DIR = double_dir()


def _forget_double():
    for name in [m for m in sys.modules if m.split(".")[0] in ("mindspeed", "megatron_adaptor", "fla", "fla_npu")]:
        del sys.modules[name]


@pytest.fixture(params=STACKS)
def double(monkeypatch, request):
    _forget_double()
    monkeypatch.syspath_prepend(double_dir(request.param))
    target = types.ModuleType("double_target")

    class Attention:
        def forward(self, x):
            return ("original", x)

    target.Attention = Attention
    monkeypatch.setitem(sys.modules, "double_target", target)
    modules = types.SimpleNamespace(
        stack=request.param,
        patch_utils=importlib.import_module("mindspeed.patch_utils"),
        args_utils=importlib.import_module("mindspeed.args_utils"),
        record=importlib.import_module("mindspeed._double"),
        target=target,
    )
    modules.patch_utils.MindSpeedPatchesManager.patches_info = {}
    yield modules
    _forget_double()


def replacement(self, x):
    return ("replacement", x)


def other_replacement(self, x):
    return ("other", x)


def outer_wrapper(fn):
    return lambda self, x: ("outer", fn(self, x))


def inner_wrapper(fn):
    return lambda self, x: ("inner", fn(self, x))


def test_a_second_replacement_on_the_same_name_raises_the_patch_of_forward_exist(double):
    pm = double.patch_utils.MindSpeedPatchesManager
    pm.register_patch("double_target.Attention.forward", replacement)
    with pytest.raises(RuntimeError, match="^the patch of forward exist !$"):
        pm.register_patch("double_target.Attention.forward", other_replacement)
    pm.register_patch("double_target.Attention.forward", other_replacement, force_patch=True)


def test_wrappers_stack_once_outermost_last_and_remove_patches_restores_the_original(double):
    pm = double.patch_utils.MindSpeedPatchesManager
    for wrapper in (inner_wrapper, outer_wrapper, inner_wrapper):
        pm.register_patch("double_target.Attention.forward", wrapper)
    pm.register_patch("double_target.Attention.forward", replacement)
    pm.apply_patches()
    attention = double.target.Attention()
    assert attention.forward(1) == ("outer", ("inner", ("replacement", 1)))
    pm.remove_patches()
    assert attention.forward(1) == ("original", 1)
    assert pm.patches_info["double_target.Attention.forward"].wrappers == []  # the entry stays, emptied


def test_a_missing_module_raises_unless_a_dummy_is_asked_for(double):
    pm = double.patch_utils.MindSpeedPatchesManager
    pm.register_patch("no_such_package.thing", replacement)
    with pytest.raises(ModuleNotFoundError):
        pm.apply_patches()
    pm.patches_info.clear()
    pm.register_patch("no_such_package_dummy.thing", replacement, create_dummy=True)
    pm.apply_patches()
    assert sys.modules.pop("no_such_package_dummy").thing is replacement


def test_arguments_are_parsed_once_from_argv_keeping_unknown_options_untyped(double, monkeypatch):
    args_utils = double.args_utils
    monkeypatch.setattr(args_utils, "_ARGS", None)
    monkeypatch.setattr(sys, "argv", ["train.py", "--use-flash-attn", "--context-parallel-size", "2",
                                      "--some-flag", "-x", "v"])
    args = args_utils.get_mindspeed_args()
    assert args.use_flash_attn is True and args.optimization_level == 2
    assert args.context_parallel_size == "2"  # a string: megatron's options are unknown here
    assert args.some_flag is True
    assert getattr(args, "") == "v"  # '-x v': the key is the token minus two characters
    monkeypatch.setattr(sys, "argv", ["train.py"])
    assert args_utils.get_mindspeed_args() is args  # cached


def test_key_equals_value_splits_and_repeated_values_make_a_list(double, monkeypatch):
    args_utils = double.args_utils
    monkeypatch.setattr(args_utils, "_ARGS", None)
    monkeypatch.setattr(sys, "argv", ["train.py", "--context-parallel-algo=megatron_cp_algo", "--layers", "1", "2"])
    args = args_utils.get_mindspeed_args()
    assert args.context_parallel_algo == "megatron_cp_algo"  # args_utils.py:30 splits at the first '='
    assert args.layers == ["1", "2"]  # :16-18: several values make a list, never converted


def test_the_double_offers_the_modules_its_stacks_mindspeed_ships_and_no_other(double):
    facts = ascend_facts.stack(double.stack)["mindspeed"]
    for entry in ("mindspeed.core.ssm.ops.flash_gated_delta_rule", "mindspeed.core.ssm.npu_chunk_gated_delta_rule",
                  "mindspeed.core.ssm.chunk_gated_delta_rule"):
        shipped = any(k.startswith(entry + ":") for k in facts["kernels"])
        if shipped:
            importlib.import_module(entry)
        else:
            with pytest.raises(ModuleNotFoundError, match=f"MindSpeed {double.stack} has no such module"):
                importlib.import_module(entry)
    with pytest.raises(ModuleNotFoundError):  # no documented stack ships the FP8 reuse cache
        importlib.import_module("mindspeed.te.pytorch.fp8.reuse")
    with pytest.raises(ModuleNotFoundError):  # MindSpeed-MM's entry is not part of either stack
        importlib.import_module("mindspeed_mm.fsdp.ops.gdn.flash_gated_delta_rule")


def test_the_double_registers_the_flags_its_stacks_features_register(double):
    parser = double.args_utils._parser()
    options = {o for a in parser._actions for o in a.option_strings}
    facts = ascend_facts.stack(double.stack)["mindspeed"]
    assert ("--use-naive-l2norm" in options) == bool(facts["naive_l2norm_flag"])
    assert ("--use-flash-attn-npu-batch-invariant" in options) == bool(facts["batch_invariant"])
    assert ("--fp8-reuse-quantized-weight" in options) == bool(facts["fp8_reuse"]["flag"])


def test_the_fla_names_after_the_pre_patch_are_the_tables_replacements(double, monkeypatch):
    facts = ascend_facts.stack(double.stack)["mindspeed"]["fla_stand_ins"]
    features = importlib.import_module("mindspeed.features")
    for with_fla_npu in (True, False):
        double.patch_utils.MindSpeedPatchesManager.patches_info = {}
        for name in [m for m in sys.modules if m.split(".")[0] == "fla"]:
            monkeypatch.delitem(sys.modules, name)
        if not with_fla_npu:
            monkeypatch.setitem(sys.modules, "fla_npu", None)  # flash-linear-attention-npu not installed
        features.apply_features_pre_patches(double.args_utils.get_mindspeed_args())
        for target, choices in facts.items():
            entry = choices.get("always") or choices.get("with fla_npu" if with_fla_npu else "without fla_npu")
            module, _, name = target.rpartition(".")
            if entry is None:
                assert module not in sys.modules or not hasattr(sys.modules[module], name), target
                continue
            bound = getattr(importlib.import_module(module), name)
            assert f"{bound.__module__}:{bound.__name__}" == entry["replacement"], target
    if not facts:  # core_r0.18.0: MindSpeed stands in nothing; MegatronAdaptor did, at `import mindspeed`
        assert double.stack == "core_r0.18.0"


