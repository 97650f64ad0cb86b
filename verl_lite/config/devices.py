"""Memory of common accelerators, for checking a cluster's run from a laptop (`trainer.device_name`).
Each entry: the memory one device (one torch device: a 910C die) has, what the training processes can
use of it, and where the figure comes from. `total` is the capacity the driver reports (nvidia-smi's
memory.total, npu-smi's HBM capacity); `usable` takes off what the runtime holds outside the
allocator (CUDA context and NCCL buffers, about 1 GiB; the Ascend runtime and HCCL buffers, about
3 GiB): those deductions are estimates, measured on one machine each at most (docs/memory.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional


@dataclass(frozen=True)
class DeviceMemory:
    kind: str  # cuda | npu
    total_gib: float
    usable_gib: float
    source: str


DEVICE_MEMORY: Dict[str, DeviceMemory] = {
    "H100-80GB": DeviceMemory("cuda", 79.6, 78.6, "NVIDIA H100 datasheet: 80 GB HBM3 (SXM) / HBM2e (PCIe); nvidia-smi "
                                                  "reports 81559 MiB"),
    "H800-80GB": DeviceMemory("cuda", 79.6, 78.6, "NVIDIA H800: 80 GB HBM (as H100 80GB); nvidia-smi 81559 MiB"),
    "H200": DeviceMemory("cuda", 140.4, 139.4, "NVIDIA H200 datasheet: 141 GB HBM3e; nvidia-smi reports 143771 MiB"),
    "H20": DeviceMemory("cuda", 95.6, 94.6, "NVIDIA H20: 96 GB HBM3 (vendor spec sheet; nvidia-smi 97871 MiB, an "
                                            "estimate from public reports)"),
    "A100-80GB": DeviceMemory("cuda", 80.0, 79.0, "NVIDIA A100 datasheet: 80 GB HBM2e; nvidia-smi reports 81920 MiB"),
    "A100-40GB": DeviceMemory("cuda", 40.0, 39.0, "NVIDIA A100 datasheet: 40 GB HBM2; nvidia-smi reports 40960 MiB"),
    "910B": DeviceMemory("npu", 64.0, 61.0, "Huawei Atlas 800T A2 spec: Ascend 910B (B1/B2/B3) with 64 GB HBM; "
                                            "npu-smi HBM capacity 65536 MB; about 3 GB held by the runtime (estimate)"),
    "910B4": DeviceMemory("npu", 32.0, 29.0, "Huawei Atlas 800I/T A2 spec: Ascend 910B4 with 32 GB HBM (estimate of "
                                             "the runtime's share as 910B)"),
    "910C": DeviceMemory("npu", 64.0, 61.0, "Huawei Atlas 900 A3 SuperPoD / 800T A3 spec: Ascend 910C with 128 GB "
                                            "HBM over 2 dies, each die one device of 64 GB (estimate of the runtime's "
                                            "share as 910B)"),
}
# The device assumed when neither trainer.device_name nor trainer.device_memory_gib is set and the
# check runs away from the devices: verl's example scripts name 80 GB GPUs and 64 GB Ascend 910B.
ASSUMED = {"cuda": "H100-80GB", "npu": "910B"}
# Reserve taken off a detected or given total: CUDA context and NCCL buffers; the Ascend runtime and HCCL.
RESERVE_GIB = {"cuda": 1.0, "npu": 3.0}


def match_device(name: str) -> Optional[str]:
    """The table entry for a device name as the driver prints it ("NVIDIA H100 80GB HBM3", "910B3")."""
    text = name.upper().replace(" ", "").replace("-", "")
    if "910C" in text or "910_93" in text or "91093" in text:
        return "910C"
    if "910B4" in text:
        return "910B4"
    if "910B" in text:
        return "910B"
    for key, size in (("H100", "80GB"), ("H800", "80GB")):
        if key in text:
            return f"{key}-{size}"
    if "H200" in text:
        return "H200"
    if "H20" in text:
        return "H20"
    if "A100" in text:
        return "A100-40GB" if "40GB" in text else "A100-80GB"
    return None
