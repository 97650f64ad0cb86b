"""Offload between phases (verl_lite/trainer/offload.py): parameters on the device for forward and
backward, optimizer state for the update, nothing of the trained models during the rollout.

On CPU every tensor lives on `cpu` whatever happens, so placement is checked through the one
function every move goes through (`offload.move`): a tiny in-process PPO run (actor, ref, critic)
records each move and each use of an engine (forward, step, weight export, checkpoint, generation),
and `check_timeline` replays the moves and fails when a use finds what it needs off the device, or
an offloaded part left on the device while the rollout generates. Removing any one phase's moves,
from the recorded timeline or from the running code, makes the check fail.
"""

from __future__ import annotations

import contextlib
from typing import Dict, List, Tuple

import pytest

from verl_lite.config import load_config
from verl_lite.trainer import offload
from verl_lite.trainer.offload import Move, OffloadPolicy, PhaseOwner

# What each use of an engine needs on the device.
USE_NEEDS = {"forward": ("param",), "train": ("param", "grad"), "step": ("param", "grad", "optimizer"),
             "export": ("param",), "checkpoint": ("param", "optimizer")}


def check_timeline(events: List, policies: Dict[str, OffloadPolicy]) -> None:
    """Replay the moves; every use must find its parts on the device, every generation must find
    each engine's offloaded parts on the host, and so must the end of the run."""
    where = {role: {p: "device" for p in offload.PARTS} for role in policies}
    for i, e in enumerate(events):
        if isinstance(e, Move):
            for p in e.parts:
                where[e.role][p] = e.to
            continue
        use, role = e
        if use == "generate":
            for r, policy in policies.items():
                left = [p for p in policy.parts if where[r][p] != "cpu"]
                assert not left, f"event {i}: the rollout generates while {r}'s {left} are on the device"
            continue
        if role not in policies:
            continue
        off = [p for p in USE_NEEDS[use] if where[role][p] != "device"]
        assert not off, f"event {i}: {role} {use} with {off} off the device"
    for r, policy in policies.items():
        left = [p for p in policy.parts if where[r][p] != "cpu"]
        assert not left, f"after the run {r}'s {left} stay on the device"


@contextlib.contextmanager
def timeline(monkeypatch):
    """Record offload moves and engine/rollout uses, in order."""
    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.engine.megatron.engine import MegatronLMEngine
    from verl_lite.rollout.hf import HFRollout

    events: List = []

    def wrap(cls, name, use_of):
        original = getattr(cls, name)

        def wrapped(self, *args, **kwargs):
            events.append((use_of(args, kwargs), getattr(self, "role", None)))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapped)

    for engine in (TorchLMEngine, MegatronLMEngine):  # the value engines subclass these
        wrap(engine, "forward_backward",
             lambda a, k: "forward" if k.get("forward_only", a[2] if len(a) > 2 else False) else "train")
        wrap(engine, "optimizer_step", lambda a, k: "step")
        wrap(engine, "export_hf_weights", lambda a, k: "export")
        wrap(engine, "save_checkpoint", lambda a, k: "checkpoint")
    wrap(HFRollout, "generate", lambda a, k: "generate")
    offload._listeners.append(events.append)
    try:
        yield events
    finally:
        offload._listeners.remove(events.append)


OFFLOAD = ["actor_rollout_ref.actor.fsdp_config.param_offload=True",
           "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
           "actor_rollout_ref.ref.fsdp_config.param_offload=True",
           "critic.fsdp_config.param_offload=True", "critic.fsdp_config.optimizer_offload=True"]
POLICIES = {"actor": OffloadPolicy(True, True, True), "ref": OffloadPolicy(True, True, False),
            "critic": OffloadPolicy(True, True, True)}


def ppo_run(data_dir, out) -> List[str]:
    return [
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.use_kl_loss=True",
        "algorithm.adv_estimator=gae", "critic.enable=True", "critic.ppo_mini_batch_size=2",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.total_training_steps=2",
        "trainer.save_freq=2", "trainer.test_freq=2", f"trainer.default_local_dir={out}", "trainer.ray=false",
        "trainer.logger=[jsonl]", "trainer.plot_rewards=false", *OFFLOAD,
    ]


def run_recorded(monkeypatch, overrides) -> List:
    from verl_lite.preflight.run import collect_problems
    from verl_lite.trainer.run import run

    cfg = load_config(overrides)
    assert collect_problems(cfg, for_training=True) == []  # the flags are accepted
    with timeline(monkeypatch) as events:
        assert run(cfg) == 0
    return list(events)


@pytest.fixture(scope="module")
def recorded(copy_task_data, tmp_path_factory):
    """One offloading PPO run for the module (about 3 s)."""
    mp = pytest.MonkeyPatch()
    try:
        yield run_recorded(mp, ppo_run(copy_task_data(n_train=16, n_val=4), tmp_path_factory.mktemp("offload")))
    finally:
        mp.undo()


