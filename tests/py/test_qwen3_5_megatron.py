"""Qwen3.5 dense and MoE on the Megatron engines (CPU, fp32, gloo): logits against transformers at
TP=1, TP=2, PP=2 and (MoE) EP=2; the export loading strictly into transformers with the same
log-probs; HF -> Megatron -> HF bitwise; the GDN kernel choice and the Ascend kernel path through
its contract double (core_r0.16.0's flash_gated_delta_rule, tests/py/mindspeed_double), packed against
padded, and the MindSpeed npu engine (its internals on CPU) running Qwen3.5 through that kernel, and
selecting the Qwen3.5 vision-language bridge (tower included) for the conditional-generation model in the
same process. What each Ascend stack does to the GDN layers otherwise: tests/py/test_ascend_gdn.py.

The layouts run one after the other in the spawn of two gloo processes the Megatron test modules
share (`_scenario`, tests/py/megatron_world.py: a megatron import costs 7-9 s per process); the MindSpeed engine needs a process of its own (the double must be
imported before megatron: `_mindspeed_scenario`, one rank); the MoE GRPO run is in-process. The
tests read what the spawned processes recorded. The shipped tiny models start from their seeded
random HF init (`init_seed`).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import pytest
import torch
from megatron_world import megatron_sections, padded_batch, response_log_probs, scenario, train_steps

REPO_ROOT = Path(__file__).resolve().parents[2]
DOUBLE = REPO_ROOT / "tests" / "py" / "mindspeed_double" / "core_r0.16.0"
B, T, R = 3, 12, 4
SEED = 3
DENSE, MOE = "tiny-qwen3_5", "tiny-qwen3_5-moe"
# (model, TP, PP, EP) run by the two ranks, in this order
LAYOUTS = [
    (DENSE, 1, 1, 1), (DENSE, 2, 1, 1), (DENSE, 1, 2, 1),
    (MOE, 1, 1, 1), (MOE, 2, 1, 1), (MOE, 1, 2, 1), (MOE, 1, 1, 2),
]


def make_batch(seed: int = 0):
    """Left-padded prompts and a response that ended early (padding on both sides)."""
    return padded_batch(B, T, R, left_pad={0: 5, 2: 2}, ended_early=(1,), seed=seed)


def _sections(path, tp=1, pp=1, ep=1, overrides=None):
    return megatron_sections(path, tp, pp, ep, init_seed=SEED, overrides=overrides)


def _hf_logits(hf_model, batch):
    with torch.no_grad():
        return hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        position_ids=batch["position_ids"]).logits


def _engine_logits(engine, batch):
    """Full-vocabulary logits through megatron's schedule (every layout; gathered over TP, sent to
    every pipeline stage)."""
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    from verl_lite.engine.megatron import batch as megatron_batch
    from verl_lite.engine.megatron import schedule as megatron_schedule

    def logits_of(output, item, with_entropy):
        return {"logits": gather_from_tensor_model_parallel_region(output)[..., : engine.layout.vocab]}

    prepared = [megatron_batch.prepare_batch(batch, torch.device("cpu"), batch["input_ids"].shape[1], 0)]
    return megatron_schedule.run_schedule(engine.model, prepared, logits_of, None, True, False)[0]["logits"]


def _hf_reference(path):
    """transformers' model from the same seeded init as the engines, and its state dict."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl_lite.engine.megatron.hf import random_hf_state
    from verl_lite.models import resolve_model_dir

    config = AutoConfig.from_pretrained(resolve_model_dir(path))
    state = random_hf_state(AutoModelForCausalLM, config, SEED).__self__
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict(state, strict=True)
    return config, model, state


def _check_layout(rank, rec, refs, path, tp, pp, ep):
    from transformers import AutoModelForCausalLM

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    key = f"{path}:tp{tp}pp{pp}ep{ep}"
    config, hf_model, state = refs[path]
    model, actor = _sections(path, tp, pp, ep)
    engine = MegatronLMEngine(model, actor, None, "cpu", "actor")  # no optimizer: forward only
    engine.initialize()
    batch = make_batch()
    valid = batch["attention_mask"].bool()
    logits = _engine_logits(engine, batch)
    rec[f"{key}:logits_diff"] = (logits[valid] - _hf_logits(hf_model, batch)[valid]).abs().max().item()
    log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    exported = dict(engine.export_hf_weights())
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    result = fresh.load_state_dict(exported, strict=True)  # raises on a missing or unexpected name
    rec[f"{key}:strict"] = (list(result.missing_keys), list(result.unexpected_keys))
    resp = batch["response_mask"].bool()
    rec[f"{key}:export_log_prob_diff"] = (
        (response_log_probs(_hf_logits(fresh, batch), batch) - log_probs)[resp].abs().max().item())
    rec[f"{key}:names"] = (sorted(set(state) - set(exported)), sorted(set(exported) - set(state)))
    rec[f"{key}:not_bitwise"] = sorted(k for k in state if k in exported and not (
        exported[k].dtype == state[k].dtype and torch.equal(exported[k], state[k])))
    rec[f"{key}:kernels"] = sorted({layer.self_attention.gdn_kernel for chunk in engine.model
                                    for layer in chunk.decoder.layers if hasattr(layer.self_attention, "gdn_kernel")})
    return engine


