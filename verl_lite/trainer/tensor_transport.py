"""How torch tensors travel between the driver and the Ray workers.

Ray pickles a torch.Tensor the way torch does: each storage goes through `torch.save` into a
bytes object, and comes back through `torch.load`. For the main job's batches (a dozen small
tensors per call) that costs more than the call itself: 0.5 ms to pickle and 0.7 ms to unpickle
one batch of eight 128 x 19 tensors, against 0.06 and 0.02 ms for the same bytes as numpy arrays,
and both ends pay it on every call of every step (measured in docs/benchmarks.md, "Ray worker vs
in-process").

`install()` registers, through Ray's own `ray.util.register_serializer`, a reducer that sends a
plain CPU tensor as its raw bytes (a uint8 numpy view, which Ray ships as a pickle-5 out-of-band
buffer) with its dtype, shape and `requires_grad`. The receiver copies the bytes into a tensor of
its own, so what arrives is writable and shares memory with nothing, as with torch's pickling (Ray's
RAY_ENABLE_ZERO_COPY_TORCH_TENSORS returns views of Ray's buffer instead, which a worker that
writes into its batch would corrupt). Tensors that are not plain dense CPU tensors (another
device, sparse, quantized, complex, conjugated or negated views) keep torch's own path. Subclasses
such as nn.Parameter are not affected (Ray looks serializers up by exact type).

The deserializer travels with the data, so a process that has not called `install()` still reads
what one that has sends.
"""

from __future__ import annotations

import io
from typing import Any, Tuple

_installed = False


def _plain(t: Any) -> bool:
    import torch

    return (t.device.type == "cpu" and t.layout == torch.strided and not t.is_quantized and not t.is_nested
            and not t.is_complex() and not t.is_conj() and not t.is_neg())


def serialize(t: Any) -> Tuple[Any, ...]:
    """A CPU tensor as (uint8 numpy bytes, dtype name, shape, requires_grad); any other as torch.save's bytes."""
    import torch

    if not _plain(t):
        buf = io.BytesIO()
        torch.save(t, buf)
        return ("torch.save", buf.getvalue())
    flat = t.detach().contiguous().reshape(-1)
    return ("raw", flat.view(torch.uint8).numpy(), str(t.dtype).rsplit(".", 1)[-1], tuple(t.shape), bool(t.requires_grad))


def deserialize(payload: Tuple[Any, ...]) -> Any:
    import numpy as np
    import torch

    if payload[0] == "torch.save":
        return torch.load(io.BytesIO(payload[1]), weights_only=False)
    _, data, dtype, shape, requires_grad = payload
    if data.size == 0:
        t = torch.empty(shape, dtype=getattr(torch, dtype))
    else:  # a copy of Ray's (read-only, shared) buffer: the receiver owns what it gets
        t = torch.from_numpy(np.array(data, dtype=np.uint8, copy=True)).view(getattr(torch, dtype)).reshape(shape)
    return t.requires_grad_() if requires_grad else t


def actor_class(cls: type) -> type:
    """`cls` for `ray.remote`: a subclass of the same name (Ray's process titles stay `ray::<Class>`)
    whose constructor installs the serializer first, so the actor's answers travel this way. The class
    itself stays free of Ray for in-process use."""
    def __init__(self, *args, **kwargs):
        install()
        cls.__init__(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__})


def install() -> None:
    """Register the tensor serializer in this process (idempotent). Call after Ray is imported; in the
    driver after ray.init, in a worker in its constructor."""
    global _installed
    if _installed:
        return
    import torch
    from ray.util import register_serializer

    register_serializer(torch.Tensor, serializer=serialize, deserializer=deserialize)
    _installed = True