def _phases_moved(events) -> Dict[Tuple[str, str], set]:
    moved: Dict[Tuple[str, str], set] = {}
    for e in events:
        if isinstance(e, Move):
            moved.setdefault((e.role, e.phase), set()).update(e.parts)
    return moved


def test_an_offloading_run_keeps_each_part_where_each_phase_needs_it(recorded):
    check_timeline(recorded, POLICIES)
    moved = _phases_moved(recorded)
    # every phase of every role moved what its policy offloads and the phase needs
    assert moved[("actor", "init")] == moved[("critic", "init")] == {"param", "grad", "optimizer"}
    assert moved[("ref", "init")] == {"param", "grad"}
    assert moved[("actor", "sync")] == moved[("ref", "forward")] == {"param"}
    assert moved[("actor", "update")] == moved[("critic", "update")] == {"param", "grad", "optimizer"}
    assert moved[("critic", "forward")] == {"param"}
    assert moved[("actor", "checkpoint")] == moved[("critic", "checkpoint")] == {"param", "optimizer"}
    uses = {e[0] for e in recorded if not isinstance(e, Move)}
    assert uses == {"forward", "train", "step", "export", "checkpoint", "generate"}


@pytest.mark.parametrize("phase", ["init", "sync", "forward", "update", "checkpoint"])
def test_the_check_fails_when_one_phase_moves_nothing(recorded, phase):
    """The check above can fail: without one phase's moves, some use finds a part misplaced."""
    without = [e for e in recorded if not (isinstance(e, Move) and e.phase == phase)]
    with pytest.raises(AssertionError, match="on the device|off the device"):
        check_timeline(without, POLICIES)


def test_a_run_whose_update_phase_moves_nothing_fails_the_check(copy_task_data, tmp_path, monkeypatch):
    """The same through the running code: offload.move is patched to skip the update phase's moves."""
    original = offload.move

    def move_except_update(engine, parts, to, phase):
        if phase != "update":
            original(engine, parts, to, phase)

    monkeypatch.setattr(offload, "move", move_except_update)
    events = run_recorded(monkeypatch, ppo_run(copy_task_data(n_train=16, n_val=4), tmp_path / "o") +
                          ["trainer.total_training_steps=1", "trainer.save_freq=-1", "trainer.test_freq=-1"])
    assert not any(isinstance(e, Move) and e.phase == "update" for e in events)
    with pytest.raises(AssertionError, match="(actor|critic) train with \\['param', 'grad'\\] off the device"):
        check_timeline(events, POLICIES)


def test_no_offload_flag_moves_nothing(copy_task_data, tmp_path, monkeypatch):
    overrides = [o for o in ppo_run(copy_task_data(n_train=16, n_val=4), tmp_path / "n") if o not in OFFLOAD]
    events = run_recorded(monkeypatch, overrides + ["trainer.total_training_steps=1", "trainer.save_freq=-1",
                                                    "trainer.test_freq=-1"])
    assert [e for e in events if isinstance(e, Move)] == []
    check_timeline(events, {r: OffloadPolicy() for r in POLICIES})


# ------------------------------------------------------------------------------ the owner alone


class FakeEngine:
    def __init__(self, role, device="cuda"):
        self.role, self.device, self.calls = role, device, []

    def to(self, device, model=True, optimizer=True, grad=True):
        self.calls.append((device, model, grad, optimizer))


class FakeRollout:
    def __init__(self):
        self.calls = []

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def sleep(self):
        self.calls.append(("sleep",))


def test_phases_nest_and_move_only_at_the_outermost_boundary(monkeypatch):
    monkeypatch.setattr("torch.cuda.empty_cache", lambda: None)  # no device here
    owner, engine = PhaseOwner(), FakeEngine("actor")
    with offload.record() as moves:
        owner.add(engine, OffloadPolicy(param=True, grad=True, optimizer=True))
        assert owner.where("actor") == {"param": "cpu", "grad": "cpu", "optimizer": "cpu"}
        with owner.phase("forward", "actor"):
            assert owner.where("actor")["param"] == "device"
            with owner.phase("sync", "actor"):  # a snapshot inside a log-prob pass: no second load
                pass
            assert owner.where("actor")["param"] == "device"
        with owner.phase("update", "actor"):
            assert set(owner.where("actor").values()) == {"device"}
    assert [(m.phase, m.parts, m.to) for m in moves] == [
        ("init", ("param", "grad", "optimizer"), "cpu"),
        ("forward", ("param",), "device"), ("forward", ("param",), "cpu"),
        ("update", ("param", "grad", "optimizer"), "device"), ("update", ("param", "grad", "optimizer"), "cpu")]
    assert engine.calls[0] == ("cpu", True, True, True) and engine.calls[1] == ("cuda", True, False, False)


