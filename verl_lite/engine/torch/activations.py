"""`model.enable_activation_offload` on the torch engine: the tensors autograd saves for backward during
the model's forward are copied to host memory and brought back to the device when backward unpacks them
(torch.autograd.graph.saved_tensors_hooks around each forward of the module).

Parameters stay where they are (autograd saves the weight of every linear layer; copying weights each
step would cost more than it saves, as verl's FSDPParameterFilter decides too), and so does anything
already in host memory. On a cpu device there is nothing to move: the engine installs nothing there.
Unlike verl, the copies are made synchronously, one tensor at a time (no prefetch of the next layer's
activations); with gradient checkpointing only the checkpointed layers' inputs are saved, so only
those move.
"""

from __future__ import annotations

from typing import Any, Tuple

import torch
import torch.nn as nn


class ActivationOffload:
    """Saved-tensor hooks that hold activations in (pinned, where available) host memory; `moved_bytes`
    counts what went to the host in the last forward."""

    def __init__(self, module: nn.Module):
        self.moved_bytes = 0
        self._context = None
        module.register_forward_pre_hook(self._enter)
        module.register_forward_hook(self._exit, always_call=True)

    def pack(self, tensor: torch.Tensor) -> Any:
        if isinstance(tensor, nn.Parameter) or tensor.device.type == "cpu":
            return tensor
        host = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout,
                           pin_memory=torch.cuda.is_available() and tensor.device.type == "cuda")
        host.copy_(tensor)
        self.moved_bytes += tensor.numel() * tensor.element_size()
        return tensor.device, host

    @staticmethod
    def unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        device, host = packed
        return host.to(device, non_blocking=True)

    def _enter(self, module: nn.Module, args: Tuple) -> None:
        if not torch.is_grad_enabled():  # nothing is saved for backward
            return
        self.moved_bytes = 0
        self._context = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._context.__enter__()

    def _exit(self, module: nn.Module, args: Tuple, output: Any) -> None:
        if self._context is not None:
            context, self._context = self._context, None
            context.__exit__(None, None, None)


def enable_activation_offload(module: nn.Module, device: str) -> Any:
    """Install the offload hooks on `module` for a role on `device`; None on cpu (nothing to move)."""
    return None if device == "cpu" else ActivationOffload(module)
