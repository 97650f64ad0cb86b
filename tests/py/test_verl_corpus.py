"""verl's own example runs (tests/py/verl_corpus/runs.json, extracted by extract.py from one pinned
verl commit) through the preflight, as a verl user would type them: each run either passes
`python -m verl_lite.check` unchanged (with its device given), or each line verl_lite cannot honour
is refused with a "not supported" message naming the key.

EXPECTED is today's honest status, run by run: the keys refused (one problem per key, in order).
An empty list means the run passes. When a feature lands, its keys leave the lists here, so this
test fails whenever behaviour changes in either direction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from verl_lite.preflight.run import collect_problems
from verl_lite.config.generated import verl_keys
from verl_lite.config.compose import compose_config

CORPUS = Path(__file__).parent / "verl_corpus" / "runs.json"
RUNS = {run["name"]: run for run in json.loads(CORPUS.read_text())}
# the device the run is checked for: the script's DEVICE, else verl's default (cuda)
DEVICE = {"gpu": "cuda", "npu": "npu"}
# the key a problem is about: "<role>: <key>=...", "<key>=...", "unknown key '<key>'"
KEY = re.compile(r"(?:(?:actor|ref|critic): )?(?:unknown key ')?([A-Za-z_]\w*(?:\.[A-Za-z_0-9][\w-]*)+)")
# what each refusal must say; any key not listed here: "not supported"
FRAGMENT = {
    # a key verl does not have at the pinned commit either (verl itself fails on this script)
    "actor_rollout_ref.rollout.single_turn_response_length": "unknown key",
    "actor_rollout_ref.rollout.name": "'sglang' is not supported: choose one of",
    # the fully-async script's train_batch_size=0 (it streams samples one prompt at a time)
    "data.train_batch_size": "must be a positive integer",
}
EXPECTED = {
    'qwen3_5_35b_megatron_gpu': [
    ],
    'qwen3_5_35b_megatron_npu': [
    ],
    'qwen3_5_35b_megatron_npu_bridge': [
    ],
    'qwen3_5_122b_a10b_megatron_gpu': [
    ],
    'qwen3_5_122b_a10b_megatron_npu': [
    ],
    'qwen3_5_122b_a10b_megatron_npu_bridge': [
    ],
    'qwen3_5_397b_megatron_gpu': [
    ],
    'qwen3_5_397b_megatron_npu': [
    ],
    'qwen3_5_397b_megatron_npu_bridge': [
    ],
    'qwen3_8b_grpo_fsdp': [
    ],
    'qwen3_8b_grpo_megatron': [
    ],
    'qwen2_5_32b_grpo_fsdp': [
    ],
    'quickstart_ppo': [
    ],
    'qwen3_8b_ppo_fsdp_gpu': [
    ],
    'qwen3_8b_ppo_fsdp_npu': [
        'actor_rollout_ref.actor.ulysses_sequence_parallel_size',
        'critic.ulysses_sequence_parallel_size',
    ],
    'qwen3_5_35b_fully_async_megatron': [
        'data.gen_batch_size',
        'actor_rollout_ref.rollout.single_turn_response_length',
        'algorithm.filter_groups.enable',
        'algorithm.filter_groups.max_num_gen_batches',
        'algorithm.filter_groups.metric',
        'actor_rollout_ref.model.use_fused_kernels',
        'actor_rollout_ref.actor.optim.lr_decay_steps',
        'actor_rollout_ref.rollout.multi_turn.enable',
        'actor_rollout_ref.rollout.multi_turn.max_user_turns',
        'actor_rollout_ref.rollout.multi_turn.max_assistant_turns',
        'actor_rollout_ref.rollout.multi_turn.max_tool_response_length',
        'actor_rollout_ref.rollout.agent.num_workers',
        'actor_rollout_ref.rollout.disable_log_stats',
        'rollout.total_rollout_steps',
        'async_training.staleness_threshold',
        'actor_rollout_ref.model.mtp.enable',
        'actor_rollout_ref.model.mtp.enable_train',
        'actor_rollout_ref.model.mtp.mtp_loss_scaling_factor',
        'actor_rollout_ref.model.mtp.detach_encoder',
        'actor_rollout_ref.model.mtp.enable_rollout',
        'actor_rollout_ref.model.mtp.speculative_algorithm',
        'actor_rollout_ref.model.mtp.speculative_num_steps',
        'actor_rollout_ref.model.mtp.speculative_eagle_topk',
        'actor_rollout_ref.model.mtp.speculative_num_draft_tokens',
        'actor_rollout_ref.rollout.name',
        'data.train_batch_size',
    ],
    'qwen3_06b_grpo_mindspeed_npu_ci': [
        'actor_rollout_ref.actor.megatron.use_dist_checkpointing',
        'actor_rollout_ref.ref.megatron.use_dist_checkpointing',
        'actor_rollout_ref.actor.megatron.dist_checkpointing_path',
        'actor_rollout_ref.ref.megatron.dist_checkpointing_path',
    ],
}


def problems_of(run):
    device = DEVICE.get(run["env"].get("DEVICE"), "cuda")
    cfg, problems = compose_config([f"trainer.device={device}", *run["argv"]])
    return problems + [p for p in collect_problems(cfg, for_training=False) if p not in problems]


def test_the_corpus_holds_the_17_runs_from_one_pinned_verl_commit():
    assert len(RUNS) == 17 and set(RUNS) == set(EXPECTED)
    assert {run["verl_commit"] for run in RUNS.values()} == {verl_keys.VERL_COMMIT}
    assert all(run["argv"] and run["entry"].startswith("verl.") for run in RUNS.values())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_run_passes_or_each_refused_line_is_refused_by_name(name):
    problems = problems_of(RUNS[name])
    keys = [m.group(1) if (m := KEY.match(p)) else p for p in problems]
    assert keys == EXPECTED[name], "\n".join(problems)
    for key, problem in zip(keys, problems):
        assert FRAGMENT.get(key, "not supported") in problem, problem
    assert len(set(problems)) == len(problems), "a problem is reported twice"
    assert len(set(keys)) == len(keys), f"a key is refused twice: {keys}"


def test_every_refused_key_is_a_key_the_run_sets():
    for name, keys in EXPECTED.items():
        typed = " ".join(RUNS[name]["argv"])
        for key in keys:
            last = key.rsplit(".", 1)[-1]
            assert last in typed, f"{name}: {key} is refused but the run does not set it"


def test_model_engine_megatron_gives_the_megatron_layout_so_the_big_npu_runs_divide_evenly():
    """model_engine=megatron used to leave the layout at fsdp: DP = every device, and false
    divisibility errors on the 256- and 64-NPU runs."""
    for name in ("qwen3_5_397b_megatron_npu", "qwen3_5_122b_a10b_megatron_npu", "qwen3_5_397b_megatron_gpu"):
        cfg, _ = compose_config(["trainer.device=npu", *RUNS[name]["argv"]])
        assert cfg.actor_rollout_ref.actor.strategy == "megatron"
        assert not [p for p in problems_of(RUNS[name]) if "divisible" in p]
