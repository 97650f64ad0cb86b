"""Preflight rules of numeric values: every number whose bad value would fail or misbehave only after
Ray has started and the model is built (a NaN learning rate, a negative weight decay, top_p=0, a clip
ratio below 1 for the dual clip) is refused here, with the key, the value and the valid range:
"<key>=<value>: must be a finite number > 0 (...)".

One table (`RULES`): a key pattern (fnmatch over the schema's keys, so `*.optim.lr` is every role's
optimizer) and its range. The ranges are verl's own checks where verl makes one (the `__post_init__`
asserts of verl/workers/config/*.py, `validate_config`, the asserts of core_algos.py and of the LR
schedules in torch_functional.py), else those of the library the value reaches (torch.optim.AdamW,
vLLM's SamplingParams), else the meaning verl_lite's schema gives the key. Each rule names its source.

NaN compares False with everything, so a range admits a value only when every comparison holds
(NaN and +-inf are never finite). A value typed as a string in an open section (`val_kwargs`)
is read as a number first; one that is not a number is refused as such.

Checked elsewhere and not repeated here: the sizes the layout arithmetic divides by
(`layout.positive_problems`: trainer.nnodes, data.train_batch_size, rollout.n, ppo_mini_batch_size,
the parallel sizes, nccl_timeout), the token budgets of dynamic batch size (`layout.token_budget_problems`,
positive; one below the longest sequence is a warning, `layout.token_budget_warnings`), the vllm rollout's memory share and bucket size and its data/expert
parallel sizes (`rollout.py`), the fully-async numbers (`fully_async.py`), the legacy grad_clip keys
(`preflight/optimizer.grad_clip_problems`) and the deprecated global micro-batches (refused when set).

A role's keys are checked only when the role runs (critic.*, actor_rollout_ref.ref.*), and a key read
only under a condition (`when`) only under it, as verl builds those configs only then.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from verl_lite.config import keys, roles, verl_names
from verl_lite.config.generated import verl_keys

_ABSENT = object()


@dataclass(frozen=True)
class Range:
    """The valid values of a number: bounds (open or closed), integer or not, null allowed, and single
    extra values outside the bounds (top_k=-1)."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False  # True: value > low; False: value >= low
    high_open: bool = False  # True: value < high; False: value <= high
    integer: bool = False
    nullable: bool = False
    also: Tuple[float, ...] = ()

    def admits(self, value: float) -> bool:
        if value in self.also:
            return True
        if not math.isfinite(value) or (self.integer and not value.is_integer()):
            return False
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        if self.high is not None and not (value < self.high if self.high_open else value <= self.high):
            return False
        return True

    def text(self) -> str:
        what = "an integer" if self.integer else "a finite number"
        lo = None if self.low is None else f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.low is not None and self.high is not None:
            bounds = (f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                      f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            bounds = lo
        elif self.high is not None:
            bounds = f"{'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            bounds = ""
        text = f"{what} {bounds}".rstrip()
        if self.also:
            text += " or " + " or ".join(_num(v) for v in self.also)
        if self.nullable:
            text += " or null"
        return text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


POSITIVE_INT = Range(low=1, integer=True)
POSITIVE_INT_OR_NULL = Range(low=1, integer=True, nullable=True)
NON_NEGATIVE = Range(low=0)
POSITIVE = Range(low=0, low_open=True)
UNIT = Range(low=0, high=1)  # [0, 1]
FINITE = Range()


@dataclass(frozen=True)
class Rule:
    pattern: str  # dotted key, fnmatch over the schema's keys ("*.optim.lr"); an open section's key as it is
    range: Range
    why: str  # what the value means, shown in the message
    source: str  # where verl (or the library the value reaches) checks or defines this range
    # (key, allowed values): the rule applies only while each key has one of its values
    when: Tuple[Tuple[str, Tuple[Any, ...]], ...] = ()
    each: bool = False  # the value is a list: each item in range (betas)
    length: Optional[int] = None  # with each: the list's length


def _loss_mode(*modes: str) -> Tuple[Tuple[str, Tuple[Any, ...]], ...]:
    """The `when` of a rule read only by these policy losses."""
    return (("actor_rollout_ref.actor.policy_loss.loss_mode", modes),)


# `when`s several rules share: read by the vllm rollout only, with the in-reward KL penalty, by its adaptive controller
_VLLM = (("actor_rollout_ref.rollout.name", ("vllm",)),)
_KL_IN_REWARD = ("algorithm.use_kl_in_reward", (True,))
_ADAPTIVE_KL_IN_REWARD = (_KL_IN_REWARD, ("algorithm.kl_ctrl.type", ("adaptive",)))

LR = "*.optim.lr"
RULES: Tuple[Rule, ...] = (
    # ---- optimizer (every role's optim: actor, critic; the ref has none)
    Rule(LR, NON_NEGATIVE, "Adam's step size; 0 trains nothing",
         "torch.optim.AdamW: 0.0 <= lr; megatron OptimizerParamScheduler: max_lr >= min_lr >= 0 "
         "(verl's OptimizerConfig only asserts lr is set)"),
    Rule("*.optim.weight_decay", NON_NEGATIVE, "decoupled weight decay",
         "torch.optim.AdamW: 0.0 <= weight_decay"),
    Rule("*.optim.betas", Range(low=0, high=1, high_open=True), "Adam's beta1 and beta2",
         "torch.optim.AdamW: 0.0 <= betas[i] < 1.0; verl's OptimizerConfig.betas: tuple[float, float]",
         each=True, length=2),
    Rule("*.optim.lr_warmup_steps_ratio", UNIT, "the share of optim.total_training_steps spent warming up",
         "verl: num_warmup_steps = int(lr_warmup_steps_ratio * total_training_steps) (a share of the run)"),
    Rule("*.optim.min_lr_ratio", UNIT, "the cosine schedule's final LR as a share of lr",
         "verl/utils/torch_functional.py get_cosine_schedule_with_warmup: assert 0 <= min_lr_ratio <= 1"),
    Rule("*.optim.num_cycles", NON_NEGATIVE, "the cosine waves over the fsdp decay",
         "verl get_cosine_schedule_with_warmup: cos(pi * num_cycles * 2 * progress)"),
    Rule("*.optim.min_lr", NON_NEGATIVE, "the megatron schedule's final LR",
         "megatron OptimizerParamScheduler: assert min_lr >= 0.0 and max_lr >= min_lr"),
    Rule("*.optim.lr_warmup_init", NON_NEGATIVE, "the LR the megatron warm-up starts from",
         "megatron OptimizerParamScheduler: assert init_lr <= max_lr"),
    Rule("*.optim.lr_decay_steps", POSITIVE_INT_OR_NULL, "the megatron decay's length; null = total_training_steps",
         "megatron OptimizerParamScheduler: assert lr_decay_steps > 0"),
    Rule("*.optim.lr_wsd_decay_steps", POSITIVE_INT_OR_NULL, "the length of WSD's final decay",
         "megatron OptimizerParamScheduler get_lr (WSD): wsd_anneal_start_ = lr_decay_steps - wsd_decay_steps"),
    Rule("*.optim.clip_grad", NON_NEGATIVE, "the gradient-norm clip; 0 = no clipping",
         "torch clip_grad_norm_(max_norm) scales gradients by max_norm / norm (a negative one flips them); "
         "megatron clips only when clip_grad > 0"),
    # ---- actor
    Rule("actor_rollout_ref.actor.ppo_micro_batch_size", POSITIVE_INT_OR_NULL, "sequences per micro-batch",
         "verl ActorConfig.validate: ppo_mini_batch_size % ppo_micro_batch_size"),
    Rule("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", POSITIVE_INT_OR_NULL,
         "sequences per forward/backward on each rank", "verl validate_config: minimal_bsz = dp * "
         "ppo_micro_batch_size_per_gpu, real_train_batch_size % minimal_bsz"),
    Rule("actor_rollout_ref.actor.ppo_epochs", POSITIVE_INT, "passes over each step's batch; 0 never updates",
         "verl ActorConfig.ppo_epochs (for _ in range(ppo_epochs))"),
    Rule("actor_rollout_ref.actor.clip_ratio", NON_NEGATIVE, "PPO's clip epsilon",
         "verl core_algos compute_policy_loss_vanilla: ratio clipped to [1 - low, 1 + high]"),
    Rule("actor_rollout_ref.actor.clip_ratio_low", Range(low=0, nullable=True), "the lower clip epsilon; null = clip_ratio",
         "verl core_algos compute_policy_loss_vanilla: clip_ratio_low if not None else clip_ratio"),
    Rule("actor_rollout_ref.actor.clip_ratio_high", Range(low=0, nullable=True),
         "the upper clip epsilon; null = clip_ratio", "verl core_algos compute_policy_loss_vanilla"),
    Rule("actor_rollout_ref.actor.clip_ratio_c", Range(low=1, low_open=True),
         "the dual-clip bound of PPO",
         "verl core_algos compute_policy_loss_vanilla: assert clip_ratio_c > 1.0",
         when=_loss_mode("vanilla")),
    Rule("actor_rollout_ref.actor.clip_ratio_c", POSITIVE, "the dppo losses' truncation of the importance ratio",
         "verl core_algos compute_policy_loss_dppo_tv/_kl: clamp(ratio, max=clip_ratio_c)",
         when=_loss_mode("dppo_tv", "dppo_kl")),
    Rule("actor_rollout_ref.actor.tau_pos", POSITIVE, "SAPO's gate temperature for positive advantages",
         "verl core_algos compute_policy_loss_sapo: sigmoid(tau * (ratio - 1)) * 4 / tau",
         when=_loss_mode("sapo")),
    Rule("actor_rollout_ref.actor.tau_neg", POSITIVE, "SAPO's gate temperature for other advantages",
         "verl core_algos compute_policy_loss_sapo: sigmoid(tau * (ratio - 1)) * 4 / tau",
         when=_loss_mode("sapo")),
    Rule("actor_rollout_ref.actor.policy_loss.clip_cov_ratio", Range(low=0, high=1, low_open=True),
         "the share of tokens whose gradient Clip-Cov cuts",
         "verl core_algos compute_policy_loss_clip_cov: assert clip_cov_ratio > 0",
         when=_loss_mode("clip_cov")),
    Rule("actor_rollout_ref.actor.policy_loss.clip_cov_lb", FINITE, "Clip-Cov's lower covariance bound",
         "verl core_algos compute_policy_loss_clip_cov: cov > clip_cov_lb",
         when=_loss_mode("clip_cov")),
    Rule("actor_rollout_ref.actor.policy_loss.clip_cov_ub", FINITE, "Clip-Cov's upper covariance bound",
         "verl core_algos compute_policy_loss_clip_cov: cov < clip_cov_ub",
         when=_loss_mode("clip_cov")),
    Rule("actor_rollout_ref.actor.policy_loss.kl_cov_ratio", Range(low=0, high=1, low_open=True),
         "the share of tokens KL-Cov penalises", "verl core_algos compute_policy_loss_kl_cov: assert kl_cov_ratio > 0",
         when=_loss_mode("kl_cov")),
    Rule("actor_rollout_ref.actor.policy_loss.ppo_kl_coef", NON_NEGATIVE, "KL-Cov's penalty weight",
         "verl core_algos compute_policy_loss_kl_cov: + ppo_kl_coef * |log-ratio| (a penalty)",
         when=_loss_mode("kl_cov")),
    Rule("actor_rollout_ref.actor.policy_loss.dro_beta", POSITIVE, "DRO's quadratic penalty beta",
         "verl core_algos compute_policy_loss_dro: beta must be a positive value",
         when=_loss_mode("dro")),
    Rule("actor_rollout_ref.actor.entropy_coeff", FINITE, "the entropy bonus's weight; 0 = off",
         "verl ActorConfig.entropy_coeff: float (loss -= entropy_coeff * entropy)"),
    Rule("actor_rollout_ref.actor.kl_loss_coef", NON_NEGATIVE, "the KL loss's weight",
         "verl ActorConfig.kl_loss_coef (a KL penalty: a negative weight rewards drifting from the ref)",
         when=(("actor_rollout_ref.actor.use_kl_loss", (True,)),)),
    # ---- ref
    Rule("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", POSITIVE_INT_OR_NULL,
         "sequences per forward on each rank", "verl validate_config check_mutually_exclusive (ref)"),
    # ---- rollout
    Rule("actor_rollout_ref.rollout.temperature", NON_NEGATIVE, "the sampling temperature; 0 = greedy",
         "vLLM SamplingParams: temperature must be finite and non-negative"),
    Rule("actor_rollout_ref.rollout.top_p", Range(low=0, high=1, low_open=True), "nucleus sampling; 1.0 = off",
         "vLLM SamplingParams: top_p must be in (0, 1]"),
    Rule("actor_rollout_ref.rollout.top_k", Range(low=0, integer=True, also=(-1,)), "top-k sampling; -1 or 0 = off",
         "vLLM SamplingParams: top_k must be 0 (disable), or at least 1 (-1 accepted as disabled)"),
    Rule("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", POSITIVE_INT_OR_NULL,
         "sequences per forward on each rank when scoring log-probs",
         "verl validate_config check_mutually_exclusive (rollout)"),
    Rule("actor_rollout_ref.rollout.micro_batch_size", POSITIVE_INT, "sequences per generate call of the hf rollout",
         "verl_lite's own key (a chunk size)"),
    Rule("actor_rollout_ref.rollout.max_num_seqs", POSITIVE_INT, "vLLM's max_num_seqs",
         "vLLM SchedulerConfig (verl passes rollout.max_num_seqs)",
         when=_VLLM),
    Rule("actor_rollout_ref.rollout.max_num_batched_tokens", POSITIVE_INT, "vLLM's max_num_batched_tokens",
         "vLLM SchedulerConfig (verl passes rollout.max_num_batched_tokens)",
         when=_VLLM),
    Rule("actor_rollout_ref.rollout.max_model_len", POSITIVE_INT_OR_NULL, "vLLM's max_model_len",
         "vLLM ModelConfig.max_model_len", when=_VLLM),
    Rule("actor_rollout_ref.rollout.val_kwargs.n", POSITIVE_INT, "responses per validation prompt",
         "verl RolloutConfig val_kwargs.n (vLLM SamplingParams: n >= 1)"),
    Rule("actor_rollout_ref.rollout.val_kwargs.temperature", NON_NEGATIVE,
         "the validation sampling temperature; 0 = greedy", "vLLM SamplingParams: temperature non-negative"),
    Rule("actor_rollout_ref.rollout.val_kwargs.top_p", Range(low=0, high=1, low_open=True),
         "validation nucleus sampling; 1.0 = off", "vLLM SamplingParams: top_p must be in (0, 1]"),
    Rule("actor_rollout_ref.rollout.val_kwargs.top_k", Range(low=0, integer=True, also=(-1,)),
         "validation top-k sampling; -1 or 0 = off", "vLLM SamplingParams: top_k must be 0 (disable) or at least 1"),
    # ---- data
    Rule("data.max_prompt_length", POSITIVE_INT, "the longest prompt in tokens",
         "verl RLHFDataset max_prompt_length (prompts are cut or refused at it)"),
    Rule("data.image_patch_size", POSITIVE_INT_OR_NULL, "the patch size images are resized for; null = the "
         "processor's", "qwen_vl_utils fetch_image(image_patch_size): sides a multiple of it x 2"),
    Rule("data.max_response_length", POSITIVE_INT, "the most tokens generated per response",
         "verl rollout response_length (vLLM SamplingParams: max_tokens must be at least 1)"),
    # ---- critic
    Rule("critic.ppo_micro_batch_size_per_gpu", POSITIVE_INT_OR_NULL,
         "sequences per forward/backward on each rank", "verl CriticConfig._check_mutually_exclusive"),
    Rule("critic.ppo_epochs", POSITIVE_INT_OR_NULL, "critic passes over each batch; null = the actor's",
         "verl CriticConfig.ppo_epochs"),
    Rule("critic.cliprange_value", NON_NEGATIVE, "the value clip",
         "verl core_algos compute_value_loss: clip_by_value(vpreds, values - c, values + c)"),
    # ---- algorithm
    Rule("algorithm.gamma", UNIT, "the discount factor of GAE and REINFORCE++",
         "verl core_algos compute_gae_advantage_return, compute_reinforce_plus_plus_outcome_advantage (a discount)",
         when=(("algorithm.adv_estimator", ("gae", "reinforce_plus_plus")),)),
    Rule("algorithm.lam", UNIT, "GAE's lambda",
         "verl core_algos compute_gae_advantage_return (a trace-decay weight)",
         when=(("algorithm.adv_estimator", ("gae",)),)),
    Rule("algorithm.kl_ctrl.kl_coef", NON_NEGATIVE, "the in-reward KL penalty's coefficient",
         "verl core_algos FixedKLController / AdaptiveKLController(init_kl_coef)",
         when=(_KL_IN_REWARD,)),
    Rule("algorithm.kl_ctrl.horizon", POSITIVE_INT, "the adaptive KL controller's horizon",
         "verl core_algos get_kl_controller: assert kl_ctrl.horizon > 0",
         when=_ADAPTIVE_KL_IN_REWARD),
    Rule("algorithm.kl_ctrl.target_kl", POSITIVE, "the adaptive KL controller's target (it divides by it)",
         "verl core_algos AdaptiveKLController.update: current_kl / target - 1",
         when=_ADAPTIVE_KL_IN_REWARD),
    # ---- trainer, Ray
    Rule("trainer.total_epochs", POSITIVE_INT, "passes over train_files; 0 trains nothing",
         "verl RayPPOTrainer: total_training_steps = len(train_dataloader) * total_epochs"),
    Rule("trainer.total_training_steps", POSITIVE_INT_OR_NULL, "steps of the run; null = total_epochs epochs",
         "verl RayPPOTrainer._create_dataloader: total_training_steps overrides the epochs' count"),
    Rule("trainer.ray_timeout_s", FINITE, "seconds per call to the workers; <= 0 = no limit",
         "verl_lite's own key (ray.get's timeout)"),
    Rule("trainer.ray_wait_nodes_s", NON_NEGATIVE, "seconds to wait for the joined cluster's nodes; 0 = look once",
         "verl_lite's own key (the wait of MindSpeed-RL's launch scripts for nnodes nodes)"),
    Rule("ray_init.num_cpus", POSITIVE_INT_OR_NULL, "CPUs of the local Ray cluster; null = this machine's",
         "ray.init(num_cpus): workers need CPUs to be scheduled"),
)


def _select(cfg: Any, key: str) -> Any:
    """The value at a dotted key (sections by attribute, open sections by item), _ABSENT when missing."""
    node = cfg
    for part in key.split("."):
        if hasattr(node, "keys") and not hasattr(type(node), "__dataclass_fields__"):
            node = node[part] if part in node else _ABSENT
        else:
            node = getattr(node, part, _ABSENT)
        if node is _ABSENT:
            return _ABSENT
    return node


def rule_keys(rule: Rule) -> List[str]:
    """The schema's keys a rule's pattern names (the pattern itself for an open section's key)."""
    if not any(c in rule.pattern for c in "*?["):
        return [rule.pattern]
    return [k for k, info in keys.key_table().items() if not info.section and fnmatch.fnmatchcase(k, rule.pattern)]


def _role_runs(cfg: Any, key: str) -> bool:
    if key.startswith("critic."):
        return roles.critic_enabled(cfg)
    if key.startswith("actor_rollout_ref.ref."):
        return roles.ref_enabled(cfg)
    return True


def applies(cfg: Any, rule: Rule, key: str) -> bool:
    """Whether the rule's key is read in this run: its role runs and each `when` key has an allowed value."""
    return _role_runs(cfg, key) and all(_select(cfg, k) in allowed for k, allowed in rule.when)


def _as_number(value: Any) -> Optional[float]:
    """A number from an int, a float or a numeric string ("1e-6", "nan"); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _default(key: str) -> str:
    """"; default <value>" from the schema when it is verl's default too; "; verl_lite's default <value>
    (verl's <value>)" where they differ (verl_names.DEFAULT_DIFFERENCES); "" when the default is not a
    plain number or list of numbers."""
    info = keys.key_table().get(key)
    default = None if info is None else info.default
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        shown = str(default)
    elif isinstance(default, list) and all(isinstance(v, (int, float)) for v in default):
        shown = f"[{', '.join(str(v) for v in default)}]"
    else:
        return ""
    if key in verl_names.DEFAULT_DIFFERENCES:
        return f"; verl_lite's default {shown} (verl's {verl_keys.DEFAULTS.get(key)})"
    return f"; default {shown}"


def value_problem(rule: Rule, key: str, value: Any) -> Optional[str]:
    """The message for a value outside the rule's range, or None."""
    if value is None and rule.range.nullable:
        return None
    expected = rule.range.text()
    why = rule.why + _default(key)
    if rule.each:
        items = None if isinstance(value, (str, bytes)) or hasattr(value, "keys") or not hasattr(value, "__iter__") \
            else list(value)
        shown = "[" + ", ".join(str(v) for v in items) + "]" if items is not None else repr(value)
        numbers = [_as_number(v) for v in items] if items is not None else [None]
        if (items is None or (rule.length is not None and len(items) != rule.length)
                or any(n is None or not rule.range.admits(n) for n in numbers)):
            count = f"{rule.length} numbers, each " if rule.length else "numbers, each "
            return f"{key}={shown}: must be {count}{expected} ({why})"
        return None
    number = _as_number(value)
    if number is None or not rule.range.admits(number):
        return f"{key}={value!r}: must be {expected} ({why})"
    return None


def value_problems(cfg: Any) -> List[str]:
    """Every number of the run outside its rule's range, one line each, in the table's order."""
    problems = []
    for rule in RULES:
        for key in rule_keys(rule):
            if not applies(cfg, rule, key):
                continue
            value = _select(cfg, key)
            if value is _ABSENT:
                continue  # a key of an open section that is not set
            problem = value_problem(rule, key, value)
            if problem:
                problems.append(problem)
    return problems


def value_warnings(cfg: Any) -> List[str]:
    """Valid numbers that make a role learn nothing: a learning rate of 0 (torch and verl accept it)."""
    warnings = []
    for key in rule_keys(next(rule for rule in RULES if rule.pattern == LR)):
        value = _select(cfg, key)
        if _role_runs(cfg, key) and _as_number(value) == 0:
            warnings.append(f"{key}=0: the role's weights never change (a learning rate of 0){_default(key)}")
    return warnings
