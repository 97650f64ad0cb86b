"""MindSpeed (NPU) engines on CPU against the MindSpeed contract double of each documented Ascend stack
(core_r0.16.0 and core_r0.18.0, the `stack` parameter: tests/py/mindspeed_double/<stack>).

Spawned gloo processes, each with that stack's double first on sys.path:
- `_order_scenario` (two ranks) builds the npu actor, ref and critic through the engine registry,
  their megatron internals on CPU (`MindSpeedEngineMixin.internals_device = "cpu"`), trains,
  offloads, and keeps the double's event log;
- `_critic_alone_scenario` (one rank) builds the critic as the only engine of its process, as a
  Ray critic worker does, with FP8 on, and moves it;
- `_failure_scenario` reproduces each upstream failure with the naive call order or plan where the
  stack has it, then shows the engines' way (build_repatch_dict, repatch before parallel init) passing,
  and the stack's refusals (FP8 weight reuse everywhere; batch-invariant mode where the stack lacks it).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
import types

import pytest
import torch
from ascend_doubles import STACKS, double_dir

from verl_lite.engine.megatron.mindspeed import MindSpeedLMEngine

B, T, R = 2, 8, 3
OVERRIDES = {
    "attention_backend": "flash",  # a string, as users type it
    "use_ascend_gdn": True,  # what USE_MINDSPEED_BRIDGE=True adds on npu
    "use_triton_gdn": False,
    "fp8": "e4m3",
}


def make_batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 48, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    pos = torch.arange(T).expand(B, T)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -R:], response_mask=mask[:, -R:])


def sections(tp=1, cp=1, overrides=None):
    """Actor and ref from one config tree (the ref's megatron section follows the actor's by
    interpolation), the critic as a plain dataclass: both kinds of section must work."""
    from omegaconf import OmegaConf

    from verl_lite.config.schema import CriticConfig, VerlLiteConfig

    cfg = OmegaConf.structured(VerlLiteConfig)
    section = cfg.actor_rollout_ref
    section.model.path = "tiny-qwen3"
    section.actor.strategy = "megatron"
    critic = CriticConfig(strategy="megatron")
    for megatron in (section.actor.megatron, critic.megatron):
        megatron.tensor_model_parallel_size = tp
        megatron.context_parallel_size = cp
        megatron.override_transformer_config = dict(overrides or {})
    return section.model, section.actor, section.ref, critic


def _plain(value):
    """Event payloads without megatron objects, so the parent process can unpickle them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _start(rank, world, port, stack):
    sys.path.insert(0, double_dir(stack))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    from verl_lite.engine.megatron import mindspeed as ms

    ms.MindSpeedEngineMixin.internals_device = "cpu"
    if stack == "core_r0.18.0":  # megatron-core 0.18 needs Python >= 3.12: 0.16 runs under this stack's double
        ms.MindSpeedEngineMixin.megatron_core_version = "0.18.0"


