"""`<role>.optim.override_optimizer_config`: verl's Megatron optimizer overrides reach the
OptimizerConfig the Megatron engine builds (engine/megatron/optim.py), field by field as verl merges
them; the preflight (decisions/optimizer_overrides.py) refuses unknown fields, fields verl_lite sets itself,
the section on the fsdp strategy, and what cannot run on the target device; on cpu the CPU optimizer
offload fields have no effect and the summary says so.

The Megatron engine is built once, in one spawned process (`_scenario`: a megatron import costs 7-9 s).
"""

from __future__ import annotations

import os
import traceback
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from verl_lite.preflight.run import collect_problems, collect_warnings
from verl_lite.preflight.summary import summarize
from verl_lite.decisions import optimizer_overrides
from verl_lite.config.compose import compose_config, load_config

A = "actor_rollout_ref.actor.optim.override_optimizer_config"
# verl's Qwen3.5 megatron scripts
VERL_LINES = [f"+{A}.optimizer_offload_fraction=1", f"+{A}.overlap_cpu_optimizer_d2h_h2d=True",
              f"+{A}.use_precision_aware_optimizer=True", f"+{A}.optimizer_cpu_offload=True"]
MEGATRON = ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.model.path=tiny-qwen3"]
ENGINE_LINES = [f"+{A}.adam_eps=1e-6", f"+{A}.decoupled_lr=3e-6", f"+{A}.optimizer_cpu_offload=True",
                f"+{A}.optimizer_offload_fraction=1.0", f"+{A}.overlap_cpu_optimizer_d2h_h2d=True"]


def problems(*lines, device="cuda"):
    cfg, composed = compose_config([f"trainer.device={device}", *MEGATRON, *lines])
    assert composed == []
    return [p for p in collect_problems(cfg, for_training=False) if "optim" in p]


# ---------------------------------------------------------------------------- the engine (spawned)


