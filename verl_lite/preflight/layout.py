"""Preflight rules of the parallel layout: sizes the arithmetic divides by, the devices against each
role's model-parallel and expert spans, verl's batch arithmetic (a step's `train_batch_size *
rollout.n` sequences split over DP ranks and into mini-batches, kept in order, dynamic batch size's
token budget, verl's deprecated global micro-batches), the model's shape against the layout, and the
rollout's TP group against a node.

The arithmetic the Megatron engine decides too (spans, heads against TP, MoE without sequence
parallelism) is `decisions/layout.py`'s; these rules name the role and the keys around it.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from verl_lite.config import roles, schema
from verl_lite.config.verl_names import NOT, YET
from verl_lite.config.shapes import expert_count, text_config
from verl_lite.decisions.async_pools import step_prompts, streaming
from verl_lite.decisions.layout import (MEGATRON_OPTIONAL_SIZES, MEGATRON_SIZES, ROLLOUT_TP_KEY, TRAIN_POOL_KEYS, Layout,
                                        heads_problem, moe_sequence_parallel_problem, rollout_layout, rollout_pool,
                                        span_problem, train_pool, train_world)
from verl_lite.preflight.roles import RoleView

# Megatron settings that place layers unevenly over pipeline stages; with them the layer count
# need not divide by PP.
UNEVEN_PP_KEYS = (
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "pipeline_model_parallel_layout",
)


def select(cfg: Any, key: str) -> Any:
    """The value at a dotted key."""
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def positive_problems(cfg: Any) -> List[str]:
    """Sizes the arithmetic divides by must be >= 1 (optional ones only when set)."""
    required = [
        *TRAIN_POOL_KEYS,
        "data.train_batch_size",
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        ROLLOUT_TP_KEY,
        "actor_rollout_ref.nccl_timeout",
        "critic.nccl_timeout",
        "data.filter_overlong_prompts_workers",
    ]
    optional = ["critic.ppo_mini_batch_size", "actor_rollout_ref.model.linear_attention_chunk_size",
                "critic.model.linear_attention_chunk_size"]
    for role in roles.active_roles(cfg):
        if roles.strategy(cfg, role) == "megatron":
            prefix = f"{roles.SECTION[role]}.megatron."
            required += [prefix + k for k in MEGATRON_SIZES]
            optional += [prefix + k for k in MEGATRON_OPTIONAL_SIZES]
    problems = []
    if cfg.async_training.enable and cfg.data.train_batch_size == 0:
        required.remove("data.train_batch_size")  # verl's fully-async form: a step is async_pools.step_prompts
    elif cfg.data.train_batch_size == 0:
        problems.append("data.train_batch_size=0 is verl's fully-async form (a step of ppo_mini_batch_size * "
                        "async_training.require_batches prompts): set async_training.enable=True, or a batch >= 1")
        required.remove("data.train_batch_size")
    if not cfg.async_training.enable and cfg.actor_rollout_ref.rollout.total_rollout_steps is not None:
        problems.append(f"rollout.total_rollout_steps={cfg.actor_rollout_ref.rollout.total_rollout_steps} counts the "
                        "prompts of verl's fully-async rollouter: set async_training.enable=True, or remove it (a "
                        "synchronous run's length is trainer.total_training_steps or total_epochs)")
    for key in required + optional:
        value = select(cfg, key)
        if value is None and key in optional:
            continue
        if not isinstance(value, int) or value < 1:
            problems.append(f"{key}={value!r} must be a positive integer")
    return problems


def layout_problems(cfg: Any, layout: Layout) -> List[str]:
    """The devices against the role's model-parallel span and, with EP > 1, its expert span."""
    if layout.strategy != "megatron":
        return []
    world, p = layout.world, layout.prefix
    nodes = f"{train_pool(cfg).describe()} = {world} devices"
    spans = [span_problem(world, "TP*PP*CP", (layout.tp, layout.pp, layout.cp),
                          f"{p}.tensor/pipeline_model_parallel_size, context_parallel_size")]
    if layout.ep > 1:
        spans.append(span_problem(world, "EP*ETP*PP", (layout.ep, layout.etp, layout.pp),
                                  f"{p}.expert_model_parallel_size, expert_tensor_parallel_size"))
    return [f"{layout.role}: {nodes} {problem}" for problem in spans if problem]