def _gdn_layer(engine):
    chunk = getattr(engine.model[0], "module", engine.model[0])  # DDP-wrapped when it trains
    return next(layer.self_attention for layer in chunk.decoder.layers if hasattr(layer.self_attention, "gdn_kernel"))


def _packed_vs_padded(layer, hidden, mask):
    """The GDN layer on a padded batch and on the same sequences packed (THD, cu_seqlens); outputs
    at the real tokens, in the padded order."""
    from megatron.core.packed_seq_params import PackedSeqParams

    from verl_lite.engine.megatron.batch import attention_mask_4d

    with torch.no_grad():
        padded, _ = layer(hidden, attention_mask_4d(mask))
        lengths = mask.sum(1)
        cu = torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0).to(torch.int32)])
        tokens = hidden.transpose(0, 1)[mask.bool()].unsqueeze(1)  # [N, 1, H]
        params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                                 max_seqlen_q=int(lengths.max()), max_seqlen_kv=int(lengths.max()))
        packed, _ = layer(tokens, None, packed_seq_params=params)
    return padded.transpose(0, 1)[mask.bool()], packed[:, 0]


def _phase_ascend(rank, rec, refs, torch_engine):
    """use_ascend_gdn on npu (internals on CPU, the kernel double): kernel chosen, logits, packing. The
    plain Megatron engine with device npu, given core_r0.16.0's Ascend entry as the MindSpeed engines
    give it (`_configure_gdn`): megatron here is imported without MindSpeed."""
    from verl_lite.decisions import ascend_stack
    from verl_lite.engine.megatron.engine import MegatronLMEngine
    from verl_lite.engine.megatron.batch import attention_mask_4d

    sys.path.insert(0, str(DOUBLE))
    from mindspeed.core.ssm import _reference as double
    from mindspeed.core.ssm.ops.flash_gated_delta_rule import flash_gated_delta_rule

    class NpuOnCpu(MegatronLMEngine):  # device npu for the kernel choice, tensors on CPU
        compute_device = "cpu"

        def _configure_gdn(self, tf_config):
            tf_config.ascend_kernel = ascend_stack.ascend_kernel_entry(ascend_stack.Stack("core_r0.16.0", "test"))
            tf_config.gdn_kernel_dtype = torch.bfloat16

    model, actor = _sections(DENSE, overrides={"use_ascend_gdn": True, "use_triton_gdn": False})
    engine = NpuOnCpu(model, actor, None, "npu", "actor")
    engine.initialize()
    batch = make_batch()
    valid = batch["attention_mask"].bool()
    calls = len(double.CALLS)
    logits = _engine_logits(engine, batch)
    rec["ascend:padded_calls"] = double.CALLS[calls:]
    rec["ascend:kernel"] = _gdn_layer(engine).gdn_kernel
    rec["ascend:logits_diff"] = (logits[valid] - _hf_logits(refs[DENSE][1], batch)[valid]).abs().max().item()
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(T, B, 64, generator=g)
    mask = batch["attention_mask"]
    calls = len(double.CALLS)
    padded, packed = _packed_vs_padded(_gdn_layer(engine), hidden, mask)
    rec["ascend:packed_calls"] = double.CALLS[calls:]
    rec["ascend:packed_vs_padded"] = (padded - packed).abs().max().item()
    rec["ascend:packed_scale"] = padded.abs().max().item()
    with torch.no_grad():
        torch_padded, _ = _gdn_layer(torch_engine)(hidden, attention_mask_4d(mask))
    rec["ascend:vs_torch_rule"] = (padded - torch_padded.transpose(0, 1)[mask.bool()]).abs().max().item()
    q = torch.randn(1, 8, 4, 16, dtype=torch.bfloat16)  # [B, T, H, K]: MindSpeed's fla-form entry
    out, final = flash_gated_delta_rule(q, q, q, -torch.rand(1, 8, 4), torch.rand(1, 8, 4),
                                        cu_seqlens=torch.tensor([0, 3, 8]), output_final_state=True)
    rec["ascend:direct"] = [tuple(out.shape), str(out.dtype), tuple(final.shape)]
    padded, packed = _packed_vs_padded(_gdn_layer(torch_engine), hidden, mask)
    rec["torch:packed_vs_padded"] = (padded - packed).abs().max().item()
    rec["torch:packed_scale"] = padded.abs().max().item()