def _scenario(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    rec = {}
    try:
        import dataclasses
        import importlib.util

        from megatron.core.optimizer import OptimizerConfig

        from verl_lite.config import compose
        from read_tracking import track_reads
        from verl_lite.config.schema import OptimConfig
        from verl_lite.engine.megatron import optim as megatron_optim
        from verl_lite.engine.megatron.engine import MegatronLMEngine

        rec["fields"] = tuple(f.name for f in dataclasses.fields(OptimizerConfig))
        cfg = load_config(["trainer.device=cpu", *MEGATRON, *ENGINE_LINES])
        with track_reads() as reads:
            arr = compose.to_dataclass(cfg).actor_rollout_ref  # tracking tags the sections it builds
            engine = MegatronLMEngine(arr.model, arr.actor, arr.actor.optim, "cpu", "actor")
            engine.initialize()
        rec["read"] = {line.split("=")[0][1:]: reads.was_read(line.split("=")[0][1:]) for line in ENGINE_LINES}
        rec["read"]["critic.optim.override_optimizer_config"] = reads.was_read("critic.optim.override_optimizer_config")
        opts = getattr(engine.optimizer, "chained_optimizers", [engine.optimizer])
        rec["configs"] = [{k: getattr(o.config, k) for k in ("adam_eps", "decoupled_lr", "optimizer_cpu_offload",
                                                              "optimizer_offload_fraction", "lr")} for o in opts]
        rec["inner"] = [(type(o.optimizer).__name__, o.optimizer.param_groups[0]["eps"]) for o in opts]
        # decoupled_lr acts: the embedding and output layer's parameter group gets it as its peak LR
        rec["max_lrs"] = sorted({g["max_lr"] for o in opts for g in o.optimizer.param_groups})
        engine.train_mode()
        engine.optimizer_zero_grad()
        ids = torch.randint(3, 48, (2, 8))
        batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(8).expand(2, 8),
                     responses=ids[:, -3:], response_mask=torch.ones(2, 3, dtype=torch.long))
        engine.forward_backward([batch], lambda out, mb: (-out["log_probs"].mean(), {}))
        rec["grad_norm"] = engine.optimizer_step()

        # on a device the CPU optimizer fields pass through (a meta model stands for one)
        on_device = [torch.nn.Linear(2, 2, device="meta")]
        hybrid = OptimConfig(override_optimizer_config={
            "optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0, "overlap_cpu_optimizer_d2h_h2d": True})
        built = megatron_optim.optimizer_config(on_device, hybrid, torch.bfloat16, True)
        rec["device_config"] = {k: getattr(built, k) for k in ("optimizer_cpu_offload", "optimizer_offload_fraction",
                                                               "overlap_cpu_optimizer_d2h_h2d", "bf16")}
        rec["te"] = importlib.util.find_spec("transformer_engine") is not None
        try:  # megatron-core needs Transformer Engine for the precision-aware optimizer
            megatron_optim.optimizer_config(on_device, OptimConfig(override_optimizer_config={
                "use_precision_aware_optimizer": True, "optimizer_cpu_offload": True}), torch.bfloat16, True,
                role="actor")
            rec["te_error"] = None
        except RuntimeError as e:
            rec["te_error"] = str(e)
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def run(spawn_ranks):
    return spawn_ranks(_scenario, "optimizer_overrides", nprocs=1)[0]


def test_the_field_list_is_the_installed_megatron_cores_optimizer_config(run):
    assert optimizer_overrides.OPTIMIZER_CONFIG_FIELDS == run["fields"]


def test_the_engines_optimizer_config_carries_the_overrides_and_the_torch_adam_uses_them(run):
    for config in run["configs"]:
        assert config["adam_eps"] == pytest.approx(1e-6) and config["decoupled_lr"] == pytest.approx(3e-6)
        assert config["lr"] == pytest.approx(1e-6)  # optim.lr, verl_lite's own setting
    assert run["max_lrs"] == pytest.approx([1e-6, 3e-6])  # the decoupled group (embedding, output layer) and the rest
    assert all(eps == pytest.approx(1e-6) for _, eps in run["inner"])
    assert run["grad_norm"] > 0


def test_on_cpu_the_engine_builds_megatrons_adam_without_the_cpu_offload_fields(run):
    for config in run["configs"]:
        assert config["optimizer_cpu_offload"] is False and config["optimizer_offload_fraction"] == 0.0
    assert {name for name, _ in run["inner"]} == {"AdamW"}  # not megatron's HybridDeviceOptimizer


def test_the_engine_reads_every_override_it_is_given(run):
    assert all(v for k, v in run["read"].items() if k.startswith("actor_rollout_ref")), run["read"]
    assert run["read"]["critic.optim.override_optimizer_config"] is False  # no critic was built


def test_on_a_device_the_cpu_optimizer_fields_pass_through(run):
    assert run["device_config"] == {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0,
                                    "overlap_cpu_optimizer_d2h_h2d": True, "bf16": True}


def test_fields_that_cannot_act_in_the_engine_are_refused_with_the_reason():
    found = problems(f"+{A}.loss_scale=128", f"+{A}.sgd_momentum=0.5", f"+{A}.log_num_zeros_in_grad=True")
    assert [p.split(" would have no effect: ")[0] for p in found] == [
        f"actor: {A}.loss_scale=128", f"actor: {A}.sgd_momentum=0.5", f"actor: {A}.log_num_zeros_in_grad=True"]
    assert "fp16 loss scaling" in found[0] and "megatron's Adam" in found[1] and found[2].endswith("; remove it")


def test_precision_aware_without_transformer_engine_fails_the_build_naming_the_fix(run):
    if run["te"]:  # a worker with Transformer Engine builds it
        assert run["te_error"] is None
    else:
        assert run["te_error"] == (
            "actor: actor_rollout_ref.actor.optim.override_optimizer_config.use_precision_aware_optimizer=True: "
            "megatron-core needs Transformer Engine (its FusedAdam and version) for the precision-aware optimizer, and "
            "transformer_engine is not installed on this worker; install Transformer Engine on the workers, or remove "
            "the line")


# ---------------------------------------------------------------------------- the preflight


def test_verls_qwen3_5_lines_pass_the_check_for_cuda():
    assert problems(*VERL_LINES) == []


def test_a_key_that_is_not_an_optimizer_config_field_is_refused_naming_the_fields():
    (problem,) = problems(f"+{A}.adam_epsilon=1e-6")
    assert problem.startswith(f"actor: {A}.adam_epsilon: megatron-core's OptimizerConfig has no field 'adam_epsilon'; "
                              "its fields are: lr, min_lr,")
    assert "adam_eps," in problem and "optimizer_cpu_offload," in problem


@pytest.mark.parametrize("field,setting", [("lr", "actor_rollout_ref.actor.optim.lr"),
                                           ("adam_beta2", "actor_rollout_ref.actor.optim.betas"),
                                           ("clip_grad", "actor_rollout_ref.actor.optim.clip_grad"),
                                           ("use_distributed_optimizer",
                                            "actor_rollout_ref.actor.megatron.use_distributed_optimizer")])
def test_a_field_verl_lite_sets_itself_is_refused_naming_its_setting(field, setting):
    assert problems(f"+{A}.{field}=0.5") == [f"actor: {A}.{field}=0.5: verl_lite sets OptimizerConfig.{field} itself: "
                                             f"set {setting} instead and remove this line"]


def test_a_megatron_field_on_the_fsdp_strategy_is_refused_with_the_torch_optimizers_keywords():
    cfg = load_config(["trainer.device=cpu", f"+{A}.adam_eps=1e-6"])
    (problem,) = [p for p in collect_problems(cfg, for_training=False) if "optim" in p]
    assert problem.startswith(f"actor: {A}.adam_eps=1e-06: torch.optim.AdamW (the fsdp strategy's optimizer) takes "
                              "no keyword 'adam_eps'; its keywords are: eps, amsgrad")
    assert "megatron-core OptimizerConfig fields act on the megatron strategy only" in problem


def test_the_critics_section_is_checked_like_the_actors():
    (problem,) = problems("algorithm.adv_estimator=gae", "+critic.optim.override_optimizer_config.weight_decay=0.1")
    assert problem == ("critic: critic.optim.override_optimizer_config.weight_decay=0.1: verl_lite sets "
                       "OptimizerConfig.weight_decay itself: set critic.optim.weight_decay instead and remove this line")


def test_the_precision_aware_optimizer_is_refused_on_cpu_with_the_reason():
    (problem,) = problems(*VERL_LINES, device="cpu")
    assert problem == (f"actor: {A}.use_precision_aware_optimizer=True cannot run on trainer.device=cpu: megatron-core's "
                       "precision-aware optimizer is Transformer Engine's FusedAdam (a CUDA kernel) over the distributed "
                       "optimizer, which cpu runs do not use; remove it (cpu trains in float32)")


def test_the_precision_aware_optimizer_needs_the_distributed_optimizer():
    assert problems(f"+{A}.use_precision_aware_optimizer=True",
                    "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False") == [
        f"actor: {A}.use_precision_aware_optimizer=True needs the distributed optimizer (megatron-core asserts it): "
        "set actor_rollout_ref.actor.megatron.use_distributed_optimizer=True"]


def test_lower_precision_moments_act_only_with_the_precision_aware_optimizer():
    assert problems(f"+{A}.exp_avg_dtype=bf16") == [
        f"actor: {A}.exp_avg_dtype='bf16' acts only with the precision-aware optimizer (megatron-core keeps fp32 "
        f"otherwise): set {A}.use_precision_aware_optimizer=True, or remove it"]
    assert problems(f"+{A}.exp_avg_dtype=bf16", f"+{A}.use_precision_aware_optimizer=True") == []
    assert problems(f"+{A}.exp_avg_dtype=int8") == [
        f"actor: {A}.exp_avg_dtype='int8': not a dtype; choose one of fp32, float32, bf16, bfloat16, fp16, float16"]


def test_verls_top_level_precision_keys_are_refused_naming_the_override_key():
    _, composed = compose_config(["actor_rollout_ref.actor.optim.use_precision_aware_optimizer=True",
                                  "critic.optim.exp_avg_dtype=bf16"])
    assert len(composed) == 2
    assert "override_optimizer_config.use_precision_aware_optimizer=True" in composed[0]
    assert composed[1].startswith("critic.optim.exp_avg_dtype='bf16': a top-level copy is not supported by verl_lite")


def test_on_cpu_the_cpu_offload_fields_are_warned_about_and_the_summary_says_they_are_left_out():
    lines = [f"+{A}.optimizer_cpu_offload=True", f"+{A}.optimizer_offload_fraction=1"]
    cfg = load_config(["trainer.device=cpu", *MEGATRON, *lines])
    assert problems(*lines, device="cpu") == []
    assert f"{A}.optimizer_cpu_offload, {A}.optimizer_offload_fraction have no effect on trainer.device=cpu: " \
           "megatron's CPU optimizer offload moves Adam's state and step to host memory, where a cpu run keeps them " \
           "already (the engine builds megatron's Adam without it)" in collect_warnings(cfg)
    assert ("  optimizer   : megatron Adam + OptimizerConfig(optimizer_cpu_offload=True, optimizer_offload_fraction=1); "
            "optimizer_cpu_offload, optimizer_offload_fraction left out on cpu (Adam's state is in host memory already)"
            ) in summarize(cfg).splitlines()


def test_cpu_optimizer_settings_without_optimizer_cpu_offload_are_warned_about_on_any_device():
    cfg = load_config(["trainer.device=cuda", *MEGATRON, f"+{A}.optimizer_offload_fraction=0.5"])
    assert f"{A}.optimizer_offload_fraction has no effect without {A}.optimizer_cpu_offload=True (megatron-core's " \
           "CPU optimizer reads them)" in collect_warnings(cfg)
    cfg = load_config(["trainer.device=cuda", *MEGATRON, *VERL_LINES])
    assert not [w for w in collect_warnings(cfg) if "override_optimizer_config" in w]


def test_on_cuda_the_summary_names_the_hybrid_optimizer():
    cfg = load_config(["trainer.device=cuda", *MEGATRON, *VERL_LINES])
    (line,) = [s for s in summarize(cfg).splitlines() if s.startswith("  optimizer")]
    assert line.endswith("megatron's HybridDeviceOptimizer: Adam's state and step on the host for a fraction 1 of "
                         "the parameters; the workers need Transformer Engine (FusedAdam) for "
                         "use_precision_aware_optimizer")
    cfg = load_config(["trainer.device=cuda", *MEGATRON, f"+{A}.use_precision_aware_optimizer=True"])
    (line,) = [s for s in summarize(cfg).splitlines() if s.startswith("  optimizer")]
    assert line.endswith("the workers need Transformer Engine (FusedAdam) for use_precision_aware_optimizer")


def test_the_engine_side_check_refuses_an_unknown_field_and_converts_dtypes():
    fields = optimizer_overrides.OPTIMIZER_CONFIG_FIELDS
    with pytest.raises(ValueError, match="OptimizerConfig has no field 'nope'; its fields are: lr, min_lr"):
        optimizer_overrides.engine_overrides({"nope": 1}, "cuda", fields)
    assert optimizer_overrides.engine_overrides({"exp_avg_dtype": "bf16", "optimizer_cpu_offload": True}, "cuda",
                                            fields) == {"exp_avg_dtype": torch.bfloat16, "optimizer_cpu_offload": True}
    assert optimizer_overrides.engine_overrides({"adam_eps": 1e-6, "optimizer_cpu_offload": True}, "cpu",
                                            fields) == {"adam_eps": 1e-6}


# ---------------------------------------------------------------------------- offload with the CPU optimizer


class Hybrid:
    """What megatron_memory reads of megatron's HybridDeviceOptimizer (which needs CUDA to build): a host
    sub-optimizer and a device one with Adam state each, and `state`, which mirrors both."""

    def __init__(self):
        self.host_param, self.device_param = torch.zeros(3), torch.zeros(3)
        host = SimpleNamespace(param_groups=[], state={self.host_param: {"exp_avg": torch.ones(3), "step": 1}})
        device = SimpleNamespace(param_groups=[], state={self.device_param: {"exp_avg": torch.ones(3), "step": 1}})
        self.cpu_optimizers, self.gpu_optimizer = [host], device
        self.sub_optimizers = [host, device]
        self.inner_param_to_orig_param = {}
        self.state = defaultdict(dict)
        for sub in self.sub_optimizers:
            for p, s in sub.state.items():
                self.state[p].update(s)
        self.param_groups = []


def test_optimizer_offload_with_the_cpu_optimizer_moves_only_its_device_share_as_verl_does():
    from verl_lite.engine.megatron.memory import move_optimizer_state

    hybrid = Hybrid()
    move_optimizer_state([], SimpleNamespace(optimizer=hybrid), torch.device("meta"))  # meta: a device to load to
    device_state = hybrid.gpu_optimizer.state[hybrid.device_param]
    assert device_state["exp_avg"].device.type == "meta" and device_state["step"] == 1
    assert hybrid.state[hybrid.device_param]["exp_avg"] is device_state["exp_avg"]  # the mirror follows
    assert hybrid.cpu_optimizers[0].state[hybrid.host_param]["exp_avg"].device.type == "cpu"
    assert hybrid.state[hybrid.host_param]["exp_avg"].device.type == "cpu"
