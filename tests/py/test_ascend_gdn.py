"""Qwen3.5's Gated DeltaNet layers on npu as each Ascend stack runs them (decisions/ascend_stack.py), through
the MindSpeed double of that stack (tests/py/mindspeed_double/<stack>), the engines' internals on CPU:

- core_r0.16.0, default switches: megatron's GatedDeltaNet stays, so verl_lite's layer runs, and its
  "fla" kernel is the name MindSpeed stood in: flash_gated_delta_rule (AscendC) where fla_npu imports,
  MindSpeed's Triton rule where it does not (requirements_basic.py:59-70); both take packed input, so
  auto packs;
- core_r0.16.0 with use_naive_l2norm=True (as verl's NPU Qwen3.5 scripts set it): MindSpeed swaps its own
  GatedDeltaNet in, and the model is built with that class, as verl builds it; it ignores the attention
  mask, so the engine zeroes the padding of its input (left-padded rows would leak otherwise);
- core_r0.18.0: verl_lite's own Qwen3.5 bridge mirrors megatron-core 0.16's layer and is refused there.

Each plan is process-wide in MindSpeed, so each runs in a spawned one-rank process.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import pytest
import torch
from ascend_doubles import double_dir
from megatron_world import hf_response_log_probs, megatron_sections, padded_batch, train_steps

pytestmark = pytest.mark.megatron
DENSE = "tiny-qwen3_5"
SEED = 3
B, T, R = 3, 12, 4


def _batch():
    """Left-padded rows whose padding is a token with a non-zero embedding (transformers' Qwen3.5 zeroes
    the padding row's embedding, which would hide a leak through the first layer)."""
    batch = padded_batch(B, T, R, left_pad={0: 5, 2: 2}, ended_early=(1,), seed=0)
    batch["input_ids"][batch["attention_mask"] == 0] = 7
    return batch


def _gdn_layers(engine):
    chunk = getattr(engine.model[0], "module", engine.model[0])
    return [layer.self_attention for layer in chunk.decoder.layers
            if type(layer.self_attention).__name__ in ("GatedDeltaLayer", "GatedDeltaNet")]


def _scenario(rank, world, port, out_dir, stack, overrides, hide_fla_npu):
    sys.path.insert(0, double_dir(stack))
    if hide_fla_npu:
        sys.modules["fla_npu"] = None  # flash-linear-attention-npu not installed on the node
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    rec = {}
    try:
        from verl_lite.engine.megatron import mindspeed as ms
        from verl_lite.registry import ENGINES

        ms.MindSpeedEngineMixin.internals_device = "cpu"
        if stack == "core_r0.18.0":
            ms.MindSpeedEngineMixin.megatron_core_version = "0.18.0"
        model, actor = megatron_sections(DENSE, init_seed=SEED, overrides=overrides)
        actor.optim.lr = 1e-2
        engine = ENGINES.load("language_model", "megatron", "npu")(model, actor, actor.optim, "npu", "actor")
        try:
            engine.initialize()
        except Exception as e:
            rec["init_error"] = f"{type(e).__name__}: {e}"
            raise SystemExit
        from mindspeed.core.ssm import _reference

        layers = _gdn_layers(engine)
        rec["layer_classes"] = sorted({f"{type(m).__module__}:{type(m).__name__}" for m in layers})
        rec["kernel"] = engine.tf_config.gdn_kernel
        rec["packed"] = engine.remove_padding
        batch = _batch()
        calls = len(_reference.CALLS)
        log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
        rec["entries"] = sorted({c["entry"] for c in _reference.CALLS[calls:]})
        rec["calls"] = _reference.CALLS[calls:]
        resp = batch["response_mask"].bool()
        rec["log_probs"] = log_probs  # transformers' reference is computed in the test's process: here
        # MindSpeed has stood in the fla names, which transformers' Qwen3.5 takes too (and its kernels refuse fp32)
        if any(m._forward_pre_hooks for m in layers):  # MindSpeed's class: the padding hook matters
            hooks = [dict(m._forward_pre_hooks) for m in layers]
            for m in layers:
                m._forward_pre_hooks.clear()
            leaked = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
            rec["without_padding_hook_diff"] = (leaked - log_probs)[resp].abs().max().item()
            for m, h in zip(layers, hooks):
                m._forward_pre_hooks.update(h)
        rec["losses"] = train_steps(engine, batch)
    except SystemExit:
        pass
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


def _run(spawn_ranks, name, stack, overrides=None, hide_fla_npu=False):
    fn = functools.partial(_scenario, stack=stack, overrides=dict(overrides or {}), hide_fla_npu=hide_fla_npu)
    rec = spawn_ranks(fn, name, nprocs=1)[0]
    if "log_probs" in rec:
        batch = _batch()
        resp = batch["response_mask"].bool()
        rec["log_prob_diff"] = (rec["log_probs"] - hf_response_log_probs(DENSE, SEED, batch))[resp].abs().max().item()
    return rec


@pytest.fixture(scope="module")
def default_16(spawn_ranks):
    return _run(spawn_ranks, "gdn_default_16", "core_r0.16.0")


@pytest.fixture(scope="module")
def no_fla_npu_16(spawn_ranks):
    return _run(spawn_ranks, "gdn_no_fla_npu_16", "core_r0.16.0", hide_fla_npu=True)


@pytest.fixture(scope="module")
def naive_16(spawn_ranks):
    return _run(spawn_ranks, "gdn_naive_16", "core_r0.16.0", {"use_naive_l2norm": True})


@pytest.fixture(scope="module")
def own_18(spawn_ranks):
    return _run(spawn_ranks, "gdn_own_18", "core_r0.18.0")


def test_on_core_r0_16_0_the_fla_name_is_mindspeeds_ascendc_kernel_and_auto_packs(default_16):
    rec = default_16
    assert rec["layer_classes"] == ["verl_lite.engine.megatron.gdn:GatedDeltaLayer"]
    assert rec["kernel"] == "fla" and rec["packed"] is True
    assert rec["entries"] == ["mindspeed.core.ssm.ops.flash_gated_delta_rule:flash_gated_delta_rule"]
    assert all(c["packed"] and c["dtype"] == "bfloat16" for c in rec["calls"])  # MindSpeed's kernels refuse fp32
    assert rec["log_prob_diff"] < 0.02, rec["log_prob_diff"]  # bf16 q/k/v inside the kernel
    assert rec["losses"][-1] < rec["losses"][0], rec["losses"]


def test_on_core_r0_16_0_without_fla_npu_the_fla_name_is_mindspeeds_triton_rule(no_fla_npu_16):
    rec = no_fla_npu_16
    assert rec["kernel"] == "fla" and rec["packed"] is True
    assert rec["entries"] == ["mindspeed.core.ssm.chunk_gated_delta_rule:chunk_gated_delta_rule"]
    assert rec["log_prob_diff"] < 0.02, rec["log_prob_diff"]


def test_use_naive_l2norm_builds_the_model_with_mindspeeds_own_gated_delta_net(naive_16):
    rec = naive_16
    assert rec["layer_classes"] == ["mindspeed.core.ssm.gated_delta_net:GatedDeltaNet"]
    assert rec["kernel"] == "mindspeed"
    # on CPU its pure-torch rule, which it takes in deterministic mode, and that refuses packed input
    assert rec["packed"] is False
    assert rec["entries"] == ["mindspeed.core.ssm.chunk_gated_delta_rule:torch_chunk_gated_delta_rule"]
    assert rec["log_prob_diff"] < 1e-5, rec["log_prob_diff"]  # fp32 throughout: transformers' numbers
    assert rec["losses"][-1] < rec["losses"][0], rec["losses"]


def test_mindspeeds_gated_delta_net_ignores_the_mask_so_the_engine_zeroes_the_padding_of_its_input(naive_16):
    # without the engine's pre-hook the left padding of rows 0 and 2 runs through the recurrence
    assert naive_16["without_padding_hook_diff"] > 1e-3, naive_16["without_padding_hook_diff"]


def test_on_core_r0_18_0_verl_lites_own_qwen3_5_bridge_is_refused_naming_what_builds_it_there(own_18):
    error = own_18["init_error"]
    assert "Ascend stack core_r0.18.0 (megatron-core 0.18) are built by Megatron-Bridge + MindSpeed-Bridge" in error
    assert "or use the core_r0.16.0 stack (trainer.ascend_stack)" in error
