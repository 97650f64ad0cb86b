"""The next step's generation sent during the update (the Ray path): when it is sent, and that a run
with it equals a run without it (metrics, validation, checkpoints, a stop and its resume)."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

from verl_lite.config import load_config

from test_faults import STEPS, metrics as rows, overrides as fault_overrides, weights as model_weights


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def overrides(data_dir, out_dir, *extra: str) -> List[str]:
    """test_faults' run (6 steps of the copy task) with one mini-batch a step, validation after step 3 (and
    the last) and checkpoints after 4 (and the last): the generation goes ahead during steps 1, 2 and 5
    only. A key given again overrides the earlier value."""
    return fault_overrides(data_dir, out_dir, "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "trainer.save_freq=4",
                           "trainer.test_freq=3", *extra)


def timing_free(row: dict) -> dict:
    """A metrics row without what measures time (those differ between any two runs)."""
    return {k: v for k, v in row.items()
            if not k.startswith(("timing_s/", "perf/cpu_s/")) and k not in ("perf/throughput", "perf/tokens_per_s")}


def assert_same(a: Path, b: Path, steps=range(1, STEPS + 1), checkpoints=(4, STEPS)) -> None:
    ra, rb = rows(a), rows(b)
    assert sorted(ra) == sorted(rb) == list(steps)
    for step in ra:
        assert timing_free(ra[step]) == timing_free(rb[step]), f"step {step} differs"
    assert "val/score" in ra[3] and "val/score" in ra[STEPS]
    for step in checkpoints:
        wa, wb = model_weights(a, step), model_weights(b, step)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), f"weights of step {step}"
        sa = json.loads((a / f"global_step_{step}" / "driver_state.json").read_text())
        sb = json.loads((b / f"global_step_{step}" / "driver_state.json").read_text())
        assert sa["sampler"] == sb["sampler"] and sa["global_step"] == sb["global_step"] == step


def counted_sends(monkeypatch, dp_sizes: Optional[List[int]] = None) -> List[int]:
    """The steps during which the next step's generation was sent, as the run goes (and into `dp_sizes`,
    the actor's data-parallel size at each send)."""
    from verl_lite.trainer.ppo_trainer import PPOTrainer

    sent: List[int] = []
    original = PPOTrainer._send_ahead

    def send(self, plan, timing):
        failed = original(self, plan, timing)
        if self._ahead is not None:
            sent.append(self.global_step + 1)
            if dp_sizes is not None:
                dp_sizes.append(self.actor_wg.dp_size)
        return failed

    monkeypatch.setattr(PPOTrainer, "_send_ahead", send)
    return sent


@pytest.fixture(scope="module")
def step_by_step(ray_cluster, data_dir, tmp_path_factory):
    """The run on the Ray path with VERL_LITE_GENERATE_AHEAD=0: each generation after the update."""
    from verl_lite.trainer.run import run

    out = tmp_path_factory.mktemp("step_by_step")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VERL_LITE_GENERATE_AHEAD", "0")
        sent = counted_sends(mp)
        assert run(load_config(overrides(data_dir, out))) == 0
    assert sent == []
    return out


def test_a_ray_run_that_generates_ahead_equals_the_run_that_does_not(step_by_step, data_dir, tmp_path, monkeypatch):
    from verl_lite.trainer.run import run

    from verl_lite.trainer.worker_group import PendingCall

    sent = counted_sends(monkeypatch)
    unanswered: List[str] = []  # calls sent while an update_actor call had not been answered yet
    submit = PendingCall.__init__
    open_updates: List[PendingCall] = []

    def track(self, group, method, refs=None, answers=None):
        submit(self, group, method, refs=refs, answers=answers)
        if any(u._answers is None for u in open_updates):
            unanswered.append(method)
        if method == "update_actor":
            open_updates.append(self)

    monkeypatch.setattr(PendingCall, "__init__", track)
    assert run(load_config(overrides(data_dir, tmp_path))) == 0
    assert sent == [1, 2, 5]  # not before validation (3), a checkpoint (4) or after the last step (6)
    assert unanswered == ["generate_sequences"] * 3  # sent behind the update, before its answer
    assert_same(step_by_step, tmp_path)
    ahead = rows(tmp_path)
    assert all(ahead[s]["timing_s/gen_send"] > 0 for s in (1, 2, 5))
    assert all("timing_s/gen_send" not in ahead[s] for s in (3, 4, 6))


