"""verl's documented training command lines (tests/py/verl_corpus/docs_runs.json, every training entry
point called in a code block of verl's docs at the pinned commit, with its page and line; extracted by
docs_extract.py) through the preflight, as the scripts corpus is (test_verl_corpus.py): each line passes
`python -m verl_lite.check` or each line it cannot honour is refused by name. docs_expected.json is
today's status line by line (`python tests/py/verl_corpus/status.py --write` rewrites it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from verl_lite.config.generated import verl_keys

sys.path.insert(0, str(Path(__file__).parent / "verl_corpus"))
import docs_extract  # noqa: E402  (tests/py/verl_corpus/docs_extract.py)
import status  # noqa: E402

RUNS = status.docs_runs()
EXPECTED = json.loads(status.DOCS_EXPECTED_FILE.read_text())
# what a refusal that is not "not supported" says, by key: each is a refusal verl shares, or a layout rule
FRAGMENT = {
    # verl's Hydra: "Could not override 'train_batch_size'" (key_of keeps the whole message: no dot in the key)
    "unknown key 'train_batch_size'; did you mean data.train_batch_size?": "did you mean data.train_batch_size",
    # verl asserts the same: a mini-batch per GPU (64 x 1 / 16 ranks = 4) divisible by the micro-batch (16)
    "actor: a mini-batch gives each of the 16 data-parallel ranks 64/16 = 4 sequences, not divisible by "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16: 4 % 16 = 4": "not divisible by",
    "rollout.test_freq": "unknown key",  # verl's fully-async config has no such key either
    "data.train_batch_size": "is not divisible by the data-parallel size",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "is not divisible by the data-parallel size",
    "actor_rollout_ref.rollout.name": "is not supported: choose one of hf, vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "a rollout TP group spanning nodes is not supported",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "read by the vllm rollout only",
    "actor_rollout_ref.rollout.disable_log_stats": "read by the vllm rollout only",
    "trainer.logger": "which is not supported",
    # a line that names no estimator trains verl's default, gae, with a critic: not in async training yet
    "async training updates the actor (and a ref for the KL loss) only; a critic (algorithm.adv_estimator=gae, "
    "critic.enable=None) is not supported yet: use algorithm.adv_estimator=grpo or async_training.enable=False":
        "not supported yet",
}


def test_the_docs_corpus_holds_each_training_line_of_verls_docs_with_its_page_and_line():
    assert set(RUNS) == set(EXPECTED) and len(RUNS) >= 20
    pages = {run["script"].split(":")[0] for run in RUNS.values()}
    for page in ("docs/start/quickstart.rst", "docs/examples/gsm8k_example.rst", "docs/start/multinode.rst",
                 "docs/advance/fully_async.md", "docs/advance/one_step_off.md", "docs/advance/determinism.md",
                 "docs/low_precision/fp8.md"):
        assert page in pages, page
    assert any(p.startswith("docs/ascend_tutorial/") for p in pages)
    for name, run in RUNS.items():
        page, _, line = run["script"].partition(":")
        assert name == page.removeprefix("docs/").rsplit(".", 1)[0] + ":" + line and int(line) > 0
        assert run["entry"] in docs_extract.ENTRIES and run["verl_commit"] == verl_keys.VERL_COMMIT
        assert (run["verl_error"] is None) == run["verl_composes"], name
        assert all(isinstance(edit, str) for edit in run["edits"])
    # the $HOME of the recorder, and the block's own variables, are expanded
    quickstart = RUNS["start/quickstart:85"]["argv"]
    assert "data.train_files=/home/user/data/gsm8k/train.parquet" in quickstart
    assert not [a for r in RUNS.values() for a in r["argv"] if "$" in a]


def test_a_block_is_read_as_the_user_means_it():
    lines = ["export X=1", "if [ 1 ]; then", "  y=2", "fi", "$ ray job submit --no-wait \\",
             "    -- python3 -m verl.trainer.main_ppo \\", "    # a comment", "    a.b=$y \\", "    ...",
             "python3 verl.experimental.fully_async_policy.fully_async_main c.d=1 > log 2>&1 &", "echo done"]
    script, commands = docs_extract.normalise(lines)
    assert script.splitlines() == ["export X=1", "y=2", "python3 -m verl.trainer.main_ppo \\", "    a.b=$y",
                                   "python3 -m verl.experimental.fully_async_policy.fully_async_main c.d=1"]
    assert [offset for offset, _ in commands] == [5, 9]
    assert commands[0][1] == ["ran the command without its launcher: --", "dropped a comment inside the command: "
                              "# a comment", "dropped a placeholder: ..."]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_docs_line_passes_or_each_refused_line_is_refused_by_name(name):
    problems, wrong = status.refusals(RUNS[name], EXPECTED[name], FRAGMENT)
    assert not wrong, "\n".join(wrong + problems)


def test_the_docs_give_the_docs_figures():
    text = status.DOC.read_text()
    figures = status.figures(EXPECTED, RUNS)
    assert f"- Of those, **{figures['passing']}** pass verl_lite's check unchanged." in text
    assert "## verl's documented command lines" in text