def _mini_batch(cfg: Any, role: str) -> tuple:
    """(mini-batch key, mini-batch, micro-batch, micro-batch key, dynamic batch size) of a trained role."""
    actor = cfg.actor_rollout_ref.actor
    if role == "critic":
        critic = cfg.critic
        mini_key = "critic.ppo_mini_batch_size" if critic.ppo_mini_batch_size is not None else \
            "actor_rollout_ref.actor.ppo_mini_batch_size"
        return (mini_key, critic.ppo_mini_batch_size or actor.ppo_mini_batch_size, critic.ppo_micro_batch_size_per_gpu,
                "critic.ppo_micro_batch_size_per_gpu", critic.use_dynamic_bsz)
    return ("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size,
            actor.ppo_micro_batch_size_per_gpu, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            actor.use_dynamic_bsz)


def batch_problems(cfg: Any, layout: Layout) -> List[str]:
    """verl's batch arithmetic: a step's sequences split over DP ranks and into mini-batches."""
    if layout.dp is None:
        return []
    batch, n, dp, role = step_prompts(cfg), cfg.actor_rollout_ref.rollout.n, layout.dp, layout.role
    if batch < 1:
        return []  # positive_problems names the size
    # verl's fully-async data.train_batch_size=0: a step is ppo_mini_batch_size * require_batches prompts
    step = ("actor_rollout_ref.actor.ppo_mini_batch_size * async_training.require_batches" if streaming(cfg)
            else "data.train_batch_size")
    how = (
        f"{train_world(cfg)} devices / TP*PP*CP {layout.model_parallel}"
        if layout.strategy == "megatron"
        else f"{train_world(cfg)} devices, fsdp"
    )
    sequences = batch * n
    problems = []
    # with train_batch_size=0 a step is whole mini-batches: the mini-batch rule below covers it
    if sequences % dp and not streaming(cfg):
        problems.append(
            f"{role}: {step} * rollout.n = {batch}*{n} = {sequences} is not divisible by the "
            f"data-parallel size {dp} ({how}): {sequences} % {dp} = {sequences % dp}"
        )
    gen = cfg.data.gen_batch_size
    # each generation batch splits over DP (in fully-async mode the rollout has a pool of its own)
    if role == "actor" and gen and int(gen) > 0 and (int(gen) * n) % dp and not cfg.async_training.enable:
        problems.append(f"{role}: data.gen_batch_size * rollout.n = {gen}*{n} = {int(gen) * n} is not divisible by the "
                        f"data-parallel size {dp} ({how}): each generation batch is split over the ranks")
    if role == "ref":
        return problems
    mini_key, mini, micro, micro_key, dynamic = _mini_batch(cfg, role)
    if mini < 1:
        return problems
    if mini > batch:
        problems.append(
            f"{role}: {mini_key}={mini} is larger than {step}={batch}; lower it to at most {batch}"
        )
    elif sequences % (mini * n):
        problems.append(
            f"{role}: {step} * rollout.n = {sequences} is not divisible by {mini_key} * rollout.n = "
            f"{mini}*{n} = {mini * n}: {sequences} % {mini * n} = {sequences % (mini * n)} "
            "(a step must split into whole mini-batches)"
        )
    if (mini * n) % dp:
        problems.append(
            f"{role}: {mini_key} * rollout.n = {mini}*{n} = {mini * n} is not divisible by the data-parallel size "
            f"{dp} ({how}): {mini * n} % {dp} = {(mini * n) % dp}"
        )
    elif micro and not dynamic and ((mini * n) // dp) % micro:
        per_rank = (mini * n) // dp
        problems.append(
            f"{role}: a mini-batch gives each of the {dp} data-parallel ranks {mini * n}/{dp} = {per_rank} sequences, "
            f"not divisible by {micro_key}={micro}: {per_rank} % {micro} = {per_rank % micro}"
        )
    return problems


def shuffle_problems(cfg: Any) -> List[str]:
    """Mini-batches keep their order between PPO epochs."""
    if cfg.actor_rollout_ref.actor.shuffle:
        return [f"actor_rollout_ref.actor.shuffle=True: shuffling between PPO epochs is {YET} (mini-batches keep "
                "their order); set it to False"]
    return []


def global_micro_batch_problems(cfg: Any, keys: Tuple[str, ...]) -> List[str]:
    """verl's deprecated global micro-batch `keys` (`*micro_batch_size`): set, they are refused naming the
    per-device key."""
    problems = []
    for key in keys:
        value = select(cfg, key)
        if value is not None:
            per_gpu = key.replace("micro_batch_size", "micro_batch_size_per_gpu")
            problems.append(f"{key}={value}: verl's deprecated global micro-batch is {NOT} here: set {per_gpu}")
    return problems


def token_budget_problems(cfg: Any, role: str) -> List[str]:
    """A token budget of dynamic batch size must be a positive number of tokens when its switch is on."""
    return [f"{role}: {prefix}.{key}={budget}: with {prefix}.{switch}=True the token budget per micro-batch must be a "
            f"positive number of tokens (verl's scripts use at least max_prompt_length + max_response_length)"
            for prefix, switch, on, key, budget, _ in token_budgets(cfg, role) if on and int(budget) < 1]


def token_budget_warnings(cfg: Any, role: str, sp: int = 1) -> List[str]:
    """Dynamic batch size (trainer/dynamic_batch.py) packs micro-batches by a token budget, the role's
    setting times its Ulysses SP size, as verl counts it. As in verl, the budget must hold each real
    prompt + response (verl asserts it per sequence at the step, not against the configured maxima): a
    budget below data.max_prompt_length + data.max_response_length is valid, and a sequence longer than
    it stops the run at that step, so it is said here."""
    longest = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    sp = max(1, int(sp))
    warnings = []
    for prefix, switch, on, key, budget, _ in token_budgets(cfg, role):
        total = int(budget) * sp
        if on and total < longest:
            times = f" x Ulysses SP {sp} = {total}" if sp > 1 else ""
            warnings.append(
                f"{role}: {prefix}.{key}={budget}{times} is smaller than data.max_prompt_length + "
                f"data.max_response_length = {longest}: with {prefix}.{switch}=True a prompt + response longer than "
                f"{total} tokens stops the run at its step (verl asserts the same per sequence); raise {prefix}.{key} "
                f"to {-(-longest // sp)} to rule that out")
    return warnings


def unused_token_budget_warnings(cfg: Any, role: str) -> List[str]:
    """A token budget set while its dynamic batch size is off."""
    return [f"{prefix}.{key}={budget} has no effect: it is the token budget of dynamic batch size, which is off "
            f"({prefix}.{switch}=False)"
            for prefix, switch, on, key, budget, default in token_budgets(cfg, role) if budget != default and not on]


def token_budgets(cfg: Any, role: str) -> List[tuple]:
    """(section, switch key, switch, budget key, budget, schema default) of each token budget of dynamic
    batch size the role's passes use."""
    arr = cfg.actor_rollout_ref
    actor, rollout, ref = schema.ActorConfig(), schema.RolloutConfig(), schema.RefConfig()
    return {
        "actor": [("actor_rollout_ref.actor", "use_dynamic_bsz", arr.actor.use_dynamic_bsz,
                   "ppo_max_token_len_per_gpu", arr.actor.ppo_max_token_len_per_gpu, actor.ppo_max_token_len_per_gpu),
                  ("actor_rollout_ref.rollout", "log_prob_use_dynamic_bsz", arr.rollout.log_prob_use_dynamic_bsz,
                   "log_prob_max_token_len_per_gpu", arr.rollout.log_prob_max_token_len_per_gpu,
                   rollout.log_prob_max_token_len_per_gpu)],
        "ref": [("actor_rollout_ref.ref", "log_prob_use_dynamic_bsz", arr.ref.log_prob_use_dynamic_bsz,
                 "log_prob_max_token_len_per_gpu", arr.ref.log_prob_max_token_len_per_gpu,
                 ref.log_prob_max_token_len_per_gpu)],
        "critic": [("critic", "use_dynamic_bsz", cfg.critic.use_dynamic_bsz, "ppo_max_token_len_per_gpu",
                    cfg.critic.ppo_max_token_len_per_gpu, schema.CriticConfig().ppo_max_token_len_per_gpu)],
    }[role]


def model_problems(view: RoleView, replicate_kv: bool = False, shape: Optional[str] = None) -> List[str]:
    """The layout against the model's shape. replicate_kv: the bridge (Megatron-Bridge, mbridge) runs
    megatron-core's attention, which takes TP > key/value heads; verl_lite's own bridges do not.
    shape: how the model is named in messages (e.g. a shipped shape), default the model path."""
    hf, layout = view.hf, view.layout
    if not hf or layout.strategy != "megatron":
        return []
    text, role, p = text_config(hf), layout.role, layout.prefix
    path = shape or view.model_path
    problems = []
    experts = expert_count(hf)
    if layout.ep > 1 and not experts:
        problems.append(
            f"{role}: {p}.expert_model_parallel_size={layout.ep} but {path} has no experts (dense model): set it to 1"
        )
    elif experts and experts % layout.ep:
        problems.append(
            f"{role}: {p}.expert_model_parallel_size={layout.ep} does not divide the {experts} experts of {path}: "
            f"{experts} % {layout.ep} = {experts % layout.ep}"
        )
    for hf_key, what in (("num_attention_heads", "attention heads"), ("num_key_value_heads", "key/value heads"),
                         ("linear_num_key_heads", "Gated DeltaNet key heads"),
                         ("linear_num_value_heads", "Gated DeltaNet value heads")):
        heads = text.get(hf_key)
        arithmetic = heads_problem(heads, layout.tp)
        if arithmetic is None:
            continue
        if hf_key == "num_key_value_heads" and replicate_kv and layout.tp % heads == 0:
            continue  # megatron-core gives each TP rank one replicated key/value group
        problems.append(
            f"{role}: {p}.tensor_model_parallel_size={layout.tp} does not divide the {heads} {what} of {path}: "
            f"{arithmetic}"
            + (f" (TP > key/value heads works only through Megatron-Bridge/mbridge, where megatron-core "
               f"replicates them: TP must then be a multiple of {heads})" if hf_key == "num_key_value_heads" else "")
        )
    layers, stages = text.get("num_hidden_layers"), layout.pp * (layout.vpp or 1)
    uneven = any(k in view.overrides for k in UNEVEN_PP_KEYS)
    if layers and not uneven and layers % stages:
        problems.append(
            f"{role}: {layers} layers of {path} do not split evenly over PP*VPP = {layout.pp}*{layout.vpp or 1} = "
            f"{stages} stages: {layers} % {stages} = {layers % stages} (or set num_layers_in_first/last_pipeline_stage)"
        )
    # remove-padding (packed GDN input included) is decided in decisions/packing_mode.py (packing.py refuses)
    return problems


def moe_sequence_parallel_problems(view: RoleView) -> List[str]:
    """megatron-core's MoE layer refuses to train with TP > 1 without sequence parallelism (a ValueError
    in its training forward, moe_layer.py): refuse it here, before Ray starts. The ref only runs forward."""
    if view.role == "ref" or not view.megatron:
        return []
    megatron = view.section.megatron
    tp = view.layout.tp
    if tp <= 1 or megatron.sequence_parallel:
        return []
    problem = moe_sequence_parallel_problem(expert_count(view.hf), tp, megatron.sequence_parallel,
                                            view.layout.prefix)
    return [f"{view.role}: {problem}"] if problem else []


def rollout_tp_problems(cfg: Any) -> List[str]:
    """A rollout TP group must fit in one node (its own devices in fully-async)."""
    tp, pool = rollout_layout(cfg).tp, rollout_pool(cfg)
    if pool.per_node <= 0:  # the rollout shares the training devices (fully-async: it has its own)
        pool = train_pool(cfg)
    per_node, key = pool.per_node, pool.keys[1]
    if tp >= 1 and per_node >= 1 and per_node % tp:
        return [
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} does not divide {key}={per_node} "
            f"({per_node} % {tp} = {per_node % tp}): a rollout TP group spanning nodes is {NOT}: each vLLM "
            "replica runs on one node; choose a tensor_model_parallel_size that divides the devices per node"
        ]
    return []
