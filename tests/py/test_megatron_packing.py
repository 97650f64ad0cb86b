"""Remove-padding (packed THD micro-batches) on the Megatron engines, on CPU: log-probs, values and
gradients of packed micro-batches against the padded ones (fp32), for Qwen3 and Qwen3.5 (dense
and MoE) at TP=2 with sequence parallelism, Qwen3 at PP=2 (TP=1), the Qwen3.5 critic at TP=1 (two
data-parallel ranks), the Ascend GDN kernel (its CPU double) on packed input, a check that the per-sequence
reset is what makes them equal, and the config's auto / True / False.

All megatron work runs in the spawn of two gloo processes the Megatron test modules share
(`_scenario`, tests/py/megatron_world.py); the tests assert on what it recorded. Two ragged micro-batches: rows of different prompt and response lengths, so a GDN state or an
attention that crossed a sequence boundary would change the log-probs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from megatron_world import megatron_sections, nll_loss, scenario, value_loss
from test_trainer import data_dir, read_metrics, run_training, tiny_overrides  # noqa: F401

pytestmark = pytest.mark.megatron

DOUBLE = Path(__file__).resolve().parent / "mindspeed_double" / "core_r0.16.0"
TOL = 2e-5  # fp32: packed and padded differ only in summation order
QWEN3, DENSE, MOE = "tiny-qwen3", "tiny-qwen3_5", "tiny-qwen3_5-moe"
# (model, tp, pp): TP=2 runs with sequence parallelism (the default); PP=2 (TP=1) with Qwen3 only: the
# pipeline passes packed hidden states the same way whatever the layers are
LAYOUTS = [(QWEN3, 2, 1), (DENSE, 2, 1), (MOE, 2, 1), (QWEN3, 1, 2)]


def ragged_batch(seed: int = 0, rows: int = 5):
    """Left-padded prompts of 1..5 tokens, right-padded responses of 1..7 tokens."""
    g = torch.Generator().manual_seed(seed)
    p, r = 5, 7
    ids = torch.randint(3, 48, (rows, p + r), generator=g)
    mask = torch.zeros(rows, p + r, dtype=torch.long)
    p_len = torch.randint(1, p + 1, (rows,), generator=g)
    r_len = torch.randint(1, r + 1, (rows,), generator=g)
    p_len[0], r_len[0] = p, r  # one full row
    for i in range(rows):
        mask[i, p - p_len[i]:p + r_len[i]] = 1
    ids = ids * mask
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -r:], response_mask=mask[:, -r:])


def _sections(path, tp=1, pp=1, remove_padding=None, overrides=None, critic=False):
    model, section = megatron_sections(path, tp, pp, init_seed=3, overrides=overrides, critic=critic)
    model.use_remove_padding = remove_padding
    section.optim.lr = 1e-2
    return model, section


def _run(engine, batches, key, loss_fn):
    """Outputs of a forward over `batches` (two micro-batches), and the grads of one backward."""
    out = torch.cat([r[key] for r in engine.forward_backward(batches, forward_only=True)])
    engine.train_mode()
    engine.optimizer_zero_grad()
    engine.forward_backward(batches, loss_fn)
    engine.eval_mode()
    grads = torch.cat([p.main_grad.detach().flatten().clone() for c in engine.model for p in c.parameters()])
    return out, grads


def _compare(rec, name, make_engine, batches, key="log_probs", loss_fn=nll_loss):
    mask = torch.cat([b["response_mask"] for b in batches]).bool()
    runs = {}
    for packed in (False, True):
        engine = make_engine(packed)
        runs[packed] = _run(engine, batches, key, loss_fn)
        rec[f"{name}:packed={packed}"] = engine.remove_padding
        last = engine
    (out_pad, g_pad), (out_pack, g_pack) = runs[False], runs[True]
    rec[f"{name}:out_gap"] = (out_pad - out_pack)[mask].abs().max().item()
    rec[f"{name}:grad_gap"] = ((g_pad - g_pack).abs().max() / g_pad.abs().max()).item()
    return last


def _leak_gap(engine, batch):
    """Log-probs of the packed engine when the pack is given as ONE sequence (cu_seqlens [0, N]): what
    a forward without the per-sequence reset (GDN state, attention) computes, against the right one."""
    from verl_lite.engine.megatron import batch as megatron_batch

    real = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    original = megatron_batch.prepare_packed_batch

    def one_sequence(*args, **kwargs):
        item = original(*args, **kwargs)
        p = item["packed_seq_params"]
        whole = torch.tensor([0, item["packed_tokens"]], dtype=torch.int32)
        p.cu_seqlens_q = p.cu_seqlens_kv = p.cu_seqlens_q_padded = p.cu_seqlens_kv_padded = whole
        p.max_seqlen_q = p.max_seqlen_kv = item["packed_tokens"]
        return item

    megatron_batch.prepare_packed_batch = one_sequence
    try:
        leaked = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    finally:
        megatron_batch.prepare_packed_batch = original
    return (real - leaked)[batch["response_mask"].bool()].abs().max().item()


@scenario
def _scenario(rank, rec, out_dir):
    sys.path.insert(0, str(DOUBLE))
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.engine import MegatronLMEngine
    from verl_lite.engine.megatron.value import MegatronValueEngine

    batches = [ragged_batch(0), ragged_batch(1, rows=3)]
    for path, tp, pp in LAYOUTS:
        # auto (null) where it decides: Qwen3 packs, the torch GDN rule runs padded; True / False otherwise
        settings = {False: False, True: None} if path == QWEN3 else {False: None, True: True}

        def make(packed, path=path, tp=tp, pp=pp, settings=settings):
            model, actor = _sections(path, tp, pp, remove_padding=settings[packed])
            engine = MegatronLMEngine(model, actor, actor.optim, "cpu", "actor")
            engine.initialize()
            return engine

        engine = _compare(rec, f"{path}:tp{tp}:pp{pp}", make, batches)
        if (tp, pp) == (2, 1) and path in (QWEN3, DENSE):
            rec[f"{path}:leak_gap"] = _leak_gap(engine, batches[0])
            rec[f"{path}:real_gap"] = rec[f"{path}:tp{tp}:pp{pp}:out_gap"]
        mpu.destroy_model_parallel()

    # the critic (values) at TP=1 with two data-parallel ranks
    def make_critic(packed):
        model, critic = _sections(DENSE, remove_padding=packed, critic=True)
        engine = MegatronValueEngine(model, critic, critic.optim, "cpu", "critic")
        engine.initialize()
        return engine

    _compare(rec, "critic", make_critic, batches, key="values", loss_fn=value_loss)
    mpu.destroy_model_parallel()

    # the Ascend GDN kernel (core_r0.16.0's entry, its CPU double) on npu takes the packed sequences with
    # cu_seqlens: auto packs. The plain engine with device npu, given the entry as the MindSpeed engines give it.
    from mindspeed.core.ssm import _reference as double

    from verl_lite.decisions import ascend_stack

    class NpuOnCpu(MegatronLMEngine):  # device npu for the kernel and packing choice, tensors on CPU
        compute_device = "cpu"

        def _configure_gdn(self, tf_config):
            tf_config.ascend_kernel = ascend_stack.ascend_kernel_entry(ascend_stack.Stack("core_r0.16.0", "test"))
            tf_config.gdn_kernel_dtype = torch.bfloat16

    def make_ascend(packed):
        model, actor = _sections(DENSE, 2, 1, remove_padding=None if packed else False,
                                 overrides={"use_ascend_gdn": True, "use_triton_gdn": False})
        engine = NpuOnCpu(model, actor, actor.optim, "npu", "actor")
        engine.initialize()
        return engine

    calls = len(double.CALLS)
    _compare(rec, "ascend", make_ascend, batches)
    rec["ascend:calls"] = double.CALLS[calls:]
    mpu.destroy_model_parallel()


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


@pytest.mark.parametrize("path,tp,pp", LAYOUTS)
def test_packed_log_probs_and_grads_equal_padded(run, path, tp, pp):
    for rec in run:
        name = f"{path}:tp{tp}:pp{pp}"
        assert rec[f"{name}:packed=True"] is True and rec[f"{name}:packed=False"] is False
        assert rec[f"{name}:out_gap"] < TOL, rec[f"{name}:out_gap"]
        assert rec[f"{name}:grad_gap"] < 1e-4, rec[f"{name}:grad_gap"]


def test_packed_values_and_grads_of_the_critic_equal_padded(run):
    for rec in run:
        assert rec["critic:packed=True"] is True
        assert rec["critic:out_gap"] < TOL and rec["critic:grad_gap"] < 1e-4, (rec["critic:out_gap"], rec["critic:grad_gap"])


@pytest.mark.parametrize("path", [QWEN3, DENSE])
def test_equality_rests_on_the_per_sequence_reset(run, path):
    """Without sequence boundaries (one cu_seqlens segment over the pack) the log-probs move by far more
    than the tolerance: the equality above is not a test that cannot fail."""
    for rec in run:
        assert rec[f"{path}:leak_gap"] > 100 * TOL > rec[f"{path}:real_gap"], (rec[f"{path}:leak_gap"], rec[f"{path}:real_gap"])


def test_auto_packs_attention_models_and_keeps_the_torch_gdn_rule_padded(run):
    """The Qwen3 runs' packed engine and the Qwen3.5 runs' padded engine have use_remove_padding null."""
    for rec in run:
        assert rec[f"{QWEN3}:tp2:pp1:packed=True"] is True and rec[f"{DENSE}:tp2:pp1:packed=False"] is False


def test_the_ascend_kernel_takes_the_packed_sequences_and_auto_packs_on_npu(run):
    for rec in run:
        assert rec["ascend:packed=True"] is True
        packed_calls = [c for c in rec["ascend:calls"] if c["packed"]]
        assert packed_calls and all(c["batch"] == 1 and c["sequences"] > 1 for c in packed_calls)
        # q/k/v go to the kernel in bf16 in both runs; the same values reach it (measured gaps ~5e-7)
        assert rec["ascend:out_gap"] < 1e-3 and rec["ascend:grad_gap"] < 1e-3, (rec["ascend:out_gap"], rec["ascend:grad_gap"])


def test_a_ragged_batch_packs_into_its_real_tokens_aligned_per_sequence():
    """Left-padded rows of 3, 5 and 2 real tokens in a 3 x 6 batch: packed, each sequence is padded at
    its end to a multiple of the alignment (TP), so 10 real tokens become 4 + 6 + 2 = 12 at align 2,
    not the 18 cells of the padded batch; cu_seqlens mark the sequences and positions restart."""
    from verl_lite.engine.megatron.batch import prepare_packed_batch

    lengths = [3, 5, 2]
    mask = torch.tensor([[0] * (6 - n) + [1] * n for n in lengths])
    ids = torch.arange(1, 19).reshape(3, 6) * mask
    batch = dict(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                 responses=ids[:, -2:], response_mask=mask[:, -2:])
    item = prepare_packed_batch(batch, torch.device("cpu"), pad_token_id=0, align=2)
    assert (item["tokens"], item["packed_tokens"]) == (10, 12)
    assert item["packed_seq_params"].cu_seqlens_q.tolist() == [0, 4, 10, 12]
    assert item["position_ids"][0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 1]
    assert item["input_ids"][0].tolist() == [4, 5, 6, 0, 8, 9, 10, 11, 12, 0, 17, 18]


def test_grpo_steps_packed_equal_padded_on_the_megatron_engine(data_dir, tmp_path, monkeypatch):  # noqa: F811
    """Same tiny Qwen3.5, seed and data: three GRPO steps with use_remove_padding=True (packed THD
    micro-batches, the torch GDN rule once per sequence) give the padded run's metrics. The run is
    in-process (trainer.ray=false), so the packed micro-batches are counted."""
    from verl_lite.engine.megatron import batch as megatron_batch

    packs = []
    original = megatron_batch.prepare_packed_batch

    def counting(*args, **kwargs):
        item = original(*args, **kwargs)
        packs.append((item["tokens"], item["batch"]["attention_mask"].numel()))
        return item

    monkeypatch.setattr(megatron_batch, "prepare_packed_batch", counting)
    rows, counts = {}, {}
    for packed in (False, True):
        out = tmp_path / f"packed_{packed}"
        before = len(packs)
        run_training(tiny_overrides(data_dir, out, 3, "actor_rollout_ref.model.path=tiny-qwen3_5",
                                    "actor_rollout_ref.actor.strategy=megatron", "data.train_batch_size=16",
                                    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                                    f"actor_rollout_ref.model.use_remove_padding={packed}"))
        rows[packed] = read_metrics(out)
        counts[packed] = packs[before:]
    assert counts[False] == [] and counts[True], "the packed run did not pack (or the padded run did)"
    assert sum(t for t, _ in counts[True]) < sum(n for _, n in counts[True])  # padding was left out
    for key in ("actor/grad_norm", "actor/pg_loss", "actor/ppo_kl", "critic/score/mean", "actor/entropy"):
        padded = [r[key] for r in rows[False] if key in r]
        packed = [r[key] for r in rows[True] if key in r]
        assert len(padded) == 3 and packed == pytest.approx(padded, rel=1e-4, abs=1e-6), (key, padded, packed)


# ---------------------------------------------------------------------------- config: auto / True / False


@pytest.mark.parametrize("device,kernel,overrides,auto", [
    ("cpu", None, {}, True),  # attention-only: the cpu core attention packs
    ("cuda", None, {}, True),
    ("npu", None, {}, True),
    ("cpu", "torch", {}, False),  # the torch GDN rule packs only when asked (one call per sequence)
    ("cuda", "fla", {}, True),
    ("npu", "ascend", {"use_ascend_gdn": True}, True),
    ("npu", "torch", {}, False),
])
def test_megatron_auto_true_false(device, kernel, overrides, auto):
    from verl_lite.decisions.packing_mode import decide_megatron

    assert decide_megatron(None, device, kernel, overrides).packed is auto
    assert decide_megatron(True, device, kernel, overrides).packed is True
    assert decide_megatron(True, device, kernel, overrides).refusal is None
    assert decide_megatron(False, device, kernel, overrides).packed is False


@pytest.mark.parametrize("kwargs,reason", [
    (dict(device="npu", overrides={"use_flash_attn": False}), "use_flash_attn=False"),
    (dict(device="npu", overrides={"use_flash_attn_npu_batch_invariant": True}), "use_flash_attn_npu_batch_invariant"),
    (dict(device="cuda", overrides={}, te_installed=False), "needs Transformer Engine"),
    (dict(device="cpu", overrides={}, external=True), "Megatron-Bridge / mbridge model on cpu"),
])
def test_megatron_true_is_refused_where_it_cannot_be_honoured_and_auto_runs_padded(kwargs, reason):
    from verl_lite.decisions.packing_mode import decide_megatron

    refused = decide_megatron(True, gdn_kernel=None, **kwargs)
    assert not refused.packed and reason in refused.refusal
    auto = decide_megatron(None, gdn_kernel=None, **kwargs)
    assert not auto.packed and auto.refusal is None and reason in auto.why


def test_torch_engine_auto_runs_padded_true_packs_attention_and_gdn_models_and_is_refused_where_it_cannot():
    from verl_lite.decisions.packing_mode import decide_torch

    # auto: padded (transformers masks a packed row densely); True packs
    assert not decide_torch(None, None).packed and not decide_torch(False, None).packed
    assert decide_torch(True, None).packed
    gdn = decide_torch(None, None, gdn=True)
    assert not gdn.packed and gdn.why.startswith("padded (auto: the packed row's attention mask is dense")
    assert "True would pack" in gdn.why and "GDN layers: one row per packed sequence" in gdn.why
    assert decide_torch(True, None, gdn=True).packed
    # Ulysses SP splits the packed sequence: auto packs under it
    sp = decide_torch(None, None, gdn=True, sequence_parallel=True)
    assert sp.packed and sp.why.startswith("packed (auto: Ulysses sequence parallelism")
    cannot = "state would flow between sequences"
    assert not decide_torch(None, cannot).packed and decide_torch(None, cannot).refusal is None
    assert cannot in decide_torch(True, cannot).refusal


def test_the_schema_default_is_auto_and_the_summary_says_packed_or_padded_per_role():
    from verl_lite.preflight.summary import summarize
    from verl_lite.config import load_config
    from verl_lite.config.schema import ModelConfig

    assert ModelConfig().use_remove_padding is None
    lines = summarize(load_config(["trainer.device=cpu", "actor_rollout_ref.actor.strategy=megatron",
                                   "actor_rollout_ref.model.path=tiny-qwen3"])).splitlines()
    assert [x.strip() for x in lines if "batches" in x][0].startswith("batches     : packed (auto)")
    lines = summarize(load_config(["trainer.device=cpu", "actor_rollout_ref.actor.strategy=megatron",
                                   "actor_rollout_ref.model.use_remove_padding=False"])).splitlines()
    assert [x.strip() for x in lines if "batches" in x][0] == "batches     : padded (use_remove_padding=False)"


def test_the_ref_is_refused_only_when_its_engine_differs_from_the_actors(write_model):
    """A linear-attention model the torch engine cannot pack (MiniMax; it packs Qwen3.5's GDN layers):
    the ref shares the actor's model section, so the reason is said once, unless the ref's engine differs."""
    from verl_lite.preflight.run import collect_problems
    from verl_lite.config import load_config

    path = write_model({"architectures": ["MiniMaxForCausalLM"], "model_type": "minimax",
                        "layer_types": ["linear_attention", "full_attention"]})

    def found(*lines):
        problems = collect_problems(load_config(["trainer.device=cpu", "actor_rollout_ref.actor.use_kl_loss=True",
                                                 f"actor_rollout_ref.model.path={path}",
                                                 "actor_rollout_ref.model.use_remove_padding=True", *lines]),
                                    for_training=False)
        return [p for p in problems if "use_remove_padding" in p]

    assert [p.split(":")[0] for p in found()] == ["actor"]  # fsdp actor and ref: said once
    assert found("actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=megatron") == []
    (problem,) = found("actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.ref.strategy=fsdp")
    assert problem.startswith("ref: actor_rollout_ref.model.use_remove_padding=True: remove-padding on the torch engine")
