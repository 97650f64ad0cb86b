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


# ---------------------------------------------------------------- the launcher's environment

LAUNCHED = {"CPU_AFFINITY_CONF": "1", "HCCL_BUFFSIZE": "200", "TOKENIZERS_PARALLELISM": "false",
            "VERL_LITE_LAUNCHER_ENV": "CPU_AFFINITY_CONF:verl_lite HCCL_BUFFSIZE:caller TOKENIZERS_PARALLELISM:verl_lite"}


def test_the_launchers_variables_are_read_with_their_origin():
    from verl_lite.runtime_env import launcher_env

    assert launcher_env(LAUNCHED) == {"CPU_AFFINITY_CONF": ("1", "verl_lite"), "HCCL_BUFFSIZE": ("200", "caller"),
                                      "TOKENIZERS_PARALLELISM": ("false", "verl_lite")}
    assert launcher_env({}) == {}
    unset = {"VERL_LITE_LAUNCHER_ENV": "OMP_NUM_THREADS:verl_lite"}  # listed, then unset by the caller
    assert launcher_env(unset) == {}


def test_a_malformed_launcher_list_names_the_entry_and_the_origins():
    from verl_lite.runtime_env import launcher_env

    with pytest.raises(ValueError, match=r"'OMP_NUM_THREADS': expected NAME:origin with origin one of verl_lite, caller"):
        launcher_env({"VERL_LITE_LAUNCHER_ENV": "OMP_NUM_THREADS", "OMP_NUM_THREADS": "1"})


def test_the_launchers_variables_go_to_the_workers_and_replace_verl_lites_defaults():
    env = env_vars(MEGATRON, "npu", environ=LAUNCHED)
    assert env["CPU_AFFINITY_CONF"] == "1" and env["HCCL_BUFFSIZE"] == "200"
    assert env["TOKENIZERS_PARALLELISM"] == "false"  # verl's npu value, not verl_lite's own "true"
    assert env["HCCL_HOST_SOCKET_PORT_RANGE"] == "auto"  # verl_lite's own npu defaults stay
    assert "VERL_LITE_LAUNCHER_ENV" not in env


def test_the_check_summary_says_which_ascend_variables_are_set_and_from_where(monkeypatch):
    from verl_lite.preflight.summary import summarize

    for name, value in LAUNCHED.items():
        monkeypatch.setenv(name, value)
    text = summarize(load_config(["trainer.device=npu"]))
    assert "(Ascend env, launcher defaults, as verl's scripts: CPU_AFFINITY_CONF=1 TOKENIZERS_PARALLELISM=false)" in text
    assert "(Ascend env, from the caller: HCCL_BUFFSIZE=200)" in text
    monkeypatch.delenv("VERL_LITE_LAUNCHER_ENV")
    assert "(Ascend env: none from the launcher;" in summarize(load_config(["trainer.device=npu"]))
    assert "Ascend env" not in summarize(load_config(["trainer.device=cpu"]))


def test_a_ray_worker_sees_the_launchers_variables(tmp_path_factory):
    """The variables reach a worker through the runtime env alone: the driver's own environment
    lacks them, so a worker that inherited it would not have them."""
    import ray

    assert not any(name in os.environ for name in LAUNCHED)
    runtime_env = get_runtime_env(load_config(MEGATRON), "npu", environ=LAUNCHED)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env,
             _temp_dir=os.environ.get("RAY_TMPDIR") or str(tmp_path_factory.mktemp("ray")))  # as conftest's ray_cluster
    try:
        @ray.remote
        def read_env(names):
            return {name: os.environ.get(name) for name in names}

        seen = ray.get(read_env.remote(["CPU_AFFINITY_CONF", "HCCL_BUFFSIZE", "TOKENIZERS_PARALLELISM"]))
    finally:
        ray.shutdown()
    assert seen == {"CPU_AFFINITY_CONF": "1", "HCCL_BUFFSIZE": "200", "TOKENIZERS_PARALLELISM": "false"}
