"""verl's fully-async conventions: `data.train_batch_size=0` with `rollout.total_rollout_steps`,
the fractional `async_training.staleness_threshold`, `require_batches`, the one-step-off trainer.

verl's fully-async module does not import without its full dependency set (hydra, torchdata,
vllm's agent loop), so the reference is verl's arithmetic written out below from its code at the
pinned commit, each formula with its file:line; `test_the_cited_lines_of_verl_say_what_the_reference_does`
reads those lines in /work/verl_src (when present) so the table cannot drift from verl's text.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from verl_lite.config import load_config

VERL = Path(os.environ.get("VERL_SRC", "/work/verl_src")) / "verl" / "experimental" / "fully_async_policy"
ROLLOUTER, TRAINER = "fully_async_rollouter.py", "fully_async_trainer.py"

# (file, line, text the line holds): the formulas the reference functions below restate
CITED = [
    (ROLLOUTER, 405, "self.total_rollout_steps = len(self.train_dataloader) * self.config.trainer.total_epochs"),
    (ROLLOUTER, 407, "self.total_rollout_steps = min(self.config.rollout.total_rollout_steps, self.total_rollout_steps)"),
    (ROLLOUTER, 424, "self.required_samples = config.actor_rollout_ref.actor.ppo_mini_batch_size * self.require_batches"),
    (TRAINER, 159, "self.required_samples = config.actor_rollout_ref.actor.ppo_mini_batch_size * self.require_batches"),
    (ROLLOUTER, 494, "self.required_samples"),
    (ROLLOUTER, 495, "* (self.staleness_threshold + 1)"),
    (ROLLOUTER, 496, "* self.config.async_training.trigger_parameter_sync_step"),
    (ROLLOUTER, 499, "self.total_rollout_steps"),
    (ROLLOUTER, 500, "/ (self.required_samples * self.config.async_training.trigger_parameter_sync_step)"),
    (ROLLOUTER, 507, "self.max_queue_size = self.max_required_samples"),
    (ROLLOUTER, 605, "self.staleness_samples = len(self.active_tasks) + await self.message_queue_client.get_queue_size()"),
    (ROLLOUTER, 878, "if self.global_steps >= self.total_rollout_steps:"),
    (ROLLOUTER, 952, "self.staleness_samples += 1"),
    (ROLLOUTER, 1147, "if queue_size >= self.max_queue_size:"),
    (ROLLOUTER, 1155, "if self.staleness_samples >= self.max_required_samples:"),
]


# ---------------------------------------------------------------------------- verl's arithmetic, restated


def verl_required_samples(ppo_mini_batch_size, require_batches):  # rollouter :424, trainer :159
    return ppo_mini_batch_size * require_batches


def verl_max_required_samples(required, staleness_threshold, trigger):  # rollouter :493-497 (and :507)
    return int(required * (staleness_threshold + 1) * trigger)


def verl_total_rollout_steps(n_prompts, total_epochs, total_rollout_steps):  # rollouter :405-407
    total = n_prompts * total_epochs  # len(dataloader) with batch size gen_batch_size=1
    return min(total_rollout_steps, total) if total_rollout_steps is not None else total


def verl_total_train_steps(total, required, trigger):  # rollouter :498-501 (weight versions)
    return int(total / (required * trigger))


class VerlRollouter:
    """verl's rollouter counting, one sample at a time: a sample may start unless the queue holds
    max_queue_size (:1147) or staleness_samples reached max_required_samples (:1155); a start adds one
    (:952); the feed stops after total_rollout_steps (:878); a sync resets the count to the samples in
    flight plus those queued (:605)."""

    def __init__(self, max_required, total):
        self.max_required, self.total = max_required, total
        self.staleness = self.fed = 0
        self.queue, self.active = 0, 0

    def may_start(self):
        return self.fed < self.total and self.queue < self.max_required and self.staleness < self.max_required

    def start(self):
        self.staleness += 1
        self.fed += 1
        self.active += 1

    def finish(self, count):
        self.active -= count
        self.queue += count

    def take(self, count):
        self.queue -= count

    def sync(self):
        self.staleness = self.active + self.queue


@pytest.mark.verl_source
def test_the_cited_lines_of_verl_say_what_the_reference_does():
    if not VERL.is_dir():
        pytest.skip(f"verl's source is not at {VERL} (set VERL_SRC)")
    for name, line, text in CITED:
        lines = (VERL / name).read_text(encoding="utf-8").splitlines()
        assert lines[line - 1].strip() == text, f"{name}:{line} is now {lines[line - 1].strip()!r}"


def streaming_cfg(*extra):
    return load_config(["trainer.device=cpu", "async_training.enable=True", "data.train_batch_size=0",
                        "rollout.nnodes=1", "rollout.n_gpus_per_node=1", *extra])


@pytest.mark.parametrize("mini,require,threshold,trigger,n_prompts,epochs,cap", [
    (32, 1, 0.1, 4, 17398, 10, 204800),   # verl's dapo_7b_math_fsdp2 runs: 512*400 rollout steps
    (32, 4, 0.5, 4, 17398, 10, None),
    (8, 2, 0.0, 1, 100, 3, 250),
    (4, 3, 0.3, 2, 1000, 1, 77),
    (16, 1, 1.0, 16, 50000, 2, 1000),
    (3, 1, 0.7, 3, 40, 2, 79),             # a fraction whose product is not a whole number
])
def test_the_step_budget_and_run_length_follow_verls_formulas(mini, require, threshold, trigger, n_prompts, epochs,
                                                              cap):
    from verl_lite.decisions import async_pools
    from verl_lite.trainer.loop import total_steps

    cfg = streaming_cfg(f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}", f"async_training.require_batches={require}",
                        f"async_training.staleness_threshold={threshold}",
                        f"async_training.trigger_parameter_sync_step={trigger}", f"trainer.total_epochs={epochs}",
                        f"rollout.total_rollout_steps={'null' if cap is None else cap}")
    required = verl_required_samples(mini, require)
    assert async_pools.step_prompts(cfg) == required
    assert async_pools.max_required_samples(cfg) == verl_max_required_samples(required, threshold, trigger)
    total = verl_total_rollout_steps(n_prompts, epochs, cap)
    assert async_pools.total_rollout_prompts(cfg, n_prompts) == total
    assert async_pools.versions(cfg, n_prompts) == verl_total_train_steps(total, required, trigger)
    # verl's trainer updates once per `required` samples until the queue ends (fully_async_trainer.py:402-429)
    assert total_steps(cfg, n_prompts) == total // required


def _run_buffer(buffer_budget, chunk, total, required, trigger, steps, delay):
    """Drive ChunkBuffer and verl's counting through the same schedule: every tick the rollouter starts
    what it may (at most 4 chunks in flight), chunks finish `delay` ticks later, and the trainer takes
    `required` groups when the queue has them, syncing every `trigger` steps. Returns the groups started
    between syncs by each, and the count carried into each new version."""
    from verl_lite.trainer.async_buffer import ChunkBuffer

    async def scenario():
        buf = ChunkBuffer(n_prompts=10_000, batch_size=1, seed=1, shuffle=False, capacity_groups=buffer_budget,
                          chunk_groups=chunk, budget=buffer_budget, limit=total)
        ref = VerlRollouter(buffer_budget, total)
        ours_flight, ref_flight = [], []  # (finish tick, groups)
        ours_started, ref_started = [0], [0]
        carry = trained = 0
        carried = []
        for tick in range(10_000):
            while len(ours_flight) < 4:
                job = await buf.reserve(0.001)
                if job is None:
                    break
                ours_flight.append((tick + delay, len(job["indices"])))
                ours_started[-1] += len(job["indices"])
            started = 0
            while len(ref_flight) + started < 4 * chunk and ref.may_start():
                ref.start()
                started += 1
            ref_flight += [(tick + delay, 1)] * started
            ref_started[-1] += started
            for done in [f for f in ours_flight if f[0] == tick]:
                ours_flight.remove(done)
                await buf.put({}, done[1])
            ref.finish(sum(g for t, g in ref_flight if t == tick))
            ref_flight = [f for f in ref_flight if f[0] != tick]
            while True:  # the trainer: groups in hand (carry) from whole chunks
                while carry < required:
                    got = await buf.get(0.001)
                    if not got or got.get("exhausted"):
                        break
                    carry += got["groups"]
                if carry < required or ref.queue < required:
                    assert (carry < required) == (ref.queue < required), (tick, carry, ref.queue)
                    break
                carry -= required
                ref.take(required)
                trained += 1
                if trained % trigger == 0:
                    held_ours = await buf.reset_staleness(carry)
                    ref.sync()
                    assert held_ours == ref.staleness, (tick, held_ours, ref.staleness)
                    carried.append(held_ours)
                    ours_started.append(0)
                    ref_started.append(0)
                if trained == steps:
                    return ours_started, ref_started, carried, buf.depth()
        raise AssertionError("the trainer never finished")

    return asyncio.run(scenario())


@pytest.mark.parametrize("threshold,trigger,chunk,delay", [(0.0, 1, 1, 1), (0.5, 2, 1, 3), (0.1, 4, 1, 2),
                                                           (1.0, 1, 1, 2)])
def test_the_queue_starts_exactly_as_many_groups_per_version_as_verls_rollouter(threshold, trigger, chunk, delay):
    required = 6
    budget = verl_max_required_samples(required, threshold, trigger)
    steps = 12
    total = required * steps + 5  # a remainder below a step is generated, never trained on
    ours, ref, carried, depth = _run_buffer(budget, chunk, total, required, trigger, steps, delay)
    assert ours == ref
    assert max(ours) <= budget and depth["dealt"] <= total
    # at each sync at most staleness_threshold * required * trigger groups come from older weights
    assert max(carried) <= budget - required * trigger
    if threshold == 0:
        assert carried == [0] * len(carried)  # verl's synchronous mode: nothing generated ahead


def test_chunks_are_cut_to_the_room_left_so_a_version_starts_its_whole_budget():
    from verl_lite.trainer.async_buffer import ChunkBuffer

    async def scenario():
        buf = ChunkBuffer(n_prompts=100, batch_size=1, seed=1, shuffle=False, capacity_groups=7, chunk_groups=3,
                          budget=7, limit=9)
        sizes = []
        while (job := await buf.reserve(0.001)) is not None:
            sizes.append(len(job["indices"]))
        for s in sizes:
            await buf.put({}, s)
        taken = [(await buf.get(0.001))["groups"] for _ in sizes]
        assert await buf.reset_staleness(0) == 0
        more = await buf.reserve(0.001)  # the run's limit of 9 leaves 2
        await buf.put({}, len(more["indices"]))
        assert await buf.reserve(0.001) is None  # every prompt of the run is dealt
        assert (await buf.get(0.001))["groups"] == 2
        return sizes, taken, await buf.get(0.001)

    sizes, taken, last = asyncio.run(scenario())
    assert sizes == [3, 3, 1] and taken == sizes and last == {"exhausted": True}


# ---------------------------------------------------------------------------- the config lines


def test_verls_fully_async_line_composes_with_its_trainer_config_values():
    from verl_lite.preflight.run import compose_and_check

    cfg, problems = compose_and_check(["trainer.device=cpu", "--config-name=fully_async_ppo_trainer",
                                       "data.train_batch_size=0", "data.gen_batch_size=1", "rollout.n_gpus_per_node=1",
                                       "algorithm.adv_estimator=grpo", "actor_rollout_ref.hybrid_engine=False",
                                       "async_training.use_trainer_do_validate=False"], for_training=False)[:2]
    assert problems == []
    a = cfg.async_training
    # fully_async_ppo_trainer.yaml's values
    assert (a.enable, a.staleness_threshold, a.trigger_parameter_sync_step, a.require_batches, a.partial_rollout) == (
        True, 0.1, 4, 1, True)
    assert cfg.actor_rollout_ref.rollout.total_rollout_steps == 100 and cfg.actor_rollout_ref.rollout.nnodes == 1


def test_one_step_off_is_the_async_engine_with_one_batch_in_flight_and_no_cut_generations():
    from verl_lite.decisions import async_pools
    from verl_lite.preflight.run import compose_and_check

    line = ["trainer.device=cpu", "--config-name=one_step_off_ppo_trainer", "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.hybrid_engine=False", "rollout.n_gpus_per_node=1", "data.train_batch_size=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8"]
    cfg, problems = compose_and_check(line, for_training=False)[:2]
    assert problems == []
    a = cfg.async_training
    assert a.enable and a.trigger_parameter_sync_step == 1 and not a.partial_rollout
    # a version starts its own batch plus one more: the next step's batch comes from the weights a step older
    assert async_pools.max_required_samples(cfg) == 2 * 16
    gae = compose_and_check(["trainer.device=cpu", "--config-name=one_step_off_ppo_trainer",
                             "rollout.n_gpus_per_node=1"], for_training=False)[1]
    assert any("a critic" in p and "adv_estimator=gae" in p for p in gae), gae


def test_the_settings_verl_lite_lacks_are_refused_by_name_and_train_batch_size_zero_needs_async():
    from verl_lite.preflight.run import compose_and_check

    def problems(*line):
        return compose_and_check(["trainer.device=cpu", *line], for_training=False)[1]

    on = ["async_training.enable=True", "rollout.nnodes=1", "rollout.n_gpus_per_node=1"]
    text = "\n".join(problems(*on, "async_training.use_trainer_do_validate=True",
                              "async_training.use_dynamic_resource_scheduling=True",
                              "async_training.dynamic_schedule_policy=default"))
    assert "use_trainer_do_validate=True is not supported" in text and "replica 0" in text
    assert "use_dynamic_resource_scheduling=True: verl's dynamic resource scheduling" in text
    assert "async_training.dynamic_schedule_policy='default': a setting of verl's dynamic resource" in text
    assert any("data.train_batch_size=0 is verl's fully-async form" in p for p in problems("data.train_batch_size=0"))
    assert any("rollout.total_rollout_steps=8 counts the prompts" in p for p in problems("rollout.total_rollout_steps=8"))
    assert any("data.gen_batch_size=2 with async_training.enable=True" in p
               for p in problems(*on, "data.gen_batch_size=2"))
    assert any("staleness_threshold=-0.5 must be >= 0" in p for p in problems(*on, "async_training.staleness_threshold=-0.5"))
    assert any("require_batches=2 with data.train_batch_size=" in p for p in problems(*on, "async_training.require_batches=2"))


# ---------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=8)


def test_a_streaming_run_trains_total_rollout_steps_over_the_step_size_and_logs_verls_metrics(ray_cluster, data_dir,
                                                                                            tmp_path):
    from verl_lite.trainer.run import run

    out = tmp_path / "stream"
    mini, require, trigger, threshold, total = 4, 2, 2, 0.5, 44
    cfg = load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=0", "data.gen_batch_size=1", f"rollout.total_rollout_steps={total}",
        "data.max_prompt_length=8", "data.max_response_length=3", "actor_rollout_ref.actor.optim.lr=2e-3",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}", f"async_training.require_batches={require}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.micro_batch_size=12", "trainer.device=cpu",
        "trainer.total_epochs=5", f"trainer.default_local_dir={out}", "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
        "trainer.test_freq=-1", "async_training.enable=True", "rollout.nnodes=1", "rollout.n_gpus_per_node=1",
        f"async_training.trigger_parameter_sync_step={trigger}", f"async_training.staleness_threshold={threshold}",
    ])
    assert run(cfg) == 0
    with open(out / "metrics.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    required = verl_required_samples(mini, require)
    steps = total // required  # 5: the last 4 prompts are generated but never trained on
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    budget = verl_max_required_samples(required, threshold, trigger)
    for r in rows:
        assert r["perf/num_sequences"] == required * 4
        assert r["fully_async/static/required_samples"] == required
        assert r["fully_async/static/max_required_samples"] == budget == r["fully_async/static/max_queue_size"]
        assert r["fully_async/count/current_param_version"] == r["step"] // trigger
        assert ("timing_s/param_sync" in r) == (r["step"] % trigger == 0)  # a sync every trigger * required prompts
        assert 0 <= r["fully_async/count/total_generated_samples"] <= total
        assert 0.0 <= r["fully_async/trainer/idle_ratio"] <= 1.0
        for key in ("fully_async/partial/total_partial_num", "fully_async/partial/partial_ratio",
                    "fully_async/partial/max_partial_span", "fully_async/count/stale_trajectory_processed",
                    "fully_async/count/stale_samples_processed", "fully_async/total_wait_time"):
            assert key in r, key
    synced = [r for r in rows if r["step"] % trigger == 0]
    # verl's reset: what is left from older weights at a sync is at most staleness_threshold * required * trigger
    assert all(r["fully_async/count/staleness_samples"] <= budget - required * trigger for r in synced)
    assert any("fully_async/rollouter/idle_ratio" in r for r in synced[1:] or synced)
    counts = [r["fully_async/count/stale_trajectory_processed"] for r in rows]
    assert counts == sorted(counts)  # a running total
