"""What algorithm.rollout_correction asks for, and the preflight's rules for it, torch-free
(trainer/algos/rollout_correction.py computes the weights, masks and metrics).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from verl_lite.config.verl_names import NOT

# the losses that multiply algorithm.rollout_correction's importance weights into their per-token loss
IS_WEIGHTED_LOSSES = ("vanilla", "gspo")
SAFETY_BOUND = 20.0
IS_LEVELS = ("token", "sequence")
LOSS_TYPES = ("ppo_clip", "reinforce")
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


def active(rc: Any) -> bool:
    """Whether `algorithm.rollout_correction` asks for anything (importance weights or rejection)."""
    return rc is not None and (rc.rollout_is is not None or rc.rollout_rs is not None)


def needs_rollout_log_probs(rc: Any) -> bool:
    """Whether the correction reads the rollout's own log-probs (anything asked for, or bypass mode)."""
    return rc is not None and (active(rc) or bool(rc.bypass_mode))


def parse_is_threshold(spec: Any) -> Tuple[float, Optional[float]]:
    """rollout_is_threshold -> (upper, lower or None): a number / "U" is TIS, "L_U" is IcePop."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"algorithm.rollout_correction.rollout_is_threshold={spec!r}: give a number (TIS upper "
                         f"bound, e.g. 2.0) or a 'lower_upper' string (IcePop, e.g. '0.5_5.0')")
    lower: Optional[float] = None
    try:
        if isinstance(spec, str) and "_" in spec.strip():
            lo, up = spec.strip().split("_", 1)
            lower, upper = float(lo), float(up)
        else:
            upper = float(spec)
    except ValueError:
        raise ValueError(f"algorithm.rollout_correction.rollout_is_threshold={spec!r} is not a number or "
                         f"'lower_upper' pair of numbers") from None
    if upper <= 0 or (lower is not None and (lower <= 0 or lower > upper)):
        raise ValueError(f"algorithm.rollout_correction.rollout_is_threshold={spec!r}: bounds must be positive "
                         f"with lower <= upper")
    return upper, lower


def parse_rs(rollout_rs: Any, threshold: Any) -> List[Tuple[str, Optional[float], float]]:
    """rollout_rs / rollout_rs_threshold -> [(option, lower or None, upper)], duplicates dropped; one
    threshold is shared by all options, else one per option. A k1 option with one number U takes 1/U
    as its lower bound; k2/k3 options take one upper bound."""
    if not isinstance(rollout_rs, str) or not [o for o in rollout_rs.split(",") if o.strip()]:
        raise ValueError(f"algorithm.rollout_correction.rollout_rs={rollout_rs!r}: give a comma-separated list of "
                         f"{', '.join(RS_OPTIONS)}")
    options: List[str] = []
    for opt in (o.strip() for o in rollout_rs.split(",")):
        if opt and opt not in RS_OPTIONS:
            raise ValueError(f"algorithm.rollout_correction.rollout_rs option {opt!r} is not one of "
                             f"{', '.join(RS_OPTIONS)}")
        if opt and opt not in options:
            options.append(opt)
    if threshold is None:
        raise ValueError("algorithm.rollout_correction.rollout_rs is set but rollout_rs_threshold is null: set it "
                         "(e.g. '0.5_2.0' for a *_k1 option, 0.01 for k2/k3)")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, str)):
        raise ValueError(f"algorithm.rollout_correction.rollout_rs_threshold={threshold!r}: give a number or string")
    if isinstance(threshold, str):
        specs = [p.strip() for p in threshold.split(",") if p.strip()]
    else:
        specs = [str(threshold)]
    if len(specs) not in (1, len(options)):
        raise ValueError(f"algorithm.rollout_correction.rollout_rs_threshold={threshold!r}: give one threshold for "
                         f"all options or one per option ({len(options)}: {', '.join(options)})")
    specs = specs * len(options) if len(specs) == 1 else specs
    out: List[Tuple[str, Optional[float], float]] = []
    for opt, spec in zip(options, specs):
        bad = f"algorithm.rollout_correction.rollout_rs_threshold {spec!r} for {opt}"
        try:
            if opt.endswith("k1"):
                lo, up = spec.split("_", 1) if "_" in spec else (str(1.0 / float(spec)), spec)
                lower, upper = float(lo), float(up)
                if lower <= 0 or upper <= 0 or lower > upper:
                    raise ValueError(f"{bad}: bounds must be positive with lower <= upper")
            else:
                if "_" in spec:
                    raise ValueError(f"{bad}: a k2/k3 option takes one upper bound, not 'lower_upper'")
                lower, upper = None, float(spec)
                if upper <= 0:
                    raise ValueError(f"{bad}: must be positive")
        except ValueError as e:
            raise ValueError(str(e) if str(e).startswith(bad) else f"{bad} is not a number") from None
        out.append((opt, lower, upper))
    return out


def validate(rc: Any) -> None:
    """Refuse bad settings before a run starts (the same checks the step makes)."""
    if rc.rollout_is is not None:
        if rc.rollout_is not in IS_LEVELS:
            raise ValueError(f"algorithm.rollout_correction.rollout_is={rc.rollout_is!r}: choose null, token or "
                             "sequence")
        parse_is_threshold(rc.rollout_is_threshold)
    if rc.rollout_rs is not None:
        parse_rs(rc.rollout_rs, rc.rollout_rs_threshold)


def rollout_correction_problems(cfg: Any) -> List[str]:
    """What algorithm.rollout_correction cannot do in this config (preflight)."""

    rc, rollout = cfg.algorithm.rollout_correction, cfg.actor_rollout_ref.rollout
    prefix = "algorithm.rollout_correction"
    problems = []
    loss_mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    if rc.loss_type not in LOSS_TYPES:
        problems.append(f"{prefix}.loss_type={rc.loss_type!r}: choose one of {', '.join(LOSS_TYPES)} "
                        "(the bypass-mode loss)")
    if rc.bypass_mode and loss_mode != "vanilla":
        problems.append(f"{prefix}.bypass_mode=True with actor_rollout_ref.actor.policy_loss.loss_mode="
                        f"{loss_mode!r} is {NOT}: bypass mode trains its own loss ({prefix}.loss_type: ppo_clip "
                        "or reinforce) in place of the configured one, as verl does; set loss_mode=vanilla")
    try:
        validate(rc)
    except ValueError as e:
        problems.append(str(e))
    if not (active(rc) or rc.bypass_mode):
        return problems
    if cfg.async_training.enable and cfg.async_training.stale_policy == "reweight":
        problems.append(f"{prefix} (rollout_is / rollout_rs / bypass_mode) with async_training.stale_policy=reweight "
                        f"is {NOT}: both correct the gap between the weights that generated and those that train, "
                        "and together they would weigh it twice; set async_training.stale_policy=drop (verl_lite's "
                        f"default; verl has no such key) and let {prefix} correct it")
    if rollout.name == "hf" and rollout.calculate_log_probs is not True:
        problems.append(f"{prefix} needs the rollout's log-probs: set "
                        "actor_rollout_ref.rollout.calculate_log_probs=True (the hf rollout returns them only when "
                        "asked)")
    elif rollout.calculate_log_probs is False:
        problems.append(f"{prefix} needs the rollout's log-probs: "
                        "actor_rollout_ref.rollout.calculate_log_probs=False "
                        "turns them off; set it to True (or null)")
    if rc.rollout_is is not None and not rc.bypass_mode and loss_mode not in IS_WEIGHTED_LOSSES:
        problems.append(f"{prefix}.rollout_is={rc.rollout_is} with actor_rollout_ref.actor.policy_loss.loss_mode="
                        f"{loss_mode!r} is {NOT}: the importance weights multiply the loss of "
                        f"{', '.join(IS_WEIGHTED_LOSSES)}; use one of those, or rollout_is=null (rollout_rs works "
                        "with every loss)")
    return problems