def _order_scenario(rank, world, port, out_dir, stack):
    _start(rank, world, port, stack)
    rec = {}
    try:
        import mindspeed._double as double  # the package only: megatron is not imported yet

        from verl_lite.engine.megatron.engine import MegatronLMEngine
        from verl_lite.registry import ENGINES

        plain_to = MegatronLMEngine.to

        def recording_to(self, device, **kw):
            double.record("engine_to", role=self.role, device=device)
            return plain_to(self, device, **kw)

        MegatronLMEngine.to = recording_to
        lm_class = ENGINES.load("language_model", "megatron", "npu")
        value_class = ENGINES.load("value_model", "megatron", "npu")
        rec["classes"] = (lm_class.__name__, value_class.__name__)
        model, actor, ref, critic = sections(tp=2, overrides=OVERRIDES)
        double.record("test_start")
        engines = {
            "actor": lm_class(model, actor, actor.optim, "npu", "actor"),
            "ref": lm_class(model, ref, None, "npu", "ref"),
            "critic": value_class(model, critic, critic.optim, "npu", "critic"),
        }
        for engine in engines.values():
            engine.initialize()
        batch = make_batch()
        rec["log_probs"] = engines["actor"].forward_backward([batch], forward_only=True)[0]["log_probs"]
        rec["values"] = engines["critic"].forward_backward([batch], forward_only=True)[0]["values"]
        actor_e = engines["actor"]
        actor_e.train_mode()
        actor_e.optimizer_zero_grad()
        loss_fn = lambda out, mb: (-(out["log_probs"]).mean(), {})  # noqa: E731
        actor_e.forward_backward([batch], loss_fn)
        rec["grad_norm"] = actor_e.optimizer_step()
        cfg = actor_e.tf_config
        rec["tf_config"] = dict(use_ascend_gdn=cfg.use_ascend_gdn, use_triton_gdn=cfg.use_triton_gdn,
                                attention_backend=repr(cfg.attention_backend), use_flash_attn=cfg.use_flash_attn)
        rec["stacks"] = {role: engine.stack.name for role, engine in engines.items()}
        actor_e.to("cpu")  # train mode
        engines["ref"].to("cpu")
        engines["critic"].train_mode()
        engines["critic"].to("cpu")
        engines["critic"].to("npu")

        from mindspeed.patch_utils import MindSpeedPatchesManager

        rec["patches"] = {n: (p.patch_func.__name__ if p.patch_func else None, [w.__name__ for w in p.wrappers])
                          for n, p in MindSpeedPatchesManager.patches_info.items()}
        rec["attention_calls"] = dict(double.STATE["attention_calls"])
        rec["events"] = _plain(double.EVENTS)
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


def _critic_alone_scenario(rank, world, port, out_dir, stack):
    """The critic as the first and only engine of its process (a Ray critic worker), with FP8 on: the
    repatch must still come before the parallel init, and the engine moves."""
    _start(rank, world, port, stack)
    rec = {}
    try:
        import mindspeed._double as double

        from verl_lite.registry import ENGINES

        model, _, _, critic = sections(overrides=OVERRIDES)
        double.record("test_start")
        engine = ENGINES.load("value_model", "megatron", "npu")(model, critic, critic.optim, "npu", "critic")
        engine.initialize()
        rec["values"] = engine.forward_backward([make_batch()], forward_only=True)[0]["values"]
        double.record("moves_start")
        engine.train_mode()
        for device in ("cpu", "npu"):
            engine.to(device)
            double.record("engine_moved", device=device)
        rec["values_after_moves"] = engine.forward_backward([make_batch()], forward_only=True)[0]["values"]
        rec["events"] = _plain(double.EVENTS)
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


