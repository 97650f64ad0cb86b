"""Which accelerator a run uses: `trainer.device` in {auto, cuda, npu, cpu} (`gpu` means cuda).

`auto` picks an Ascend NPU, then an NVIDIA GPU, then the CPU, and answers without importing torch
or torch_npu (importing them costs 1-10 s): a device is present when its Python package is
installed and the driver exposes a device node. CPU is a real device and is never reported as
cuda (verl reports "cuda" on machines without an accelerator).

The probe reads files under a root directory and an environment mapping, both injectable, so
tests fake an NPU or GPU box on a laptop.
"""

from __future__ import annotations

import difflib
import glob
import importlib.util
import os
import re
from typing import Callable, Mapping, Optional, Sequence

DEVICES = ("auto", "cuda", "npu", "cpu")
ALIASES = {"gpu": "cuda"}
# torch.distributed backend of each resolved device.
DIST_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


def device_of_backend(backend: str) -> str:
    """The device type a torch.distributed backend runs on (DIST_BACKENDS read backwards; cpu for any other)."""
    return {b: d for d, b in DIST_BACKENDS.items()}.get(str(backend), "cpu")


class DeviceError(ValueError):
    """An unknown device name."""


def normalize_device(name: str) -> str:
    """Validate a device name: lower-cases it and maps gpu to cuda; raises DeviceError otherwise."""
    raw = name if isinstance(name, str) else repr(name)
    key = raw.strip().lower()
    key = ALIASES.get(key, key)
    if key in DEVICES:
        return key
    close = difflib.get_close_matches(key, list(DEVICES) + list(ALIASES), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise DeviceError(
        f"unknown device {raw!r}: choose one of {', '.join(DEVICES)} (gpu is accepted for cuda){hint}; "
        "set it with trainer.device=<name> or DEVICE=<name> in the launcher"
    )


# The variable that limits the devices a process sees, per device (Ray sets it for each actor unless
# RAY_EXPERIMENTAL_NOSET_<name> is set; then every actor on a node sees all of the node's devices).
VISIBLE_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}


def local_device_index(device: str, assigned: Sequence[str], environ: Mapping[str, str]) -> int:
    """The index to open (`torch.<device>.set_device`) for the device that Ray assigned this process:
    its position among the devices the process sees. When Ray sets the visibility variable to the
    assigned device, that is 0; in Ray's no-set mode (RAY_EXPERIMENTAL_NOSET_*_VISIBLE_DEVICES=1)
    the process sees the node's devices and the index is the assigned id's place among them (the id
    itself when nothing narrows them). Using the rank instead opens a device of another process."""
    if device not in VISIBLE_ENV:
        raise ValueError(f"device {device!r} has no device index (choose cuda or npu)")
    if len(assigned) == 0:
        raise ValueError(f"no {device} device was assigned to this process by Ray (the worker must request one)")
    first = str(assigned[0]).strip()
    visible = environ.get(VISIBLE_ENV[device])
    if visible is None or not visible.strip():
        return int(first)
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if first not in ids:
        raise ValueError(f"{VISIBLE_ENV[device]}={visible!r} does not include device {first}, which Ray assigned to "
                         f"this process (unset {VISIBLE_ENV[device]} in the workers' environment, or let Ray set it)")
    return ids.index(first)


def _visible(value: Optional[str]) -> bool:
    """False when a *_VISIBLE_DEVICES variable hides every device ("" or "-1")."""
    return value is None or value.strip() not in ("", "-1")


class Probe:
    """Cheap presence tests for accelerators. Nothing here imports torch."""

    def __init__(
        self,
        environ: Optional[Mapping[str, str]] = None,
        root: str = "/",
        find_spec: Callable[[str], object] = importlib.util.find_spec,
    ):
        self.environ = os.environ if environ is None else environ
        self.root = root
        self.find_spec = find_spec

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def npu(self) -> bool:
        """torch_npu installed and an Ascend device node (/dev/davinciN) present and visible."""
        if self.find_spec("torch_npu") is None:
            return False
        if not _visible(self.environ.get("ASCEND_RT_VISIBLE_DEVICES")):
            return False
        return bool(glob.glob(self._path("dev", "davinci[0-9]*")))

    def torch_cuda_build(self) -> bool:
        """True when the installed torch wheel was built with CUDA (reads torch/version.py)."""
        spec = self.find_spec("torch")
        locations = getattr(spec, "submodule_search_locations", None) if spec else None
        if not locations:
            return False
        try:
            with open(os.path.join(list(locations)[0], "version.py"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return False
        match = re.search(r"^cuda\s*(?::[^=]*)?=\s*(.+)$", text, flags=re.MULTILINE)
        return bool(match) and match.group(1).strip() not in ("None", "''", '""')

    def cuda(self) -> bool:
        """A CUDA build of torch and an NVIDIA GPU the driver lists (/proc/driver/nvidia/gpus)."""
        if not _visible(self.environ.get("CUDA_VISIBLE_DEVICES")):
            return False
        if not self.torch_cuda_build():
            return False
        gpus = self._path("proc", "driver", "nvidia", "gpus")
        if os.path.isdir(gpus) and os.listdir(gpus):
            return True
        return bool(glob.glob(self._path("dev", "nvidia[0-9]*")))


def resolve_device(name: str = "auto", probe: Optional[Probe] = None) -> str:
    """cuda, npu or cpu for a device name; `auto` probes NPU, then CUDA, then falls back to CPU.

    An explicit name is returned as given (normalised), even where that device is absent: the
    preflight check resolves a cluster's layout on a laptop. `device_available` tells whether it
    is present here.
    """
    device = normalize_device(name)
    if device != "auto":
        return device
    probe = probe or Probe()
    if probe.npu():
        return "npu"
    if probe.cuda():
        return "cuda"
    return "cpu"


def device_available(device: str, probe: Optional[Probe] = None) -> bool:
    """Whether `device` (cuda, npu or cpu) can be used on this machine."""
    device = normalize_device(device)
    probe = probe or Probe()
    if device == "npu":
        return probe.npu()
    if device == "cuda":
        return probe.cuda()
    return True


def init_one_rank_group(backend: str) -> None:
    """torch.distributed's default group for a run of one process (what Megatron and fully_shard need),
    its rendezvous in this process's memory: no port to pick, so none another process can take first."""
    import torch.distributed as dist

    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now ("" for every interface of this machine), for a process group's
    rendezvous."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
