"""Device names and `auto` resolution (NPU, then CUDA, then CPU) on faked machines."""

import types

import pytest

from verl_lite.device import DeviceError, Probe, device_available, normalize_device, resolve_device


def fake_find_spec(installed, torch_dir=None):
    def find_spec(name):
        if name not in installed:
            return None
        locations = [str(torch_dir)] if name == "torch" and torch_dir else None
        return types.SimpleNamespace(submodule_search_locations=locations)

    return find_spec


@pytest.fixture
def machine(tmp_path):
    """A fake machine root: machine(npus=2, gpus=1, torch_cuda="12.8", installed=[...]) -> Probe."""

    def make(npus=0, gpus=0, torch_cuda=None, installed=("torch",), environ=None):
        root = tmp_path / "root"
        (root / "dev").mkdir(parents=True, exist_ok=True)
        for i in range(npus):
            (root / "dev" / f"davinci{i}").touch()
        (root / "dev" / "davinci_manager").touch()  # present on NPU hosts, not a device
        for i in range(gpus):
            gpu_dir = root / "proc" / "driver" / "nvidia" / "gpus" / f"0000:0{i}:00.0"
            gpu_dir.mkdir(parents=True, exist_ok=True)
        torch_dir = tmp_path / "torch"
        torch_dir.mkdir(exist_ok=True)
        cuda = repr(torch_cuda) if torch_cuda else "None"
        (torch_dir / "version.py").write_text(
            f"from typing import Optional\n__version__ = '2.13.0'\ncuda: Optional[str] = {cuda}\n"
        )
        return Probe(environ=environ or {}, root=str(root), find_spec=fake_find_spec(set(installed), torch_dir))

    return make


def test_names_are_validated_lower_cased_and_gpu_means_cuda():
    assert [normalize_device(n) for n in ("auto", "CUDA", "gpu", " npu ", "cpu")] == [
        "auto",
        "cuda",
        "cuda",
        "npu",
        "cpu",
    ]


def test_an_unknown_name_lists_the_choices_and_the_closest_one():
    with pytest.raises(DeviceError) as info:
        normalize_device("nup")
    message = str(info.value)
    assert message.startswith("unknown device 'nup': choose one of auto, cuda, npu, cpu (gpu is accepted for cuda)")
    assert "did you mean 'npu'?" in message


def test_explicit_names_resolve_to_themselves_even_where_absent(machine):
    probe = machine()
    assert resolve_device("npu", probe) == "npu"
    assert resolve_device("gpu", probe) == "cuda"
    assert device_available("npu", probe) is False


def test_auto_on_a_machine_without_accelerators_is_cpu_never_cuda(machine):
    assert resolve_device("auto", machine()) == "cpu"


def test_auto_on_this_cpu_only_machine_is_cpu():
    assert resolve_device("auto") == "cpu"


def test_auto_prefers_the_npu_when_torch_npu_and_a_davinci_device_are_present(machine):
    probe = machine(npus=8, gpus=1, torch_cuda="12.8", installed=("torch", "torch_npu"))
    assert resolve_device("auto", probe) == "npu"


def test_an_npu_host_without_torch_npu_installed_is_not_an_npu_machine(machine):
    assert resolve_device("auto", machine(npus=8)) == "cpu"


def test_hidden_npus_are_not_used(machine):
    probe = machine(npus=8, installed=("torch", "torch_npu"), environ={"ASCEND_RT_VISIBLE_DEVICES": ""})
    assert resolve_device("auto", probe) == "cpu"


def test_auto_picks_cuda_with_a_cuda_build_of_torch_and_a_listed_gpu(machine):
    assert resolve_device("auto", machine(gpus=2, torch_cuda="12.8")) == "cuda"
    assert device_available("cuda", machine(gpus=2, torch_cuda="12.8")) is True


def test_a_cpu_build_of_torch_on_a_gpu_host_is_not_cuda(machine):
    assert resolve_device("auto", machine(gpus=2, torch_cuda=None)) == "cpu"


def test_cuda_visible_devices_hiding_every_gpu_means_no_cuda(machine):
    for hidden in ("", "-1"):
        assert (
            resolve_device("auto", machine(gpus=2, torch_cuda="12.8", environ={"CUDA_VISIBLE_DEVICES": hidden}))
            == "cpu"
        )


def test_the_torch_build_is_read_from_its_version_file_without_importing_it(machine):
    assert machine(torch_cuda="12.8").torch_cuda_build() is True
    assert machine(torch_cuda=None).torch_cuda_build() is False
    assert machine(installed=()).torch_cuda_build() is False
