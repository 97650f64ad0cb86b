"""Model building: the GDN chunk choice of the pure-torch gated delta rule (models/hf.py)."""

from __future__ import annotations

import pytest
import torch

from verl_lite.config import load_config
from verl_lite.config.schema import ModelConfig
from verl_lite.models.hf import auto_chunk_size, build_causal_lm


@pytest.fixture
def rule_module(monkeypatch):
    """transformers' Qwen3.5 module with its rule restored after the test (the choice is process-wide)."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5

    monkeypatch.setattr(qwen3_5, "torch_chunk_gated_delta_rule", qwen3_5.torch_chunk_gated_delta_rule)
    return qwen3_5


def spy_on_rule(module, monkeypatch):
    """Replace the module's rule with one that records the chunk size it is called with."""
    original = getattr(module.torch_chunk_gated_delta_rule, "__verl_lite_original__",
                       module.torch_chunk_gated_delta_rule)
    seen = []

    def spy(*args, **kwargs):
        seen.append((args[1].shape[1], kwargs.get("chunk_size")))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "torch_chunk_gated_delta_rule", spy)
    return seen


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


@pytest.mark.parametrize("seq_len, chunk", [(1, 16), (11, 16), (128, 16), (129, 32), (1024, 32), (1025, 64)])
def test_auto_chunk_follows_the_sequence_length(seq_len, chunk):
    assert auto_chunk_size(seq_len) == chunk


def test_auto_and_fixed_chunks_reach_the_rule_and_change_only_rounding(rule_module, monkeypatch):
    seen = spy_on_rule(rule_module, monkeypatch)
    ids = torch.randint(3, 48, (4, 11), generator=torch.Generator().manual_seed(0))
    out = {}
    for chunk in (None, 8, 64):
        model = build_causal_lm(ModelConfig(path="tiny-qwen3_5", init_seed=0, linear_attention_chunk_size=chunk))
        seen.clear()
        out[chunk] = logits(model, ids)
        assert seen == [(11, chunk or 16)], f"chunk {chunk}: the GDN layer called the rule with {seen}"
    torch.testing.assert_close(out[None], out[64], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[8], out[64], atol=1e-5, rtol=1e-5)


def test_rebuilding_wraps_the_original_rule_not_the_previous_wrapper(rule_module):
    rule = rule_module.torch_chunk_gated_delta_rule
    original = getattr(rule, "__verl_lite_original__", rule)  # earlier tests in this process built models
    assert original.__module__ == rule_module.__name__
    build_causal_lm(ModelConfig(path="tiny-qwen3_5", linear_attention_chunk_size=8))
    build_causal_lm(ModelConfig(path="tiny-qwen3_5", linear_attention_chunk_size=32))
    assert rule_module.torch_chunk_gated_delta_rule.__verl_lite_original__ is original


def test_a_model_without_gdn_layers_is_left_alone():
    model = build_causal_lm(ModelConfig(path="tiny-qwen3", linear_attention_chunk_size=16))
    assert model.config.model_type == "qwen3"
    import transformers.models.qwen3.modeling_qwen3 as qwen3

    assert not hasattr(qwen3, "torch_chunk_gated_delta_rule")


@pytest.mark.parametrize("value", [0, -16])
def test_a_chunk_below_one_is_reported_by_the_preflight(value):
    from verl_lite.preflight.run import collect_problems

    cfg = load_config(["trainer.device=cpu", f"actor_rollout_ref.model.linear_attention_chunk_size={value}"])
    assert collect_problems(cfg, for_training=False) == [
        f"actor_rollout_ref.model.linear_attention_chunk_size={value} must be a positive integer"]


def test_the_builder_takes_a_typed_model_section_and_names_the_conversion_for_a_dict():
    with pytest.raises(TypeError, match=r"must be a verl_lite\.config\.schema\.ModelConfig.*as_section\(ModelConfig"):
        build_causal_lm({"path": "tiny-qwen3"})


def test_a_chunk_below_one_is_refused_by_the_builder_too():
    with pytest.raises(ValueError, match="linear_attention_chunk_size=0 must be a positive integer or null"):
        build_causal_lm(ModelConfig(path="tiny-qwen3_5", linear_attention_chunk_size=0))
