"""torch_npu.npu with no device: the engines' internals run on CPU, so "the current NPU" is the CPU
(as engine/megatron/cpu.py makes torch.cuda.current_device the CPU); streams and events are no-ops;
seeds go to torch's CPU generator."""

import contextlib

import torch

from . import mstx  # noqa: F401


def is_available():
    return False


def device_count():
    return 0


def current_device():
    return torch.device("cpu")


def set_device(device):
    pass


def synchronize(*args):
    pass


def empty_cache():
    pass


def init():
    pass


def set_compile_mode(**kwargs):
    pass


def get_device_name(*args):
    return "Ascend910B (CPU device layer)"


def get_device_properties(*args):
    return type("Properties", (), {"name": get_device_name(), "total_memory": 64 << 30})()


def manual_seed(seed):
    torch.manual_seed(seed)


def manual_seed_all(seed):
    torch.manual_seed(seed)


def _lazy_call(fn, *args, **kwargs):
    fn()


class device:
    def __init__(self, index):
        self.index = index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Stream:
    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, stream):
        pass

    def synchronize(self):
        pass


class Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args):
        pass

    def wait(self, *args):
        pass

    def synchronize(self):
        pass


def current_stream(*args):
    return Stream()


@contextlib.contextmanager
def stream(s):
    yield s
