"""The memory rule: each device's predicted memory for every phase of the RL step, against what the
device can use. The arithmetic is `decisions/memory.py` (terms) and `decisions/memory_step.py`
(phases); this module reads the run's settings into a `StepPlan`, finds the device's memory
(trainer.device_memory_gib, trainer.device_name, the devices where the workers run, else an assumed
device), refuses a peak above it with the cheapest changes that would fit, and prints the table.
docs/memory.md explains the terms and their measured error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from typing import Any, List, Optional, Tuple

from verl_lite import device as devices
from verl_lite.config import roles
from verl_lite.config.devices import ASSUMED, DEVICE_MEMORY, RESERVE_GIB, match_device
from verl_lite.decisions import fsdp_settings
from verl_lite.decisions import memory as m
from verl_lite.decisions import memory_step as ms
from verl_lite.decisions.layout import Layout, rollout_layout, rollout_pool, train_pool, train_world
from verl_lite.decisions.micro_batch import micro_batch_size
from verl_lite.decisions.switches import switch
from verl_lite.preflight.roles import RoleView, role_views
from verl_lite.preflight.rollout import memory_share

# a peak above this share of the usable memory gets a warning (allocator fragmentation, NCCL/HCCL
# buffers and the estimate's own error: docs/memory.md)
WARN_SHARE = 0.9


@dataclass(frozen=True)
class Capacity:
    total_gib: float
    usable_gib: float
    source: str
    known: bool  # False: an assumed device (warn, do not refuse, unless no device in the table fits)


def capacity(cfg: Any, device: str, for_training: bool) -> Capacity:
    t = cfg.trainer
    if t.device_memory_gib is not None:
        g = float(t.device_memory_gib)
        return Capacity(g, g, f"trainer.device_memory_gib={g:g}", True)
    if device == "cpu":
        return host_capacity(cfg)
    if t.device_name in DEVICE_MEMORY:  # another name is refused by the choices (trainer.device_name='')
        d = DEVICE_MEMORY[t.device_name]
        return Capacity(d.total_gib, d.usable_gib, f"trainer.device_name={t.device_name}: {d.source}", True)
    detected = detect(device) if for_training else None
    if detected is not None:
        name, total = detected
        return Capacity(total, total - RESERVE_GIB[device], f"detected {name}, {total:.1f} GiB", True)
    d = DEVICE_MEMORY[ASSUMED[device]]
    return Capacity(d.total_gib, d.usable_gib, f"assumed {ASSUMED[device]} (set trainer.device_name or "
                                               "trainer.device_memory_gib)", False)


def separate_rollout(cfg: Any) -> bool:
    """Fully-async training with a rollout pool of its own (decisions/async_pools.py)."""
    return bool(cfg.async_training.enable) and rollout_pool(cfg).world > 0


def host_capacity(cfg: Any) -> Capacity:
    """cpu: this host's physical memory shared by the worker processes of one node (the training pool's,
    and the rollout pool's with fully-async). An estimate, never a refusal: the driver, Ray's object store
    and the other processes take their part too."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / m.GIB
    workers = train_pool(cfg).per_node + (rollout_pool(cfg).per_node if separate_rollout(cfg) else 0)
    workers = max(1, workers)
    each = total / workers
    processes = f"{workers} worker process{'es' if workers > 1 else ''}"
    return Capacity(total, each, f"this host's {total:.1f} GiB / {processes}; set trainer.device_memory_gib for the "
                                 "host that trains", False)


def detect(device: str) -> Optional[Tuple[str, float]]:
    """(name, total GiB) of the smallest device here, from nvidia-smi or npu-smi; None when neither answers."""
    try:
        if device == "cuda" and shutil.which("nvidia-smi"):
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            rows = [line.rsplit(",", 1) for line in out.strip().splitlines() if "," in line]
            if rows:
                name, mib = min(rows, key=lambda r: float(r[1]))
                return name.strip(), float(mib) / 1024
        if device == "npu" and shutil.which("npu-smi"):
            out = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=10).stdout
            name = next((w for w in out.split() if w.startswith("910")), None)
            if name and match_device(name):
                return name, DEVICE_MEMORY[match_device(name)].total_gib
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return None


