"""Engine and rollout registries: "module:Class" strings resolved without importing, twins for
every value model, and errors that list what is registered."""

import subprocess
import sys
import textwrap

import pytest

from verl_lite import registry
from verl_lite.config import load_config
from verl_lite.registry import ENGINES, ROLLOUTS, EngineRegistry, RegistryError


def test_the_engine_table_is_exactly_the_supported_backends_and_devices():
    assert dict(ENGINES.items()) == {
        ("language_model", "fsdp", "cpu"): "verl_lite.engine.torch.engine:TorchLMEngine",
        ("language_model", "fsdp", "cuda"): "verl_lite.engine.torch.engine:TorchLMEngine",
        ("language_model", "fsdp", "npu"): "verl_lite.engine.torch.engine:TorchLMEngine",
        ("value_model", "fsdp", "cpu"): "verl_lite.engine.torch.engine:TorchValueEngine",
        ("value_model", "fsdp", "cuda"): "verl_lite.engine.torch.engine:TorchValueEngine",
        ("value_model", "fsdp", "npu"): "verl_lite.engine.torch.engine:TorchValueEngine",
        ("language_model", "megatron", "cpu"): "verl_lite.engine.megatron.engine:MegatronLMEngine",
        ("language_model", "megatron", "cuda"): "verl_lite.engine.megatron.engine:MegatronLMEngine",
        ("value_model", "megatron", "cpu"): "verl_lite.engine.megatron.value:MegatronValueEngine",
        ("value_model", "megatron", "cuda"): "verl_lite.engine.megatron.value:MegatronValueEngine",
        ("language_model", "megatron", "npu"): "verl_lite.engine.megatron.mindspeed:MindSpeedLMEngine",
        ("value_model", "megatron", "npu"): "verl_lite.engine.megatron.mindspeed:MindSpeedValueEngine",
    }


def test_every_language_model_key_has_a_value_model_twin():
    lm = {k[1:] for k in ENGINES.keys() if k[0] == "language_model"}
    vm = {k[1:] for k in ENGINES.keys() if k[0] == "value_model"}
    assert lm and lm == vm


def test_a_critic_on_npu_with_megatron_resolves_to_the_mindspeed_value_engine():
    cfg = load_config(["actor_rollout_ref.actor.strategy=megatron", "algorithm.adv_estimator=gae"])
    assert registry.resolve_engine(cfg, "critic", "npu") == "verl_lite.engine.megatron.mindspeed:MindSpeedValueEngine"
    assert registry.resolve_engine(cfg, "ref", "npu") == "verl_lite.engine.megatron.mindspeed:MindSpeedLMEngine"


def test_ref_and_critic_without_a_strategy_use_the_actors_and_their_own_when_set():
    cfg = load_config(["actor_rollout_ref.actor.strategy=megatron", "critic.strategy=fsdp"])
    assert registry.engine_key(cfg, "ref", "cuda") == ("language_model", "megatron", "cuda")
    assert registry.engine_key(cfg, "critic", "cuda") == ("value_model", "fsdp", "cuda")