def _failure_scenario(rank, world, port, out_dir, stack):
    _start(rank, world, port, stack)
    rec = {}
    try:
        import importlib

        from mindspeed import _stack

        # imports megatron.core after its check (not `from mindspeed import megatron_adaptor`: on core_r0.18.0 that
        # name is the MegatronAdaptor package, which mindspeed/__init__.py imports)
        adaptor = importlib.import_module("mindspeed.megatron_adaptor")
        import mindspeed._double as double
        from mindspeed.patch_utils import MindSpeedPatchesManager
        from megatron.core import parallel_state as mpu
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.enums import AttnBackend

        from verl_lite.decisions import ascend_stack
        from verl_lite.engine.megatron import mindspeed as ms
        from verl_lite.decisions.repatch import build_repatch_dict

        tiny = dict(num_layers=1, hidden_size=8, num_attention_heads=2)
        plan_of = lambda overrides: build_repatch_dict({"override_transformer_config": overrides},  # noqa: E731
                                                       lambda n: AttnBackend[n])

        # 1. attention_backend as a string
        raw = {"attention_backend": "flash", "batch_invariant_mode": True}
        adaptor.repatch(raw)
        try:
            TransformerConfig(**tiny)
        except AssertionError as e:
            rec["string_backend_raw"] = str(e)
        adaptor.repatch(plan_of(raw))
        config = TransformerConfig(**tiny)  # values from repatch reach a config that did not pass them
        rec["string_backend_plan"] = (repr(config.attention_backend), config.batch_invariant_mode)
        adaptor.repatch({"batch_invariant_mode": False})

        # 2. both DotProductAttention.forward patches: a collision where the stack has the batch-invariant
        # attention (with flash_attn_npu installed), nothing on a stack without the feature, which the
        # engines refuse
        sys.modules["flash_attn_npu"] = types.ModuleType("flash_attn_npu")
        raw = {"use_flash_attn": True, "use_flash_attn_npu_batch_invariant": True}
        try:
            adaptor.repatch(raw)
            rec["both_forward_raw"] = None
        except RuntimeError as e:
            rec["both_forward_raw"] = str(e)
        adaptor.repatch(plan_of(raw))
        forward = MindSpeedPatchesManager.patches_info[
            "megatron.core.transformer.dot_product_attention.DotProductAttention.forward"].patch_func
        rec["both_forward_plan"] = forward.__name__ if forward else None
        adaptor.repatch({"use_flash_attn_npu_batch_invariant": False, "use_flash_attn": True})
        rec["batch_invariant_refusal"] = ascend_stack.stack_problems(
            ascend_stack.Stack(stack, "test"), plan_of({"use_flash_attn_npu_batch_invariant": True}))

        # repatch rules: the same dict twice gives the same patches; bad args raise AttributeError
        def state():
            return {n: (p.patch_func, tuple(p.wrappers), p.is_applied) for n, p in MindSpeedPatchesManager.patches_info.items()}

        adaptor.repatch({"use_flash_attn": True, "some_unknown_key": 7})
        first = state()
        adaptor.repatch({"use_flash_attn": True, "some_unknown_key": 7})
        rec["same_plan_same_state"] = first == state()
        rec["unknown_key_persists"] = TransformerConfig(**tiny).some_unknown_key
        for bad in ([("use_flash_attn", True)],):
            try:
                adaptor.repatch(bad)
            except AttributeError as e:
                rec["non_mapping"] = str(e)
        from mindspeed.args_utils import get_full_args

        level = get_full_args().optimization_level
        del get_full_args().optimization_level
        try:
            adaptor.repatch({})
        except AttributeError as e:
            rec["no_optimization_level"] = str(e)
        get_full_args().optimization_level = level
        adaptor.repatch({"use_flash_attn": True})

        # FP8 weight reuse: no documented stack ships the cache; the engine refuses before the repatch
        model, actor, _, _ = sections(overrides={"fp8": "e4m3", "fp8_reuse_quantized_weight": True})
        engine = ms.MindSpeedLMEngine(model, actor, actor.optim, "npu", "actor")
        engine._import_backend()
        try:
            engine._before_parallel_init()
        except ascend_stack.StackError as e:
            rec["fp8_reuse_refused"] = str(e)

        # 3. repatch after initialize_model_parallel (CP=2): the ring wrapper comes too late where the
        # stack has it; the engine repatches first
        mpu.initialize_model_parallel(context_parallel_size=2)
        try:
            adaptor.repatch({"context_parallel_size": 2})
            rec["late_repatch"] = None
        except RuntimeError as e:
            rec["late_repatch"] = str(e)
        mpu.destroy_model_parallel()
        adaptor.repatch({"context_parallel_size": 1})
        double.STATE["cp_ring_groups"] = False
        double.record("engine_mesh_init_start")
        model, actor, _, _ = sections(cp=2)
        engine = ms.MindSpeedLMEngine(model, actor, actor.optim, "npu", "actor")
        engine._import_backend()
        engine._prepare_device()
        ms._APPLIED = None  # a new process's first engine
        engine.init_device_mesh()
        rec["cp_ring_groups"] = double.STATE["cp_ring_groups"]
        rec["cp_wrapper_on_stack"] = bool(_stack.FACTS["context_parallel"]["wraps_initialize_model_parallel"])
        kinds = double.kinds()
        rec["mesh_events"] = [k for k in kinds[kinds.index("engine_mesh_init_start"):]
                              if k in ("repatch", "initialize_model_parallel", "cp_ring_groups_created")]
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module", params=STACKS)
def stack(request):
    return request.param