def _phase_chunk_size(rec, refs, engine):
    """The torch rule's chunk: by sequence length (auto), or model.linear_attention_chunk_size."""
    from megatron.core.ssm import gated_delta_net as gdn

    original, chunks = gdn.torch_chunk_gated_delta_rule, []

    def recording(*args, **kwargs):
        chunks.append(kwargs.get("chunk_size"))
        return original(*args, **kwargs)

    gdn.torch_chunk_gated_delta_rule = recording
    try:
        batch = make_batch()
        valid = batch["attention_mask"].bool()
        hf_logits = _hf_logits(refs[DENSE][1], batch)
        for setting in (None, 8):
            engine.tf_config.gdn_chunk_size = setting  # what linear_attention_chunk_size sets at init
            chunks.clear()
            diff = (_engine_logits(engine, batch)[valid] - hf_logits[valid]).abs().max().item()
            rec[f"chunk:{setting}"] = (sorted(set(chunks)), diff)
    finally:
        gdn.torch_chunk_gated_delta_rule = original
        engine.tf_config.gdn_chunk_size = None


def _try_training_moe_at_tp2(rec):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor = _sections(MOE, tp=2)
    actor.megatron.sequence_parallel = False  # with it (the default) MoE trains: tests/py/test_sequence_parallel.py
    try:
        MegatronLMEngine(model, actor, actor.optim, "cpu", "actor").initialize()
        rec["moe_tp2_training_error"] = None
    except Exception as e:
        rec["moe_tp2_training_error"] = f"{type(e).__name__}: {e}"


@scenario
def _scenario(rank, rec, out_dir):
    from megatron.core import parallel_state as mpu

    refs = {path: _hf_reference(path) for path in (DENSE, MOE)}
    for path, tp, pp, ep in LAYOUTS:
        engine = _check_layout(rank, rec, refs, path, tp, pp, ep)
        if (path, tp) == (MOE, 2):
            _try_training_moe_at_tp2(rec)
        if (path, tp, pp, ep) == (DENSE, 1, 1, 1):
            _phase_chunk_size(rec, refs, engine)
            _phase_ascend(rank, rec, refs, engine)
        mpu.destroy_model_parallel()


def _mindspeed_scenario(rank, world, port, out_dir):
    """The npu engine from the registry (MindSpeed, its internals on CPU) with use_ascend_gdn, in a
    process where the MindSpeed double is imported before megatron (as on Ascend)."""
    sys.path.insert(0, str(DOUBLE))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    rec = {}
    try:
        import importlib

        # transformers' references first: once MindSpeed has stood in the fla names, transformers' Qwen3.5
        # layers built afterwards take MindSpeed's kernel too (which refuses fp32), as they would on the node
        batch = make_batch()
        _, hf_model, _ = _hf_reference(DENSE)
        hf_log_probs = response_log_probs(_hf_logits(hf_model, batch), batch)
        vl = _vl_reference(out_dir)

        importlib.import_module("mindspeed._double")  # the package only: megatron is not imported yet

        from verl_lite.engine.megatron import mindspeed as ms
        from verl_lite.registry import ENGINES

        ms.MindSpeedEngineMixin.internals_device = "cpu"
        model, actor = _sections(DENSE, overrides={"use_ascend_gdn": True, "use_triton_gdn": False})
        actor.optim.lr = 1e-2
        engine = ENGINES.load("language_model", "megatron", "npu")(model, actor, actor.optim, "npu", "actor")
        engine.initialize()
        from mindspeed.core.ssm import _reference as double

        rec["class"] = type(engine).__name__
        rec["stack"] = engine.stack.name
        rec["kernel"] = _gdn_layer(engine).gdn_kernel
        log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
        resp = batch["response_mask"].bool()
        rec["log_prob_diff"] = (log_probs - hf_log_probs)[resp].abs().max().item()

        rec["losses"] = train_steps(engine, batch)
        rec["calls"] = list(double.CALLS)
        _mindspeed_vl(rec, vl)
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


