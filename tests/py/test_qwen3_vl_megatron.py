"""Qwen3-VL dense and MoE on the Megatron engine (CPU, fp32, gloo), with images: logits against
transformers' Qwen3VL(Moe)ForConditionalGeneration at TP=1, TP=2 (sequence parallel), PP=2 and
(MoE) EP=2; the export loading strictly into transformers, HF -> Megatron -> HF bitwise (vision
tower included); a VL batch through forward + loss + backward that trains the vision tower; a
micro-batch whose pixel inputs were dropped is refused; the interleaved 3-D rotary layout against
transformers' own.

The tiny models are built in code from transformers' config classes (random init, seeded); the
layouts run in the spawn of two gloo processes the Megatron test modules share (`_scenario`,
tests/py/megatron_world.py), the tests read what they recorded.
"""

from __future__ import annotations

import os
import traceback
from types import SimpleNamespace

import pytest
import torch
from megatron_world import megatron_sections, nll_loss, response_log_probs, scenario, train_steps

SEED = 5
DENSE, MOE = "qwen3_vl", "qwen3_vl_moe"
IMAGE, VSTART, VEND = 500, 502, 503
PATCH, TEMPORAL, MERGE = 4, 2, 2
R = 4
# (model, TP, PP, EP) run by the two ranks, in this order
LAYOUTS = [
    (DENSE, 1, 1, 1), (DENSE, 2, 1, 1), (DENSE, 1, 2, 1),
    (MOE, 1, 1, 1), (MOE, 2, 1, 1), (MOE, 1, 2, 1), (MOE, 1, 1, 2),
]


def tiny_config(kind: str, deepstack=(0, 1)):
    """A Qwen3-VL(-MoE)-shaped config: 4 text layers, a 2-block vision tower with DeepStack."""
    from transformers import Qwen3VLConfig, Qwen3VLMoeConfig

    text = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=512, pad_token_id=0,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3],
                                     mrope_interleaved=True))
    vision = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=PATCH,
                  temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE, out_hidden_size=64,
                  num_position_embeddings=16, deepstack_visual_indexes=list(deepstack))
    ids = dict(image_token_id=IMAGE, video_token_id=501, vision_start_token_id=VSTART, vision_end_token_id=VEND,
               tie_word_embeddings=False)
    if kind == MOE:
        text.update(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
        return Qwen3VLMoeConfig(text_config=text, vision_config=vision, architectures=[
            "Qwen3VLMoeForConditionalGeneration"], **ids)
    return Qwen3VLConfig(text_config=text, vision_config=vision, architectures=["Qwen3VLForConditionalGeneration"],
                         **ids)


def _hf_class(kind):
    from transformers import Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration

    return Qwen3VLMoeForConditionalGeneration if kind == MOE else Qwen3VLForConditionalGeneration


def make_vl_batch(hf_model, seed: int = 0):
    """Three left-padded rows: two with an image each (grids 1x4x4 and 1x4x8 patches, 4 and 8 image
    tokens), one text-only; 3-D positions from the HF model's own get_rope_index, per-sample
    `multi_modal_inputs` as the processor gives them."""
    g = torch.Generator().manual_seed(seed)
    grids = [torch.tensor([[1, 4, 4]]), None, torch.tensor([[1, 4, 8]])]
    rows = []
    for grid in grids:
        text = torch.randint(3, 400, (5,), generator=g).tolist()
        image = [] if grid is None else [VSTART] + [IMAGE] * int(grid.prod() // MERGE ** 2) + [VEND]
        rows.append(text[:2] + image + text[2:] + torch.randint(3, 400, (R,), generator=g).tolist())
    width = max(len(r) for r in rows) + 1
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    mask[1, -1] = 0  # a response that ended early
    ids[1, -1] = 0
    mm_inputs = []
    for grid in grids:
        if grid is None:
            mm_inputs.append(None)
            continue
        patches = int(grid.prod())
        pixels = torch.randn(patches, 3 * TEMPORAL * PATCH * PATCH, generator=g)
        mm_inputs.append({"pixel_values": pixels, "image_grid_thw": grid})
    types = (ids == IMAGE).int()
    image_grid = torch.cat([g_ for g_ in grids if g_ is not None])
    with torch.no_grad():
        pos, _ = hf_model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=image_grid,
                                               attention_mask=mask)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos.transpose(0, 1).contiguous(),
                responses=ids[:, -R:], response_mask=mask[:, -R:], multi_modal_inputs=mm_inputs)