def test_the_rollout_is_woken_for_sync_and_generation_and_put_to_sleep_after():
    owner, rollout = PhaseOwner(), FakeRollout()
    owner.add(FakeEngine("actor", "cpu"), OffloadPolicy())
    owner.attach_rollout(rollout)
    with owner.phase("sync", "actor"):
        pass
    with owner.phase("rollout"):
        rollout.calls.append(("generate",))
    assert rollout.calls == [("wake_up", ["weights"]), ("wake_up", None), ("generate",), ("sleep",)]
    owner.attach_rollout(object())  # an hf rollout: no sleep mode, nothing called
    with owner.phase("rollout"):
        pass


def test_policy_follows_verl_flags():
    from verl_lite.config import to_dataclass

    cfg = to_dataclass(load_config(["actor_rollout_ref.actor.megatron.param_offload=True",
                                    "critic.megatron.grad_offload=True", "critic.megatron.optimizer_offload=True"]))
    arr = cfg.actor_rollout_ref
    assert OffloadPolicy.of(arr.actor, "megatron") == OffloadPolicy(True, True, False)
    assert OffloadPolicy.of(arr.ref, "megatron") == OffloadPolicy(True, True, False)  # follows the actor's, as verl
    assert OffloadPolicy.of(cfg.critic, "megatron") == OffloadPolicy(False, True, True)
    assert OffloadPolicy.of(arr.actor, "fsdp") == OffloadPolicy()


def test_bad_phase_and_role_are_named():
    owner = PhaseOwner()
    with pytest.raises(ValueError, match="'warmup'.*choose one of init, sync, rollout"):
        with owner.phase("warmup", "actor"):
            pass
    with pytest.raises(KeyError, match="no engine for role 'critic'"):
        with owner.phase("update", "critic"):
            pass
    with pytest.raises(ValueError, match="to='gpu'"):
        offload.move(FakeEngine("actor"), ("param",), "gpu", "update")


MEGATRON_OFFLOAD = [
    "actor_rollout_ref.model.path=tiny-qwen3", "model_engine=megatron",
    "actor_rollout_ref.actor.megatron.use_distributed_optimizer=false", "critic.megatron.use_distributed_optimizer=false",
    "actor_rollout_ref.actor.megatron.param_offload=True", "actor_rollout_ref.actor.megatron.grad_offload=True",
    "actor_rollout_ref.actor.megatron.optimizer_offload=True",  # the ref's param_offload follows the actor's
    "critic.megatron.grad_offload=True", "critic.megatron.optimizer_offload=True",
]


@pytest.mark.megatron
def test_the_megatron_engines_offload_by_the_same_phases(copy_task_data, tmp_path, monkeypatch):
    overrides = [o for o in ppo_run(copy_task_data(n_train=16, n_val=4), tmp_path / "m") if o not in OFFLOAD]
    events = run_recorded(monkeypatch, overrides + MEGATRON_OFFLOAD + ["trainer.test_freq=-1"])
    policies = {"actor": OffloadPolicy(True, True, True), "ref": OffloadPolicy(True, True, False),
                "critic": OffloadPolicy(False, True, True)}
    check_timeline(events, policies)
    moved = _phases_moved(events)
    assert moved[("critic", "update")] == {"grad", "optimizer"} and ("critic", "forward") not in moved
    assert moved[("ref", "forward")] == {"param"} and moved[("actor", "checkpoint")] == {"param", "optimizer"}
    with pytest.raises(AssertionError, match="critic train with \\['grad'\\] off the device"):
        check_timeline([e for e in events if not (isinstance(e, Move) and e.phase == "update"
                                                  and e.role == "critic")], policies)


# ------------------------------------------------------------------------------ on a device


@pytest.mark.gpu
def test_on_a_gpu_the_torch_engine_leaves_the_device_between_phases():
    """Where the tensors really are, and the memory it frees (has not run yet: no GPU so far)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig
    from verl_lite.engine.torch.engine import TorchLMEngine

    engine = TorchLMEngine(ModelConfig(path="tiny-qwen3"), ActorConfig(), OptimConfig(lr=1e-3), "cuda", "actor")
    engine.initialize()
    ids = torch.randint(3, 40, (2, 8))
    mb = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(8).expand(2, 8),
          "responses": ids[:, -3:], "response_mask": torch.ones(2, 3, dtype=torch.long)}

    def step():
        engine.optimizer_zero_grad()
        engine.forward_backward([mb], lambda out, _: (out["log_probs"].mean(), {}))
        engine.optimizer_step()

    def placement():
        state = next(iter(engine.optimizer.state.values()))["exp_avg"]
        return next(engine.module.parameters()).device.type, state.device.type

    step()  # the optimizer has state now
    on_device = torch.cuda.memory_allocated()
    owner = PhaseOwner()
    owner.add(engine, OffloadPolicy(param=True, grad=True, optimizer=True))
    assert placement() == ("cpu", "cpu") and torch.cuda.memory_allocated() < on_device
    with owner.phase("forward", "actor"):
        assert placement() == ("cuda", "cpu")
    with owner.phase("update", "actor"):
        assert placement() == ("cuda", "cuda")
        step()
    assert placement() == ("cpu", "cpu")
