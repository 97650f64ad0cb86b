"""Weights out of the engines and the HF <-> Megatron bridges, in-process (no megatron import):
the torch engine's `export_hf_weights` stream and a rollout sync from it, the worker's sync, and
the bridge registry with the Qwen3 mapping. The Megatron engine's export (TP=2, PP=2) is asserted
in test_megatron_engine.py's spawned scenario.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch

from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig, RolloutConfig
from verl_lite.engine.base import UnsupportedModelError
from verl_lite.engine.megatron.bridges import bridge_for
from verl_lite.engine.megatron.bridges.base import ModelShard

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine():
    from verl_lite.engine.torch.engine import TorchLMEngine

    engine = TorchLMEngine(ModelConfig(path="tiny-qwen3_5"), ActorConfig(), OptimConfig(), "cpu", "actor")
    engine.initialize()
    with torch.no_grad():  # away from the rollout's own seeded init, so a sync has something to do
        for p in engine.module.parameters():
            p.add_(0.01)
    return engine


# ---------------------------------------------------------------------------- the export stream


def test_the_torch_export_is_a_generator_of_the_models_state_dict_on_cpu(engine):
    stream = engine.export_hf_weights()
    assert inspect.isgenerator(stream)
    state = engine.module.state_dict()
    exported = list(stream)
    assert [name for name, _ in exported] == list(state)
    for name, tensor in exported:
        assert tensor.device.type == "cpu" and torch.equal(tensor, state[name]), name


def test_a_sync_from_the_stream_makes_the_rollouts_weights_the_engines(engine):
    from verl_lite.rollout.hf import HFRollout

    rollout = HFRollout(ModelConfig(path="tiny-qwen3_5"), RolloutConfig(), None, "cpu")
    engine_state = engine.module.state_dict()
    assert any(not torch.equal(v, engine_state[k]) for k, v in rollout.model.state_dict().items())
    assert rollout.update_weights(engine.export_hf_weights(), 5) == len(engine_state)
    assert rollout.weight_version == 5
    for name, tensor in rollout.model.state_dict().items():
        assert torch.equal(tensor, engine_state[name]), name


def test_the_workers_rollout_sync_streams_the_export_instead_of_collecting_it(copy_task_data):
    from verl_lite.config import load_config, to_dataclass
    from verl_lite.trainer.workers import ActorRolloutRefWorker

    data = copy_task_data(n_train=64, n_val=8)
    worker = ActorRolloutRefWorker(to_dataclass(load_config([
        f"data.train_files={data}/train.parquet", f"data.val_files={data}/val.parquet", "trainer.device=cpu",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2"])), 0, 1)
    received = []
    plain = worker.rollout.update_weights
    worker.rollout.update_weights = lambda tensors, version: received.append(tensors) or plain(tensors, version)
    assert worker.sync_rollout_weights(2) == len(worker.actor.module.state_dict())
    assert len(received) == 1 and inspect.isgenerator(received[0])  # not a dict of every weight


# ---------------------------------------------------------------------------- bridges


def tiny_qwen3_config():
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(REPO_ROOT / "verl_lite/assets/tiny-qwen3"))


def test_bridges_are_registered_by_hf_architecture_and_resolve_without_importing():
    from verl_lite.registry import BRIDGES

    assert BRIDGES.resolve("Qwen3ForCausalLM") == "verl_lite.engine.megatron.bridges.qwen3:Qwen3Bridge"
    assert BRIDGES.resolve("Qwen3ForTokenClassification") == "verl_lite.engine.megatron.bridges.qwen3:Qwen3Bridge"
    assert type(bridge_for(tiny_qwen3_config())).__name__ == "Qwen3Bridge"


def test_an_unregistered_architecture_is_refused_listing_the_registered_ones():
    with pytest.raises(UnsupportedModelError) as caught:
        bridge_for({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    text = str(caught.value)
    assert "model_type 'llama' (architectures ['LlamaForCausalLM']) cannot be built" in text
    assert ("Model bridges are registered for: Qwen3ForCausalLM, Qwen3ForTokenClassification, "
            "Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration, "
            "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM, "
            "Qwen3_5MoeForConditionalGeneration") in text


def test_qwen3_next_is_refused_with_the_reason_and_a_fix():
    with pytest.raises(UnsupportedModelError, match="in_proj_qkvz.*registered for: Qwen3ForCausalLM.*strategy=fsdp"):
        bridge_for({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]})


def test_qwen3_5_configs_get_their_bridges_and_a_gdn_free_config_is_refused():
    from verl_lite.engine.megatron.bridges.qwen3_5 import Qwen3_5Bridge
    from verl_lite.engine.megatron.bridges.qwen3_5_vl import Qwen3_5MoeVLBridge

    dense = json.loads((REPO_ROOT / "verl_lite/assets/tiny-qwen3_5/config.json").read_text())
    assert type(bridge_for(dense)) is Qwen3_5Bridge
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
    vl = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "image_token_id": 5,
          "vision_config": {}, "text_config": {**dense, "model_type": "qwen3_5_moe_text", "num_experts": 4,
                                                 "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                                 "shared_expert_intermediate_size": 32, "rope_parameters": rope}}
    bridge = bridge_for(vl)
    assert type(bridge) is Qwen3_5MoeVLBridge
    checkpoint = {"model.language_model.layers.0.mlp.gate.weight": torch.ones(4, 64)}  # a VL checkpoint's name
    layout = ModelShard(hidden=64, ffn=32, heads=4, groups=2, head_dim=16, vocab=48)
    router = bridge.hf_to_megatron("decoder.layers.0.mlp.router.weight", layout, checkpoint.__getitem__)
    assert torch.equal(router, torch.ones(4, 64))
    assert bridge.megatron_to_hf("decoder.layers.0.mlp.router.weight", router, layout)[0][0] == \
        "model.language_model.layers.0.mlp.gate.weight"  # the conditional-generation model's names, as it loaded
    assert bridge.megatron_to_hf("vision.blocks.0.attn.qkv.weight", router, layout)[0][0] == \
        "model.visual.blocks.0.attn.qkv.weight"
    assert bridge.transformer_config_kwargs()["num_moe_experts"] == 4
    with pytest.raises(UnsupportedModelError, match="no linear_attention layer"):
        bridge_for({**dense, "layer_types": ["full_attention", "full_attention"]})
    older = {k: v for k, v in dense.items() if k != "layer_types"}
    assert Qwen3_5Bridge.layer_kinds({**older, "full_attention_interval": 2}) == ["linear_attention", "full_attention"]


def test_the_qwen3_bridge_refuses_what_it_does_not_map():
    with pytest.raises(UnsupportedModelError, match="with num_experts set is not covered by verl_lite's Qwen3 bridge"):
        bridge_for({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_experts": 8})


def test_weight_mapping_round_trips_through_two_tp_shards():
    hf_config = tiny_qwen3_config()
    bridge = bridge_for(hf_config)
    g = torch.Generator().manual_seed(0)
    hf = {
        "model.layers.0.self_attn.q_proj.weight": torch.randn(64, 64, generator=g),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(32, 64, generator=g),
        "model.layers.0.self_attn.v_proj.weight": torch.randn(32, 64, generator=g),
        "model.layers.0.mlp.gate_proj.weight": torch.randn(128, 64, generator=g),
        "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64, generator=g),
        "model.layers.0.mlp.down_proj.weight": torch.randn(64, 128, generator=g),
    }
    names = ["decoder.layers.0.self_attention.linear_qkv.weight", "decoder.layers.0.mlp.linear_fc1.weight",
             "decoder.layers.0.mlp.linear_fc2.weight"]
    pieces = {}
    for rank in range(2):
        layout = bridge.layout(tp_size=2, tp_rank=rank)
        for name in names:
            shard = bridge.hf_to_megatron(name, layout, hf.__getitem__)
            for hf_name, part, dim in bridge.megatron_to_hf(name, shard, layout):
                pieces.setdefault(hf_name, []).append((part, dim))
    for hf_name, parts in pieces.items():
        assert torch.equal(torch.cat([p for p, _ in parts], dim=parts[0][1]), hf[hf_name]), hf_name
    # rank 0's fused QKV holds query group 0: its two query heads, then key head 0, then value head 0
    qkv = bridge.hf_to_megatron(names[0], ModelShard.from_hf(hf_config, 2, 0), hf.__getitem__)
    assert torch.equal(qkv[:32], hf["model.layers.0.self_attn.q_proj.weight"][:32])
    assert torch.equal(qkv[32:48], hf["model.layers.0.self_attn.k_proj.weight"][:16])


def test_qwen3_5_moe_experts_load_from_fused_or_per_expert_checkpoint_tensors():
    """transformers' state dict fuses the experts (experts.gate_up_proj [E, 2I, H]); hub checkpoints
    keep one tensor per expert (experts.{e}.gate_proj ...), under model.language_model. for VL ones."""
    config = json.loads((REPO_ROOT / "verl_lite/assets/tiny-qwen3_5-moe/config.json").read_text())
    bridge = bridge_for(config)
    layout = bridge.layout(1, 0)
    g = torch.Generator().manual_seed(0)
    gate_up, down = torch.randn(4, 64, 64, generator=g), torch.randn(4, 64, 32, generator=g)
    fused = {"model.layers.1.mlp.experts.gate_up_proj": gate_up, "model.layers.1.mlp.experts.down_proj": down}
    per_expert = {}
    for e in range(4):
        prefix = f"model.language_model.layers.1.mlp.experts.{e}."
        per_expert[prefix + "gate_proj.weight"], per_expert[prefix + "up_proj.weight"] = gate_up[e].chunk(2)
        per_expert[prefix + "down_proj.weight"] = down[e]
    for source in (fused, per_expert):
        bridge.finish_load()
        fc1 = bridge.hf_to_megatron("decoder.layers.1.mlp.experts.local_experts.2.linear_fc1.weight", layout,
                                    source.__getitem__)
        fc2 = bridge.hf_to_megatron("decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight", layout,
                                    source.__getitem__)
        assert torch.equal(fc1, gate_up[2]) and torch.equal(fc2, down[3])

