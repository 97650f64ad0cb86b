"""Tensors between the driver and the Ray workers: raw bytes instead of torch.save per storage
(verl_lite/trainer/tensor_transport.py), with what arrives equal to what was sent and owned by the receiver."""

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

from verl_lite.trainer import tensor_transport as tt

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cases():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(6, 8, generator=g)
    return {
        "float32": torch.randn(4, 5, generator=g),
        "bfloat16": torch.randn(3, 7, generator=g).to(torch.bfloat16),
        "float16": torch.randn(2, 3, generator=g).half(),
        "int64": torch.randint(-5, 50, (128, 19), generator=g),
        "int32": torch.randint(0, 9, (5,), generator=g, dtype=torch.int32),
        "bool": torch.rand(3, 4, generator=g) > 0.5,
        "uint8": torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 5),
        "transposed": big.t(),
        "slice": big[2:4, 1:5],
    }


@pytest.mark.parametrize("name", sorted(_cases()))
def test_a_cpu_tensor_comes_back_with_its_values_dtype_and_shape(name):
    x = _cases()[name]
    payload = tt.serialize(x)
    assert payload[0] == "raw"
    y = tt.deserialize(pickle.loads(pickle.dumps(payload, protocol=5)))
    assert y.dtype == x.dtype and y.shape == x.shape and y.is_contiguous()
    assert torch.equal(y, x)


def test_a_view_sends_only_its_own_elements():
    big = torch.arange(10_000, dtype=torch.float32).reshape(100, 100)
    payload = tt.serialize(big[10:12])
    assert payload[1].nbytes == 2 * 100 * 4


def test_what_arrives_is_writable_and_shares_memory_with_nothing():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    payload = tt.serialize(x)
    raw = payload[1].copy()
    raw.setflags(write=False)  # as Ray hands out its buffers
    y = tt.deserialize(("raw", raw) + payload[2:])
    y.add_(100)  # a worker that edits its batch in place
    assert torch.equal(x, torch.arange(12, dtype=torch.float32).reshape(3, 4))
    assert raw.tolist() == payload[1].tolist()
    assert y.data_ptr() != x.data_ptr()


def test_requires_grad_travels_and_the_result_is_a_leaf():
    x = torch.randn(3, 2, requires_grad=True)
    y = tt.deserialize(tt.serialize(x))
    assert y.requires_grad and y.is_leaf and torch.equal(y.detach(), x.detach())
    assert not tt.deserialize(tt.serialize(x.detach())).requires_grad


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 2, dtype=torch.complex64),
    lambda: torch.randn(3, 2, dtype=torch.complex64).conj(),
    lambda: torch.eye(4).to_sparse(),
    lambda: torch.quantize_per_tensor(torch.rand(4), 0.1, 0, torch.quint8),
], ids=["complex", "conj", "sparse", "quantized"])
def test_tensors_that_are_not_plain_keep_torchs_own_path(make):
    x = make()
    payload = tt.serialize(x)
    assert payload[0] == "torch.save"
    y = tt.deserialize(payload)
    assert y.layout == x.layout and y.dtype == x.dtype
    if x.is_quantized:
        assert torch.equal(y.dequantize(), x.dequantize())
    elif x.is_sparse:
        assert torch.equal(y.to_dense(), x.to_dense())
    else:
        assert torch.equal(y.resolve_conj(), x.resolve_conj())


PROBE = """
import json, os, sys, ray, torch
import ray.cloudpickle as cp
from verl_lite.config import load_config
from verl_lite.trainer.run import _end_ray, _init_ray
from verl_lite.trainer.worker_group import defer_init_errors
before = b"tensor_transport" in cp.dumps(torch.ones(2))
assert _init_ray(load_config(["trainer.device=cpu", "ray_init.num_cpus=2"]), "cpu", 1)
class Edit:
    def __init__(self):
        pass
    def ready(self):
        return True
    def edit(self, batch):
        from verl_lite.trainer import tensor_transport
        x = batch["x"]
        x.add_(1)  # in place, on what arrived
        return {"x": x, "sent_by_ours": b"tensor_transport" in cp.dumps(x), "installed": tensor_transport._installed}
w = ray.remote(defer_init_errors(Edit)).remote()
ray.get(w.ready.remote())
from verl_lite.trainer.tensor_transport import actor_class
class Plain:  # as the fully-async rollout workers and the chunk buffer are made actors
    def sends(self):
        return b"tensor_transport" in cp.dumps(torch.ones(2))
plain = ray.get(ray.remote(actor_class(Plain)).remote().sends.remote())
x = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
out = ray.get(w.edit.remote({"x": x}))
print(json.dumps({"before": before, "driver": b"tensor_transport" in cp.dumps(x), "worker": out["sent_by_ours"],
                  "worker_installed": out["installed"], "plain": plain, "back": out["x"].float().tolist(), "dtype": str(out["x"].dtype),
                  "sent_unchanged": x.float().tolist()}))
_end_ray(True)
"""


def test_the_driver_and_its_workers_send_tensors_as_raw_bytes_and_a_worker_may_edit_what_it_got(tmp_path):
    import tempfile

    temp = tempfile.mkdtemp(prefix="vl_tt_")  # short: Ray's socket paths must stay under 108 bytes
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(RAY_AUTH_MODE="disabled", RAY_TMPDIR=temp, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] is False  # Ray's default until the trainer starts Ray
    assert got["driver"] and got["worker"] and got["worker_installed"] and got["plain"]
    assert got["back"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]] and got["dtype"] == "torch.bfloat16"
    assert got["sent_unchanged"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
