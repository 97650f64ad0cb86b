"""global_profiler / <role>.profiler as verl's DistProfiler records them: torch.profiler traces of the listed
steps, one per step (stages as named ranges) or one per stage (discrete), in verl's file layout; the rollout's
own traces (discrete) in verl's engine layout, moved up by relocate_results under verl's names (its replica
selection and names compared with verl's own functions on a committed table, tools/gen_profiler_cases.py);
the Ascend profiler through a contract double of torch_npu.profiler; torch.cuda.memory snapshots; the tools
and settings verl_lite cannot run refused with the reason."""

from __future__ import annotations

import gzip
import inspect
import json
import os
import pickle
import re
import sys
from pathlib import Path

import pytest

from verl_lite.config import load_config
from verl_lite.preflight import machine
from verl_lite.preflight.roles import role_views
from verl_lite.preflight.run import compose_and_check
from verl_lite.decisions.profiling import profiler_problems
from verl_lite.trainer.profiling import WorkerProfiler

NPU_DOUBLE = Path(__file__).resolve().parent / "torch_npu_double"
ROLLOUT_CASES = Path(__file__).resolve().parent / "data" / "profiler_rollout_cases.json"
ACTOR_STAGES = {"generate_sequences", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update"}
# the name of a rollout trace (vLLM's name of the worker of a one-rank engine, torch's tensorboard_trace_handler's time)
ROLLOUT_TRACE = r"rank0\.\d+\.pt\.trace\.json\.gz"


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(n_train=64, n_val=4)


def _train(data_dir, tmp_path, *lines, steps=2):
    from verl_lite.trainer.run import run

    traces = tmp_path / "traces"
    cfg = load_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/val.parquet",
        "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3",
        # two mini-batches: the old log-probs are computed (stage actor_compute_log_prob)
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "trainer.device=cpu", f"trainer.total_training_steps={steps}", f"trainer.default_local_dir={tmp_path / 'run'}",
        "trainer.ray=false", "trainer.logger=[jsonl]", "trainer.plot_rewards=false",
        "global_profiler.tool=torch", f"global_profiler.save_path={traces}", *lines,
    ])
    assert run(cfg) == 0
    return traces


def _names(path: Path) -> set:
    return {e.get("name", "") for e in _events(path)}


def _events(path: Path) -> list:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _trace_name(worker: str, role: str, step: int) -> str:
    """verl's build_trace_basename: the world size and Megatron's ranks only where this process has them up
    (an earlier test of the session may have left a process group)."""
    return (rf"{re.escape(worker)}_{re.escape(role)}_step{step}_rank0(-of-1)?(_tp0-pp0-dp0-cp0)?_pid{os.getpid()}"
            r"_\d{17}\.json\.gz")


def test_one_trace_of_the_profiled_step_holds_every_stage_of_the_actor_workers(data_dir, tmp_path):
    traces = _train(data_dir, tmp_path, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True",
                    "global_profiler.steps=[2]", "actor_rollout_ref.actor.profiler.enable=True")
    (trace,) = traces.iterdir()
    assert re.fullmatch(_trace_name("actor-rollout-ref", "train", 2), trace.name), trace.name
    names = _names(trace)
    assert ACTOR_STAGES <= names and any(n.startswith("aten::") for n in names)
    # contents=[] is verl's: no shapes, memory or stacks
    assert not any("Input Dims" in e.get("args", {}) for e in _events(trace))


def test_discrete_writes_one_trace_per_stage_holding_that_stage_only(data_dir, tmp_path):
    traces = _train(data_dir, tmp_path, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True",
                    "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=True",
                    "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=True",
                    "actor_rollout_ref.ref.profiler.enable=True",
                    "actor_rollout_ref.ref.profiler.tool_config.torch.discrete=True",
                    "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True")
    by_stage = {}
    for trace in traces.iterdir():
        if trace.is_dir():
            continue
        stage = next(s for s in ACTOR_STAGES if re.fullmatch(_trace_name("actor-rollout-ref", s.replace("_", "-"), 1),
                                                             trace.name))
        by_stage.setdefault(stage, []).append(trace)
    # the generation is the rollout's: its trace is in the replica's directory, as verl's engines write it
    assert set(by_stage) == ACTOR_STAGES - {"generate_sequences"}
    (rollout,) = (traces / "agent_loop_rollout_replica_0").iterdir()
    assert re.fullmatch(ROLLOUT_TRACE, rollout.name), rollout.name
    by_stage["generate_sequences"] = [rollout]
    for stage, files in by_stage.items():
        for trace in files:
            names = _names(trace)
            assert stage in names and not (ACTOR_STAGES - {stage}) & names, (stage, trace.name)
            assert any(n.startswith("aten::") for n in names)


