"""Typed config sections down to the engines: `as_section` (verl_lite/config/sections.py) and the
settings the torch engine reads from them. The Megatron engine's side (clip at optim.clip_grad,
weight decay 0.01 from an untyped optim dict) runs in test_megatron_engine.py's spawned scenario.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from omegaconf import OmegaConf

from verl_lite.config.schema import ActorConfig, MegatronConfig, ModelConfig, OptimConfig, RefConfig, VerlLiteConfig
from verl_lite.config.sections import as_section

B, T, R = 4, 10, 4


def make_batch(seed: int = 0, length: int = T):
    """B random full-length rows of `length` tokens, the last R of them the response."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 48, (B, length), generator=g)
    mask = torch.ones(B, length, dtype=torch.long)
    return dict(input_ids=ids, attention_mask=mask, position_ids=torch.arange(length).expand(B, length),
                responses=ids[:, -R:], response_mask=mask[:, -R:])


def nll_loss(outputs, batch):
    mask = batch["response_mask"].float()
    return -(outputs["log_probs"] * mask).sum() / mask.sum(), {}


def torch_engine(optim, actor=None):
    from verl_lite.engine.torch.engine import TorchLMEngine

    engine = TorchLMEngine(ModelConfig(path="tiny-qwen3"), actor or ActorConfig(), optim, "cpu", "actor")
    engine.initialize()
    return engine


# ---------------------------------------------------------------------------- the torch engine


def test_the_torch_engine_clips_at_optim_clip_grad_not_actor_grad_clip_and_returns_the_norm_before():
    engine = torch_engine(OptimConfig(lr=1e-3, clip_grad=0.5), ActorConfig(grad_clip=1.0))
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward([make_batch()], nll_loss)
    before_clip = torch.nn.utils.get_total_norm([p.grad for p in engine.module.parameters() if p.grad is not None])
    returned = engine.optimizer_step()
    after = torch.nn.utils.get_total_norm([p.grad for p in engine.module.parameters() if p.grad is not None])
    assert float(before_clip) > 1.0  # above both settings: either clip would have been active
    assert returned == pytest.approx(float(before_clip))
    assert float(after) == pytest.approx(0.5, rel=1e-4)


def test_an_optim_dict_without_weight_decay_gets_the_schemas_default_in_the_torch_engine():
    engine = torch_engine({"lr": 1e-3})  # an untyped section, as one arrives from a flattened config
    group = engine.optimizer.param_groups[0]
    assert group["weight_decay"] == pytest.approx(OptimConfig().weight_decay) == pytest.approx(0.01)
    assert group["lr"] == pytest.approx(1e-3) and group["betas"] == (0.9, 0.999)


def test_an_engine_section_with_an_unknown_key_is_refused_naming_it():
    from verl_lite.engine.torch.engine import TorchLMEngine

    with pytest.raises(ValueError, match=r"unknown key 'grad_clipp' in ActorConfig \(did you mean 'grad_clip'\?\)"):
        TorchLMEngine({"path": "tiny-qwen3"}, {"grad_clipp": 0.5}, None, "cpu", "actor")


def test_an_engine_for_an_unknown_role_names_the_roles():
    from verl_lite.engine.torch.engine import TorchLMEngine

    with pytest.raises(ValueError, match="unknown role 'policy': engines are built for actor, ref, critic"):
        TorchLMEngine({"path": "tiny-qwen3"}, {}, None, "cpu", "policy")


# ---------------------------------------------------------------------------- as_section


def test_missing_keys_take_the_schemas_defaults_and_nested_sections_become_dataclasses():
    actor = as_section(ActorConfig, {"strategy": "megatron", "optim": {"lr": 3e-4},
                                     "megatron": {"override_transformer_config": {"use_ascend_gdn": True}}})
    assert isinstance(actor, ActorConfig) and isinstance(actor.optim, OptimConfig)
    assert (actor.optim.lr, actor.optim.weight_decay, actor.optim.clip_grad) == (3e-4, 0.01, 1.0)
    assert isinstance(actor.megatron, MegatronConfig) and actor.megatron.tensor_model_parallel_size == 1
    assert actor.megatron.override_transformer_config == {"use_ascend_gdn": True}  # open: stays a dict
    assert type(actor.megatron.override_transformer_config) is dict


def test_an_instance_is_returned_as_it_is_and_a_dictconfig_is_resolved_against_its_tree():
    optim = OptimConfig(lr=2e-5)
    assert as_section(OptimConfig, optim) is optim
    cfg = OmegaConf.structured(VerlLiteConfig)
    cfg.actor_rollout_ref.actor.megatron.tensor_model_parallel_size = 4
    ref = as_section(RefConfig, cfg.actor_rollout_ref.ref)  # its layout interpolates the actor's
    assert ref.megatron.tensor_model_parallel_size == 4


def test_unknown_keys_are_named_with_their_path_the_nearest_key_and_the_valid_keys():
    with pytest.raises(ValueError) as caught:
        as_section(ActorConfig, {"optim": {"clip_gradd": 0.5}, "stratgy": "fsdp"})
    text = str(caught.value)
    assert "unknown key 'optim.clip_gradd' in OptimConfig (did you mean 'optim.clip_grad'?)" in text
    assert "unknown key 'stratgy' in ActorConfig (did you mean 'strategy'?)" in text
    assert "its keys are: lr, weight_decay, betas" in text


def test_a_wrong_type_and_a_value_that_is_not_a_section_are_refused():
    with pytest.raises(ValueError, match=r"OptimConfig: Value 'fast' of type 'str' could not be converted to Float"):
        as_section(OptimConfig, {"lr": "fast"})
    with pytest.raises(TypeError, match="a OptimConfig section must be a OptimConfig, a DictConfig or a dict, got list"):
        as_section(OptimConfig, [1e-3])


def test_a_ref_section_alone_cannot_take_the_actors_layout_and_says_what_to_set():
    with pytest.raises(ValueError, match=r"RefConfig: megatron\.tensor_model_parallel_size defaults to another "
                                         r"section's value.*set megatron\.tensor_model_parallel_size"):
        # those follow the actor too
        profiler = {"all_ranks": False, "ranks": [], "tool_config": {
            "torch": {"contents": [], "discrete": False},
            "npu": {"contents": [], "level": "level0", "analysis": True, "discrete": False}}}
        as_section(RefConfig, {"use_torch_compile": False, "ulysses_sequence_parallel_size": 1, "profiler": profiler})


def test_the_whole_config_from_a_flattened_dict_equals_to_dataclass_and_pickles():
    from verl_lite.config import load_config, to_dataclass

    cfg = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                       "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8=e4m3"])
    typed = as_section(VerlLiteConfig, OmegaConf.to_container(cfg, resolve=True))
    assert typed == to_dataclass(cfg)
    assert typed.actor_rollout_ref.ref.megatron.tensor_model_parallel_size == 2
    assert pickle.loads(pickle.dumps(typed)) == typed  # it crosses Ray as it is

