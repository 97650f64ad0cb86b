"""The memory prediction of a vision-language model and of fully-async's two pools: the vision tower's
parameter count against transformers' own modules, the shipped Qwen3-VL-30B-A3B shape against
transformers' whole model and the checkpoint's published size, where the tower's state lands (the
first pipeline stage, not split over TP), and which phases hold vLLM when the rollout has devices of
its own."""

from __future__ import annotations

import json
import os

import pytest

from verl_lite.config.compose import compose_config
from verl_lite.config.shapes import SHAPES_DIR, model_shape
from verl_lite.decisions import memory as m
from verl_lite.decisions.layout import Layout
from verl_lite.decisions.memory_vision import vision_config, vision_params
from verl_lite.models import ASSETS_DIR
from verl_lite.preflight import memory as pm

VL_30B = os.path.join(SHAPES_DIR, "Qwen3-VL-30B-A3B-Instruct.json")
TINY_VL = os.path.join(ASSETS_DIR, "tiny-qwen3_vl_moe", "config.json")


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _vision_module(kind, vision):
    import torch

    if kind == "qwen3_vl_moe":
        from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeVisionConfig as Config
        from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeVisionModel as Model
    else:
        from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeVisionConfig as Config
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeVisionModel as Model
    with torch.device("meta"):
        return Model._from_config(Config(**vision))


@pytest.mark.parametrize("path", [VL_30B, TINY_VL], ids=["Qwen3-VL-30B-A3B", "tiny-qwen3_vl_moe"])
def test_the_vision_tower_count_equals_transformers_qwen3_vl_moe_vision_model(path):
    vision = vision_config(_load(path))
    real = sum(p.numel() for p in _vision_module("qwen3_vl_moe", vision).parameters())
    assert vision_params(vision) == real


def test_the_vision_tower_count_equals_transformers_qwen3_5_vision_model_without_deepstack():
    vision = {"depth": 3, "hidden_size": 64, "intermediate_size": 96, "num_heads": 4, "out_hidden_size": 48,
              "num_position_embeddings": 64, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
              "in_channels": 3}
    real = sum(p.numel() for p in _vision_module("qwen3_5_moe", vision).parameters())
    assert vision_params(vision) == real


def test_the_shipped_qwen3_vl_30b_shape_is_transformers_whole_model_of_31_1b_parameters():
    import torch
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    hf = _load(VL_30B)
    with torch.device("meta"):
        model = Qwen3VLMoeForConditionalGeneration(Qwen3VLMoeConfig(**hf))
    real = sum(p.numel() for p in model.parameters())
    d = m.model_dims(hf)
    assert m.total_params(d) + d.vision_params == real
    # the model card of Qwen/Qwen3-VL-30B-A3B-Instruct: 31B parameters (safetensors: 31.1B)
    assert round(real / 1e9, 1) == 31.1
    assert (d.layers, d.heads, d.kv_heads, d.head_dim, d.experts, d.topk, d.expert_ffn) == (48, 32, 4, 128, 128, 8, 768)


def test_the_shipped_shape_is_found_by_the_checkpoints_directory_name():
    shape = model_shape("/nonexistent/models/Qwen3-VL-30B-A3B-Instruct/")
    assert shape is not None and shape.origin == "shipped" and shape.name == "Qwen3-VL-30B-A3B-Instruct"
    assert "slime" in shape.describe() and "MindSpeed-MM" in shape.describe()


def test_the_vision_tower_sits_on_the_first_pipeline_stage_whole_on_every_tp_rank():
    d = m.model_dims(_load(VL_30B))
    text_only = m.model_dims({**_load(VL_30B), "vision_config": None})
    assert text_only.vision_params == 0
    lay = Layout("megatron", tp=4, pp=2, ep=4, etp=1, world=8)
    for stage, extra in ((0, d.vision_params), (1, 0)):
        dense, expert = m.stage_params(d, lay, stage)
        dense_text, expert_text = m.stage_params(text_only, lay, stage)
        assert (dense - dense_text, expert - expert_text) == (extra, 0)  # not divided by TP 4
    fsdp = Layout("fsdp", world=8, fsdp_shard=8)
    assert m.rank_params(d, fsdp)[0] * 8 == m.total_params(d) + d.vision_params


def _async_30b(*extra):
    cfg, problems = compose_config([
        "actor_rollout_ref.model.path=/nonexistent/Qwen3-VL-30B-A3B-Instruct", "trainer.device=npu",
        "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=megatron",
        "algorithm.adv_estimator=grpo", "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
        "actor_rollout_ref.ref.megatron.expert_model_parallel_size=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4", "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.name=vllm", *extra])
    assert problems == []
    return cfg


def test_fully_async_puts_vllm_on_the_rollout_pool_only():
    colocated = pm.predict(_async_30b(), "npu")
    own = pm.predict(_async_30b("async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
                                "actor_rollout_ref.rollout.n_gpus_per_node=4"), "npu")
    assert not colocated.plan.rollout_pool and own.plan.rollout_pool
    names = [ph.name for ph in own.phases]
    assert names[:2] == ["rollout (rollout pool)", "weight sync (training pool)"]
    rollout = own.phases[0]
    assert set(rollout.terms) == {"vLLM (gpu_memory_utilization)", "sync bucket"}
    for ph in own.phases[1:]:
        assert not any(t.startswith("vLLM") for t in ph.terms), ph
    # the hf rollout on a pool of its own generates with a whole bf16 replica of the model
    hf = pm.predict(_async_30b("async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
                               "actor_rollout_ref.rollout.n_gpus_per_node=4", "actor_rollout_ref.rollout.name=hf",
                               "actor_rollout_ref.rollout.tensor_model_parallel_size=1"), "npu")
    assert set(hf.phases[0].terms) == {"hf rollout weights", "hf rollout KV cache", "sync bucket"}
    d = hf.dims
    assert hf.phases[0].terms["hf rollout weights"] == (m.total_params(d) + d.vision_params) * 2
    # colocated, the weight sync holds vLLM's weights beside the actor's
    assert "vLLM weights" in next(ph for ph in colocated.phases if ph.name == "weight sync").terms
    lines = pm.summary_lines(_async_30b("async_training.enable=True", "actor_rollout_ref.rollout.nnodes=1",
                                        "actor_rollout_ref.rollout.n_gpus_per_node=4"), "npu")
    assert any(line.startswith("  vision tower: 0.54B parameters counted") for line in lines)
    assert lines[-1].startswith("  (fully-async: the rollout phase is on the rollout pool's devices")
