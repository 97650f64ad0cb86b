"""Preflight rules of Ray's runtime env as the run passes it (`ray_init.runtime_env`, verl:
`ray_kwargs.ray_init.runtime_env`): its keys are Ray's, and env_vars is a mapping. Which variables
replace verl_lite's own is said by `runtime_env.runtime_env_overrides`.
"""

from __future__ import annotations

from typing import Any, List

from verl_lite.config.choices import RAY_RUNTIME_ENV_KEYS


def runtime_env_problems(cfg: Any) -> List[str]:
    """ray_init.runtime_env keys Ray's runtime_env does not know, and env_vars that are not a mapping."""
    env = getattr(cfg.ray_init, "runtime_env", None) or {}
    problems = [f"ray_init.runtime_env.{key}: Ray's runtime_env has no key {key!r} (verl: "
                f"ray_kwargs.ray_init.runtime_env.{key}); use one of {', '.join(RAY_RUNTIME_ENV_KEYS)}, or remove it"
                for key in env if key not in RAY_RUNTIME_ENV_KEYS]
    env_vars = env.get("env_vars") if "env_vars" in env else None
    if env_vars is not None and not hasattr(env_vars, "items"):
        problems.append(f"ray_init.runtime_env.env_vars={env_vars!r}: Ray's env_vars is a mapping of variable names "
                        "to values; set each with ray_init.runtime_env.env_vars.<NAME>=<value>")
    return problems
