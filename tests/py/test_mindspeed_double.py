"""The MindSpeed contract double itself: its rules hold without megatron (rules 1, 2, 5, 9, 10 of
shared/notes/mindspeed.md). Rules 3, 4, 6, 7, 8 need megatron and are checked in
test_mindspeed_engine.py's failure scenario.

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

DOUBLE_DIR = str(Path(__file__).resolve().parent / "mindspeed_double")


@pytest.fixture
def double(monkeypatch):
    monkeypatch.syspath_prepend(DOUBLE_DIR)
    target = types.ModuleType("double_target")

    class Attention:
        def forward(self, x):
            return ("original", x)

    target.Attention = Attention
    monkeypatch.setitem(sys.modules, "double_target", target)
    modules = types.SimpleNamespace(
        patch_utils=importlib.import_module("mindspeed.patch_utils"),
        args_utils=importlib.import_module("mindspeed.args_utils"),
        reuse=importlib.import_module("mindspeed.te.pytorch.fp8.reuse"),
        record=importlib.import_module("mindspeed._double"),
        target=target,
    )
    modules.patch_utils.MindSpeedPatchesManager.patches_info = {}
    yield modules
    for name in [m for m in sys.modules if m == "mindspeed" or m.startswith("mindspeed.")]:
        del sys.modules[name]


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


def test_fp8_cache_clear_releases_storage_and_disabled_release_keeps_bf16_weights(double):
    reuse = double.reuse
    cached, weight = torch.ones(8), torch.ones(8, dtype=torch.bfloat16)
    reuse.cache_quantized_weight(cached)
    reuse.clear_weight_quantization_reuse_cache(release_storage=False)
    assert cached.untyped_storage().size() > 0 and reuse.cached_count() == 0
    reuse.cache_quantized_weight(cached)
    reuse.clear_weight_quantization_reuse_cache(release_storage=True)
    assert cached.untyped_storage().size() == 0
    reuse.set_weight_release_enabled(False)
    assert reuse.release_bf16_weight(weight) is False and weight.sum().item() == 8
    reuse.set_weight_release_enabled(True)
    assert reuse.release_bf16_weight(weight) is True and weight.untyped_storage().size() == 0
    assert ("fp8_cache_cleared", {"release_storage": True}) in double.record.EVENTS


def test_importing_the_adaptor_after_megatron_is_refused():
    code = (
        "import sys, types; sys.modules['megatron'] = types.ModuleType('megatron'); "
        "sys.modules['megatron.core'] = types.ModuleType('megatron.core'); import mindspeed.megatron_adaptor"
    )
    env = dict(os.environ, PYTHONPATH=DOUBLE_DIR)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert "RuntimeError: megatron was imported before mindspeed.megatron_adaptor" in done.stderr