def _vl_reference(out_dir):
    """The tiny Qwen3.5 conditional-generation checkpoint, its batch with images and transformers'
    response log-probs (computed before MindSpeed is imported: see `_mindspeed_scenario`)."""
    from test_qwen3_5_vl_megatron import _hf_class, tiny_config
    from test_qwen3_vl_megatron import hf_logits, make_vl_batch

    from verl_lite.engine.megatron.hf import random_hf_state

    kind = "qwen3_5"
    config = tiny_config(kind)
    path = os.path.join(out_dir, "qwen3_5_vl")
    config.save_pretrained(path)
    hf_model = _hf_class(kind)(config).eval()
    hf_model.load_state_dict(random_hf_state(_hf_class(kind), config, SEED).__self__, strict=True)
    batch = make_vl_batch(hf_model)
    return {"path": path, "batch": batch, "hf_log_probs": response_log_probs(hf_logits(hf_model, batch), batch)}


def _mindspeed_vl(rec, vl):
    """In the same MindSpeed process (its repatch is process-wide: the text engine's use_ascend_gdn
    plan, which the VL engine here asks for too): the Qwen3.5 conditional-generation model on the npu
    engine gets the bridge with the vision tower, and its log-probs with images are transformers'
    within the Ascend kernel's bf16 error; zeroed pixels move them by far more."""
    from test_qwen3_5_vl_megatron import _blank

    from verl_lite.registry import ENGINES

    # the same one-rank groups as the text engine before it (as actor and ref share them)
    batch = vl["batch"]
    model, actor = _sections(vl["path"], overrides={"use_ascend_gdn": True, "use_triton_gdn": False})
    engine = ENGINES.load("language_model", "megatron", "npu")(model, actor, None, "npu", "actor")
    engine.initialize()
    rec["vl_class"], rec["vl_bridge"] = type(engine).__name__, type(engine.bridge).__name__
    rec["vl_kernel"] = _gdn_layer(engine).gdn_kernel
    log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    blank = engine.forward_backward([_blank(batch)], forward_only=True)[0]["log_probs"]
    resp = batch["response_mask"].bool()
    rec["vl_log_prob_diff"] = (log_probs - vl["hf_log_probs"])[resp].abs().max().item()
    rec["vl_pixels_change_log_probs"] = (log_probs - blank)[resp].abs().max().item()


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


@pytest.fixture(scope="module")
def mindspeed_run(spawn_ranks):
    return spawn_ranks(_mindspeed_scenario, "qwen3_5_mindspeed", nprocs=1)[0]


def test_the_mindspeed_npu_engine_runs_qwen3_5_through_the_ascend_kernel_and_trains(mindspeed_run):
    rec = mindspeed_run
    assert rec["class"] == "MindSpeedLMEngine" and rec["kernel"] == "ascend" and rec["stack"] == "core_r0.16.0"
    assert rec["log_prob_diff"] < 0.02  # bf16 q/k/v inside the kernel
    assert rec["calls"] and all(c["dtype"] == "bfloat16" for c in rec["calls"])
    # core_r0.16.0's AscendC entry, found through the facts table (not MindSpeed-MM's, which does not import there)
    assert {c["entry"] for c in rec["calls"]} == {"mindspeed.core.ssm.ops.flash_gated_delta_rule:flash_gated_delta_rule"}
    assert rec["losses"][-1] < rec["losses"][0], rec["losses"]


def test_the_mindspeed_npu_engine_selects_the_qwen3_5_vl_bridge_with_the_tower_and_takes_images(mindspeed_run):
    rec = mindspeed_run
    assert (rec["vl_class"], rec["vl_bridge"]) == ("MindSpeedLMEngine", "Qwen3_5VLBridge")
    assert rec["vl_kernel"] == "ascend"
    assert rec["vl_log_prob_diff"] < 1e-3, rec["vl_log_prob_diff"]  # bf16 q/k/v inside the kernel (measured 9e-5)
    assert rec["vl_pixels_change_log_probs"] > 1e-2, rec["vl_pixels_change_log_probs"]


def _keys(path):
    return [f"{p}:tp{tp}pp{pp}ep{ep}" for p, tp, pp, ep in LAYOUTS if p == path]