def test_resolving_imports_nothing():
    code = textwrap.dedent("""
        import sys
        from verl_lite.registry import ENGINES, ROLLOUTS
        for key in ENGINES.keys():
            ENGINES.resolve(*key)
        ROLLOUTS.resolve("vllm")
        print(sorted(m for m in sys.modules if m.startswith(("verl_lite.engine", "verl_lite.rollout", "torch"))))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(__import__("pathlib").Path(registry.__file__).parents[1]),
    )
    assert out.stdout.strip() == "[]"


def test_a_miss_lists_what_is_registered_for_the_model_type_and_the_fix():
    reg = EngineRegistry()
    reg.register("language_model", "fsdp", ("cpu", "cuda", "npu"), "m:LM")
    reg.register("value_model", "fsdp", ("cpu", "cuda"), "m:V")
    with pytest.raises(RegistryError) as info:
        reg.resolve("value_model", "fsdp", "npu")
    assert str(info.value) == (
        "Unknown engine: no value_model engine for backend 'fsdp' on device 'npu'. "
        "Registered for value_model: fsdp on cpu, cuda. "
        "Fix: backend fsdp runs on cpu, cuda: set trainer.device to one of them"
    )


def test_a_miss_on_an_unknown_backend_suggests_the_nearest_strategy():
    with pytest.raises(RegistryError) as info:
        ENGINES.resolve("language_model", "fsdp2", "cuda")
    assert "Registered for language_model: fsdp on cpu, cuda, npu; megatron on cpu, cuda, npu" in str(info.value)
    assert str(info.value).endswith("Fix: set the strategy to fsdp")


def test_a_miss_on_the_removed_mindspeed_backend_gives_the_migration():
    with pytest.raises(RegistryError) as info:
        ENGINES.resolve("value_model", "mindspeed_megatron", "npu")
    assert "use strategy megatron with trainer.device=npu" in str(info.value)


def test_an_unknown_model_type_lists_the_model_types():
    with pytest.raises(RegistryError, match="registered model types are language_model, value_model"):
        ENGINES.resolve("reward_model", "fsdp", "cpu")


def test_registering_a_key_twice_is_an_error_naming_both_targets():
    reg = EngineRegistry()
    reg.register("language_model", "fsdp", "cpu", "a.b:First")
    with pytest.raises(RegistryError) as info:
        reg.register("language_model", "fsdp", "cpu", "a.b:Second")
    assert "already registered as a.b:First" in str(info.value) and "a.b:Second" in str(info.value)
    assert reg.resolve("language_model", "fsdp", "cpu") == "a.b:First"


def test_a_target_without_module_and_class_is_rejected():
    with pytest.raises(RegistryError, match="must be 'package.module:Class'"):
        EngineRegistry().register("language_model", "fsdp", "cpu", "JustAClass")


def test_the_decorator_records_module_and_qualname_and_returns_the_class_unchanged():
    reg = EngineRegistry()

    class Outer:
        @reg.register("value_model", "fsdp", ["cpu", "cuda"])
        class Engine:
            pass

    assert reg.resolve("value_model", "fsdp", "cpu") == f"{__name__}:{Outer.Engine.__qualname__}"
    assert reg.resolve("value_model", "fsdp", "cuda").endswith("Outer.Engine")
    assert isinstance(Outer.Engine, type)


def test_load_imports_the_registered_class():
    reg = EngineRegistry()
    reg.register("language_model", "fsdp", "cpu", "collections:OrderedDict")
    import collections

    assert reg.load("language_model", "fsdp", "cpu") is collections.OrderedDict


def test_a_failing_import_surfaces_with_the_target_instead_of_being_hidden():
    reg = EngineRegistry()
    reg.register("language_model", "fsdp", "cpu", "verl_lite_no_such_module.engine:X")
    reg.register("language_model", "fsdp", "cuda", "collections:NoSuchClass")
    with pytest.raises(RegistryError, match="cannot import verl_lite_no_such_module.engine:X: ModuleNotFoundError"):
        reg.load("language_model", "fsdp", "cpu")
    with pytest.raises(RegistryError, match="module 'collections' has no 'NoSuchClass'"):
        reg.load("language_model", "fsdp", "cuda")


def test_rollouts_are_registered_by_name_and_a_miss_lists_them():
    assert ROLLOUTS.resolve("hf") == "verl_lite.rollout.hf:HFRollout"
    assert ROLLOUTS.resolve("vllm") == "verl_lite.rollout.vllm:VLLMRollout"
    with pytest.raises(
        RegistryError, match=r"no rollout registered for name=vlm: registered: hf, vllm \(did you mean 'vllm'\?\)"
    ):
        ROLLOUTS.resolve("vlm")


def test_an_engine_for_an_unknown_model_type_is_refused_at_registration():
    from verl_lite.registry import EngineRegistry, RegistryError

    with pytest.raises(RegistryError, match="engine model_type 'reward_model' is not one of language_model, value_model"):
        EngineRegistry().register("reward_model", "fsdp", "cpu", "pkg.mod:Cls")