def test_a_stop_after_the_next_generation_was_sent_finishes_that_step_saves_and_resumes_to_the_same_run(
        step_by_step, data_dir, tmp_path, monkeypatch, caplog):
    from verl_lite.trainer import ppo_trainer
    from verl_lite.trainer.run import run

    original = ppo_trainer.PPOTrainer._send_ahead

    def send_then_stop(self, plan, timing):  # the signal lands just after step 1 sent step 2's generation
        failed = original(self, plan, timing)
        if self.global_step == 0:
            assert self._ahead is not None
            self.stop.signum = 15
        return failed

    monkeypatch.setattr(ppo_trainer.PPOTrainer, "_send_ahead", send_then_stop)
    with caplog.at_level("WARNING", logger="verl_lite.trainer.ppo_trainer"):
        assert run(load_config(overrides(data_dir, tmp_path))) == 128 + 15
    assert "finishing step 2 before stopping: its generation had already begun (the checkpoint will be of step 2)" \
        in caplog.text
    assert sorted(rows(tmp_path)) == [1, 2]  # step 2 was finished, then saved; nothing ran after it
    assert (tmp_path / "global_step_2" / "driver_state.json").is_file()
    monkeypatch.setattr(ppo_trainer.PPOTrainer, "_send_ahead", original)
    assert run(load_config(overrides(data_dir, tmp_path))) == 0  # resumes from step 2
    assert_same(step_by_step, tmp_path)


@pytest.mark.parametrize("setting", [
    # two mini-batches: off-policy, so the generate call also scores the old log-probs (the main job's plan)
    ["actor_rollout_ref.actor.ppo_mini_batch_size=2"],
    # a critic (GAE) updated before the actor, one warm-up step with no actor update, and a KL loss
    # against the reference model, whose log-probs the generate call scores too
    ["algorithm.adv_estimator=gae", "trainer.critic_warmup=1", "actor_rollout_ref.actor.use_kl_loss=True",
     "actor_rollout_ref.actor.kl_loss_coef=0.1", "critic.optim.lr=2e-3"],
    # two data-parallel workers: the update and the next generation are sent to both
    ["trainer.n_gpus_per_node=2"],
], ids=["two_mini_batches", "gae_critic_warmup_kl_loss", "dp2"])
def test_other_step_plans_generating_ahead_equal_their_runs_that_do_not(setting, data_dir, ray_cluster,
                                                                           tmp_path, monkeypatch):
    from verl_lite.trainer.run import run

    runs, dp_sizes = {}, []
    for ahead in ("0", "1"):
        out = tmp_path / f"ahead_{ahead}"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("VERL_LITE_GENERATE_AHEAD", ahead)
            sent = counted_sends(mp, dp_sizes)
            assert run(load_config(overrides(data_dir, out, *setting))) == 0
        assert sent == ([] if ahead == "0" else [1, 2, 5])
        runs[ahead] = out
    assert_same(runs["0"], runs["1"])
    first = rows(runs["1"])[1]
    if "trainer.critic_warmup=1" in setting:  # the warm-up step ran no actor update, and the critic ran
        assert "actor/pg_loss" not in first and "critic/vf_loss" in first
        assert "actor/kl_loss" in rows(runs["1"])[2]
    elif "trainer.n_gpus_per_node=2" in setting:
        assert dp_sizes == [2, 2, 2]
    else:
        assert first["actor/ppo_kl"] != 0  # the second mini-batch trained off the scored old log-probs


# -- when the generation goes ahead: the decision alone ---------------------------------------------


