"""The parallel layout, written once: the one module that reads the parallel keys (`trainer.nnodes`,
`trainer.n_gpus_per_node`, a role's `megatron.*_parallel_size`, its Ulysses size, the rollout's TP/DP/EP and
its own pool) and the arithmetic the preflight and the engines both decide on them, each rule once.

- `Layout`: one role's parallel layout over the training devices (TP, PP, VPP, CP, EP, ETP, Ulysses SP, DP),
  frozen, built by `role_layout` from the composed config (the preflight, the memory model, the checkpoint
  code) or by `section_layout` from the role's engine section (an engine, which holds only its section).
  Layouts follow Megatron and verl: DP = devices / (TP*PP*CP) (fsdp: devices / SP), expert groups
  EP*ETP*PP (ETP follows TP when null). `megatron_kwargs` are megatron's parallel arguments,
  `checkpoint_sizes` what a Megatron checkpoint records (and `checkpoint_mismatch` compares).
- `Pool` / `train_pool` / `rollout_pool`: nodes x devices per node of the training pool and of the
  fully-async rollout pool; `RolloutLayout` / `rollout_layout`: the rollout's TP, DP and EP.
- The checks each function returns as a message (or None), so the preflight lists it with the role's name
  and the engine raises it: the devices against a model-parallel span, a head count against TP, MoE
  training at TP > 1 without sequence parallelism; and the preflight's DeepStack check against the first
  pipeline stage (the vision tower refuses a misplaced DeepStack layer itself when built,
  engine/megatron/bridges/vision.py).

The launcher (`launch/lib.sh:vl_divides`) checks the env-var arithmetic (TP*PP*CP against the
devices) before any Python runs, naming the env vars a user edits; it is the shell's own first
pass, and the preflight's answer (this module) is what decides. Nothing outside this module and
`config/` reads a parallel key (tests/py/test_layout_keys.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from verl_lite.config import roles
from verl_lite.config.sections import field_of

# A role's Megatron parallel keys that must be positive integers (ETP and VPP may be null).
MEGATRON_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size")
MEGATRON_OPTIONAL_SIZES = ("expert_tensor_parallel_size", "virtual_pipeline_model_parallel_size")
TRAIN_POOL_KEYS = ("trainer.nnodes", "trainer.n_gpus_per_node")
ROLLOUT_TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"
# vLLM's engine arguments the rollout's layout sets -> the setting, as messages name it
VLLM_LAYOUT_SETTINGS = {
    "tensor_parallel_size": ROLLOUT_TP_KEY,
    "data_parallel_size": "actor_rollout_ref.rollout.data_parallel_size",
    "enable_expert_parallel": "actor_rollout_ref.rollout.expert_parallel_size (1 = off, TP x DP = on)",
}


# ------------------------------------------------------------------------------ pools of devices


@dataclass(frozen=True)
class Pool:
    """`nodes` nodes with `per_node` devices each, for the worker groups named `name` (decisions/placement.py
    places them); `keys`: the two settings, as messages name them."""

    name: str
    nodes: int
    per_node: int
    keys: Tuple[str, str] = TRAIN_POOL_KEYS

    @property
    def world(self) -> int:
        return self.nodes * self.per_node

    def describe(self) -> str:
        """e.g. `trainer.nnodes=2 x trainer.n_gpus_per_node=8`"""
        return f"{self.keys[0]}={self.nodes} x {self.keys[1]}={self.per_node}"


def train_pool(cfg: Any, name: str = "trainer") -> Pool:
    """The training devices: trainer.nnodes x trainer.n_gpus_per_node (fully-async: the training pool), for the
    worker groups named `name`."""
    return Pool(name, int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node))


def train_world(cfg: Any) -> int:
    """The training devices: trainer.nnodes x trainer.n_gpus_per_node (fully-async: the training pool)."""
    return train_pool(cfg).world


def rollout_pool(cfg: Any) -> Pool:
    """The fully-async rollout pool: actor_rollout_ref.rollout.nnodes x n_gpus_per_node (0 x 0 when the
    rollout shares the training devices)."""
    rollout = cfg.actor_rollout_ref.rollout
    return Pool("rollout", int(rollout.nnodes), int(rollout.n_gpus_per_node),
                ("actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node"))


@dataclass(frozen=True)
class RolloutLayout:
    """The rollout's parallel settings: TP (devices of one engine), DP (engines in one vLLM data-parallel
    group) and EP (vLLM expert parallelism: 1 off, TP x DP on)."""

    tp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def engine_ranks(self) -> int:
        """Ranks of one engine (`tp`), at least 1."""
        return max(1, self.tp)

    def vllm_only_settings(self) -> List[str]:
        """The rollout's settings only the vllm rollout reads (its data-parallel group, expert parallelism),
        where set away from 1 (off), by their names in the rollout section."""
        names = ("data_parallel_size", "expert_parallel_size")
        return [name for name, value in zip(names, (self.dp, self.ep)) if value != 1]

    def same_value(self, arg: str) -> Optional[Tuple[str, int]]:
        """(the setting, its value) behind vLLM's engine argument `arg` where vLLM takes that value as it is
        (tensor_parallel_size, data_parallel_size); None for another argument."""
        values = {"tensor_parallel_size": self.tp, "data_parallel_size": self.dp}
        return (VLLM_LAYOUT_SETTINGS[arg], values[arg]) if arg in values else None

    def vllm_kwargs(self) -> Dict[str, Any]:
        """vLLM's engine arguments for the layout: its TP, and its data-parallel group and expert parallelism
        where they are on."""
        kwargs: Dict[str, Any] = {"tensor_parallel_size": self.tp}
        if self.dp > 1:  # all engines of the actor's world: one vLLM data-parallel group
            kwargs["data_parallel_size"] = self.dp
        if self.ep > 1:  # experts spread over TP x DP ranks
            kwargs["enable_expert_parallel"] = True
        return kwargs


def rollout_section_layout(rollout: Any) -> RolloutLayout:
    """The layout of a rollout section (actor_rollout_ref.rollout), as the rollout engines read it."""
    return RolloutLayout(int(rollout.tensor_model_parallel_size), int(rollout.data_parallel_size),
                         int(rollout.expert_parallel_size))


def rollout_layout(cfg: Any) -> RolloutLayout:
    return rollout_section_layout(cfg.actor_rollout_ref.rollout)


def rollout_replicas(cfg: Any) -> int:
    """Rollout engines in the fully-async rollout pool: one per `rollout.tensor_model_parallel_size` devices."""
    return rollout_pool(cfg).world // rollout_layout(cfg).engine_ranks


# ------------------------------------------------------------------------------ a role's layout


@dataclass(frozen=True)
class Layout:
    """One role's parallel layout over its `world` training devices. Megatron: TP, PP, VPP, CP, EP, ETP
    (resolved: TP when the setting is null, `etp_follows_tp`); fsdp: Ulysses SP and the FSDP shard group
    (`fsdp_shard`, set by the memory model). `section`: where the role's settings live."""

    strategy: str  # megatron | fsdp
    world: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: Optional[int] = None
    fsdp_shard: int = 1  # fsdp: ranks one parameter is sharded over
    sp: int = 1  # fsdp: Ulysses sequence parallelism (ranks sharing one data-parallel shard)
    role: str = "actor"
    section: str = roles.SECTION["actor"]
    etp_follows_tp: bool = False  # expert_tensor_parallel_size was null

    @property
    def prefix(self) -> str:
        """Where the role's megatron settings live, e.g. actor_rollout_ref.actor.megatron."""
        return f"{self.section}.megatron"

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp * self.sp

    @property
    def dp(self) -> Optional[int]:
        """Data-parallel ranks: the devices over the model-parallel span; None when they do not divide."""
        span = self.model_parallel
        if self.world > 0 and span > 0 and self.world % span == 0:
            return self.world // span
        return None

    @property
    def dp_ranks(self) -> int:
        """The memory model's data-parallel ranks: devices // (TP*PP*CP), at least 1 (Ulysses ranks count as
        data-parallel there: each holds its own activations of a whole micro-batch's shard)."""
        return max(1, self.world // (self.tp * self.pp * self.cp))

    @property
    def expert_dp(self) -> int:
        return max(1, self.world // (self.ep * self.etp * self.pp))

    def megatron_kwargs(self) -> Dict[str, Any]:
        """megatron-core's parallel arguments (initialize_model_parallel, TransformerConfig, a bridge's
        provider), with VPP and ETP null where the settings are."""
        return dict(tensor_model_parallel_size=int(self.tp), pipeline_model_parallel_size=int(self.pp),
                    virtual_pipeline_model_parallel_size=self.vpp, context_parallel_size=int(self.cp),
                    expert_model_parallel_size=int(self.ep),
                    expert_tensor_parallel_size=None if self.etp_follows_tp else self.etp)

    def checkpoint_sizes(self, dp: Optional[int] = None) -> Dict[str, Any]:
        """What a checkpoint's files are cut for (contents.json's layout): Megatron's sizes (VPP 1 when off, ETP
        resolved); fsdp the engine alone (its full state dicts do not depend on the layout). `dp`: the
        data-parallel size, recorded where the files depend on it (a distributed optimizer's shards) or for
        the record (the torch engine)."""
        sizes: Dict[str, Any] = {"engine": "fsdp"}
        if self.strategy == "megatron":
            sizes = {"engine": "megatron", "tensor_model_parallel_size": int(self.tp),
                     "pipeline_model_parallel_size": int(self.pp),
                     "virtual_pipeline_model_parallel_size": int(self.vpp or 1),
                     "expert_model_parallel_size": int(self.ep), "expert_tensor_parallel_size": int(self.etp or self.tp)}
        if dp is not None:
            sizes["data_parallel_size"] = dp
        return sizes


def megatron_sizes(megatron: Any) -> Dict[str, Any]:
    """The Layout fields of a role's megatron section, as set (ints where set; VPP may be null)."""
    tp = megatron.tensor_model_parallel_size
    etp = megatron.expert_tensor_parallel_size
    return dict(tp=tp, pp=megatron.pipeline_model_parallel_size, cp=megatron.context_parallel_size,
                ep=megatron.expert_model_parallel_size, vpp=megatron.virtual_pipeline_model_parallel_size,
                etp=etp if etp is not None else tp, etp_follows_tp=etp is None)


def ulysses_own_size(section: Any) -> Any:
    """The role section's own Ulysses key (`ulysses_setting` resolves it against fsdp_config's copy)."""
    return section.ulysses_sequence_parallel_size


def ulysses_setting(section: Any, prefix: str) -> Tuple[str, Any]:
    """(key, value) of a role's SP size, as verl reads it: the role's own key when above 1 (verl copies it into
    fsdp_config), else fsdp_config.ulysses_sequence_parallel_size when that is set; `prefix` is the role's section
    (actor_rollout_ref.actor, actor_rollout_ref.ref, critic)."""
    own = ulysses_own_size(section)
    engine = getattr(getattr(section, "fsdp_config", None), "ulysses_sequence_parallel_size", 1)
    if own == 1 and engine != 1:
        return f"{prefix}.fsdp_config.ulysses_sequence_parallel_size", engine
    return f"{prefix}.ulysses_sequence_parallel_size", own


def section_layout(section: Any, role: str, strategy: str, world: int) -> Layout:
    """A role's layout from its engine section (strategy, megatron, the Ulysses keys) over `world` devices."""
    if strategy == "megatron":
        sizes: Dict[str, Any] = megatron_sizes(section.megatron)
    else:
        sp = ulysses_setting(section, roles.SECTION[role])[1]
        sizes = dict(sp=sp) if isinstance(sp, int) and not isinstance(sp, bool) and sp > 1 else {}
    return Layout(strategy, world, role=role, section=roles.SECTION[role], **sizes)


def role_layout(cfg: Any, role: str) -> Layout:
    """A role's layout over the training devices, from the composed config."""
    return section_layout(roles.section(cfg, role), role, roles.strategy(cfg, role), train_world(cfg))


def mindspeed_parallel_args(megatron: Any) -> Dict[str, int]:
    """The parallel arguments the MindSpeed repatch dict carries (decisions/repatch.py): context_parallel_size
    when > 1, so MindSpeed registers its CP ring wrapper at patch time."""
    cp = int(field_of(megatron, "context_parallel_size", 1) or 1)
    return {"context_parallel_size": cp} if cp > 1 else {}


def repatch_context_parallel(plan: Dict[str, Any]) -> int:
    """The CP size a repatch dict carries (1 when it has none)."""
    return int(plan.get("context_parallel_size", 1) or 1)


def sequence_parallel_on(sequence_parallel: Any, kwargs: Dict[str, Any]) -> bool:
    """megatron.sequence_parallel as verl passes it: on with TP > 1 only (at TP=1 it splits nothing), for
    megatron's parallel arguments `kwargs` (`Layout.megatron_kwargs`, or an external bridge's provider's)."""
    return bool(sequence_parallel) and int(kwargs.get("tensor_model_parallel_size", 1)) > 1


def groups_clash(have: Layout, want: Layout) -> Dict[str, Tuple[int, int]]:
    """Where megatron's existing TP/PP/CP groups (`have`) differ from the layout a role wants, by megatron's
    argument names: {name: (existing, wanted)}."""
    pairs = {"tensor_model_parallel_size": (have.tp, want.tp), "pipeline_model_parallel_size": (have.pp, want.pp),
             "context_parallel_size": (have.cp, want.cp)}
    return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}


def checkpoint_mismatch(part: str, saved: Optional[Dict[str, Any]], current: Dict[str, Any], role: str,
                        what: Sequence[str], prefix: str) -> Optional[str]:
    """Why files cut for the saved engine and layout (`checkpoint_sizes` of the run that saved) cannot load
    into this run's (`current`), or None. Only keys both name are compared, so a torch engine's data-parallel
    size, which its full state dicts do not depend on, is not."""
    if not saved or not what:
        return None
    diff = {k: (saved.get(k), v) for k, v in current.items() if k in saved and saved.get(k) != v}
    if not diff:
        return None
    parts = ", ".join(what[:-1]) + (" and " if len(what) > 1 else "") + what[-1]
    instead = (f"or load the weights alone from the checkpoint's HF copy ({prefix}.load_contents=[hf_model], which "
               "needs hf_model in the saved save_contents)")
    if "engine" in diff:
        key = f"{roles.SECTION[role]}.strategy"
        strategy = {"megatron": "megatron", "fsdp": "fsdp"}.get(saved["engine"], saved["engine"])
        return (f"the {role} checkpoint {part} was written by the {saved['engine']} engine and this run's {role} "
                f"runs on the {current['engine']} engine; its {parts} files are that engine's. Resume with "
                f"{key}={strategy}, {instead}")
    section = f"{roles.SECTION[role]}.megatron"
    shown = ", ".join(f"{k}={old} (this run: {new})" for k, (old, new) in sorted(diff.items()))

    def setting(key: str, value: Any) -> Optional[str]:
        if key == "data_parallel_size":  # the device count over TP * PP * CP
            return None
        if key == "expert_tensor_parallel_size" and value == saved.get("tensor_model_parallel_size"):
            return None  # null follows tensor_model_parallel_size
        if key == "virtual_pipeline_model_parallel_size" and value == 1:
            return f"{section}.{key}=null"
        return f"{section}.{key}={value}"

    sets = " ".join(s for s in (setting(k, old) for k, (old, _) in sorted(diff.items())) if s)
    return (f"the {role} checkpoint {part} was saved with another parallel layout: {shown}; its {parts} files are "
            f"cut for that layout. Resume with the saved layout{' (' + sets + ')' if sets else ''}, {instead}")


# ------------------------------------------------------------------------------ the shared checks


def span_problem(world: int, what: str, factors: Sequence[int], where: str) -> Optional[str]:
    """`world` devices against a product of parallel sizes: `what` names the product (e.g. "TP*PP*CP"),
    `factors` its sizes in that order, `where` the keys a user sets."""
    span = math.prod(int(f) for f in factors)
    if span < 1 or world % span == 0:
        return None
    sizes = "*".join(str(int(f)) for f in factors)
    return f"is not divisible by {what} = {sizes} = {span} ({where}): {world} % {span} = {world % span}"


def heads_problem(count: int, tp: int) -> Optional[str]:
    """A head count (or another size split over TP ranks) that TP does not divide."""
    if not count or tp < 1 or count % tp == 0:
        return None
    return f"{count} % {tp} = {count % tp}"


def moe_sequence_parallel_problem(experts: Optional[int], tp: int, sequence_parallel: bool, prefix: str) -> Optional[str]:
    """megatron-core's MoE layer refuses to train with TP > 1 without sequence parallelism (a ValueError
    in its training forward, moe_layer.py). `prefix`: the role's megatron section
    (e.g. actor_rollout_ref.actor.megatron), named in the fix."""
    if not experts or tp <= 1 or sequence_parallel:
        return None
    return (f"training an MoE model ({experts} experts) with {prefix}.tensor_model_parallel_size={tp} needs Megatron "
            f"sequence parallelism (megatron-core's MoE layer refuses TP > 1 without it): set "
            f"{prefix}.sequence_parallel=True (verl's default), or {prefix}.tensor_model_parallel_size=1 and split "
            f"the experts with {prefix}.expert_model_parallel_size")


def first_stage_layers(num_layers: int, pp: int, vpp: Optional[int], first_stage: Optional[int] = None) -> int:
    """Decoder layers in the model chunk of the first pipeline stage (virtual stage 0 of PP rank 0):
    override_transformer_config.num_layers_in_first_pipeline_stage when set, else megatron's even split."""
    if first_stage:
        return int(first_stage)
    return num_layers // max(1, pp * (int(vpp) if vpp and int(vpp) > 1 else 1))


def deepstack_stage_problem(deepstack: int, num_layers: int, pp: int, vpp: Optional[int],
                            first_stage: Optional[int], prefix: str) -> Optional[str]:
    """Qwen3-VL adds DeepStack visual features after decoder layers 0 .. deepstack-1, on the first pipeline
    stage with the vision tower (engine/megatron/bridges/vision.py refuses them elsewhere)."""
    if not deepstack or pp <= 1:
        return None
    held = first_stage_layers(num_layers, pp, vpp, first_stage)
    if held >= deepstack:
        return None
    return (f"the model adds DeepStack visual features after decoder layers 0..{deepstack - 1}, which must sit on the "
            f"first pipeline stage with the vision tower, but {prefix}.pipeline_model_parallel_size={pp}"
            f"{f' (virtual {vpp})' if vpp else ''} puts {held} layer(s) there: lower the pipeline size or set "
            f"{prefix}.override_transformer_config.num_layers_in_first_pipeline_stage >= {deepstack}")
