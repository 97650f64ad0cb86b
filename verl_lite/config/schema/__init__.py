"""Structured config for verl_lite: dataclasses whose key names are the ones verl users type.

Only what verl_lite supports is here; an unknown key is an error with a suggestion (see
`verl_lite.config.compose`). Open dicts (`override_transformer_config`, `override_config`) take
new keys with Hydra's `+key=value`. The sections are split over engine.py (optimizer, Megatron,
FSDP, model), actor.py (actor_rollout_ref), profiler.py (the roles' profiler and global_profiler),
algorithm.py (algorithm, reward_model, custom_reward_function) and run.py (data, critic, async,
trainer, Ray, the whole config); the comment above each field is its documentation
(`tools/gen_config_docs.py` reads them into docs/config.md).
"""

from verl_lite.config.schema.actor import (ActorConfig, ActorRolloutRefConfig, CheckpointConfig, CheckpointEngineConfig,
                                           PolicyLossConfig, RefConfig, RolloutConfig)
from verl_lite.config.schema.algorithm import (AlgorithmConfig, CustomRewardFunctionConfig, KLControlConfig,
                                               RewardModelConfig)
from verl_lite.config.schema.engine import FSDPConfig, MegatronConfig, ModelConfig, OptimConfig
from verl_lite.config.schema.profiler import (GlobalProfilerConfig, ProfilerConfig, ProfilerToolConfig,
                                              TorchProfilerToolConfig)
from verl_lite.config.schema.run import (AsyncTrainingConfig, CriticConfig, DataConfig, RayInitConfig, TrainerConfig,
                                         VerlLiteConfig)

__all__ = [
    "ActorConfig", "ActorRolloutRefConfig", "AlgorithmConfig", "AsyncTrainingConfig", "CheckpointConfig",
    "CheckpointEngineConfig", "CriticConfig", "CustomRewardFunctionConfig", "DataConfig", "FSDPConfig",
    "GlobalProfilerConfig", "KLControlConfig", "MegatronConfig", "ModelConfig", "OptimConfig", "PolicyLossConfig",
    "ProfilerConfig", "ProfilerToolConfig", "RayInitConfig", "RefConfig", "RewardModelConfig", "RolloutConfig",
    "TorchProfilerToolConfig", "TrainerConfig", "VerlLiteConfig",
]