# ------------------------------------------------------------------------------ the run's plan


def _layout(view: RoleView) -> Layout:
    """The role's layout with its FSDP shard group (fsdp: fsdp_size over the devices / SP)."""
    lay = view.layout
    if view.megatron:
        return lay
    try:
        shard = fsdp_settings.mesh_shape(view.section.fsdp_config.fsdp_size, lay.world // max(1, lay.sp))[1]
    except ValueError:
        shard = lay.world
    return replace(lay, fsdp_shard=shard)


def _micro(cfg: Any, view: RoleView, update: bool, dp: int) -> Tuple[int, int]:
    """(tokens, sequences) of the role's largest micro-batch in its update or its forward pass, read in
    the order the workers read them (trainer/workers.py), at most the rank's share of the step's rows."""
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    arr = cfg.actor_rollout_ref
    if view.role == "critic":
        c = cfg.critic
        dynamic, budget, settings = c.use_dynamic_bsz, c.ppo_max_token_len_per_gpu, [c.ppo_micro_batch_size_per_gpu]
    elif update:
        a = arr.actor
        dynamic, budget = a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu
        settings = [a.ppo_micro_batch_size_per_gpu, a.ppo_micro_batch_size]
    else:
        src = arr.ref if view.role == "ref" else arr.rollout
        dynamic, budget = src.log_prob_use_dynamic_bsz, src.log_prob_max_token_len_per_gpu
        own = [arr.ref.log_prob_micro_batch_size_per_gpu] if view.role == "ref" else []
        settings = own + [arr.rollout.log_prob_micro_batch_size_per_gpu, arr.actor.ppo_micro_batch_size_per_gpu]
    if dynamic:
        budget = max(int(budget), longest)
        return budget, max(1, budget // longest)
    rows = int(cfg.data.train_batch_size) * int(arr.rollout.n) // max(1, dp)
    micro = min(micro_batch_size(*settings), max(1, rows))
    return micro * longest, micro


def _pass(cfg: Any, view: RoleView, device: str, update: bool, lay: Layout) -> m.Pass:
    tokens, seqs = _micro(cfg, view, update, lay.dp_ranks)
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    act = 4 if device == "cpu" else 2
    sp, recompute, method, layers, load = False, "none", "uniform", 0, 1.0
    if view.megatron:
        o = view.overrides
        if o.get("moe_expert_capacity_factor") and switch(o.get("moe_pad_expert_input_to_capacity", False)):
            load = float(o["moe_expert_capacity_factor"])  # every expert padded to its capacity
        sp = bool(view.section.megatron.sequence_parallel)
        recompute = str(o.get("recompute_granularity") or "none")
        method = str(o.get("recompute_method") or "uniform")
        layers = int(o.get("recompute_num_layers") or 1)
    elif switch(roles.model_section(cfg, view.role).enable_gradient_checkpointing):
        recompute, layers = "full", 1
    micro_per_step = 1
    if update and view.role != "ref":
        mini = (cfg.critic.ppo_mini_batch_size if view.role == "critic" else None) or \
            cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        per_rank = int(mini) * int(cfg.actor_rollout_ref.rollout.n) // max(1, lay.dp_ranks)
        micro_per_step = max(1, per_rank // max(1, seqs))
    entropy = view.role == "actor" and update and float(cfg.actor_rollout_ref.actor.entropy_coeff) != 0
    model = roles.model_section(cfg, view.role)
    fused = (not view.megatron) and view.role != "critic" and bool(model.use_fused_kernels)
    chunk = 0
    if view.role != "critic" and bool(getattr(view.section, "entropy_from_logits_with_chunking", False)):
        chunk = int(view.section.entropy_from_logits_chunk_size)
    return m.Pass(tokens=tokens, sequences=seqs, act_bytes=act, backward=update, sequence_parallel=sp,
                  recompute=recompute if update else "none", recompute_layers=layers, recompute_method=method,
                  microbatches=micro_per_step, flash_attention=device != "cpu", seq_len=longest,
                  gdn_kernel="torch" if device == "cpu" else "chunked", entropy=entropy, fused_logits=fused,
                  logits_chunk=chunk, moe_load=load, fused_norms=device != "cpu")


def _role_plan(cfg: Any, view: RoleView, device: str) -> ms.RolePlan:
    lay = _layout(view)
    trains = view.role != "ref"
    if view.megatron:
        mg = view.section.megatron
        prec = m.megatron_precision(device)
        dist = bool(mg.use_distributed_optimizer) and device != "cpu"
        offload = dict(param_offload=bool(mg.param_offload),
                       grad_offload=bool(getattr(mg, "grad_offload", False)) or bool(mg.param_offload),
                       optimizer_offload=bool(getattr(mg, "optimizer_offload", False)))
        host, gathered, compute = False, 0, prec.weight
        over = getattr(getattr(view.section, "optim", None), "override_optimizer_config", None) or {}
        if switch(over.get("optimizer_cpu_offload", False)) and device != "cpu":
            offload["optimizer_host_share"] = float(over.get("optimizer_offload_fraction", 0.0) or 0.0)
    else:
        fc = view.section.fsdp_config
        try:
            p = fsdp_settings.resolve_precision(fc, view.role, device)
            storage, compute = p.storage, m.BYTES.get(p.param, 4)
        except ValueError:
            storage, compute = "float32", 4
        prec, dist = m.fsdp_precision(storage), True
        host = fsdp_settings.cpu_offload(fc, view.role, device)
        offload = dict(param_offload=bool(fc.param_offload), grad_offload=bool(fc.param_offload),
                       optimizer_offload=bool(getattr(fc, "optimizer_offload", False)))
        gathered = 2 if bool(fc.forward_prefetch) else 1
    if device == "cpu":  # offload moves state to the host, where it already is
        offload = dict(param_offload=False, grad_offload=False, optimizer_offload=False)
        host = False
    update = _pass(cfg, view, device, True, lay) if trains else None
    return ms.RolePlan(view.role, lay, prec, dist, trains, update, _pass(cfg, view, device, False, lay),
                       host_state=host, lm_head=view.role != "critic", gathered_layers=gathered,
                       compute_bytes=compute, **offload)


def step_plan(cfg: Any, views: List[RoleView], device: str, total_gib: float) -> ms.StepPlan:
    own = separate_rollout(cfg)
    world = rollout_pool(cfg).world if own else train_world(cfg)
    ro, ro_lay = cfg.actor_rollout_ref.rollout, rollout_layout(cfg)
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    bucket = float(getattr(ro.checkpoint_engine, "update_weights_bucket_megabytes", 0) or 0) * 1024 ** 2
    rollout = ms.RolloutPlan(str(ro.name), memory_share(cfg, device), bool(ro.free_cache_engine),
                             ro_lay.tp, bucket_bytes=bucket,
                             sequences=min(int(ro.micro_batch_size),
                                           int(cfg.data.train_batch_size) * int(ro.n) // max(1, world)),
                             max_len=longest,
                             expert_ranks=ro_lay.tp * ro_lay.dp if ro_lay.ep > 1 else 0,
                             dtype_bytes=4 if device == "cpu" else 2)
    plans = tuple(_role_plan(cfg, v, device) for v in views)
    return ms.StepPlan(plans, rollout, total_gib * m.GIB, rollout_pool=own)


# ------------------------------------------------------------------------------ the rule


@dataclass
class Prediction:
    dims: m.ModelDims
    plan: ms.StepPlan
    phases: List[m.Phase]
    capacity: Capacity
    device: str = "cuda"

    @property
    def peak(self) -> m.Phase:
        return m.peak(self.phases)


def predict(cfg: Any, device: str, for_training: bool = False) -> Optional[Prediction]:
    """The run's prediction; None with memory_check=off or without a readable model shape (the path's
    config.json or a shipped shape: config/shapes.py)."""
    if str(cfg.trainer.memory_check) == "off":
        return None
    views = role_views(cfg, device)
    actor = next((v for v in views if v.role == "actor"), None)
    if actor is None or not isinstance(actor.hf, dict):  # none, or a config.json the model checks refuse
        return None
    try:
        dims = m.model_dims(actor.hf)
    except (AttributeError, KeyError, TypeError, ValueError):  # a malformed config.json: its own rules say so
        return None
    cap = capacity(cfg, device, for_training)
    plan = step_plan(cfg, views, device, cap.total_gib)
    return Prediction(dims, plan, ms.phases(dims, plan), cap, device)


def _terms(phase: m.Phase, n: int = 3) -> str:
    return ", ".join(f"{name} {m.gib(b):.1f}" for name, b in phase.largest(n))


def fixes(cfg: Any, pred: Prediction) -> List[str]:
    """The cheapest single changes that bring the peak under the usable memory, with their peaks."""
    limit = pred.capacity.usable_gib * m.GIB
    world = train_world(cfg)
    out: List[str] = []
    d = pred.dims
    for r in pred.plan.roles:
        prefix = roles.SECTION[r.role] + (".megatron" if r.layout.strategy == "megatron" else ".fsdp_config")
        cands: List[Tuple[str, ms.StepPlan]] = []
        for key, field_name in (("optimizer_offload", "optimizer_offload"), ("param_offload", "param_offload"),
                                ("grad_offload", "grad_offload")):
            if (r.layout.strategy != "megatron" and key == "grad_offload") or pred.device == "cpu":
                continue
            if not getattr(r, field_name) and (r.trains or key == "param_offload"):
                extra = {"grad_offload": True} if key == "param_offload" else {}
                cands.append((f"{prefix}.{key}=True", ms.with_role(pred.plan, r.role, **{field_name: True}, **extra)))
        lay = r.layout
        if lay.strategy == "megatron":
            splits = [d.heads, d.kv_heads] + ([d.gdn_key_heads, d.gdn_value_heads] if "gdn" in d.kinds else [])
            if world % (lay.tp * 2 * lay.pp * lay.cp) == 0 and all(n % (lay.tp * 2) == 0 for n in splits):
                cands.append((f"{prefix}.tensor_model_parallel_size={lay.tp * 2}",
                              ms.with_role(pred.plan, r.role, layout=replace(lay, tp=lay.tp * 2))))
            if d.experts and d.experts % (lay.ep * 2) == 0 and world % (lay.ep * 2 * lay.etp * lay.pp) == 0:
                cands.append((f"{prefix}.expert_model_parallel_size={lay.ep * 2}",
                              ms.with_role(pred.plan, r.role, layout=replace(lay, ep=lay.ep * 2))))
            if r.update is not None and r.update.recompute != "full":
                cands.append((f"+{prefix}.override_transformer_config.recompute_granularity=full (recompute_method="
                              "uniform, recompute_num_layers=1)",
                              ms.with_role(pred.plan, r.role, update=replace(r.update, recompute="full",
                                                                             recompute_layers=1,
                                                                             recompute_method="uniform"))))
        if r.update is not None and r.update.tokens > 2 * r.update.tokens // max(1, r.update.sequences):
            half = replace(r.update, tokens=r.update.tokens // 2, sequences=max(1, r.update.sequences // 2))
            cands.append((f"half the {r.role}'s micro-batch tokens ({r.update.tokens} -> {half.tokens}: "
                          "ppo_micro_batch_size_per_gpu or ppo_max_token_len_per_gpu)",
                          ms.with_role(pred.plan, r.role, update=half)))
        if r.update is not None and r.lm_head and not r.update.logits_chunk and not r.update.fused_logits:
            cands.append((f"{roles.SECTION[r.role]}.entropy_from_logits_with_chunking=True",
                          ms.with_role(pred.plan, r.role, update=replace(r.update, logits_chunk=2048))))
        if r.update is not None and r.lm_head and lay.strategy == "fsdp" and not r.update.fused_logits:
            cands.append(("actor_rollout_ref.model.use_fused_kernels=True",
                          ms.with_role(pred.plan, r.role, update=replace(r.update, fused_logits=True))))
        for what, plan in cands:
            new = m.peak(ms.phases(d, plan)).total
            if new <= limit:
                out.append(f"{what}: {m.gib(new):.1f} GiB")
    # every role's offload at once (verl's ALL_OFFLOAD)
    plan = pred.plan
    names = []
    for r in pred.plan.roles:
        prefix = roles.SECTION[r.role] + (".megatron" if r.layout.strategy == "megatron" else ".fsdp_config")
        keys = ["param_offload"] + (["grad_offload"] if r.trains and r.layout.strategy == "megatron" else []) + \
            (["optimizer_offload"] if r.trains else [])
        names += [f"{prefix}.{k}=True" for k in keys if not getattr(r, k)]
        plan = ms.with_role(plan, r.role, param_offload=True, grad_offload=True, optimizer_offload=r.trains)
    if len(names) > 1 and pred.device != "cpu":
        new = m.peak(ms.phases(d, plan)).total
        if new <= limit:
            out.append(f"{', '.join(names)}: {m.gib(new):.1f} GiB")
    ro = pred.plan.rollout
    if ro.name == "vllm":
        for share in (round(ro.share - 0.1, 2), round(ro.share - 0.2, 2)):
            if share <= 0.1:
                break
            plan = replace(pred.plan, rollout=replace(ro, share=share))
            ph = ms.phases(d, plan)
            kv = ms.kv_sequences(d, plan, ro.max_len)
            if m.peak(ph).total <= limit and (kv is None or kv >= 1):
                out.append(f"actor_rollout_ref.rollout.gpu_memory_utilization={share}: {m.gib(m.peak(ph).total):.1f} GiB")
                break
    return list(dict.fromkeys(out))


def memory_problems(cfg: Any, device: str, for_training: bool = False) -> List[str]:
    """A refusal when the predicted peak exceeds the device's usable memory (memory_check=refuse, a known
    device or no device in the table big enough); [] otherwise."""
    pred = predict(cfg, device, for_training)
    if pred is None:
        return []
    peak, cap = pred.peak, pred.capacity
    biggest = max((d.usable_gib for d in DEVICE_MEMORY.values() if d.kind == device), default=float("inf"))
    over = m.gib(peak.total) > cap.usable_gib
    impossible = m.gib(peak.total) > biggest
    problems = []
    if str(cfg.trainer.memory_check) == "refuse" and ((over and cap.known) or impossible):
        where = cap.source if not impossible or cap.known else f"more than any {device} device in config/devices.py " \
                                                                f"({biggest:.1f} GiB)"
        found = fixes(cfg, pred)
        problems.append(
            f"memory: the {peak.name} phase needs {m.gib(peak.total):.1f} GiB per device, more than the "
            f"{cap.usable_gib:.1f} GiB usable ({where}); largest terms: {_terms(peak)} GiB. "
            + (f"Changes that fit: {'; '.join(found[:5])}" if found else
               "No single change fits: raise the parallel sizes (more devices), "
               + ("and shorten the token budget" if device == "cpu" else "offload and shorten the token budget"))
            + " (trainer.memory_check=warn to start anyway; docs/memory.md)")
    rollout_kv = ms.kv_sequences(pred.dims, pred.plan, pred.plan.rollout.max_len)
    if rollout_kv is not None and rollout_kv < 1 and str(cfg.trainer.memory_check) == "refuse" and cap.known:
        problems.append(
            f"memory: vLLM's share actor_rollout_ref.rollout.gpu_memory_utilization={pred.plan.rollout.share} of "
            f"{cap.total_gib:.1f} GiB holds its weights ({m.gib(m.rollout_weight_bytes(pred.dims, pred.plan.rollout.tp, pred.plan.rollout.expert_ranks)):.1f}"
            f" GiB at rollout TP {pred.plan.rollout.tp}) but not the KV cache of one {pred.plan.rollout.max_len}-token "
            "sequence: raise gpu_memory_utilization or actor_rollout_ref.rollout.tensor_model_parallel_size")
    return problems


def memory_warnings(cfg: Any, device: str) -> List[str]:
    t = cfg.trainer
    out = []
    if device == "cpu" and t.device_name is not None:  # the host's memory: device_memory_gib sets it
        out.append(f"trainer.device_name={t.device_name}: no effect on cpu (its rows are cuda and npu devices; the "
                   "prediction is checked against the host's memory: set trainer.device_memory_gib; docs/memory.md)")
    pred = predict(cfg, device, for_training=devices.device_available(device))  # detected where the devices are
    if pred is None:
        return out
    peak, cap = pred.peak, pred.capacity
    need = m.gib(peak.total)
    kv = ms.kv_sequences(pred.dims, pred.plan, pred.plan.rollout.max_len)
    if kv is not None and kv < 1 and (not cap.known or str(cfg.trainer.memory_check) == "warn"):
        out.append(f"memory: vLLM's share gpu_memory_utilization={pred.plan.rollout.share} of {cap.total_gib:.1f} GiB "
                   f"({cap.source}) is smaller than its weights at rollout TP {pred.plan.rollout.tp}: raise "
                   "actor_rollout_ref.rollout.tensor_model_parallel_size or expert_parallel_size")
    if need > cap.usable_gib and (not cap.known or str(cfg.trainer.memory_check) == "warn"):
        return out + [f"memory: the {peak.name} phase is predicted at {need:.1f} GiB per device, more than the "
                      f"{cap.usable_gib:.1f} GiB of {cap.source}; largest terms: {_terms(peak)} GiB"]
    if WARN_SHARE * cap.usable_gib < need <= cap.usable_gib:
        return out + [f"memory: the {peak.name} phase is predicted at {need:.1f} GiB per device, within "
                f"{100 * (1 - WARN_SHARE):.0f}% of the {cap.usable_gib:.1f} GiB usable ({cap.source}): fragmentation "
                "or the estimate's error (docs/memory.md) may run it out of memory"]
    return out


def _unit(peak_bytes: float) -> Tuple[str, float]:
    """The table's unit: GiB, or MiB / KiB for a model too small to show in GiB (the tiny runs)."""
    for name, size in (("GiB", m.GIB), ("MiB", 1024 ** 2)):
        if peak_bytes >= size:
            return name, size
    return "KiB", 1024


def summary_lines(cfg: Any, device: str) -> List[str]:
    """The check's memory table: per phase, the memory per device (per worker process on cpu) and its
    three largest terms."""
    pred = predict(cfg, device)
    if pred is None:
        why = "trainer.memory_check=off" if str(cfg.trainer.memory_check) == "off" else "the model's shape is not readable here"
        return [f"memory        : not predicted ({why})"]
    peak, cap = pred.peak, pred.capacity
    unit, size = _unit(peak.total)
    where = "worker process" if device == "cpu" else "device"
    lines = [f"memory        : {unit} per {where}, {cap.usable_gib * m.GIB / size:.1f} usable ({cap.source})"]
    width = max(len(ph.name) for ph in pred.phases)
    for ph in pred.phases:
        mark = " <- peak" if ph is peak else ""
        terms = ", ".join(f"{name} {b / size:.1f}" for name, b in ph.largest(3))
        lines.append(f"  {ph.name:<{width}} {ph.total / size:7.1f}  {terms}{mark}")
    kv = ms.kv_sequences(pred.dims, pred.plan, pred.plan.rollout.max_len)
    if kv is not None:
        lines.append(f"  vLLM KV cache holds ~{kv:.0f} sequences of {pred.plan.rollout.max_len} tokens per engine rank")
    if pred.dims.vision_params:
        n = pred.dims.vision_params
        count = f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"
        lines.append(f"  vision tower: {count} parameters counted in the weights, gradients "
                     "and optimizer state; its activations are not counted (they grow with each image's patches, "
                     "which the check does not read: docs/memory.md)")
    if pred.plan.rollout_pool:
        lines.append("  (fully-async: the rollout phase is on the rollout pool's devices, the others on the training "
                     "pool's)")
    return lines
