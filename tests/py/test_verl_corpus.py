"""Every training run of verl's repository at the pinned commit (tests/py/verl_corpus/runs.json,
extracted by extract.py) through the preflight, as a verl user types it: each run either passes
`python -m verl_lite.check` unchanged (for the device it targets), or each line verl_lite cannot
honour is refused with a "not supported" message naming the key.

tests/py/verl_corpus/expected.json is today's honest status, run by run: the keys refused (one
problem per key, in order); an empty list means the run passes. When a feature lands its keys leave
the lists (`python tests/py/verl_corpus/status.py --write` rewrites the table and
docs/verl_corpus.md), so this test fails whenever behaviour changes in either direction.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from verl_lite.config.compose import compose_config
from verl_lite.config.generated import verl_keys

sys.path.insert(0, str(Path(__file__).parent / "verl_corpus"))
import status  # noqa: E402  (tests/py/verl_corpus/status.py)

RUNS = status.runs()
EXPECTED = json.loads(status.EXPECTED_FILE.read_text())
ROOTS = ("examples/", "verl/experimental/", "tests/special_", "docs/start/quickstart.rst")
# what each refusal must say; any key not listed here: "not supported"
FRAGMENT = {
    # keys verl does not have at the pinned commit either (verl's Hydra refuses those runs too)
    "actor_rollout_ref.rollout.single_turn_response_length": "unknown key",
    "actor_rollout_ref.actor.model_engine": "unknown key",
    # `+key=` for keys verl's config already has (verl's Hydra refuses to add them: the run does not compose there)
    "algorithm.filter_groups.enable": "cannot add",
    "algorithm.filter_groups.max_num_gen_batches": "cannot add",
    # train_batch_size=0 where the fully-async trainer config is not composed (its --config-name is refused)
    "data.train_batch_size": "is verl's fully-async form",
    # a step's sequences (ppo_mini_batch_size * require_batches prompts with train_batch_size=0) over the DP ranks
    "actor_rollout_ref.actor.ppo_mini_batch_size": "is not divisible by the data-parallel size",
    # vLLM's expert parallelism is its own setting here
    "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_expert_parallel": "set it with "
                                                                           "actor_rollout_ref.rollout.expert_parallel_size",
    # TP above the model's key/value heads (Megatron-Bridge replicates them; the native bridge does not)
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": "key/value heads",
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": "key/value heads",
    # a vLLM data-parallel group of part of the engines, or of fully-async replicas (vLLM engines of their own)
    "actor_rollout_ref.rollout.data_parallel_size": "actor_rollout_ref.rollout.data_parallel_size=1",
    # where the fully-async trainer config is not composed (its --config-name is refused)
    "rollout.total_rollout_steps": "counts the prompts of verl's fully-async rollouter",
    # layouts megatron-core refuses too (world % (EP*ETP*PP) != 0), for actor and ref alike
    "trainer.nnodes": "is not divisible by",
    # token budgets below the longest sequence: verl asserts the same (where verl multiplies the budget by
    # the Ulysses size, the run also sets the refused ulysses_sequence_parallel_size)
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "is smaller than",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "is smaller than",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "is smaller than",
    # vLLM's own rule: EP = TP x DP of the engine
    "actor_rollout_ref.rollout.expert_parallel_size": "spreads the experts over every rank",
    # `+` on a key verl's config has too (verl: "Could not append to config. An item is already at ...")
    "actor_rollout_ref.actor.fsdp_config.model_dtype": "it already exists",
    # `+` on it (verl refuses the line) or merge=False (adapters sent to the rollout)
    "actor_rollout_ref.model.lora.merge": ("it already exists in verl's config", "not supported"),
    # True on a vision-language model (its shape shipped or readable) on the torch engine, which runs it padded
    "actor_rollout_ref.model.use_remove_padding": "vision-language models run padded",
    # a megatron-core OptimizerConfig field on an fsdp role: not a keyword of the torch optimizer
    "actor_rollout_ref.actor.optim.override_optimizer_config.offload_fraction": "act on the megatron strategy only",
}


def test_the_corpus_holds_every_training_run_of_one_pinned_verl_commit_with_verls_verdict():
    assert set(RUNS) == set(EXPECTED)
    assert len(RUNS) >= 230 and len({run["script"] for run in RUNS.values()}) >= 150
    assert {run["verl_commit"] for run in RUNS.values()} == {verl_keys.VERL_COMMIT}
    for name, run in RUNS.items():
        assert run["script"].startswith(ROOTS) and "/sft/" not in run["script"], name
        assert run["argv"] and run["device"] in ("cuda", "npu"), name
        assert isinstance(run["verl_composes"], bool) and (run["verl_error"] is None) == run["verl_composes"], name
    # the variants the issue names are there, and checked for their device
    assert RUNS["grpo_trainer/run_qwen3_5_35b_megatron@npu_bridge"]["env"] == {"DEVICE": "npu",
                                                                                "USE_MINDSPEED_BRIDGE": "True"}
    assert RUNS["grpo_trainer/run_qwen3_5_35b_megatron@npu"]["device"] == "npu"
    assert RUNS["grpo_trainer/run_qwen3_5_35b_megatron"]["device"] == "cuda"
    # verl's own verdict is recorded, both ways
    assert 0 < sum(not run["verl_composes"] for run in RUNS.values()) < len(RUNS) // 4


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_run_passes_or_each_refused_line_is_refused_by_name(name):
    problems, wrong = status.refusals(RUNS[name], EXPECTED[name], FRAGMENT)
    assert not wrong, "\n".join(wrong + problems)
    keys = EXPECTED[name]
    assert len(set(problems)) == len(problems), "a problem is reported twice"
    # a key is refused once, or once per role (the same layout rule for actor and ref)
    roles = [p.split(":", 1)[0] if p.startswith(("actor:", "ref:", "critic:")) else "" for p in problems]
    assert len(set(zip(roles, keys))) == len(keys), f"a key is refused twice: {keys}"


# refusals of a size the run leaves at its default, where verl_lite's default differs from verl's
UNSET = {
    # the script's command ends at a blank line before trainer.n_gpus_per_node: verl trains on its default
    # 8 devices, verl_lite on its default 1, which the actor's megatron TP=2 does not divide
    ("fully_async_policy/geo3k_qwen25vl_7b_megatron_4_4", "trainer.nnodes"),
}


def test_every_refused_key_is_a_key_the_run_sets():
    for name, keys in EXPECTED.items():
        typed = " ".join(status.line_of(RUNS[name]))
        for key in keys:
            if (name, key) in UNSET:
                continue
            last = key.rsplit(".", 1)[-1].lstrip("-")
            assert last in typed, f"{name}: {key} is refused but the run does not set it"


def test_the_docs_give_the_pass_count_and_the_blocking_features():
    docs_table = json.loads(status.DOCS_EXPECTED_FILE.read_text())
    assert status.DOC.read_text() == status.doc_text(EXPECTED, docs_table), \
        "docs/verl_corpus.md is stale: python tests/py/verl_corpus/status.py --write"
    figures = status.figures(EXPECTED)
    assert f"**{figures['passing']}** pass" in status.DOC.read_text()


def test_model_engine_megatron_gives_the_megatron_layout_so_the_big_npu_runs_divide_evenly():
    """model_engine=megatron used to leave the layout at fsdp: DP = every device, and false
    divisibility errors on the 256- and 64-NPU runs."""
    for name in ("grpo_trainer/run_qwen3_5_397b_megatron@npu", "grpo_trainer/run_qwen3_5_122b_a10b_megatron@npu",
                 "grpo_trainer/run_qwen3_5_397b_megatron"):
        cfg, _ = compose_config(status.line_of(RUNS[name]))
        assert cfg.actor_rollout_ref.actor.strategy == "megatron"
        assert not [p for p in status.problems_of(RUNS[name]) if "divisible" in p]