def test_the_rollouts_own_traces_beside_the_actors_trace_of_each_step_relocated_as_verl_names_them(data_dir,
                                                                                                    tmp_path):
    # verl's examples/profile/run_qwen2_5_7b_torch_profile.sh: the actor's traces of whole steps, the rollout's
    # discrete, relocate_results on
    traces = _train(data_dir, tmp_path, "algorithm.adv_estimator=grpo", "global_profiler.steps=[1,2]",
                    "global_profiler.relocate_results=True", "actor_rollout_ref.actor.profiler.enable=True",
                    "actor_rollout_ref.actor.profiler.ranks=[0]",
                    "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=False",
                    "actor_rollout_ref.rollout.profiler.enable=True", "actor_rollout_ref.rollout.profiler.ranks=[0]",
                    "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True")
    files = sorted(p.name for p in traces.iterdir() if p.is_file())
    actor = [f for f in files if f.startswith("actor-rollout_")]
    rollout = sorted((f for f in files if f.startswith("rollout-replica0_")), key=lambda f: int(f.split(".")[1]))
    assert len(actor) == 2 and len(rollout) == 2 and len(files) == 4, files
    for step, (a, r) in enumerate(zip(sorted(actor, key=lambda f: "step2" in f), rollout), start=1):
        assert re.fullmatch(_trace_name("actor-rollout", "train", step), a), a
        assert re.fullmatch("rollout-replica0_" + ROLLOUT_TRACE, r), r
        whole, generation = _events(traces / a), _events(traces / r)
        # the rollout's trace: the generation's range and what ran inside it, none of the step's other stages
        assert sum(e.get("name") == "generate_sequences" for e in generation) == 1
        assert not {"actor_update", "actor_compute_log_prob"} & {e.get("name") for e in generation}
        inside = [e for e in generation if e.get("ph") == "X" and e.get("name", "").startswith("aten::")]
        assert inside and all(e in whole for e in inside)
        (span,) = [e for e in generation if e.get("name") == "generate_sequences"]
        assert all(span["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= span["ts"] + span["dur"] for e in inside)
        # the actor's trace of the step holds the generation too (it runs in the actor's process)
        assert {"generate_sequences", "actor_update"} <= {e.get("name") for e in whole}
    # relocated: the replica's directory is left empty, as verl leaves it
    assert list((traces / "agent_loop_rollout_replica_0").iterdir()) == []


def test_continuous_steps_share_one_trace_and_contents_shapes_records_input_shapes(data_dir, tmp_path):
    traces = _train(data_dir, tmp_path, "algorithm.adv_estimator=grpo", "global_profiler.steps=[1,2]",
                    "global_profiler.profile_continuous_steps=True", "actor_rollout_ref.actor.profiler.enable=True",
                    "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[shapes]")
    (trace,) = traces.iterdir()
    assert re.fullmatch(_trace_name("actor-rollout", "train", 1), trace.name), trace.name
    events = _events(trace)
    assert sum(e.get("name") == "actor_update" for e in events) == 2  # both steps' updates
    assert any("Input Dims" in e.get("args", {}) for e in events)


def test_actor_and_critic_sharing_a_process_share_one_trace_named_after_both(data_dir, tmp_path):
    traces = _train(data_dir, tmp_path, "algorithm.adv_estimator=gae", "global_profiler.steps=[1]",
                    "critic.ppo_mini_batch_size=2",
                    "actor_rollout_ref.actor.profiler.enable=True", "critic.profiler.enable=True", steps=1)
    (trace,) = traces.iterdir()
    assert re.fullmatch(_trace_name("actor-rollout+value-model", "train", 1), trace.name), trace.name
    assert {"critic_compute_values", "critic_update", "actor_update", "generate_sequences"} <= _names(trace)


def _cfg(*lines, device="cpu"):
    return load_config([f"trainer.device={device}", *lines])


@pytest.mark.parametrize("rank, ranks, all_ranks, records", [
    (0, "[]", False, True), (1, "[]", False, False), (1, "[1,3]", False, True), (2, "[1,3]", False, False),
    (5, "[]", True, True),
])
def test_ranks_are_selected_as_verl_selects_them(tmp_path, rank, ranks, all_ranks, records):
    cfg = _cfg("global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={tmp_path}",
               "actor_rollout_ref.actor.profiler.enable=True", f"actor_rollout_ref.actor.profiler.ranks={ranks}",
               f"actor_rollout_ref.actor.profiler.all_ranks={all_ranks}")
    prof = WorkerProfiler(cfg, "actor", "actor_rollout", rank, "cpu")
    prof.start(1)
    with prof.stage("actor_update"):
        sum(range(10))
    written = prof.stop()
    assert bool(written) == records and sorted(os.listdir(tmp_path)) == [os.path.basename(p) for p in written]
    if records:  # the rank of the file is torch.distributed's where a group is up, as in verl
        import torch.distributed as dist

        named = dist.get_rank() if dist.is_initialized() else rank
        assert re.search(rf"_rank{named}(-of-\d+)?_", written[0]), written[0]


def _rollout_section(enable, all_ranks, ranks, relocate=True, tmp_path="x"):
    return _cfg("global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={tmp_path}",
                f"global_profiler.relocate_results={relocate}", f"actor_rollout_ref.rollout.profiler.enable={enable}",
                f"actor_rollout_ref.rollout.profiler.all_ranks={all_ranks}",
                f"actor_rollout_ref.rollout.profiler.ranks={list(ranks)}",
                "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True")


def test_rollout_replicas_are_selected_and_their_traces_renamed_as_verls_own_functions_do():
    from verl_lite.decisions.profiling import keep_global_ranks, relocated_name, replica_profiled, section

    table = json.loads(ROLLOUT_CASES.read_text())
    assert len(table["selection"]) == 32 and len(table["relocation"]) == 48
    for case in table["selection"]:
        own = section(_rollout_section(case["enable"], case["all_ranks"], case["ranks"]), "rollout")
        assert [r for r in range(4) if replica_profiled(own, r, case["world_size"])] == case["replicas"], case
    for case in table["relocation"]:
        own = section(_rollout_section(True, case["all_ranks"], case["ranks"]), "rollout")
        got = {name: relocated_name(name, case["replica"], case["world_size"], keep_global_ranks(own))
               for name in case["moved"]}
        assert got == case["moved"], case
        assert sorted(n for n, moved in got.items() if moved is None) == case["left"]


def test_a_rollout_rank_the_ranks_leave_out_records_but_stays_in_its_replicas_directory(tmp_path):
    import torch

    from verl_lite.trainer.profiling import RolloutReplica

    # replicas of two ranks (vllm TP=2), ranks=[0]: replica 0 records on both ranks (an engine records its whole
    # replica, as verl's); relocation moves global rank 0's trace up and leaves rank 1's where it was written
    cfg = _rollout_section(True, False, [0], tmp_path=tmp_path)
    written = {}
    for rank in (0, 1):
        prof = WorkerProfiler(cfg, "actor", "actor_rollout", rank, "cpu",
                              rollout=RolloutReplica(0, 2, f"dp0_pp0_tp{rank}_dcp0_ep{rank}_rank{rank}"))
        prof.start(1)
        with prof.stage("generate_sequences"):
            torch.ones(3).mul(2)
        written[rank] = prof.stop()
    (zero,), (one,) = written[0], written[1]
    assert re.fullmatch(r"rollout-replica0-globalrank0_dp0_pp0_tp0_dcp0_ep0_rank0\.\d+\.pt\.trace\.json\.gz",
                        os.path.basename(zero)) and os.path.dirname(zero) == str(tmp_path)
    assert os.path.dirname(one) == str(tmp_path / "agent_loop_rollout_replica_0")
    assert "generate_sequences" in _names(Path(one))
    # replica 1 (ranks 2, 3) is not selected: nothing recorded
    prof = WorkerProfiler(cfg, "actor", "actor_rollout", 2, "cpu", rollout=RolloutReplica(1, 2, "x"))
    prof.start(1)
    with prof.stage("generate_sequences"):
        pass
    assert prof.stop() == []


@pytest.fixture
def torch_npu_double(monkeypatch):
    """The torch_npu profiler double, importable in this test only."""
    monkeypatch.syspath_prepend(str(NPU_DOUBLE))
    yield
    for name in [m for m in sys.modules if m == "torch_npu" or m.startswith("torch_npu.")]:
        del sys.modules[name]


def _npu_records(directory: Path) -> list:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*_ascend_pt/double_profile.json"))]


def test_npu_tool_asks_torch_npu_profiler_for_verls_mapping_of_tool_config_npu(torch_npu_double, tmp_path):
    cfg = _cfg("global_profiler.tool=npu", "global_profiler.steps=[1]", f"global_profiler.save_path={tmp_path}",
               "actor_rollout_ref.actor.profiler.enable=True",
               "actor_rollout_ref.actor.profiler.tool_config.npu.contents=[npu,shapes,module]",
               "actor_rollout_ref.actor.profiler.tool_config.npu.level=level1",
               "actor_rollout_ref.actor.profiler.tool_config.npu.analysis=False", device="npu")
    prof = WorkerProfiler(cfg, "actor", "actor_rollout_ref", 0, "npu")
    prof.start(1)
    for stage in ("generate_sequences", "actor_update"):
        with prof.stage(stage):
            pass
    assert prof.stop() == [str(tmp_path / "train")]
    (record,) = _npu_records(tmp_path / "train")
    assert record["activities"] == ["CPU", "NPU"]
    assert (record["record_shapes"], record["with_modules"], record["with_stack"], record["profile_memory"]) == (
        True, True, False, False)
    assert record["experimental"] == {"profiler_level": "Level1", "export_type": ["Db"], "msprof_tx": True,
                                      "data_simplification": True, "mstx_domain_exclude": ["communication"],
                                      "mstx_domain_include": None}
    assert record["analyse"] is False and record["steps"] == 1
    assert [r[:2] for r in record["ranges"]] == [["start", "generate_sequences"], ["end", "generate_sequences"],
                                                 ["start", "actor_update"], ["end", "actor_update"]]


def test_npu_discrete_records_each_stage_in_its_own_directory_cpu_only_by_default(torch_npu_double, tmp_path):
    cfg = _cfg("global_profiler.tool=npu", "global_profiler.steps=[1]", f"global_profiler.save_path={tmp_path}",
               "actor_rollout_ref.actor.profiler.enable=True",
               "actor_rollout_ref.actor.profiler.tool_config.npu.discrete=True", device="npu")
    prof = WorkerProfiler(cfg, "actor", "actor_rollout", 0, "npu")
    prof.start(1)
    for stage in ("ref_compute_log_prob", "actor_update"):
        with prof.stage(stage):
            pass
    assert prof.stop() == [str(tmp_path / "ref_compute_log_prob"), str(tmp_path / "actor_update")]
    assert not (tmp_path / "train").exists()
    for stage in ("ref_compute_log_prob", "actor_update"):
        (record,) = _npu_records(tmp_path / stage)
        # verl passes contents=[] as it is: CPU activity only, nothing else collected
        assert record["activities"] == ["CPU"] and not record["record_shapes"] and record["analyse"] is True
        assert record["experimental"]["profiler_level"] == "Level0"
        assert [r[1] for r in record["ranges"]] == [stage, stage]


def test_torch_memory_records_the_step_and_dumps_a_snapshot_with_torchs_own_arguments(monkeypatch, tmp_path):
    import torch

    memory = torch.cuda.memory
    real_record, real_dump = memory._record_memory_history, memory._dump_snapshot
    calls = []

    def record(*args, **kwargs):
        calls.append(("record", dict(inspect.signature(real_record).bind(*args, **kwargs).arguments)))

    def dump(*args, **kwargs):
        filename = inspect.signature(real_dump).bind(*args, **kwargs).arguments["filename"]
        calls.append(("dump", filename))
        Path(filename).write_bytes(pickle.dumps({"segments": [], "device_traces": []}))

    monkeypatch.setattr(memory, "_record_memory_history", record)
    monkeypatch.setattr(memory, "_dump_snapshot", dump)
    cfg = _cfg("global_profiler.tool=torch_memory", "global_profiler.steps=[3]",
               f"global_profiler.save_path={tmp_path}",
               "global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries=5000",
               "actor_rollout_ref.actor.profiler.enable=True", device="cuda")
    prof = WorkerProfiler(cfg, "actor", "actor_rollout", 0, "cuda")
    prof.start(3)
    with prof.stage("actor_update"):
        pass
    snapshot = str(tmp_path / "step3" / f"torch_memory_rank0_pid{os.getpid()}.pickle")
    assert prof.stop() == [snapshot]
    assert calls == [("record", {"context": "all", "stacks": "all", "max_entries": 5000}), ("dump", snapshot),
                     ("record", {"enabled": None})]
    assert pickle.loads(Path(snapshot).read_bytes())["segments"] == []


def test_torch_memory_on_npu_records_torch_npus_allocation_history_as_verl_reads_it(torch_npu_double, tmp_path):
    from torch_npu.npu import memory

    memory.CALLS.clear()
    line = ["trainer.device=npu", "global_profiler.tool=torch_memory", "global_profiler.steps=[2]",
            f"global_profiler.save_path={tmp_path}", "actor_rollout_ref.actor.profiler.enable=True"]
    assert _problems(*line[1:], device="npu") == []
    cfg = load_config(line)
    prof = WorkerProfiler(cfg, "actor", "actor_rollout", 0, "npu")
    prof.start(2)
    with prof.stage("actor_update"):
        pass
    snapshot = str(tmp_path / "step2" / f"torch_memory_rank0_pid{os.getpid()}.pickle")
    assert prof.stop() == [snapshot]
    # verl's enable_memory_visualize passes the keywords torch_npu's function has: context, stacks, max_entries
    assert memory.CALLS == [("record", {"enabled": "all", "context": "all", "stacks": "all", "max_entries": 100000}),
                            ("dump", snapshot), ("record", {"enabled": None, "context": "all", "stacks": "all",
                                                            "max_entries": memory.sys.maxsize})]
    assert pickle.loads(Path(snapshot).read_bytes())["segments"] == []


def _problems(*lines, device="cpu"):
    return profiler_problems(_cfg(*lines, device=device), device)


@pytest.mark.parametrize("tool, device, fragment", [
    ("npu", "cpu", "with trainer.device=cpu is not supported: the Ascend profiler (torch_npu.profiler) records "
                   "NPUs only"),
    ("npu", "cuda", "with trainer.device=cuda is not supported: the Ascend profiler"),
    ("torch_memory", "cpu", "exists only on CUDA and Ascend devices"),
    ("nsys", "cuda", "run the training command under `nsys profile` yourself"),
    ("precision_debugger", "npu", "msprobe's precision debugger is not supported"),
    ("perf", "cpu", "choose one of torch, npu, torch_memory (or null)"),
])
def test_tools_verl_lite_cannot_run_on_the_device_are_refused_with_the_reason(tool, device, fragment):
    (problem,) = _problems(f"global_profiler.tool={tool}", "global_profiler.steps=[1]", device=device)
    assert problem.startswith(f"global_profiler.tool={tool!r}") and fragment in problem


def test_npu_tool_passes_the_laptop_check_and_the_training_machine_check_asks_for_torch_npu():
    line = ["trainer.device=npu", "global_profiler.tool=npu", "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=True", "actor_rollout_ref.actor.profiler.tool_config.npu.level=level2"]
    assert not [p for p in compose_and_check(line, for_training=False)[1] if "profiler" in p]
    assert _problems(*line[1:], device="npu") == []
    cfg = load_config(line)
    needed = [p for p in machine.environment_problems(cfg, role_views(cfg, "npu"), "npu", explicit=False)
              if "torch_npu" in p]
    assert needed == ["this run needs torch_npu for global_profiler.tool=npu (its profiler, torch_npu.profiler): "
                      "module 'torch_npu' is not installed"]


def test_bad_steps_contents_levels_and_a_missing_tool_are_refused():
    assert "[0] are not" in _problems("global_profiler.tool=torch", "global_profiler.steps=[0,2]")[0]
    assert "no global_profiler.tool" in _problems("global_profiler.steps=[1]",
                                                  "actor_rollout_ref.actor.profiler.enable=True")[0]
    assert "choose from cuda, cpu, memory, shapes, stack" in _problems(
        "critic.profiler.tool_config.torch.contents=[gpu]")[0]
    assert "choose from npu, cpu, memory, shapes, module, stack" in _problems(
        "actor_rollout_ref.actor.profiler.tool_config.npu.contents=[cuda]")[0]
    assert "choose one of level_none, level0, level1, level2" in _problems(
        "actor_rollout_ref.ref.profiler.tool_config.npu.level=level3")[0]
    assert "leave it at 32" in _problems("global_profiler.tool=torch_memory", "global_profiler.steps=[1]",
                                         "global_profiler.global_tool_config.torch_memory.stack_depth=8",
                                         device="cuda")[0]
    (problem,) = _problems("global_profiler.tool=torch", "global_profiler.steps=[1,2]",
                           "global_profiler.profile_continuous_steps=True", "critic.profiler.enable=True",
                           "critic.profiler.tool_config.torch.discrete=True")
    assert "a recording of several steps cannot be one per stage" in problem
    assert _problems("global_profiler.tool=torch", "global_profiler.steps=[1,3]",
                     "actor_rollout_ref.actor.profiler.enable=True") == []


def test_the_ref_section_may_repeat_the_actors_settings_but_not_differ_and_the_rollouts_is_its_own_on_torch():
    on = ["global_profiler.tool=torch", "global_profiler.steps=[1]"]
    (problem,) = _problems(*on, "actor_rollout_ref.ref.profiler.enable=True")
    assert problem.startswith("actor_rollout_ref.ref.profiler.enable=True with actor_rollout_ref.actor.profiler."
                              "enable=False: the ref runs in the actor's workers")
    actor = ["actor_rollout_ref.actor.profiler.enable=True", "actor_rollout_ref.actor.profiler.ranks=[0,1]",
             "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cuda]"]
    # the rollout's own settings (verl's rollout servers read them)
    assert _problems(*on, *actor, "actor_rollout_ref.rollout.profiler.enable=True",
                     "actor_rollout_ref.rollout.profiler.ranks=[0]",
                     "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True",
                     "actor_rollout_ref.rollout.profiler.tool_config.torch.contents=[cuda]",
                     "actor_rollout_ref.rollout.profiler.relocate_results=True") == []
    assert _problems(*on, "actor_rollout_ref.rollout.profiler.enable=True",
                     "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True") == []
    # the actor's traces of whole steps hold the generation: it cannot be left out
    (problem,) = _problems(*on, *actor, "actor_rollout_ref.rollout.profiler.enable=False")
    assert "the rollout's generation runs in the actor's workers" in problem
    assert _problems(*on, *actor, "actor_rollout_ref.rollout.profiler.enable=False",
                     "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=True") == []
    # its traces are cut from the actor's traces of whole steps, which record the actor's contents
    discrete = ["actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True"]
    (problem,) = _problems(*on, *actor, *discrete)  # the rollout's contents: verl's default []
    assert problem.startswith("actor_rollout_ref.rollout.profiler.tool_config.torch.contents=[] differs from "
                              "actor_rollout_ref.actor.profiler.tool_config.torch.contents=['cuda']: the rollout's "
                              "traces are cut from the actor's")
    assert _problems(*on, *actor, *discrete, "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=True") == []
    # a rollout section that records nothing (verl's servers record in discrete mode only)
    (problem,) = _problems(*on, "actor_rollout_ref.rollout.profiler.enable=True")
    assert problem.startswith("actor_rollout_ref.rollout.profiler.enable=True with actor_rollout_ref.rollout.profiler."
                              "tool_config.torch.discrete=False records nothing")
    npu = ["global_profiler.tool=npu", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=True",
           "actor_rollout_ref.actor.profiler.tool_config.npu.level=level1", "actor_rollout_ref.ref.profiler.enable=True"]
    assert _problems(*npu, "actor_rollout_ref.ref.profiler.tool_config.npu.level=level1", device="npu") == []
    problems = _problems(*npu, "actor_rollout_ref.ref.profiler.tool_config.npu.level=level2",
                         "actor_rollout_ref.ref.profiler.tool_config.npu.analysis=False",
                         "actor_rollout_ref.ref.profiler.tool_config.npu.contents=[npu]",
                         "actor_rollout_ref.ref.profiler.tool_config.npu.discrete=True", device="npu")
    assert [p.split(" differs")[0] for p in problems] == [
        "actor_rollout_ref.ref.profiler.tool_config.npu.contents=['npu']",
        "actor_rollout_ref.ref.profiler.tool_config.npu.discrete=True",
        "actor_rollout_ref.ref.profiler.tool_config.npu.level='level2'",
        "actor_rollout_ref.ref.profiler.tool_config.npu.analysis=False"]


def test_npu_tool_refuses_a_torch_npu_older_than_2_1_as_verl_does(torch_npu_double, monkeypatch, tmp_path):
    import torch_npu

    monkeypatch.setattr(torch_npu, "__version__", "2.0.3.post1")
    cfg = _cfg("global_profiler.tool=npu", "global_profiler.steps=[1]", f"global_profiler.save_path={tmp_path}",
               "actor_rollout_ref.actor.profiler.enable=True", device="npu")
    with pytest.raises(RuntimeError, match=r"needs torch_npu>=2.1 \(its mstx_domain_exclude\), found 2.0.3.post1"):
        WorkerProfiler(cfg, "actor", "actor_rollout", 0, "npu").start(1)