def trainer_stub(**cfg_overrides):
    from verl_lite.trainer.loop import StopRequest
    from verl_lite.trainer.ppo_trainer import PPOTrainer

    t = PPOTrainer.__new__(PPOTrainer)
    t.cfg = load_config(["trainer.total_training_steps=10", "trainer.test_freq=-1", "trainer.save_freq=-1",
                         *[f"{k}={v}" for k, v in cfg_overrides.items()]])
    t.actor_wg = types.SimpleNamespace(use_ray=True)
    t.dynamic, t.stop, t.total_steps, t.global_step = None, StopRequest(), 10, 0
    t._generate_ahead = True
    return t


def allowed_during(t) -> Dict[int, bool]:
    """Step (1-based) -> whether the next step's generation may be sent during it."""
    out = {}
    for done in range(t.total_steps):
        t.global_step = done
        out[done + 1] = t._prefetch_allowed()
    return out


def test_generation_goes_ahead_on_the_ray_path_between_plain_steps():
    assert allowed_during(trainer_stub()) == {**{s: True for s in range(1, 10)}, 10: False}


@pytest.mark.parametrize("setting, waits", [
    ({"trainer.test_freq": 3}, [3, 6, 9]),  # validation after step 3 comes before step 4's generation
    ({"trainer.save_freq": 3}, [3, 6, 9]),  # the checkpoint holds the sampler and the RNG after step 3
    # step 4's recording starts before it (so step 3 waits) and stops after it (so step 4 waits)
    ({"global_profiler.tool": "torch", "global_profiler.steps": "[4]"}, [3, 4]),
])
def test_generation_waits_for_what_must_come_between_the_update_and_the_next_generation(setting, waits):
    allowed = allowed_during(trainer_stub(**setting))
    assert [s for s, ok in allowed.items() if not ok] == waits + [10]


def test_generation_does_not_go_ahead_in_process_under_dynamic_sampling_after_a_stop_or_when_turned_off():
    t = trainer_stub()
    t.actor_wg.use_ray = False
    assert not t._prefetch_allowed()
    t = trainer_stub()
    t.dynamic = object()
    assert not t._prefetch_allowed()
    t = trainer_stub()
    t.stop.signum = 2
    assert not t._prefetch_allowed()
    t = trainer_stub()
    t._generate_ahead = False
    assert not t._prefetch_allowed()


def test_a_failure_to_send_the_next_generation_is_held_until_the_update_answers_and_names_that_step():
    t = trainer_stub()
    t.global_step = 4

    def fail(plan):
        raise ValueError("row 7 of the data has no prompt")

    t._send_generation = fail
    timing: Dict[str, float] = {}
    error = t._send_ahead(None, timing)
    assert isinstance(error, ValueError)
    assert error.__notes__ == ["sending the generation of step 6 during step 5"]
    assert timing["gen_send"] >= 0
    t.stop.signum = 15  # not allowed: nothing is sent, nothing timed
    timing = {}
    assert t._send_ahead(None, timing) is None and timing == {}


def test_the_switch_takes_0_or_1_and_names_a_bad_value(monkeypatch):
    from verl_lite.trainer.generation import generate_ahead_enabled

    monkeypatch.delenv("VERL_LITE_GENERATE_AHEAD", raising=False)
    assert generate_ahead_enabled() is True
    monkeypatch.setenv("VERL_LITE_GENERATE_AHEAD", "0")
    assert generate_ahead_enabled() is False
    monkeypatch.setenv("VERL_LITE_GENERATE_AHEAD", "off")
    with pytest.raises(ValueError, match=r"VERL_LITE_GENERATE_AHEAD='off' is not 0 or 1"):
        generate_ahead_enabled()


def test_a_pending_call_in_process_has_run_and_answers_as_call_shards():
    from verl_lite.trainer.worker_group import PendingCall

    group = types.SimpleNamespace(leaders=[(0, 0)], call_timeout_s=None)
    call = PendingCall(group, "m", answers=[{"x": torch.arange(3)}])
    assert call.result()[0]["x"].tolist() == [0, 1, 2]
    assert call.batch()["x"].tolist() == [0, 1, 2]