@pytest.mark.parametrize("path", [DENSE, MOE])
def test_logits_equal_transformers_within_1e_5_at_every_layout(run, path):
    for rec in run:
        diffs = {k: rec[f"{k}:logits_diff"] for k in _keys(path)}
        assert len(diffs) == (3 if path == DENSE else 4)
        assert max(diffs.values()) < 1e-5, diffs


@pytest.mark.parametrize("path", [DENSE, MOE])
def test_the_export_loads_strictly_into_transformers_and_gives_the_same_log_probs(run, path):
    for rec in run:
        for key in _keys(path):
            assert rec[f"{key}:strict"] == ([], []), key
            assert rec[f"{key}:export_log_prob_diff"] < 1e-5, (key, rec[f"{key}:export_log_prob_diff"])


@pytest.mark.parametrize("path", [DENSE, MOE])
def test_hf_to_megatron_to_hf_is_bitwise_for_every_tensor(run, path):
    for rec in run:
        for key in _keys(path):
            assert rec[f"{key}:names"] == ([], []), key
            assert rec[f"{key}:not_bitwise"] == [], key


def test_cpu_runs_take_the_torch_gdn_rule(run):
    for key in _keys(DENSE) + _keys(MOE):
        kernels = [rec[f"{key}:kernels"] for rec in run]  # a PP stage may hold no GDN layer
        assert all(k in ([], ["torch"]) for k in kernels) and ["torch"] in kernels, (key, kernels)


def test_the_ascend_kernel_is_taken_on_npu_with_use_ascend_gdn_and_matches_transformers_in_bf16(run):
    for rec in run:
        assert rec["ascend:kernel"] == "ascend"
        calls = rec["ascend:padded_calls"]
        assert calls and all(c["packed"] is False and c["batch"] == B and c["dtype"] == "bfloat16" for c in calls)
        assert rec["ascend:logits_diff"] < 0.05  # the kernel takes bf16 q/k/v (it refuses fp32)


def test_the_ascend_kernel_takes_packed_sequences_and_agrees_with_padded(run):
    for rec in run:
        (call,) = rec["ascend:packed_calls"][1:]  # first the padded call, then the packed one
        assert call["packed"] is True and call["batch"] == 1 and call["sequences"] == B
        scale = rec["ascend:packed_scale"]
        assert scale > 0 and rec["ascend:packed_vs_padded"] < 1e-4 * scale
        assert rec["ascend:vs_torch_rule"] < 0.02 * scale  # bf16 q/k/v against the fp32 torch rule


def test_the_torch_rule_takes_packed_sequences_one_at_a_time_and_agrees_with_padded(run):
    for rec in run:
        scale = rec["torch:packed_scale"]
        assert scale > 0 and rec["torch:packed_vs_padded"] < 1e-5 * scale


def test_the_torch_rule_takes_the_chunk_of_linear_attention_chunk_size_or_chooses_by_length(run):
    for rec in run:
        assert rec["chunk:None"][0] == [16]  # auto: 16 up to 128 tokens, as the torch engine
        assert rec["chunk:8"][0] == [8]
        assert rec["chunk:None"][1] < 1e-5 and rec["chunk:8"][1] < 1e-5


def test_training_moe_at_tp2_without_sequence_parallel_is_refused_naming_the_fix(run):
    for rec in run:  # megatron-core's MoE layer needs sequence parallel to train with TP > 1
        error = rec["moe_tp2_training_error"]
        # the preflight's message (decisions/layout.py:moe_sequence_parallel_problem)
        assert error.startswith("UnsupportedModelError: training an MoE model (4 experts) with "
                                "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 "
                                "needs Megatron sequence parallelism"), error
        assert "set actor_rollout_ref.actor.megatron.sequence_parallel=True" in error  # the role's own key
        assert "actor_rollout_ref.actor.megatron.expert_model_parallel_size" in error


# ---------------------------------------------------------------------------- kernel choice (no megatron)

def test_the_gdn_kernel_follows_the_two_switches_and_the_installed_kernels():
    from verl_lite.decisions.bridge_choice import gdn_kernel, kernel_takes_packed_input

    def pick(triton, ascend, device, have_fla):
        return gdn_kernel(device, {"use_triton_gdn": triton, "use_ascend_gdn": ascend}, have_fla)

    assert pick(None, None, "cuda", have_fla=True) == "fla"
    assert pick(True, None, "npu", have_fla=True) == "fla"
    assert pick(None, None, "cuda", have_fla=False) == "torch"
    assert pick(False, None, "cuda", have_fla=True) == "torch"
    assert pick(None, None, "cpu", have_fla=True) == "torch"  # Triton needs a device
    assert pick(False, True, "npu", have_fla=True) == "ascend"
    assert pick("False", "True", "npu", have_fla=False) == "ascend"
    assert pick(True, True, "npu", have_fla=True) == "fla"  # the real stack's order
    assert pick(None, None, "npu", have_fla=False) == "torch"
    assert [kernel_takes_packed_input(k) for k in ("fla", "ascend", "torch")] == [True, True, False]


