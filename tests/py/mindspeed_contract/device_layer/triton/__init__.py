"""Device-layer double of Triton-Ascend (MindSpeed's Triton kernels are compiled by it on the NPU):
decorators keep the kernels as they are defined; launching one (`kernel[grid](...)`) raises
KernelNotRunHere naming it, which is how the contract run shows which MindSpeed kernel the engine
reached. torch's own compiler keeps the installed triton (harness.py imports it first)."""

import math

from . import language, runtime  # noqa: F401

__version__ = "3.2.0"  # triton-ascend's base (MindSpeed's verl system test lists triton-ascend 3.2.0rc4)


class KernelNotRunHere(RuntimeError):
    """A Triton-Ascend kernel was launched: the device layer does not run them on CPU."""


class _Kernel:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__module__ = getattr(fn, "__module__", None)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise KernelNotRunHere(f"Triton kernel {self.__module__}.{self.__name__} launched (the CPU device layer "
                                   f"does not run Triton-Ascend kernels)")
        return launch

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def jit(fn=None, **kwargs):
    return (lambda f: _Kernel(f)) if fn is None else _Kernel(fn)


def autotune(configs=None, key=None, **kwargs):
    return lambda kernel: kernel


def heuristics(values):
    return lambda kernel: kernel


class Config:
    def __init__(self, kwargs=None, num_warps=4, num_stages=2, **extra):
        self.kwargs, self.num_warps, self.num_stages = kwargs or {}, num_warps, num_stages


def cdiv(a, b):
    return -(-a // b)


def next_power_of_2(n):
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))