@pytest.fixture(scope="module")
def order(spawn_ranks, stack):
    return spawn_ranks(functools.partial(_order_scenario, stack=stack), f"mindspeed_order_{stack}")


@pytest.fixture(scope="module")
def critic_alone(spawn_ranks, stack):
    return spawn_ranks(functools.partial(_critic_alone_scenario, stack=stack), f"mindspeed_critic_alone_{stack}",
                       nprocs=1)[0]


@pytest.fixture(scope="module")
def failures(spawn_ranks, stack):
    return spawn_ranks(functools.partial(_failure_scenario, stack=stack), f"mindspeed_failures_{stack}")


def _kinds(events):
    return [kind for kind, _ in events]


# ------------------------------------------------------------------------------ order of events


def test_npu_registry_keys_give_the_mindspeed_engines_for_lm_and_value_model(order):
    assert order[0]["classes"] == ("MindSpeedLMEngine", "MindSpeedValueEngine")


def test_every_engine_finds_the_stack_of_the_installed_mindspeed(order, stack):
    assert order[0]["stacks"] == {"actor": stack, "ref": stack, "critic": stack}


def test_mindspeed_is_imported_and_repatched_before_initialize_model_parallel(order):
    kinds = _kinds(order[0]["events"])
    start = kinds.index("test_start")
    assert kinds.index("adaptor_imported") > start
    assert kinds.index("adaptor_imported") < kinds.index("repatch") < kinds.index("initialize_model_parallel")
    repatch = dict(order[0]["events"])["repatch"]
    assert repatch["after_parallel_init"] is False


def test_a_critic_alone_in_its_process_imports_mindspeed_and_repatches_before_initialize_model_parallel(
        critic_alone):
    events = critic_alone["events"]
    kinds = _kinds(events)
    start = kinds.index("test_start")
    assert kinds.count("repatch") == 1 and kinds.count("initialize_model_parallel") == 1
    assert start < kinds.index("adaptor_imported") < kinds.index("repatch") < kinds.index("initialize_model_parallel")
    repatch = dict(events)["repatch"]
    assert repatch["after_parallel_init"] is False
    assert repatch["args"]["use_ascend_gdn"] is True and "fp8_reuse_quantized_weight" not in repatch["args"]
    assert critic_alone["values"].shape == (B, R) and torch.isfinite(critic_alone["values"]).all()


def test_moving_an_engine_keeps_its_values(critic_alone):
    kinds = _kinds(critic_alone["events"])
    assert kinds[kinds.index("moves_start"):].count("engine_moved") == 2
    assert torch.equal(critic_alone["values"], critic_alone["values_after_moves"])


def test_actor_ref_and_critic_in_one_process_repatch_once_and_init_the_mesh_once(order):
    kinds = _kinds(order[0]["events"])
    assert kinds.count("repatch") == 1
    assert kinds.count("initialize_model_parallel") == 1


def test_no_patch_is_registered_twice(order):
    patches = order[0]["patches"]
    for name, (_, wrappers) in patches.items():
        assert len(wrappers) == len(set(wrappers)), name
    forward = patches["megatron.core.transformer.dot_product_attention.DotProductAttention.forward"]
    assert forward == ("dot_product_attention_forward_impl", ["dot_product_attention_forward_wrapper"])


def test_the_patched_attention_is_what_the_engines_run(order):
    calls = order[0]["attention_calls"]
    assert calls["fusion_attention"] > 0 and calls["generate_mask"] == calls["fusion_attention"]
    assert order[0]["log_probs"].shape == (B, R) and torch.isfinite(order[0]["log_probs"]).all()
    assert order[0]["values"].shape == (B, R)
    assert order[0]["grad_norm"] > 0


def test_bridge_overrides_reach_the_repatch_dict_and_the_transformer_config(order):
    args = dict(order[0]["events"])["repatch"]["args"]
    assert args["use_ascend_gdn"] is True and args["use_triton_gdn"] is False
    assert args["attention_backend"] == "<AttnBackend.flash: 1>" and args["use_flash_attn"] is True
    assert order[0]["tf_config"] == dict(use_ascend_gdn=True, use_triton_gdn=False,
                                         attention_backend="<AttnBackend.flash: 1>", use_flash_attn=True)


