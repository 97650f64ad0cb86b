"""Qwen3.5 dense and MoE conditional-generation models on the Megatron engine with Qwen3.5's own
vision tower (CPU, fp32, gloo), with images: logits and log-probs against transformers'
Qwen3_5(Moe)ForConditionalGeneration at TP=1, TP=2 (sequence parallel), PP=2 and (MoE) EP=2; the
export loading strictly into transformers, HF -> Megatron -> HF bitwise (vision tower included);
the log-probs change when the pixels do and a micro-batch whose pixel inputs were dropped is
refused; the partial interleaved 3-D rotary layout against transformers' own; the MindSpeed npu
engine (its internals on CPU) selecting the same bridge.

The tiny models are built in code from transformers' config classes (random init, seeded): two text
layers (one GDN, one gated attention; at PP=2 one a stage, the tower on the first), a 2-block tower.
The layouts run in the two-rank spawn the Megatron test modules share (tests/py/megatron_world.py);
the batch and logits helpers are Qwen3-VL's (tests/py/test_qwen3_vl_megatron.py).
"""

from __future__ import annotations

import os

import pytest
import torch
from megatron_world import megatron_sections, response_log_probs, scenario
from test_qwen3_vl_megatron import IMAGE, MERGE, PATCH, TEMPORAL, VEND, VSTART, _engine_logits, hf_logits, make_vl_batch

SEED = 7
DENSE, MOE = "qwen3_5", "qwen3_5_moe"
# (model, TP, PP, EP) run by the two ranks, in this order
LAYOUTS = [(DENSE, 1, 1, 1), (DENSE, 2, 1, 1), (DENSE, 1, 2, 1), (MOE, 2, 1, 1), (MOE, 1, 2, 1), (MOE, 1, 1, 2)]