def test_on_npu_the_fla_name_imports_whatever_this_machine_has_because_mindspeed_stands_it_in():
    from verl_lite.decisions.bridge_choice import fla_importable, gdn_kernel

    assert fla_importable("npu", False) is True and fla_importable("npu", True) is True
    assert fla_importable("cuda", False) is False and fla_importable("cpu", True) is True
    # so CHECK=1 on a laptop without fla picks for npu what the nodes pick: the fla name (MindSpeed's kernel)
    assert gdn_kernel("npu", {}, fla_importable("npu", False)) == "fla"


def test_megatron_core_releases_other_than_0_16_are_refused_with_what_to_install():
    from verl_lite.engine.base import UnsupportedModelError
    from verl_lite.engine.megatron.gdn import check_megatron_version

    check_megatron_version("0.16.1")
    with pytest.raises(UnsupportedModelError, match="built for megatron-core 0.16.x .* has megatron-core 0.17.0. "
                                                   "Install megatron-core==0.16.1 or use strategy=fsdp"):
        check_megatron_version("0.17.0")


def test_the_ascend_kernel_double_enforces_the_real_entrys_contract():
    sys.path.insert(0, str(DOUBLE))
    try:
        from mindspeed.core.ssm.ops.flash_gated_delta_rule import flash_gated_delta_rule as op
    finally:
        sys.path.remove(str(DOUBLE))
        for name in [m for m in sys.modules if m == "mindspeed" or m.startswith("mindspeed.")]:
            del sys.modules[name]
    q = torch.randn(2, 8, 4, 16, dtype=torch.bfloat16)  # [B, T, H, K]
    g, beta = -torch.rand(2, 8, 4), torch.rand(2, 8, 4)
    with pytest.raises(ValueError, match="does not support float32"):
        op(q.float(), q.float(), q.float(), g, beta)
    with pytest.raises(ValueError, match=r"\[B, T, H\]"):
        op(q, q, q, g.unsqueeze(-1), beta)
    with pytest.raises(ValueError, match="batch size is expected to be 1 rather than 2"):
        op(q, q, q, g, beta, cu_seqlens=torch.tensor([0, 3, 8]))
    with pytest.raises(ValueError, match="must run from 0 to T=8"):
        op(q[:1], q[:1], q[:1], g[:1], beta[:1], cu_seqlens=torch.tensor([0, 3, 7]))
    with pytest.raises(ValueError, match="number of initial states"):
        op(q[:1], q[:1], q[:1], g[:1], beta[:1], cu_seqlens=torch.tensor([0, 3, 8]),
           initial_state=torch.zeros(3, 4, 16, 16, dtype=torch.bfloat16))


def test_the_ascend_kernel_double_returns_the_real_entrys_shapes(run):
    for rec in run:  # called in the spawned ranks, which import megatron (its torch rule computes)
        assert rec["ascend:direct"] == [(1, 8, 4, 16), "torch.bfloat16", (2, 4, 16, 16)]


# ---------------------------------------------------------------------------- training (in-process trainer)

@pytest.mark.megatron
def test_grpo_on_the_megatron_engine_teaches_the_tiny_qwen3_5_moe(copy_task_data, tmp_path):
    """The tiny MoE with run_tiny.sh's batch sizes, a fixed seed, 80 steps: the mean reward of the
    last 10 steps is at least the first 10's + 0.3 (run_tiny.sh with this model: 0.03 over the
    first 10 steps, 0.65 over steps 71-80)."""
    from test_trainer import read_metrics, run_training, tiny_overrides

    out = tmp_path / "moe"
    run_training(tiny_overrides(
        copy_task_data(512, 16), out, 80, f"actor_rollout_ref.model.path={MOE}",
        "actor_rollout_ref.actor.strategy=megatron", "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8"))
    scores = [r["critic/score/mean"] for r in read_metrics(out)]
    first, last = sum(scores[:10]) / 10, sum(scores[-10:]) / 10
    assert len(scores) == 80 and last >= first + 0.3, f"first 10 steps {first:.3f}, last 10 steps {last:.3f}"