# ------------------------------------------------------------------------------ upstream failures


def test_string_attention_backend_fails_megatrons_check_and_the_plan_converts_it(failures):
    assert failures[0]["string_backend_raw"] == "Batch invariant mode only supports FlashAttention"
    assert failures[0]["string_backend_plan"] == ("<AttnBackend.flash: 1>", True)


def test_both_forward_patches_collide_where_the_stack_has_the_batch_invariant_attention(failures, stack):
    rec = failures[0]
    if stack == "core_r0.16.0":
        assert rec["both_forward_raw"] == "the patch of forward exist !"
        assert rec["both_forward_plan"] == "dot_product_attention_flash_attn_npu_forward"
        assert rec["batch_invariant_refusal"] == []
    else:  # the flags are gone: MindSpeed ignores them; the engines refuse them naming the stack that has them
        assert rec["both_forward_raw"] is None
        assert rec["both_forward_plan"] is None  # the plan turned flash attention off; nothing replaced it
        (problem,) = rec["batch_invariant_refusal"]
        assert problem.startswith("use_flash_attn_npu_batch_invariant=True: MindSpeed core_r0.18.0 has no "
                                  "batch-invariant feature") and "core_r0.16.0 has it" in problem


def test_repatch_after_parallel_init_breaks_cp_where_the_stack_wraps_it_and_the_engine_repatches_first(failures, stack):
    rec = failures[0]
    if rec["cp_wrapper_on_stack"]:
        assert stack == "core_r0.16.0"
        assert "Context parallel ranks for ring intra window not initialized" in rec["late_repatch"]
        assert rec["mesh_events"] == ["repatch", "initialize_model_parallel", "cp_ring_groups_created"]
        assert all(r["cp_ring_groups"] for r in failures)
    else:  # core_r0.18.0 creates no CP groups (megatron owns them): nothing comes too late
        assert stack == "core_r0.18.0" and rec["late_repatch"] is None
        assert rec["mesh_events"] == ["repatch", "initialize_model_parallel"]


def test_repatch_accepts_the_same_plan_twice_keeps_unknown_keys_and_rejects_non_mappings(failures):
    rec = failures[0]
    assert rec["same_plan_same_state"] is True
    assert rec["unknown_key_persists"] == 7
    assert "has no attribute 'items'" in rec["non_mapping"]
    assert "optimization_level" in rec["no_optimization_level"]


def test_fp8_weight_reuse_is_refused_on_both_stacks_naming_where_the_cache_exists(failures, stack):
    refused = failures[0]["fp8_reuse_refused"]
    assert refused.startswith(f"actor: fp8_reuse_quantized_weight=True: MindSpeed {stack} has no "
                              "mindspeed.te.pytorch.fp8.reuse"), refused
    assert "exists only on MindSpeed master (Ascend/MindSpeed@028de58c:mindspeed/te/pytorch/fp8/reuse.py)" in refused


def test_missing_mindspeed_on_npu_raises_an_import_error_that_says_what_to_install(monkeypatch):
    from omegaconf import OmegaConf

    from verl_lite.config.schema import ActorConfig, ModelConfig

    actor = OmegaConf.structured(ActorConfig(strategy="megatron"))
    engine = MindSpeedLMEngine(OmegaConf.structured(ModelConfig(path="tiny-qwen3")), actor, actor.optim, "npu", "actor")
    monkeypatch.setitem(sys.modules, "mindspeed", None)  # not installed
    with pytest.raises(ImportError, match=r"Ascend MindSpeed.*core_r0\.16\.0.*placeholder"):
        engine._import_backend()
    monkeypatch.setitem(sys.modules, "mindspeed", types.ModuleType("mindspeed"))  # the PyPI placeholder
    with pytest.raises(ImportError, match="mindspeed.megatron_adaptor") as caught:
        engine._import_backend()
    assert "NoneType" not in str(caught.value)
