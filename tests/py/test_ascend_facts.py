"""The Ascend facts table (verl_lite/config/generated/ascend_facts.json) is exactly what
tools/gen_ascend_facts.py writes, and, with the pinned sources at hand (VERL_LITE_ASCEND_SOURCES: a
directory holding the clones as Ascend+MindSpeed, NVIDIA+Megatron-LM, Ascend+MindSpeed-MM,
NVIDIA-NeMo+Megatron-Bridge, flashserve+flash-linear-attention-npu), what it writes from them today.
The facts the issue of record named are checked by value, with the lines they were read from."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from verl_lite.config.generated import ascend_facts
from verl_lite.decisions import ascend_stack

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gen_ascend_facts.py"


def _tool():
    spec = importlib.util.spec_from_file_location("gen_ascend_facts", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_ascend_facts"] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_table_is_what_the_tool_writes():
    text = Path(ascend_facts.TABLE_PATH).read_text(encoding="utf-8")
    assert _tool().render(json.loads(text)) == text, "regenerate with python tools/gen_ascend_facts.py --sources DIR"


@pytest.mark.ascend_source
def test_the_table_is_what_the_pinned_sources_say_today():
    root = os.environ.get("VERL_LITE_ASCEND_SOURCES")
    if not root:
        pytest.skip("VERL_LITE_ASCEND_SOURCES names no directory of the Ascend-stack clones")
    tool = _tool()
    built = tool.build(tool.source_paths(root))
    assert tool.render(built) == Path(ascend_facts.TABLE_PATH).read_text(encoding="utf-8")


def test_the_facts_the_divergences_rest_on_with_their_lines():
    s16 = ascend_facts.stack("core_r0.16.0")["mindspeed"]
    s18 = ascend_facts.stack("core_r0.18.0")["mindspeed"]
    # 1. the Ascend GDN entry: core_r0.16.0 ships its own ([B, T, H, K]); MindSpeed-MM's needs mindspeed.fsdp
    entry = s16["kernels"]["mindspeed.core.ssm.ops.flash_gated_delta_rule:flash_gated_delta_rule"]
    assert entry["qkv_layout"] == "B,T,H,K" and entry["needs"] == ["fla_npu"] and entry["rejects_float32"]
    assert entry["source"] == "Ascend/MindSpeed@e4772499:mindspeed/core/ssm/ops/flash_gated_delta_rule.py:281"
    mm = ascend_facts.FACTS["mindspeed_mm"]
    assert mm["kernel"]["qkv_layout"] == "B,H,T,K" and "mindspeed.fsdp.utils.log" in mm["ops_package_imports"]
    assert not s16["fsdp_package"] and not s18["fsdp_package"] and ascend_facts.FACTS["mindspeed_master"]["fsdp_package"]
    assert not any("fla_npu" in k["needs"] for k in s18["kernels"].values())  # no AscendC entry on core_r0.18.0
    # 2. the fla names MindSpeed stands in on core_r0.16.0 (requirements_basic.py:59-70); none on core_r0.18.0
    rule = s16["fla_stand_ins"]["fla.ops.gated_delta_rule.chunk_gated_delta_rule"]
    assert rule["with fla_npu"]["replacement"] == "mindspeed.core.ssm.ops.flash_gated_delta_rule:flash_gated_delta_rule"
    assert rule["without fla_npu"]["replacement"] == "mindspeed.core.ssm.chunk_gated_delta_rule:chunk_gated_delta_rule"
    assert rule["with fla_npu"]["create_dummy"] and s18["fla_stand_ins"] == {}
    # 3. the GatedDeltaNet swap: conditional, its own class (core_r0.16.0); always, a subclass (core_r0.18.0)
    assert s16["gdn_swap"]["when_any"] == ["2d_tp_ring", "context_parallel", "eod_packing", "naive_l2norm"]
    assert not s16["gdn_swap"]["subclass_of_megatron"] and s16["gdn_swap"]["source"].endswith("gated_delta_net.py:39")
    assert s18["gdn_swap"]["always"] and s18["gdn_swap"]["subclass_of_megatron"] and s18["gdn_swap"]["force_patch"]
    # 4. FP8 weight reuse: master only
    assert s16["fp8_reuse"]["module"] is None and s18["fp8_reuse"]["module"] is None
    assert ascend_facts.FACTS["mindspeed_master"]["fp8_reuse"]["names"] == [
        "clear_weight_quantization_reuse_cache", "set_weight_release_enabled"]
    # 6. batch-invariant mode needs flash_attn_npu on core_r0.16.0, gone on core_r0.18.0; CP algorithms
    assert s16["batch_invariant"]["flash_attention_needs"] == "flash_attn_npu" and s18["batch_invariant"] is None
    assert s16["context_parallel"]["algorithms"] == ["adaptive_cp_algo", "hybrid_adaptive_cp_algo", "hybrid_cp_algo",
                                                     "kvallgather_cp_algo", "megatron_cp_algo", "ulysses_cp_algo"]
    assert s18["context_parallel"]["to_cp_comm_type"] == {"hybrid_cp_algo": "a2a+p2p", "kvallgather_cp_algo": "all_gather",
                                                          "megatron_cp_algo": "p2p", "ulysses_cp_algo": "a2a"}
    assert s18["import"]["needs_external_megatron_adaptor"] and not s16["import"]["needs_external_megatron_adaptor"]


def test_every_unreachable_part_is_listed_as_unverified_with_what_is_assumed():
    parts = [u["part"].split(" (")[0] for u in ascend_facts.unverified("core_r0.18.0")]
    assert parts == ["MegatronAdaptor", "TransformerEngineNPU", "MindSpeed-Bridge", "FP8 weight reuse",
                     "MindSpeed's arguments on Megatron-Bridge's providers"]
    assert all(u["assumed"] for u in ascend_facts.UNVERIFIED)


def test_verl_lite_evaluates_exactly_the_swap_conditions_the_table_records():
    for name in ascend_facts.STACKS:
        swap = ascend_facts.stack(name)["mindspeed"]["gdn_swap"]
        assert set(swap["when_any"]) <= set(ascend_stack.CONDITION_WORDS), name
    stack = ascend_stack.Stack("core_r0.16.0", "test")
    assert ascend_stack.gdn_swap_reason(stack, {}) is None
    assert ascend_stack.gdn_swap_reason(stack, {"use_naive_l2norm": True}).startswith("use_naive_l2norm=True")
    assert ascend_stack.gdn_swap_reason(stack, {"reset_position_ids": True}) is None  # both EOD flags are needed
    assert ascend_stack.gdn_swap_reason(stack, {"reset_position_ids": True, "reset_attention_mask": True})
    assert ascend_stack.gdn_swap_reason(stack, {"tp_2d": True, "tp_y": 2, "context_parallel_algo": "hybrid_cp_algo"}) is None
    assert ascend_stack.gdn_swap_reason(stack, {"tp_2d": True, "tp_y": 2})  # megatron_cp_algo is the default
    assert ascend_stack.gdn_swap_reason(ascend_stack.Stack("core_r0.18.0", "test"), {}).startswith("always")


def test_the_stack_is_named_detected_or_inferred_and_a_mismatch_is_refused():
    assert ascend_stack.choose_stack("auto", {}).name == "core_r0.16.0"
    assert ascend_stack.choose_stack("auto", {"use_ascend_gdn": True}).name == "core_r0.18.0"
    assert ascend_stack.choose_stack("core_r0.16.0", {"use_ascend_gdn": True}).name == "core_r0.16.0"
    installed = ("core_r0.18.0", "the installed MindSpeed has mindspeed/features_manager/npu_enhancement/npu_enhancement.py")
    assert ascend_stack.choose_stack("auto", {}, installed).name == "core_r0.18.0"
    with pytest.raises(ascend_stack.StackError, match=r"trainer.ascend_stack=core_r0.16.0 but the installed MindSpeed "
                                                      r"has .*npu_enhancement.py, which is core_r0.18.0: set "
                                                      r"trainer.ascend_stack=core_r0.18.0 \(or auto\)"):
        ascend_stack.choose_stack("core_r0.16.0", {}, installed)
    with pytest.raises(ascend_stack.StackError, match="is not one of auto, core_r0.16.0, core_r0.18.0"):
        ascend_stack.choose_stack("0.16", {})
    problem = ascend_stack.megatron_core_problem(ascend_stack.Stack("core_r0.16.0", "t"), "0.18.0")
    assert "pairs MindSpeed with megatron-core 0.16.x, but megatron-core 0.18.0 is installed" in problem
    assert ascend_stack.megatron_core_problem(ascend_stack.Stack("core_r0.16.0", "t"), "0.16.1") is None


def test_a_mindspeed_that_matches_no_documented_stack_is_refused_by_its_files(tmp_path, monkeypatch):
    (tmp_path / "mindspeed").mkdir()
    (tmp_path / "mindspeed" / "__init__.py").write_text('"""a MindSpeed of another release"""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ascend_stack.StackError, match="matches no documented Ascend stack"):
        ascend_stack.installed_stack()
