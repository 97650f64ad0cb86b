"""Worker runtime env by verl's rules, with the GPU capability injected or read from a fake nvidia-smi."""

import os
import stat

import pytest

from verl_lite.config import load_config
from verl_lite.runtime_env import get_runtime_env, query_gpu_capability, runtime_env_overrides

MEGATRON = ["actor_rollout_ref.actor.strategy=megatron"]


def env_vars(overrides, device, capability=None, environ=None):
    return get_runtime_env(load_config(overrides), device, gpu_capability=capability, environ=environ or {})["env_vars"]


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (9, 0)])
def test_megatron_on_ampere_or_hopper_sets_cuda_device_max_connections(capability):
    assert env_vars(MEGATRON, "cuda", capability)["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


@pytest.mark.parametrize("capability", [(7, 0), (10, 0), (12, 0)])
def test_megatron_on_older_or_blackwell_gpus_does_not_set_it(capability):
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars(MEGATRON, "cuda", capability)


def test_fsdp_never_sets_it_even_on_hopper():
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars([], "cuda", (9, 0))


def test_python_never_sets_it_on_npu_or_cpu():
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars(MEGATRON, "npu")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars(MEGATRON, "cpu")


def test_a_megatron_critic_counts_only_when_the_critic_runs():
    critic = ["critic.strategy=megatron"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars(critic + ["algorithm.adv_estimator=grpo"], "cuda", (9, 0))
    assert env_vars(critic, "cuda", (9, 0))["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"  # gae (verl's default): a critic


def test_device_defaults_for_tokenizers_nccl_and_hccl():
    assert env_vars([], "cuda", (9, 0)) == {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"}
    assert env_vars([], "npu") == {
        "TOKENIZERS_PARALLELISM": "true",
        "HCCL_HOST_SOCKET_PORT_RANGE": "auto",
        "HCCL_NPU_SOCKET_PORT_RANGE": "auto",
    }
    assert env_vars([], "cpu") == {"TOKENIZERS_PARALLELISM": "true"}


def test_a_vllm_rollout_adds_its_log_level():
    assert env_vars(["actor_rollout_ref.rollout.name=vllm"], "cuda", (9, 0))["VLLM_LOGGING_LEVEL"] == "WARN"


def test_values_the_user_exported_win():
    environ = {"NCCL_DEBUG": "INFO", "CUDA_DEVICE_MAX_CONNECTIONS": "8", "UNRELATED": "x"}
    env = env_vars(MEGATRON, "cuda", (9, 0), environ)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert "UNRELATED" not in env


def test_the_runs_runtime_env_is_merged_in_and_its_env_vars_win():
    cfg = load_config(["ray_kwargs.ray_init.runtime_env.py_executable=uv run --frozen",
                       "+ray_kwargs.ray_init.runtime_env.working_dir=/src",
                       "+ray_kwargs.ray_init.runtime_env.env_vars.NCCL_DEBUG=INFO",
                       "+ray_kwargs.ray_init.runtime_env.env_vars.MY_FLAG=true",
                       "+ray_kwargs.ray_init.runtime_env.env_vars.NCCL_TIMEOUT=30"])
    env = get_runtime_env(cfg, "cuda", (9, 0), environ={})
    assert env == {"py_executable": "uv run --frozen", "working_dir": "/src",
                   "env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "INFO", "MY_FLAG": "true",
                                "NCCL_TIMEOUT": "30"}}
    (line,) = runtime_env_overrides(cfg, "cuda", (9, 0), environ={})
    assert line.startswith("ray_init.runtime_env.env_vars.NCCL_DEBUG='INFO' replaces verl_lite's NCCL_DEBUG='WARN'")


def test_verls_default_null_py_executable_is_left_out():
    cfg = load_config(["ray_kwargs.ray_init.runtime_env.py_executable=null"])
    assert get_runtime_env(cfg, "cpu", environ={}) == {"env_vars": {"TOKENIZERS_PARALLELISM": "true"}}
    assert runtime_env_overrides(cfg, "cpu", environ={}) == []


def test_an_unresolved_device_is_rejected():
    with pytest.raises(ValueError, match="device 'auto' is not resolved"):
        get_runtime_env(load_config([]), "auto")


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    def make(output, rc=0):
        exe = tmp_path / "nvidia-smi"
        exe.write_text(f"#!/bin/sh\necho \"$*\" > {tmp_path}/argv\nprintf '{output}'\nexit {rc}\n")
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        return {"PATH": f"{tmp_path}{os.pathsep}/usr/bin:/bin"}

    return make


def test_the_capability_is_read_from_nvidia_smi_when_not_given(fake_nvidia_smi, tmp_path):
    environ = fake_nvidia_smi("9.0\\n9.0\\n")
    assert query_gpu_capability(environ) == (9, 0)
    assert (tmp_path / "argv").read_text().strip() == "--query-gpu=compute_cap --format=csv,noheader"
    assert env_vars(MEGATRON, "cuda", None, environ)["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_a_blackwell_answer_from_nvidia_smi_leaves_it_unset(fake_nvidia_smi):
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars(MEGATRON, "cuda", None, fake_nvidia_smi("10.0\\n"))


def test_a_failing_or_missing_nvidia_smi_means_unknown_capability(fake_nvidia_smi, tmp_path):
    assert query_gpu_capability(fake_nvidia_smi("", rc=9)) is None
    assert query_gpu_capability({"PATH": str(tmp_path / "empty")}) is None
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env_vars(MEGATRON, "cuda", None, {"PATH": str(tmp_path / "empty")})


def test_the_check_summary_shows_the_runs_runtime_env():
    from verl_lite.preflight.summary import summarize

    cfg = load_config(["trainer.device=cpu", "ray_kwargs.ray_init.runtime_env.py_executable=uv run --frozen",
                       "+ray_kwargs.ray_init.runtime_env.env_vars.MY_FLAG=1"])
    lines = summarize(cfg).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("runtime env   :"))
    assert "MY_FLAG=1" in lines[at] and lines[at + 1].strip() == "py_executable=uv run --frozen"
