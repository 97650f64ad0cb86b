"""Offload: where each engine's parameters, gradients and optimizer state live in each phase of a
step, and the one owner of that state machine in a worker process (`PhaseOwner`).

What a role's section asks for (verl's flags, read in `OffloadPolicy.of`):
  fsdp_config.param_offload       parameters and gradients off the device between phases
  fsdp_config.optimizer_offload   optimizer state off the device between updates
  megatron.param_offload          parameters and gradients (DDP buffers) off the device between phases
  megatron.grad_offload           gradients off the device between updates (verl moves them with the
                                  parameters; on its own this moves the gradient buffers only)
  megatron.optimizer_offload      optimizer state (Adam moments, fp32 main parameters) off the device

What each phase needs on the device (`NEEDS`), as verl's workers load and offload around each call:
  init        nothing: right after an engine is built, what its policy offloads leaves the device
  sync        parameters, to stream the actor's weights into the rollout (and CPU snapshots)
  rollout     nothing of any engine: the rollout engine has the device; it is woken for it
  forward     parameters (old log-probs, ref log-probs, critic values)
  update      parameters, gradients and optimizer state (verl's train mode loads all three for the
              whole update and offloads them when it ends)
  checkpoint  parameters and optimizer state (saving and loading read both)
A part the policy does not offload stays on the device throughout. Phases nest (a snapshot inside a
log-prob pass): a part moves in when the first phase that needs it begins and out when the last ends.

Every move goes through `move()`, which tells its listeners (`record()`); on a CPU run nothing
changes place, so tests check the recorded moves and the owner's ledger (`where`).

The rollout plugs into the same owner: `attach_rollout(rollout)` with a rollout that may have
`wake_up(tags=None)` and `sleep()` (vLLM's sleep mode: tags "weights", "kv_cache"). The owner wakes
its weights before a sync, wakes it fully before a generation and puts it to sleep after; a rollout
without them (hf) is left alone.

Torch is imported inside functions only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from verl_lite.decisions.fsdp_settings import phase_offload

PARTS = ("param", "grad", "optimizer")
NEEDS: Dict[str, Tuple[str, ...]] = {
    "init": (),
    "sync": ("param",),
    "rollout": (),
    "forward": ("param",),
    "update": ("param", "grad", "optimizer"),
    "checkpoint": ("param", "optimizer"),
}
DEVICE, HOST = "device", "cpu"


@dataclass(frozen=True)
class OffloadPolicy:
    """Which parts of one engine live off the device between the phases that need them."""

    param: bool = False
    grad: bool = False
    optimizer: bool = False

    @classmethod
    def of(cls, section: Any, strategy: str, role: str = "actor", device: str = "cpu") -> "OffloadPolicy":
        """From a role's section (ActorConfig, RefConfig, CriticConfig) and its strategy. On fsdp, FSDP2's
        CPU offload policy (offload_policy, and the ref's on a device) turns both flags off, as verl
        (decisions/fsdp_settings.py: phase_offload)."""
        if strategy == "megatron":
            m = section.megatron
            param = bool(m.param_offload)
            return cls(param=param, grad=param or bool(m.grad_offload), optimizer=bool(m.optimizer_offload))

        param, optimizer = phase_offload(section.fsdp_config, role, device)
        return cls(param=param, grad=param, optimizer=optimizer)

    @property
    def parts(self) -> Tuple[str, ...]:
        return tuple(p for p in PARTS if getattr(self, p))


@dataclass(frozen=True)
class Move:
    role: str
    parts: Tuple[str, ...]
    phase: str
    to: str  # "device" or "cpu"


_listeners: List[Callable[[Move], None]] = []


def move(engine: Any, parts: Tuple[str, ...], to: str, phase: str) -> None:
    """The one function every offload move goes through: `parts` of `engine` to the engine's device
    (`to="device"`) or to the host (`to="cpu"`)."""
    if to not in (DEVICE, HOST):
        raise ValueError(f"offload.move(to={to!r}): choose {DEVICE!r} or {HOST!r}")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"offload.move: unknown parts {unknown} (choose from {', '.join(PARTS)})")
    if not parts:
        return
    engine.to(HOST if to == HOST else engine.device, model="param" in parts, grad="grad" in parts,
              optimizer="optimizer" in parts)
    if to == HOST and engine.device != "cpu":
        import torch

        accel = getattr(torch, engine.device, None)
        if accel is not None and hasattr(accel, "empty_cache"):
            accel.empty_cache()  # give the freed blocks back, for the rollout engine to use
    record_ = Move(engine.role, tuple(parts), phase, to)
    for listener in list(_listeners):
        listener(record_)


@contextlib.contextmanager
def record() -> Iterator[List[Move]]:
    """Collect every `move()` made inside the block (all engines of this process)."""
    moves: List[Move] = []
    _listeners.append(moves.append)
    try:
        yield moves
    finally:
        _listeners.remove(moves.append)


class PhaseOwner:
    """Owns where the engines of one worker process keep their tensors, phase by phase, and the
    rollout's sleep and wake. Workers enter phases; nothing else moves engine state."""

    def __init__(self) -> None:
        self._engines: Dict[str, Tuple[Any, OffloadPolicy]] = {}
        self._held: Dict[str, Dict[str, int]] = {}
        self._where: Dict[str, Dict[str, str]] = {}
        self.rollout: Any = None

    def add(self, engine: Any, policy: OffloadPolicy) -> None:
        """Register an initialised engine; the parts its policy offloads leave the device now."""
        role = engine.role
        if role in self._engines:
            raise ValueError(f"PhaseOwner: an engine for role {role!r} is registered already")
        self._engines[role] = (engine, policy)
        self._held[role] = {p: 0 for p in PARTS}
        self._where[role] = {p: DEVICE for p in PARTS}
        self._move(role, policy.parts, HOST, "init")

    def attach_rollout(self, rollout: Any) -> None:
        self.rollout = rollout

    def policy(self, role: str) -> OffloadPolicy:
        return self._engine(role)[1]

    def where(self, role: str) -> Dict[str, str]:
        """The ledger: "device" or "cpu" for each part of `role`'s engine."""
        self._engine(role)
        return dict(self._where[role])

    def _engine(self, role: str) -> Tuple[Any, OffloadPolicy]:
        if role not in self._engines:
            raise KeyError(f"PhaseOwner: no engine for role {role!r} (registered: {sorted(self._engines)})")
        return self._engines[role]

    def _move(self, role: str, parts: Tuple[str, ...], to: str, phase: str) -> None:
        if not parts:
            return
        move(self._engines[role][0], parts, to, phase)
        for p in parts:
            self._where[role][p] = to

    def _rollout_call(self, name: str, **kwargs: Any) -> None:
        fn = getattr(self.rollout, name, None)
        if callable(fn):
            fn(**kwargs)

    @contextlib.contextmanager
    def phase(self, name: str, role: Optional[str] = None) -> Iterator[None]:
        """Run the block in phase `name` for `role`'s engine ("rollout" takes no role: it concerns
        the rollout engine, and every engine's offloaded parts are already off the device then)."""
        if name not in NEEDS:
            raise ValueError(f"PhaseOwner.phase({name!r}): choose one of {', '.join(NEEDS)}")
        if name == "rollout":
            if role is not None:
                raise ValueError("PhaseOwner.phase('rollout') takes no role")
            self._rollout_call("wake_up")
            try:
                yield
            finally:
                self._rollout_call("sleep")
            return
        if role is None:
            raise ValueError(f"PhaseOwner.phase({name!r}) needs the role whose engine runs it")
        _, policy = self._engine(role)
        if name == "sync":
            self._rollout_call("wake_up", tags=["weights"])
        parts = tuple(p for p in NEEDS[name] if getattr(policy, p))
        held = self._held[role]
        self._move(role, tuple(p for p in parts if held[p] == 0), DEVICE, name)
        for p in parts:
            held[p] += 1
        try:
            yield
        finally:
            for p in parts:
                held[p] -= 1
            self._move(role, tuple(p for p in parts if held[p] == 0), HOST, name)