def hf_logits(hf_model, batch):
    rows = [m for m in batch["multi_modal_inputs"] if m]
    with torch.no_grad():
        return hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        position_ids=batch["position_ids"].transpose(0, 1),
                        pixel_values=torch.cat([m["pixel_values"] for m in rows]),
                        image_grid_thw=torch.cat([m["image_grid_thw"] for m in rows])).logits


def _sections(path, tp=1, pp=1, ep=1):
    return megatron_sections(path, tp, pp, ep, init_seed=SEED)


def _engine_logits(engine, batch):
    """Full-vocabulary logits through megatron's schedule (gathered over TP, on every stage)."""
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

    from verl_lite.engine.megatron import batch as megatron_batch
    from verl_lite.engine.megatron import schedule as megatron_schedule

    def logits_of(output, item, with_entropy):
        return {"logits": gather_from_tensor_model_parallel_region(output)[..., : engine.layout.vocab]}

    tp = mpu.get_tensor_model_parallel_world_size()
    item = megatron_batch.prepare_batch(batch, torch.device("cpu"), 0, 0, multiple=tp)
    item["visual"] = engine.bridge.visual_inputs(batch, torch.device("cpu"))
    logits = megatron_schedule.run_schedule(engine.model, [item], logits_of, None, True, False)[0]["logits"]
    return logits[:, logits.shape[1] - batch["input_ids"].shape[1]:]


def _check_layout(rec, refs, paths, kind, tp, pp, ep):
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    key = f"{kind}:tp{tp}pp{pp}ep{ep}"
    config, hf_model, state, batch = refs[kind]
    model, actor = _sections(paths[kind], tp, pp, ep)
    engine = MegatronLMEngine(model, actor, None, "cpu", "actor")  # forward only
    engine.initialize()
    valid = batch["attention_mask"].bool()
    rec[f"{key}:logits_diff"] = (_engine_logits(engine, batch)[valid] - hf_logits(hf_model, batch)[valid]).abs().max().item()
    rec[f"{key}:sp"] = bool(engine.tf_config.sequence_parallel)
    log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    resp = batch["response_mask"].bool()
    rec[f"{key}:log_prob_diff"] = (log_probs - response_log_probs(hf_logits(hf_model, batch), batch))[resp].abs().max().item()
    exported = dict(engine.export_hf_weights())
    fresh = _hf_class(kind)(config).eval()
    result = fresh.load_state_dict(exported, strict=True)
    rec[f"{key}:strict"] = (list(result.missing_keys), list(result.unexpected_keys))
    rec[f"{key}:names"] = (sorted(set(state) - set(exported)), sorted(set(exported) - set(state)))
    rec[f"{key}:not_bitwise"] = sorted(k for k in state if k in exported and not torch.equal(exported[k], state[k]))
    rec[f"{key}:vision_on_stage"] = [hasattr(getattr(c, "module", c), "vision") for c in engine.model]
    return engine


def _phase_dropped_pixels(rec, engine, batch):
    """A micro-batch whose multi_modal_inputs were dropped (the image tokens stay) is refused."""
    dropped = dict(batch)
    dropped.pop("multi_modal_inputs")
    try:
        engine.forward_backward([dropped], forward_only=True)
        rec["dropped"] = "no error"
    except ValueError as e:
        rec["dropped"] = str(e)


def _vision_grads(engine):
    chunk = getattr(engine.model[0], "module", engine.model[0])
    return {name: p.main_grad.detach().clone() for name, p in chunk.vision.named_parameters()}


