"""The memory prediction's model state against what the engines really allocate, on two gloo ranks:
the Megatron engine's parameters, DDP gradient buffers and Adam state at TP=2, PP=2 and EP=2 (tiny
Qwen3.5 MoE and dense Qwen3), and FSDP2's parameter shards, gradients and Adam state. Each measured
byte count must equal the prediction (`decisions/memory.py`) within 1%; the errors are printed.

The distributed optimizer needs Apex/TE (not on CPU): its shard arithmetic is checked against
Megatron-LM's own formula in tests/py/test_memory.py instead.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from megatron_world import nll_loss, scenario

from verl_lite.decisions import memory as m
from verl_lite.decisions.layout import Layout
from verl_lite.models import ASSETS_DIR

B, T, R = 2, 10, 4
MEGATRON_LAYOUTS = [("tiny-qwen3_5-moe", 2, 1, 1), ("tiny-qwen3_5-moe", 1, 2, 1), ("tiny-qwen3_5-moe", 1, 1, 2),
                    ("tiny-qwen3", 2, 1, 1), ("tiny-qwen3", 1, 2, 1)]


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -R:], response_mask=mask[:, -R:])


def _adam_bytes(optimizer) -> int:
    total = 0
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(opt, "optimizer", opt)
        for state in (inner.state.values() if inner is not None else []):
            for k, v in state.items():
                if isinstance(v, torch.Tensor) and k in ("exp_avg", "exp_avg_sq"):
                    v = v.to_local() if hasattr(v, "to_local") else v  # FSDP2's DTensor: this rank's shard
                    total += v.numel() * v.element_size()
    return total


def _megatron(rank, rec):
    from omegaconf import OmegaConf
    from megatron.core import parallel_state as mpu

    from verl_lite.config.schema import VerlLiteConfig
    from verl_lite.engine.megatron.engine import MegatronLMEngine
    from verl_lite.engine.megatron.memory import ddp_buffers

    for path, tp, pp, ep in MEGATRON_LAYOUTS:
        cfg = OmegaConf.structured(VerlLiteConfig)
        model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
        model.path, model.init_seed = path, 1
        actor.strategy = "megatron"
        actor.megatron.tensor_model_parallel_size = tp
        actor.megatron.pipeline_model_parallel_size = pp
        actor.megatron.expert_model_parallel_size = ep
        engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
        engine.initialize()
        engine.train_mode()
        engine.optimizer_zero_grad()
        engine.forward_backward([_batch()], nll_loss)
        engine.optimizer_step()
        key = f"{path}:tp{tp}pp{pp}ep{ep}"
        rec[key] = {
            "stage": mpu.get_pipeline_model_parallel_rank(),
            "weights": sum(p.numel() * p.element_size() for c in engine.model for p in c.parameters()),
            "grads": sum(b.grad_data.numel() * b.grad_data.element_size() for c in engine.model for b in ddp_buffers(c)),
            "optimizer": _adam_bytes(engine.optimizer),
        }
        del engine
        mpu.destroy_model_parallel()


def _fsdp(rank, rec):
    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch.engine import TorchLMEngine

    for path in ("tiny-qwen3", "tiny-qwen3_5-moe"):
        engine = TorchLMEngine(ModelConfig(path=path, override_config={"tie_word_embeddings": False}), ActorConfig(),
                               OptimConfig(lr=1e-3), "cpu", "actor")
        engine.initialize()
        engine.train_mode()
        engine.forward_backward([_batch()], loss_fn=lambda out, mb: (-out["log_probs"].mean(), {}))
        engine.optimizer_step()
        local = [p.to_local() if hasattr(p, "to_local") else p for p in engine.module.parameters()]
        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in engine.module.parameters()]
        rec[f"fsdp:{path}"] = {
            "sharded": hasattr(next(engine.module.parameters()), "to_local"),
            "weights": sum(t.numel() * t.element_size() for t in local),
            "grads": sum(g.numel() * g.element_size() for g in grads if g is not None),
            "optimizer": _adam_bytes(engine.optimizer),
        }


@scenario
def _scenario(rank, rec, out_dir):
    _megatron(rank, rec)
    _fsdp(rank, rec)


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


def _dims(path, **override):
    with open(os.path.join(ASSETS_DIR, path, "config.json"), encoding="utf-8") as f:
        return m.model_dims({**json.load(f), **override})


def _check(measured, predicted, what):
    for term in ("weights", "grads", "optimizer"):
        got, want = measured[term], getattr(predicted, term)
        err = abs(got - want) / want
        print(f"{what} {term}: measured {got} B, predicted {want:.0f} B, error {100 * err:.3f}%")
        assert err <= 0.01, (what, term, got, want)


@pytest.mark.parametrize("path,tp,pp,ep", MEGATRON_LAYOUTS)
def test_megatron_weights_grads_and_adam_state_per_rank_equal_the_prediction_within_1_percent(run, path, tp, pp, ep):
    d = _dims(path)
    for rank, rec in enumerate(run):
        measured = rec[f"{path}:tp{tp}pp{pp}ep{ep}"]
        lay = Layout("megatron", 2, tp=tp, pp=pp, ep=ep, etp=tp)  # ETP unset = TP (role_layout)
        dense, expert = m.stage_params(d, lay, measured["stage"])
        prec = m.megatron_precision("cpu")
        predicted = m.State((dense + expert) * prec.weight, (dense + expert) * prec.grad,
                            (dense + expert) * (prec.master + prec.moments))
        _check(measured, predicted, f"megatron {path} TP{tp} PP{pp} EP{ep} rank {rank}")


@pytest.mark.parametrize("path", ["tiny-qwen3", "tiny-qwen3_5-moe"])
def test_fsdp2_shards_grads_and_adam_state_equal_the_prediction_within_1_percent(run, path):
    d = _dims(path, tie_word_embeddings=False)
    lay = Layout("fsdp", 2, fsdp_shard=2)
    predicted = m.state_bytes(d, lay, m.fsdp_precision("float32"), distributed_optimizer=True)
    for rank, rec in enumerate(run):
        assert rec[f"fsdp:{path}"]["sharded"]
        _check(rec[f"fsdp:{path}"], predicted, f"fsdp2 {path} rank {rank}")
