"""Real Hugging Face tokenizers on the data path: a byte-level BPE tokenizer trained here (nothing
downloaded) with Qwen's ChatML template, the shipped tiny-qwen3_5-bpe model, verl's raw-prompt
and template-kwargs settings, EOS and pad ids through the rollout to the reward, and a short
training run on GSM8K-format rows."""

from __future__ import annotations

import json

import pytest
import torch

from verl_lite.data.dataset import DataError, PromptDataset, encode_prompt
from verl_lite.data.synthetic import write_parquet
from verl_lite.data.tiny_hf import CHATML_TEMPLATE, GSM8K_INSTRUCTION, corpus, train_tokenizer
from verl_lite.data.tokenizer import load_tokenizer, tokenizer_problem

QUESTION = "Ann has 3 apples and gets 4 more. How many apples does Ann have now?"


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(corpus(n=200), vocab_size=400)


def gsm8k_row(question: str, answer: str, i: int) -> dict:
    """A row as verl's examples/data_preprocess/gsm8k.py writes it."""
    return {"data_source": "openai/gsm8k", "ability": "math",
            "prompt": [{"role": "user", "content": f"{question} {GSM8K_INSTRUCTION}"}],
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": "train", "index": i}}


def test_chat_template_ids_round_trip_to_the_chatml_text(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    ids = encode_prompt(tok, messages)
    assert all(isinstance(i, int) for i in ids)
    assert tok.decode(ids, skip_special_tokens=False) == (
        f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")  # the marker is one id, not its characters


def test_a_slow_python_tokenizer_takes_the_same_path():
    from transformers import ByT5Tokenizer, PythonBackend

    slow = ByT5Tokenizer()  # byte-level, needs no vocabulary file
    assert isinstance(slow, PythonBackend)
    slow.chat_template = CHATML_TEMPLATE
    ids = encode_prompt(slow, [{"role": "user", "content": "Hi 3"}])
    assert slow.decode(ids) == "<|im_start|>user\nHi 3<|im_end|>\n<|im_start|>assistant\n"
    assert encode_prompt(slow, "Hi", apply_chat_template=False) == slow.encode("Hi") == [75, 108, slow.eos_token_id]


def test_the_shipped_bpe_model_tokenizes_prompts_with_its_own_vocab_and_special_ids():
    tok = load_tokenizer("tiny-qwen3_5-bpe")
    from verl_lite.models import read_hf_config, resolve_model_dir

    hf = read_hf_config(resolve_model_dir("tiny-qwen3_5-bpe"))
    assert len(tok) == hf["vocab_size"] == 512
    assert (tok.eos_token, tok.eos_token_id, tok.pad_token, tok.pad_token_id) == ("<|im_end|>", hf["eos_token_id"],
                                                                                  "<|endoftext|>", hf["pad_token_id"])
    ids = encode_prompt(tok, [{"role": "user", "content": QUESTION}])
    assert max(ids) < hf["vocab_size"] and len(ids) < len(QUESTION)  # merges learned: fewer ids than characters


def test_truncation_keeps_the_end_or_the_start_and_an_overlong_prompt_is_refused_by_default(tok, tmp_path):
    path = str(tmp_path / "train.parquet")
    write_parquet([gsm8k_row(QUESTION, "7", 0)], path)
    full = PromptDataset(path, tok, 512).examples[0].prompt_ids
    left = PromptDataset(path, tok, 10, truncation="left").examples[0].prompt_ids
    right = PromptDataset(path, tok, 10, truncation="right").examples[0].prompt_ids
    assert len(full) > 10 and left == full[-10:] and right == full[:10]
    with pytest.raises(DataError, match=rf"prompt of row 0 has {len(full)} tokens > data.max_prompt_length=10"):
        PromptDataset(path, tok, 10)


def test_prompts_of_different_lengths_are_left_padded_with_the_pad_id(tok):
    from verl_lite.batch import left_pad

    short = encode_prompt(tok, [{"role": "user", "content": "Hi"}])
    long = encode_prompt(tok, [{"role": "user", "content": QUESTION}])
    batch = left_pad([short, long], tok.pad_token_id)
    gap = len(long) - len(short)
    assert batch["input_ids"][0].tolist() == [tok.pad_token_id] * gap + short
    assert batch["attention_mask"][0].tolist() == [0] * gap + [1] * len(short)
    assert batch["input_ids"][1].tolist() == long


def test_a_tokenizer_without_a_chat_template_is_refused_with_the_fix(tok, tmp_path):
    tok.save_pretrained(tmp_path / "no_template")
    for name in ("chat_template.jinja", "chat_template.json"):
        (tmp_path / "no_template" / name).unlink(missing_ok=True)
    config = json.loads((tmp_path / "no_template" / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (tmp_path / "no_template" / "tokenizer_config.json").write_text(json.dumps(config))
    bare = load_tokenizer(str(tmp_path / "no_template"))
    fix = r"has no chat template: .*set data\.apply_chat_template=False"
    with pytest.raises(DataError, match=fix):
        encode_prompt(bare, [{"role": "user", "content": "hi"}])
    problem = tokenizer_problem(str(tmp_path / "no_template"), needs_chat_template=True)
    assert "has no chat template" in problem and "data.apply_chat_template=False" in problem
    assert tokenizer_problem(str(tmp_path / "no_template"), needs_chat_template=False) is None
    assert encode_prompt(bare, "Ann has 3", apply_chat_template=False) == bare.encode("Ann has 3")


def test_without_the_template_a_plain_string_or_the_messages_text_is_encoded_as_is(tok, tmp_path):
    chat, raw = str(tmp_path / "chat.parquet"), str(tmp_path / "raw.parquet")
    write_parquet([gsm8k_row(QUESTION, "7", 0)], chat)
    write_parquet([{**gsm8k_row(QUESTION, "7", 0), "prompt": "Count: 1 2 3"}], raw)
    with pytest.raises(DataError, match="row 0: column 'prompt' must be a non-empty list of chat messages, got"):
        PromptDataset(raw, tok, 512)
    assert PromptDataset(raw, tok, 512, apply_chat_template=False).examples[0].prompt_ids == tok.encode("Count: 1 2 3")
    text_ids = PromptDataset(chat, tok, 512, apply_chat_template=False).examples[0].prompt_ids
    assert text_ids == tok.encode(f"{QUESTION} {GSM8K_INSTRUCTION}")


def test_apply_chat_template_kwargs_reach_the_template(tok):
    from transformers import PreTrainedTokenizerFast

    templated = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>",
                                        chat_template="{% if brief %}Be brief. {% endif %}" + CHATML_TEMPLATE)
    messages = [{"role": "user", "content": "Hi"}]
    plain = templated.decode(encode_prompt(templated, messages), skip_special_tokens=False)
    brief = templated.decode(encode_prompt(templated, messages, chat_template_kwargs={"brief": True}),
                             skip_special_tokens=False)
    assert brief == "Be brief. " + plain


def test_eos_ends_the_response_mask_and_the_reward_sees_the_text_without_special_tokens():
    from verl_lite.reward.manager import RewardManager
    from verl_lite.rollout.hf import response_mask_from
    from verl_lite.reward.manager import score_responses

    tok = load_tokenizer("tiny-qwen3_5-bpe")
    right, wrong = tok.encode("So #### 7"), tok.encode("So #### 8")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    width = max(len(right), len(wrong)) + 3
    rows = [right + [eos] + [pad] * (width - len(right) - 1), wrong + [eos, 5] + [pad] * (width - len(wrong) - 2)]
    responses = torch.tensor(rows)
    mask = response_mask_from(responses, eos)
    assert mask[0].tolist() == [1] * (len(right) + 1) + [0] * (width - len(right) - 1)  # EOS counts, then nothing
    batch = {"responses": responses, "response_mask": mask, "data_source": ["openai/gsm8k"] * 2,
             "ground_truth": ["7", "7"], "extra_info": [{}, {}]}
    token_scores, texts = score_responses(tok, RewardManager(), batch)[:2]
    assert texts == ["So #### 7", "So #### 8"]
    assert token_scores.sum(-1).tolist() == [1.0, 0.0]
    assert token_scores[0, len(right)] == 1.0  # the score sits on the EOS, the response's last token


def test_a_grpo_step_runs_on_the_bpe_model_with_gsm8k_rows(tmp_path):
    from verl_lite.config import load_config
    from verl_lite.trainer.run import run

    rows = [gsm8k_row(f"Ann has {a} apples and gets {b} more. How many apples does Ann have now?", str(a + b), i)
            for i, (a, b) in enumerate([(3, 4), (5, 2), (10, 7), (8, 8)])]
    write_parquet(rows, str(tmp_path / "train.parquet"))
    out = tmp_path / "run"
    cfg = load_config([
        "actor_rollout_ref.model.path=tiny-qwen3_5-bpe", f"data.train_files={tmp_path}/train.parquet",
        "data.val_files=[]", "data.train_batch_size=2", "data.max_prompt_length=64", "data.max_response_length=8",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.device=cpu",
        "trainer.ray=false", "trainer.total_training_steps=2", f"trainer.default_local_dir={out}",
        "trainer.logger=jsonl", "trainer.plot_rewards=false",
    ])
    assert run(cfg) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(0 < m["response_length/mean"] <= 8 for m in metrics)
    assert all(m["critic/score/mean"] in (0.0, 0.25, 0.5, 0.75, 1.0) for m in metrics)


def test_the_main_job_runs_its_steps_on_the_bpe_model_with_preprocessed_gsm8k_rows(tmp_path):
    """The user's path: a local GSM8K-layout copy -> verl's parquet -> run_tiny.sh on a real tokenizer,
    every step logged and the validation run mid-way and at the end (4 steps: what a step does is the
    same at step 4 as at step 20)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from verl_lite.data.dataset import read_rows
    from verl_lite.data.tiny_hf import write_gsm8k_layout
    from verl_lite.reward.manager import RewardManager

    repo = Path(__file__).resolve().parents[2]
    write_gsm8k_layout(str(tmp_path / "local"), n_train=64, n_test=8)
    subprocess.run([sys.executable, "examples/data_preprocess/gsm8k.py", "--local_dataset_path", str(tmp_path / "local"),
                    "--local_save_dir", str(tmp_path / "data")], check=True, cwd=str(repo), capture_output=True)
    rows = read_rows(str(tmp_path / "data" / "train.parquet"))
    truths = [r["reward_model"]["ground_truth"] for r in rows[:2]]
    planted = [f"So the answer is\n#### {truths[0]}", f"So the answer is\n#### {int(truths[1]) + 1}"]
    assert RewardManager()([rows[0]["data_source"], rows[1]["data_source"]], planted, truths) == [1.0, 0.0]

    out = tmp_path / "run"
    env = {**os.environ, "HF_MODEL_PATH": "tiny-qwen3_5-bpe", "TRAIN_FILES": str(tmp_path / "data" / "train.parquet"),
           "VAL_FILES": str(tmp_path / "data" / "test.parquet"), "MAX_PROMPT_LENGTH": "64",
           "MAX_RESPONSE_LENGTH": "16", "TOTAL_STEPS": "4", "SAVE_FREQ": "-1", "TEST_FREQ": "2"}
    done = subprocess.run(["bash", "examples/grpo/run_tiny.sh", f"trainer.default_local_dir={out}",
                           "trainer.plot_rewards=false", "ray_init.num_cpus=2"],
                          env=env, cwd=str(repo), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "critic/score/mean" in m]
    assert [m["step"] for m in steps] == [1, 2, 3, 4]
    assert all(0 < m["response_length/mean"] <= 16 for m in steps)
    assert [m["step"] for m in metrics if any(k.startswith("val/score") for k in m)] == [2, 4]


def test_mixed_gsm8k_and_math_files_load_together_and_each_row_is_scored_by_its_own_source(tmp_path):
    from verl_lite.preflight.data import data_source_problems
    from verl_lite.config import load_config
    from verl_lite.reward.manager import RewardManager

    write_parquet([gsm8k_row(QUESTION, "7", 0)], str(tmp_path / "gsm8k.parquet"))
    math_row = {"data_source": "DigitalLearningGmbH/MATH-lighteval", "ability": "math",
                "prompt": [{"role": "user", "content": "What is $\\frac{2}{4}$?"}],
                "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"}, "extra_info": {"index": 0}}
    write_parquet([math_row], str(tmp_path / "math.parquet"))
    files = f"data.train_files=[{tmp_path}/gsm8k.parquet,{tmp_path}/math.parquet]"
    cfg = load_config([files, "data.val_files=[]"])
    assert data_source_problems(cfg) == []
    tok = load_tokenizer("tiny-qwen3_5-bpe")
    examples = PromptDataset.from_config(cfg.data.train_files, tok, cfg.data).examples
    assert [e.data_source for e in examples] == ["openai/gsm8k", "DigitalLearningGmbH/MATH-lighteval"]
    score = RewardManager()
    sources, truths = [e.data_source for e in examples], [e.ground_truth for e in examples]
    assert score(sources, ["#### 7", "It is $\\boxed{\\dfrac{1}{2}}$."], truths) == [1.0, 1.0]
    assert score(sources, ["\\boxed{7}", "#### 0.5"], truths) == [0.0, 0.0]  # each source keeps its own format

    write_parquet([{**math_row, "data_source": "my/olympiad"}] * 2, str(tmp_path / "other.parquet"))
    problems = data_source_problems(load_config([f"data.train_files={tmp_path}/other.parquet", "data.val_files=[]"]))
    assert len(problems) == 1 and "has data_source 'my/olympiad' (2 rows), which no built-in scorer handles" in problems[0]
    custom = load_config([f"data.train_files={tmp_path}/other.parquet", "data.val_files=[]",
                          f"custom_reward_function.path={tmp_path}/reward.py"])
    assert data_source_problems(custom) == []


class PidTokenizer:
    """Answers each prompt with the id of the process that tokenized it (slowly enough that both
    processes of the pool get chunks)."""

    chat_template = "pid"

    def apply_chat_template(self, messages, **kwargs):
        import os
        import time

        time.sleep(0.01)
        return [os.getpid()]


def test_filter_overlong_prompts_workers_tokenizes_in_that_many_processes_with_the_same_ids_in_order(tok, tmp_path):
    import os

    from verl_lite.data.dataset import encode_prompts

    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(64)]
    pids = {ids[0] for ids in encode_prompts(PidTokenizer(), prompts, True, None, workers=2)}
    if os.cpu_count() == 1:  # capped at the CPU count, as verl caps it: this process does the work
        assert pids == {os.getpid()}
    else:
        assert len(pids) == 2 and os.getpid() not in pids  # two worker processes did the work
    assert {ids[0] for ids in encode_prompts(PidTokenizer(), prompts, True, None, workers=1)} == {os.getpid()}
    path = str(tmp_path / "train.parquet")
    write_parquet([gsm8k_row(f"{QUESTION} {'more ' * (i % 7)}", "7", i) for i in range(48)], path)
    lengths = sorted(len(e.prompt_ids) for e in PromptDataset(path, tok, 4096).examples)
    limit = lengths[len(lengths) // 2]  # about half the prompts are overlong
    one = PromptDataset(path, tok, limit, filter_overlong=True).examples
    two = PromptDataset(path, tok, limit, filter_overlong=True, workers=2).examples
    assert 0 < len(one) < 48 and [e.prompt_ids for e in two] == [e.prompt_ids for e in one]
    assert [e.uid for e in two] == [e.uid for e in one]
    with pytest.raises(ValueError, match=r"data.filter_overlong_prompts_workers=0 \(a positive number of processes\)"):
        PromptDataset(path, tok, limit, workers=0)


def test_data_trust_remote_code_reaches_the_driver_in_fully_async_and_is_said_to_do_nothing_in_sync():
    """verl's fully-async and one-step-off drivers load the tokenizer and processor with
    data.trust_remote_code; its sync trainer never reads the key."""
    from verl_lite.config import load_config
    from verl_lite.preflight.run import collect_warnings
    from verl_lite.trainer.run import driver_trusts_remote_code

    said = "data.trust_remote_code=True has no effect in the sync trainer"
    sync = load_config(["trainer.device=cpu", "data.trust_remote_code=True"])
    assert not driver_trusts_remote_code(sync)
    assert any(w.startswith(said) for w in collect_warnings(sync))
    both = load_config(["trainer.device=cpu", "actor_rollout_ref.model.trust_remote_code=True"])
    assert driver_trusts_remote_code(both)
    plain = load_config(["trainer.device=cpu"])
    assert not driver_trusts_remote_code(plain)
    assert not any(w.startswith(said) for w in collect_warnings(plain))
    lines = ["trainer.device=cpu", "async_training.enable=True", "data.trust_remote_code=True"]
    on = load_config(lines)
    assert driver_trusts_remote_code(on)
    assert not any(w.startswith(said) for w in collect_warnings(on))
    assert not driver_trusts_remote_code(load_config(lines[:2]))