def _phase_tp2_vision_grads(rec, paths, refs):
    """The vision tower's gradients of one backward at TP=2 with sequence parallelism (each rank
    back-propagates its part of the sequence; finalize_model_grads sums them over TP)."""
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    _, _, _, batch = refs[MOE]
    model, actor = _sections(paths[MOE], 2, 1, 1)
    engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    engine.initialize()
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward([batch], nll_loss)  # the schedule runs finalize_model_grads
    rec["tp2_sp"] = bool(engine.tf_config.sequence_parallel)
    rec["tp2_vision_grads"] = _vision_grads(engine)
    mpu.destroy_model_parallel()


def _phase_recompute_under_pp2(rec, paths, refs):
    """Two micro-batches through the 1F1B schedule at PP=2 (stage 1 runs forward 2 before backward 1),
    with and without full recompute: the re-run DeepStack layers read their own micro-batch's features,
    so the grads agree."""
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    _, hf_model, _, first = refs[DENSE]
    second = make_vl_batch(hf_model, seed=1)
    for recompute in (False, True):
        model, actor = _sections(paths[DENSE], 1, 2, 1)
        if recompute:
            actor.megatron.override_transformer_config = {
                "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
        engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
        engine.initialize()
        engine.train_mode()
        engine.optimizer_zero_grad()
        engine.forward_backward([first, second], nll_loss)
        chunk = getattr(engine.model[0], "module", engine.model[0])
        grads = {n: p.main_grad.detach().clone() for n, p in chunk.named_parameters()}
        rec[f"pp2_grads:recompute={recompute}"] = grads
        if recompute and hasattr(chunk, "deepstack"):
            rec["pp2_recompute_rerun_layers"] = chunk.deepstack.rerun_layers
            rec["pp2_recompute_left_queued"] = len(chunk.deepstack.pending)
        mpu.destroy_model_parallel()


def _phase_training(rec, paths, refs):
    """forward + loss + backward of the VL batch on the MoE model at EP=2: the vision tower gets
    gradients, the loss falls, and log-probs without the images differ (the pixels reach the loss)."""
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    _, _, _, batch = refs[MOE]
    model, actor = _sections(paths[MOE], 1, 1, 2)
    actor.optim.lr = 1e-2
    engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
    engine.initialize()
    engine.train_mode()
    losses, vision_grads = [], []
    for _ in range(3):
        engine.optimizer_zero_grad()
        losses.append(engine.forward_backward([batch], nll_loss)[0]["metrics"]["loss"])
        if not vision_grads:
            rec["ep2_vision_grads"] = _vision_grads(engine)
        chunk = getattr(engine.model[0], "module", engine.model[0])
        vision_grads.append(sum(float(p.main_grad.abs().sum()) for p in chunk.vision.parameters()))
        engine.optimizer_step()
    rec["train_losses"] = losses
    rec["vision_grad_sums"] = vision_grads
    engine.eval_mode()
    with_images = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    blank = dict(batch)
    blank["multi_modal_inputs"] = [None if m is None else {"pixel_values": torch.zeros_like(m["pixel_values"]),
                                                          "image_grid_thw": m["image_grid_thw"]}
                                   for m in batch["multi_modal_inputs"]]
    without = engine.forward_backward([blank], forward_only=True)[0]["log_probs"]
    rec["pixels_change_log_probs"] = (with_images - without).abs().max().item()


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
        engine = _check_layout(rec, refs, paths, kind, tp, pp, ep)
        if (kind, tp, pp, ep) == (DENSE, 1, 1, 1):
            _phase_dropped_pixels(rec, engine, refs[DENSE][3])
        mpu.destroy_model_parallel()
    _phase_tp2_vision_grads(rec, paths, refs)
    _phase_recompute_under_pp2(rec, paths, refs)
    _phase_training(rec, paths, refs)
    mpu.destroy_model_parallel()


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


def _keys(kind):
    return [f"{k}:tp{tp}pp{pp}ep{ep}" for k, tp, pp, ep in LAYOUTS if k == kind]


@pytest.mark.parametrize("kind", [DENSE, MOE])
def test_vl_logits_equal_transformers_at_tp_pp_ep_2(run, kind):
    for rec in run:
        diffs = {k: rec[f"{k}:logits_diff"] for k in _keys(kind)}
        assert len(diffs) == (3 if kind == DENSE else 4)
        assert max(diffs.values()) < 1e-5, diffs
        lp = {k: rec[f"{k}:log_prob_diff"] for k in _keys(kind)}
        assert max(lp.values()) < 1e-5, lp
        assert rec[f"{kind}:tp2pp1ep1:sp"]  # TP=2 ran with sequence parallelism (the hooks' sliced path)


@pytest.mark.parametrize("kind", [DENSE, MOE])
def test_the_export_loads_strictly_and_the_round_trip_is_bitwise_vision_tower_included(run, kind):
    for rec in run:
        for key in _keys(kind):
            assert rec[f"{key}:strict"] == ([], []), key
            assert rec[f"{key}:names"] == ([], []), (key, rec[f"{key}:names"])
            assert rec[f"{key}:not_bitwise"] == [], (key, rec[f"{key}:not_bitwise"])


def test_the_vision_tower_sits_on_the_first_pipeline_stage_only(run):
    stages = [rec[f"{DENSE}:tp1pp2ep1:vision_on_stage"] for rec in run]
    assert stages == [[True], [False]], stages


def test_a_micro_batch_whose_pixel_inputs_were_dropped_is_refused(run):
    for rec in run:
        assert "multi_modal_inputs" in rec["dropped"] and "image tokens" in rec["dropped"], rec["dropped"]


def test_a_vl_batch_trains_through_forward_loss_backward_and_the_pixels_reach_the_loss(run):
    for rec in run:
        assert all(g > 0 for g in rec["vision_grad_sums"]), rec["vision_grad_sums"]
        assert rec["train_losses"][-1] < rec["train_losses"][0], rec["train_losses"]
        assert rec["pixels_change_log_probs"] > 1e-3, rec["pixels_change_log_probs"]


def test_vision_grads_at_tp2_with_sequence_parallelism_equal_those_without_tp(run):
    for rec in run:
        assert rec["tp2_sp"]
        tp2, ep2 = rec["tp2_vision_grads"], rec["ep2_vision_grads"]
        assert set(tp2) == set(ep2) and tp2
        worst = max(((tp2[k] - ep2[k]).abs().max() / ep2[k].abs().max().clamp(min=1e-12)).item() for k in tp2)
        assert worst < 1e-4, worst


def test_full_recompute_under_the_pipeline_schedule_gives_the_same_grads(run):
    first_stage = run[0]
    assert first_stage["pp2_recompute_rerun_layers"] == 2 and first_stage["pp2_recompute_left_queued"] == 0
    for rec in run:
        plain, recomputed = rec["pp2_grads:recompute=False"], rec["pp2_grads:recompute=True"]
        assert set(plain) == set(recomputed)
        worst = {k: ((plain[k] - recomputed[k]).abs().max() / plain[k].abs().max().clamp(min=1e-12)).item()
                 for k in plain}
        assert max(worst.values()) < 1e-5, sorted(worst.items(), key=lambda kv: -kv[1])[:3]


def test_the_interleaved_mrope_layout_is_transformers_own():
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    from verl_lite.engine.megatron.bridges.qwen3_vl import InterleavedMRoPE

    text = tiny_config(DENSE).text_config
    pos = torch.randint(0, 50, (3, 2, 7))
    cos, sin = Qwen3VLTextRotaryEmbedding(text)(torch.zeros(1, dtype=torch.float32), pos)
    emb = InterleavedMRoPE(16, 10000.0, [2, 3, 3])(pos.transpose(0, 1))  # (B, 3, L) as the batch carries
    assert emb.shape == (7, 2, 1, 16)
    assert torch.allclose(emb[:, :, 0].transpose(0, 1).cos(), cos, atol=1e-6)
    assert torch.allclose(emb[:, :, 0].transpose(0, 1).sin(), sin, atol=1e-6)
    # megatron's own (contiguous sections) differs: the layout is what is being checked
    contiguous = torch.cat([m[i % 3] for i, m in enumerate(
        (pos[..., None].float() * InterleavedMRoPE(16, 10000.0, [2, 3, 3]).inv_freq).split([2, 3, 3], -1))], -1)
    assert not torch.allclose(torch.cat([contiguous, contiguous], -1).cos(), cos)


def _fake_chunk(pre_process, layer_numbers):
    layers = [SimpleNamespace(layer_number=n) for n in layer_numbers]
    return SimpleNamespace(pre_process=pre_process, decoder=SimpleNamespace(layers=layers))


def test_deepstack_layers_off_the_first_pipeline_stage_are_refused_naming_the_fix():
    from verl_lite.engine.base import UnsupportedModelError
    from verl_lite.engine.megatron.bridges import bridge_for

    bridge = bridge_for(tiny_config(MOE, deepstack=(0, 1, 1)).to_dict())  # three DeepStack layers
    tf = SimpleNamespace(kv_channels=16, params_dtype=torch.float32, sequence_parallel=False)
    with pytest.raises(UnsupportedModelError, match="whose first stage has at least 3 layers"):
        bridge.finish_chunk(_fake_chunk(False, [3, 4]), tf)  # stage 2 of PP=2 holds layer 2
    with pytest.raises(UnsupportedModelError, match=r"DeepStack layers \[2\]"):
        bridge.finish_chunk(_fake_chunk(True, [1, 2]), tf)


def test_the_registry_builds_qwen3_vl_bridges_from_config_json_dicts():
    from verl_lite.engine.megatron.bridges import bridge_for
    from verl_lite.engine.megatron.bridges.qwen3_vl import Qwen3VLBridge, Qwen3VLMoeBridge

    assert type(bridge_for(tiny_config(DENSE).to_dict())) is Qwen3VLBridge
    moe = bridge_for(tiny_config(MOE).to_dict())
    assert type(moe) is Qwen3VLMoeBridge and moe.has_vision
    kwargs = moe.transformer_config_kwargs()
    assert (kwargs["num_moe_experts"], kwargs["moe_router_topk"], kwargs["moe_ffn_hidden_size"]) == (4, 2, 32)


# A Qwen3-VL-30B-A3B-shaped config.json in the layout its checkpoints carry (written by transformers
# 4.57: `rope_scaling`, `rope_theta` and `num_experts` in text_config).
QWEN3_VL_30B_A3B = {
    "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe", "image_token_id": 151655,
    "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "tie_word_embeddings": False,
    "text_config": {"model_type": "qwen3_vl_moe_text", "attention_bias": False, "decoder_sparse_step": 1,
                    "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
                    "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 768,
                    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
                    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
                    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
                    "rope_theta": 5000000, "vocab_size": 151936},
    "vision_config": {"model_type": "qwen3_vl_moe", "deepstack_visual_indexes": [8, 16, 24], "depth": 27,
                      "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
                      "intermediate_size": 4304, "num_heads": 16, "num_position_embeddings": 2304,
                      "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
}


def test_the_check_accepts_a_real_qwen3_vl_moe_config_json_naming_the_bridge_and_the_replicated_tower(tmp_path):
    import json
    import subprocess
    import sys

    model = tmp_path / "Qwen3-VL-30B-A3B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_VL_30B_A3B))
    env = dict(os.environ, HOME=str(tmp_path), PYTHON=sys.executable, CHECK="1", HF_MODEL_PATH=str(model))
    check = subprocess.run(["bash", "examples/ascend/run_qwen3_vl_30b_a3b_fully_async.sh"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    out = check.stdout
    assert "(the model's config.json)" in out
    assert "bridge      : verl_lite registry (Qwen3VLMoeForConditionalGeneration)" in out
    assert "vision tower: 27 blocks, replicated on every TP rank (not tensor-parallel), on the first pipeline stage " \
           "with the DeepStack layers 0..2" in out
    assert "; micro-batches with images run padded (image embeddings and 3-D rotary positions" in out


def test_deepstack_layers_need_the_first_pipeline_stage_in_the_preflight_arithmetic():
    from verl_lite.decisions.layout import deepstack_stage_problem, first_stage_layers

    assert first_stage_layers(48, 2, None) == 24 and first_stage_layers(48, 4, 4) == 3
    assert first_stage_layers(48, 4, 4, first_stage=2) == 2
    assert deepstack_stage_problem(3, 48, 4, 4, None, "p") is None
    problem = deepstack_stage_problem(3, 48, 4, 8, None, "actor_rollout_ref.actor.megatron")
    assert "puts 1 layer(s) there" in problem and "num_layers_in_first_pipeline_stage >= 3" in problem
    assert deepstack_stage_problem(3, 4, 1, None, None, "p") is None  # one stage holds them all


def test_the_images_padded_decision_names_exactly_the_vision_bridges():
    from verl_lite.decisions.packing_mode import VISION_BRIDGED, decide_megatron
    from verl_lite.registry import BRIDGES

    vision = set()
    for (architecture, *_rest) in BRIDGES.keys():
        bridge = BRIDGES.load(architecture)
        if getattr(bridge, "has_vision", False):
            vision.update(bridge.vl_model_types)  # the config.json's model_type (Qwen3.5's text model has its own)
    assert vision == set(VISION_BRIDGED)
    packed = decide_megatron(True, "npu", None, {}, vision=True)  # text-only micro-batches pack
    assert packed.packed and not packed.refusal and "a micro-batch with images is refused packed" in packed.why
    auto = decide_megatron(None, "npu", None, {}, vision=True)  # text-only packed, images padded by the engine
    assert auto.packed and not auto.refusal and "micro-batches with images run padded" in auto.why
    assert not decide_megatron(None, "npu", None, {"use_flash_attn": False}, vision=True).packed  # the usual rules
    assert decide_megatron(True, "npu", None, {"use_flash_attn": False}, vision=True).refusal  # the usual rules
    assert decide_megatron(None, "npu", None, {}, vision=True, external=True).packed  # Megatron-Bridge's own


def _mindspeed_scenario(rank, world, port, out_dir):
    """The npu engine from the registry (MindSpeed, its internals on CPU, the double imported before
    megatron as on Ascend) takes the VL batch: log-probs as transformers', then forward + loss +
    backward steps that train."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "mindspeed_double" / "core_r0.16.0"))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    rec = {}
    try:
        importlib.import_module("mindspeed._double")  # the package only: megatron is not imported yet

        from verl_lite.engine.megatron import mindspeed as ms
        from verl_lite.engine.megatron.hf import random_hf_state
        from verl_lite.registry import ENGINES

        config = tiny_config(MOE)
        path = os.path.join(out_dir, "model")
        config.save_pretrained(path)
        state = random_hf_state(_hf_class(MOE), config, SEED).__self__
        hf_model = _hf_class(MOE)(config).eval()
        hf_model.load_state_dict(state, strict=True)
        batch = make_vl_batch(hf_model)
        ms.MindSpeedEngineMixin.internals_device = "cpu"
        model, actor = _sections(path)
        actor.optim.lr = 1e-2
        engine = ENGINES.load("language_model", "megatron", "npu")(model, actor, actor.optim, "npu", "actor")
        engine.initialize()
        rec["class"] = type(engine).__name__
        rec["packed"] = engine.remove_padding
        log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
        resp = batch["response_mask"].bool()
        rec["log_prob_diff"] = (log_probs - response_log_probs(hf_logits(hf_model, batch), batch))[resp].abs().max().item()
        rec["losses"] = train_steps(engine, batch)
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def mindspeed_run(spawn_ranks):
    return spawn_ranks(_mindspeed_scenario, "qwen3_vl_mindspeed", nprocs=1)[0]


def test_the_mindspeed_npu_engine_takes_the_vl_batch_and_trains(mindspeed_run):
    rec = mindspeed_run
    # auto packs on MindSpeed's flash attention (TND); this batch has images, so it ran padded
    assert rec["class"] == "MindSpeedLMEngine" and rec["packed"] is True
    assert rec["log_prob_diff"] < 1e-5, rec["log_prob_diff"]
    assert rec["losses"][-1] < rec["losses"][0], rec["losses"]
