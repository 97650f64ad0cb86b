"""The phases of a colocated RL step on one device, from the terms of `decisions/memory.py`: the
rollout (vLLM's reservation), the weight sync, each role's forward passes (old log-probs, ref,
values) and the update (forward/backward, then the optimizer step). What a role offloads is on the
device only in its own phases; what it keeps stays resident in every phase. The device's peak is the
largest phase. Fully-async training (`StepPlan.rollout_pool`) puts the rollout on devices of its own: its
phase holds only the rollout engine and a received sync bucket, and no training phase holds vLLM. Pure
arithmetic over a `StepPlan`, so the preflight can re-run it with one setting changed (the fixes it proposes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from verl_lite.decisions import memory as m
from verl_lite.decisions.layout import Layout


@dataclass(frozen=True)
class RolePlan:
    """One role on the device: its layout, dtypes, passes and what it offloads."""

    role: str  # actor | ref | critic
    layout: Layout
    precision: m.Precision
    distributed_optimizer: bool
    trains: bool
    update: Optional[m.Pass]  # the update's micro-batch (None: forward only)
    forward: m.Pass  # the log-prob / value pass's micro-batch
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    host_state: bool = False  # FSDP's CPUOffloadPolicy: shards, gradients and the step on the host
    optimizer_host_share: float = 0.0  # Megatron's CPU optimizer: the share of the Adam state kept on the host
    lm_head: bool = True  # False for the critic (a value head)
    gathered_layers: int = 0  # fsdp: unsharded layers held in a forward (1, 2 with prefetch)
    compute_bytes: int = 2


@dataclass(frozen=True)
class RolloutPlan:
    name: str  # vllm | hf
    share: float  # gpu_memory_utilization: vLLM's share of the device's total memory
    sleeps: bool  # free_cache_engine: KV cache freed and weights offloaded between generations
    tp: int
    bucket_bytes: float = 0.0  # the weight sync's bucket
    sequences: int = 0  # hf rollout: sequences generated at once on a rank
    expert_ranks: int = 0  # vLLM expert parallelism: the ranks the experts are spread over (TP*DP)
    max_len: int = 0
    dtype_bytes: int = 2  # the hf rollout's weights and KV cache (float32 on cpu)


@dataclass(frozen=True)
class StepPlan:
    roles: Tuple[RolePlan, ...]
    rollout: RolloutPlan
    total_memory: float  # bytes of the device (vLLM's share is of this)
    rollout_pool: bool = False  # fully-async: the rollout on devices of its own, none of the roles' state there


def _state(d: m.ModelDims, r: RolePlan) -> m.State:
    s = m.state_bytes(d, r.layout, r.precision, r.distributed_optimizer, trains=r.trains, lm_head=r.lm_head)
    return m.State(s.weights, s.grads, s.optimizer * (1 - r.optimizer_host_share))


def _resident(d: m.ModelDims, r: RolePlan) -> Dict[str, float]:
    """What the role keeps on the device outside its own phases."""
    if r.host_state:
        return {}
    s = _state(d, r)
    terms = {}
    if not r.param_offload:
        terms[f"{r.role} weights"] = s.weights
        if r.trains and not r.grad_offload:
            terms[f"{r.role} grads"] = s.grads
    if r.trains and not r.optimizer_offload:
        terms[f"{r.role} optimizer"] = s.optimizer
    return terms


def _gathered(d: m.ModelDims, r: RolePlan) -> float:
    """fsdp: the unsharded layers (and the separately wrapped LM head) a forward holds at once."""
    if r.layout.strategy == "megatron" or (r.layout.fsdp_shard <= 1 and not r.host_state) or not r.gathered_layers:
        return 0.0
    largest = max(m.layer_params(d, i).total for i in range(d.layers))
    head = d.vocab * d.hidden
    return max(largest * r.gathered_layers, head) * r.compute_bytes


def _activations(d: m.ModelDims, r: RolePlan, p: m.Pass) -> Dict[str, float]:
    terms = {f"{r.role} activations": m.activation_bytes(d, r.layout, p)}
    if r.lm_head:
        terms[f"{r.role} logits"] = m.logits_bytes(d, r.layout, p)
    gathered = _gathered(d, r)
    if gathered:
        terms[f"{r.role} gathered layers"] = gathered
    return terms


def _rollout_awake(d: m.ModelDims, plan: StepPlan) -> Dict[str, float]:
    ro = plan.rollout
    if ro.name == "vllm":
        return {"vLLM (gpu_memory_utilization)": ro.share * plan.total_memory}
    kv = m.kv_bytes_per_token(d, 1, ro.dtype_bytes) * ro.sequences * ro.max_len
    kv += m.gdn_state_bytes_per_sequence(d, 1, ro.dtype_bytes) * ro.sequences
    return {"hf rollout KV cache": kv}


def phases(d: m.ModelDims, plan: StepPlan) -> List[m.Phase]:
    """Each phase of the step on the most loaded device, with its terms."""
    resident = {r.role: _resident(d, r) for r in plan.roles}
    ro = plan.rollout
    asleep = {} if (plan.rollout_pool or ro.name != "vllm" or ro.sleeps) else _rollout_awake(d, plan)

    def others(role: str) -> Dict[str, float]:
        out: Dict[str, float] = {}
        for name, terms in resident.items():
            if name != role:
                out.update(terms)
        return out

    out: List[m.Phase] = []
    actor = next((r for r in plan.roles if r.role == "actor"), None)
    own = plan.rollout_pool
    # a sync bucket never holds more than the whole model's weights
    bucket = min(ro.bucket_bytes, m.rollout_weight_bytes(d, 1, dtype_bytes=ro.dtype_bytes))
    gen = {} if own else dict(others(""))
    gen.update(_rollout_awake(d, plan))
    if ro.name == "hf" and actor is not None:
        # the hf rollout generates with the actor's module; on a pool of its own, with a whole replica
        whole = m.rollout_weight_bytes(d, 1, dtype_bytes=ro.dtype_bytes)
        gen["hf rollout weights" if own else "actor weights"] = whole if own else _state(d, actor).weights
    if own:
        gen["sync bucket"] = bucket  # the weights arrive bucket by bucket
    out.append(m.Phase("rollout (rollout pool)" if own else "rollout", gen))
    if actor is not None and (own or ro.name == "vllm"):
        sync = dict(others("actor"))
        sync["actor weights"] = _state(d, actor).weights
        if not own:
            sync["vLLM weights"] = m.rollout_weight_bytes(d, ro.tp, ro.expert_ranks)
        sync["sync bucket"] = bucket
        out.append(m.Phase("weight sync (training pool)" if own else "weight sync", sync))
    for r in plan.roles:
        s = _state(d, r)
        base = dict(others(r.role))
        base.update(asleep)
        fwd = dict(base)
        if not r.host_state:  # under FSDP's CPUOffloadPolicy only the gathered layers come to the device
            fwd[f"{r.role} weights"] = s.weights
        fwd.update(_activations(d, r, r.forward))
        out.append(m.Phase(f"{r.role} {'values' if r.role == 'critic' else 'log-prob'}", fwd))
        if not r.trains or r.update is None:
            continue
        upd = dict(base)
        if not r.host_state:
            upd[f"{r.role} weights"] = s.weights
            upd[f"{r.role} grads"] = s.grads
            if not r.optimizer_offload:
                upd[f"{r.role} optimizer"] = s.optimizer
        upd.update(_activations(d, r, r.update))
        out.append(m.Phase(f"{r.role} update", upd))
        if not r.host_state:
            step = dict(base)
            step.update({f"{r.role} weights": s.weights, f"{r.role} grads": s.grads, f"{r.role} optimizer": s.optimizer})
            out.append(m.Phase(f"{r.role} optimizer step", step))
    return out


def kv_sequences(d: m.ModelDims, plan: StepPlan, max_len: int) -> Optional[float]:
    """How many sequences of `max_len` tokens vLLM's KV cache holds on a rank: its reservation less its
    weights (activation workspace not counted); None for the hf rollout."""
    ro = plan.rollout
    if ro.name != "vllm":
        return None
    free = ro.share * plan.total_memory - m.rollout_weight_bytes(d, ro.tp, ro.expert_ranks)
    per_seq = m.kv_bytes_per_token(d, ro.tp) * max_len + m.gdn_state_bytes_per_sequence(d, ro.tp)
    return free / per_seq if per_seq else math.inf


def with_role(plan: StepPlan, role: str, **changes) -> StepPlan:
    """The plan with one role's fields changed (a proposed fix)."""
    return replace(plan, roles=tuple(replace(r, **changes) if r.role == role else r for r in plan.roles))