def tiny_config(kind: str):
    """A Qwen3.5(-MoE)-shaped conditional-generation config: a GDN layer and a gated attention layer
    (half of each head rotated, 3-D sections [2, 1, 1]), a 2-block vision tower."""
    from transformers import Qwen3_5Config, Qwen3_5MoeConfig

    text = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=512, pad_token_id=0,
                layer_types=["linear_attention", "full_attention"], linear_conv_kernel_dim=4,
                linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                     mrope_interleaved=True, mrope_section=[2, 1, 1]))
    vision = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=PATCH,
                  temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE, out_hidden_size=64,
                  num_position_embeddings=16)
    ids = dict(image_token_id=IMAGE, video_token_id=501, vision_start_token_id=VSTART, vision_end_token_id=VEND,
               tie_word_embeddings=False)
    if kind == MOE:
        text.update(moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
        return Qwen3_5MoeConfig(text_config=text, vision_config=vision,
                                architectures=["Qwen3_5MoeForConditionalGeneration"], **ids)
    return Qwen3_5Config(text_config=text, vision_config=vision, architectures=["Qwen3_5ForConditionalGeneration"],
                         **ids)


def _hf_class(kind):
    from transformers import Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration

    return Qwen3_5MoeForConditionalGeneration if kind == MOE else Qwen3_5ForConditionalGeneration


def _blank(batch):
    """The batch with every image's pixels zeroed (the same image tokens and grids)."""
    blank = dict(batch)
    blank["multi_modal_inputs"] = [None if m is None else {"pixel_values": torch.zeros_like(m["pixel_values"]),
                                                          "image_grid_thw": m["image_grid_thw"]}
                                   for m in batch["multi_modal_inputs"]]
    return blank


def _check_layout(rec, refs, paths, kind, tp, pp, ep):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    key = f"{kind}:tp{tp}pp{pp}ep{ep}"
    config, hf_model, state, batch = refs[kind]
    model, actor = megatron_sections(paths[kind], tp, pp, ep, init_seed=SEED)
    engine = MegatronLMEngine(model, actor, None, "cpu", "actor")  # forward only
    engine.initialize()
    rec[f"{key}:bridge"] = type(engine.bridge).__name__
    rec[f"{key}:sp"] = bool(engine.tf_config.sequence_parallel)
    valid = batch["attention_mask"].bool()
    reference = hf_logits(hf_model, batch)
    rec[f"{key}:logits_diff"] = (_engine_logits(engine, batch)[valid] - reference[valid]).abs().max().item()
    resp = batch["response_mask"].bool()
    log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    rec[f"{key}:log_prob_diff"] = (log_probs - response_log_probs(reference, batch))[resp].abs().max().item()
    blank = engine.forward_backward([_blank(batch)], forward_only=True)[0]["log_probs"]
    rec[f"{key}:pixels_change_log_probs"] = (log_probs - blank)[resp].abs().max().item()
    exported = dict(engine.export_hf_weights())
    fresh = _hf_class(kind)(config).eval()
    result = fresh.load_state_dict(exported, strict=True)
    rec[f"{key}:strict"] = (list(result.missing_keys), list(result.unexpected_keys))
    rec[f"{key}:names"] = (sorted(set(state) - set(exported)), sorted(set(exported) - set(state)))
    rec[f"{key}:not_bitwise"] = sorted(k for k in state if k in exported and not torch.equal(exported[k], state[k]))
    rec[f"{key}:vision_on_stage"] = [hasattr(getattr(c, "module", c), "vision") for c in engine.model]
    if (kind, tp, pp, ep) == (DENSE, 1, 1, 1):
        dropped = dict(batch)
        dropped.pop("multi_modal_inputs")
        try:
            engine.forward_backward([dropped], forward_only=True)
            rec["dropped"] = "no error"
        except ValueError as e:
            rec["dropped"] = str(e)


@scenario
def _scenario(rank, rec, out_dir):
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.hf import random_hf_state

    refs, paths = {}, {}
    for kind in (DENSE, MOE):
        config = tiny_config(kind)
        path = os.path.join(out_dir, f"rank{rank}", kind)
        config.save_pretrained(path)
        paths[kind] = path
        state = random_hf_state(_hf_class(kind), config, SEED).__self__
        hf_model = _hf_class(kind)(config).eval()
        hf_model.load_state_dict(state, strict=True)
        refs[kind] = (config, hf_model, state, make_vl_batch(hf_model))
    for kind, tp, pp, ep in LAYOUTS:
        _check_layout(rec, refs, paths, kind, tp, pp, ep)
        mpu.destroy_model_parallel()
    _check_packed_text(rec, refs, paths)
    mpu.destroy_model_parallel()


def _check_packed_text(rec, refs, paths):
    """use_remove_padding=True on the vision-language bridge (TP=2, sequence parallel): a text-only
    micro-batch runs packed with transformers' log-probs; one with images is refused."""
    from megatron_world import padded_batch

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    _, hf_model, _, vl_batch = refs[MOE]
    model, actor = megatron_sections(paths[MOE], 2, 1, 1, init_seed=SEED)
    model.use_remove_padding = True
    engine = MegatronLMEngine(model, actor, None, "cpu", "actor")
    engine.initialize()
    rec["packed"] = engine.remove_padding
    text = padded_batch(3, 12, 4, left_pad={0: 5, 2: 2}, ended_early=(1,), seed=3, vocab=400)
    with torch.no_grad():
        reference = hf_model(input_ids=text["input_ids"], attention_mask=text["attention_mask"],
                             position_ids=text["position_ids"]).logits
    log_probs = engine.forward_backward([text], forward_only=True)[0]["log_probs"]
    resp = text["response_mask"].bool()
    rec["packed_text_log_prob_diff"] = (log_probs - response_log_probs(reference, text))[resp].abs().max().item()
    try:
        engine.forward_backward([vl_batch], forward_only=True)
        rec["packed_images"] = "no error"
    except ValueError as e:
        rec["packed_images"] = str(e)
    # auto (null) on the same packed-capable model: a call with images runs padded, text-only ones packed
    engine.model_config.use_remove_padding = None
    reference = hf_logits(hf_model, vl_batch)
    resp = vl_batch["response_mask"].bool()
    log_probs = engine.forward_backward([vl_batch], forward_only=True)[0]["log_probs"]
    rec["auto_images_log_prob_diff"] = (log_probs - response_log_probs(reference, vl_batch))[resp].abs().max().item()
    blank = engine.forward_backward([_blank(vl_batch)], forward_only=True)[0]["log_probs"]
    rec["auto_pixels_change_log_probs"] = (log_probs - blank)[resp].abs().max().item()


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


def _keys(kind):
    return [f"{k}:tp{tp}pp{pp}ep{ep}" for k, tp, pp, ep in LAYOUTS if k == kind]


@pytest.mark.parametrize("kind", [DENSE, MOE])
def test_qwen3_5_vl_logits_with_images_equal_transformers_at_tp_pp_ep_2(run, kind):
    bridge = "Qwen3_5MoeVLBridge" if kind == MOE else "Qwen3_5VLBridge"
    for rec in run:
        assert {rec[f"{k}:bridge"] for k in _keys(kind)} == {bridge}
        diffs = {k: rec[f"{k}:logits_diff"] for k in _keys(kind)}
        assert len(diffs) == 3
        assert max(diffs.values()) < 1e-5, diffs
        lp = {k: rec[f"{k}:log_prob_diff"] for k in _keys(kind)}
        assert max(lp.values()) < 1e-5, lp
        assert rec[f"{kind}:tp2pp1ep1:sp"]  # TP=2 ran with sequence parallelism (the hook's sliced path)


@pytest.mark.parametrize("kind", [DENSE, MOE])
def test_qwen3_5_vl_export_loads_strictly_and_round_trips_bitwise_vision_tower_included(run, kind):
    for rec in run:
        for key in _keys(kind):
            assert rec[f"{key}:strict"] == ([], []), key
            assert rec[f"{key}:names"] == ([], []), (key, rec[f"{key}:names"])
            assert rec[f"{key}:not_bitwise"] == [], (key, rec[f"{key}:not_bitwise"])


def test_qwen3_5_vl_pixels_reach_the_log_probs_and_dropped_pixel_inputs_are_refused(run):
    for rec in run:
        changes = {k: rec[f"{k}:pixels_change_log_probs"] for kind in (DENSE, MOE) for k in _keys(kind)}
        assert min(changes.values()) > 1e-3, changes
        assert "multi_modal_inputs" in rec["dropped"] and "image tokens" in rec["dropped"], rec["dropped"]


def test_packing_runs_text_only_micro_batches_packed_and_those_with_images_padded_under_auto_refused_under_true(run):
    for rec in run:
        assert rec["packed"] is True
        assert rec["packed_text_log_prob_diff"] < 1e-5, rec["packed_text_log_prob_diff"]
        assert "use_remove_padding=True: a micro-batch with images is refused packed" in rec["packed_images"], \
            rec["packed_images"]
        # auto: the micro-batch with images runs padded on the model built for packed input
        assert rec["auto_images_log_prob_diff"] < 1e-5, rec["auto_images_log_prob_diff"]
        assert rec["auto_pixels_change_log_probs"] > 1e-3, rec["auto_pixels_change_log_probs"]


def test_qwen3_5_vl_tower_sits_on_the_first_pipeline_stage_only(run):
    for kind in (DENSE, MOE):
        assert [rec[f"{kind}:tp1pp2ep1:vision_on_stage"] for rec in run] == [[True], [False]]


def test_the_partial_interleaved_mrope_is_transformers_own():
    """Qwen3.5 rotates the first partial_rotary_factor of a head with interleaved 3-D sections; the
    bridge's rotary embedding (what megatron applies to those channels) equals transformers' cos/sin."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    from verl_lite.engine.megatron.bridges import bridge_for
    from verl_lite.engine.megatron.bridges.vision import InterleavedMRoPE

    config = tiny_config(DENSE)
    bridge = bridge_for(config)
    dim = bridge.rotary_dim(16)
    assert (dim, bridge.mrope_section(), bridge.rope_theta()) == (8, [2, 1, 1], 10000.0)
    pos = torch.randint(0, 50, (3, 2, 7))
    cos, sin = Qwen3_5TextRotaryEmbedding(config.text_config)(torch.zeros(1, dtype=torch.float32), pos)
    emb = InterleavedMRoPE(dim, bridge.rope_theta(), bridge.mrope_section())(pos.transpose(0, 1))
    assert emb.shape == (7, 2, 1, 8) and cos.shape[-1] == 8
    assert torch.allclose(emb[:, :, 0].transpose(0, 1).cos(), cos, atol=1e-6)
    assert torch.allclose(emb[:, :, 0].transpose(0, 1).sin(), sin, atol=1e-6)


def test_the_registry_builds_the_qwen3_5_vl_bridges_with_the_tower():
    from verl_lite.decisions.packing_mode import VISION_BRIDGED
    from verl_lite.engine.base import UnsupportedModelError
    from verl_lite.engine.megatron.bridges import bridge_for
    from verl_lite.engine.megatron.bridges.qwen3_5_vl import Qwen3_5MoeVLBridge, Qwen3_5VLBridge
    from verl_lite.engine.megatron.bridges.vision import InterleavedMRoPE

    dense, moe = bridge_for(tiny_config(DENSE).to_dict()), bridge_for(tiny_config(MOE).to_dict())
    assert type(dense) is Qwen3_5VLBridge and type(moe) is Qwen3_5MoeVLBridge
    assert dense.has_vision and moe.has_vision and dense.deepstack_layers == 0
    assert {DENSE, MOE} <= set(VISION_BRIDGED)
    assert moe.transformer_config_kwargs()["moe_shared_expert_intermediate_size"] == 32
    no_sections = tiny_config(DENSE).to_dict()
    no_sections["text_config"]["rope_parameters"].pop("mrope_section")
    assert bridge_for(no_sections).mrope_section() == [11, 11, 10]  # transformers' default
    two = tiny_config(DENSE).to_dict()
    two["text_config"]["rope_parameters"]["mrope_section"] = [2, 2]
    with pytest.raises(UnsupportedModelError, match=r"mrope_section=\[2, 2\] \(three sections expected"):
        bridge_for(two)
    with pytest.raises(UnsupportedModelError, match="does not cover the rotary dim 8"):
        InterleavedMRoPE(8, 10000.0, [11, 11, 10])  # the chunk's build refuses sections that miss the rotary dim


def test_the_hf_model_copy_of_a_vision_language_export_is_the_conditional_generation_model(tmp_path):
    """checkpoint hf_model from the export stream (what the Megatron bridges give: the tower with the
    text model, the checkpoint's names): written as Qwen3_5ForConditionalGeneration with its whole
    config, strictly (no tensor missing or extra), and transformers loads it back bitwise."""
    from transformers import AutoModelForImageTextToText

    from verl_lite.engine.hf_export import save_hf_model

    config = tiny_config(DENSE)
    state = _hf_class(DENSE)(config).state_dict()
    out = save_hf_model(str(tmp_path / "hf"), iter(state.items()), config, "language_model", "tiny-qwen3_5", False,
                        strict=True, role="actor")
    loaded = AutoModelForImageTextToText.from_pretrained(out)
    assert type(loaded).__name__ == "Qwen3_5ForConditionalGeneration"
    assert loaded.config.architectures == ["Qwen3_5ForConditionalGeneration"]
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())
