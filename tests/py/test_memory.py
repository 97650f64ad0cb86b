"""The memory prediction (decisions/memory.py, decisions/memory_step.py, preflight/memory.py) against
real figures: transformers' own parameter counts, Megatron-LM's theoretical weight-and-optimizer
memory (tests/py/data/megatron_memory_cases.json, written by tools/gen_memory_cases.py), the torch
profiler's memory peak of a forward on CPU, and verl's own example runs on the hardware their
headers name. Each test prints its measured error. The engines' own allocations are in
tests/py/test_memory_engines.py.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from verl_lite.config.compose import compose_config
from verl_lite.config.shapes import SHAPES_DIR
from verl_lite.decisions import memory as m
from verl_lite.decisions.layout import Layout
from verl_lite.decisions import memory_step as ms
from verl_lite.models import ASSETS_DIR
from verl_lite.preflight import memory as pm
from verl_lite.preflight.run import collect_problems, collect_warnings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "verl_corpus"))
import status as corpus  # noqa: E402  (the corpus's own reader of runs.json)

TINY = ("tiny-qwen3", "tiny-qwen3_5", "tiny-qwen3_5-moe")
SHIPPED = ("Qwen3.5-35B-A3B", "Qwen3.5-122B-A10B", "Qwen3.5-397B-A17B")


def _hf(name):
    path = os.path.join(ASSETS_DIR, name, "config.json") if name in TINY else os.path.join(SHAPES_DIR, f"{name}.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("name", TINY + SHIPPED)
def test_the_parameter_count_equals_transformers_model_built_from_the_same_config(name):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = _hf(name)
    text = hf.get("text_config", hf)
    with torch.device("meta"):  # the real shape without its memory
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**text))
    real = sum(p.numel() for n, p in model.named_parameters() if "mtp" not in n)
    predicted = m.total_params(m.model_dims(hf))
    print(f"{name}: transformers {real}, predicted {predicted}")
    assert predicted == real


def _megatron_lm_dims(case):
    hf = {"model_type": "llama", "hidden_size": case["hidden_size"], "num_hidden_layers": case["num_layers"],
          "num_attention_heads": case["num_attention_heads"], "num_key_value_heads": case["num_query_groups"],
          "head_dim": case["kv_channels"], "intermediate_size": case["ffn_hidden_size"],
          "vocab_size": case["padded_vocab_size"], "tie_word_embeddings": False}
    if case["num_experts"]:
        hf.update(num_experts=case["num_experts"], moe_intermediate_size=case["moe_ffn_hidden_size"], num_experts_per_tok=8)
    return m.model_dims(hf)


def _cases():
    with open(HERE / "data" / "megatron_memory_cases.json", encoding="utf-8") as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c['model']}-w{c['world_size']}-tp{c['tensor_model_parallel_size']}"
                         f"-pp{c['pipeline_model_parallel_size']}-ep{c['expert_model_parallel_size']}"
                         f"-{'distopt' if c['use_distributed_optimizer'] else 'adam'}")
def test_weights_grads_and_optimizer_agree_with_megatron_lms_theoretical_memory(case):
    d = _megatron_lm_dims(case)
    lay = Layout("megatron", case["world_size"], tp=case["tensor_model_parallel_size"],
                   pp=case["pipeline_model_parallel_size"], ep=case["expert_model_parallel_size"])
    s = m.state_bytes(d, lay, m.megatron_precision("cuda"), case["use_distributed_optimizer"])
    ours = s.weights + s.grads + s.optimizer
    err = abs(ours - case["bytes"]) / case["bytes"]
    print(f"{case['model']}: Megatron-LM {case['bytes'] / m.GIB:.3f} GiB, predicted {ours / m.GIB:.3f} GiB, "
          f"error {100 * err:.4f}%")
    assert err < 0.001  # the final norm: Megatron-LM spreads it over the stages, here it sits on the last


# ------------------------------------------------------------------------------ activations


def _profiled_forward(name, rows, length):
    """The torch profiler's CPU memory peak over a forward with autograd (what the backward keeps) and
    the log-probs, above the memory before it."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**_hf(name)), dtype=torch.float32)
    ids = torch.randint(3, 40, (rows, length))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        logits = model(input_ids=ids).logits
        log_probs = torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None])
    level = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        level += event.self_cpu_memory_usage
        peak = max(peak, level)
    del log_probs
    return peak


SHAPES = [(2, 64), (2, 128), (2, 256), (4, 128)]


@pytest.mark.parametrize("name", TINY)
def test_forward_activations_follow_the_profilers_peak_in_slope_and_size(name):
    d = m.model_dims(_hf(name))
    lay = Layout("fsdp", 1)
    measured, predicted = [], []
    for rows, length in SHAPES:
        p = m.Pass(tokens=rows * length, sequences=rows, act_bytes=4, seq_len=length, sequence_parallel=False,
                   gdn_kernel="torch", fused_norms=False)  # transformers' torch modules on CPU
        measured.append(_profiled_forward(name, rows, length))
        predicted.append(m.activation_bytes(d, lay, p) + m.logits_bytes(d, lay, m.Pass(**{**p.__dict__, "backward": False})))
    for (rows, length), got, want in zip(SHAPES, measured, predicted):
        print(f"{name} {rows}x{length}: profiler {got} B, predicted {want:.0f} B, error {100 * (want - got) / got:+.1f}%")
        assert abs(want - got) / got <= 0.25
    slope_got = (measured[2] - measured[0]) / (SHAPES[2][1] - SHAPES[0][1])
    slope_want = (predicted[2] - predicted[0]) / (SHAPES[2][1] - SHAPES[0][1])
    print(f"{name}: slope per token of length, profiler {slope_got:.0f} B, predicted {slope_want:.0f} B, "
          f"error {100 * (slope_want - slope_got) / slope_got:+.1f}%")
    assert abs(slope_want - slope_got) / slope_got <= 0.15


def test_a_forward_without_backward_keeps_one_layer_and_recompute_keeps_layer_inputs():
    d = m.model_dims(_hf("Qwen3.5-35B-A3B"))
    lay = Layout("megatron", 8, tp=2, ep=8)
    base = m.Pass(tokens=4096, sequences=1)
    full = m.activation_bytes(d, lay, base)
    recomputed = m.activation_bytes(d, lay, m.Pass(tokens=4096, sequences=1, recompute="full", recompute_layers=1))
    forward = m.activation_bytes(d, lay, m.Pass(tokens=4096, sequences=1, backward=False))
    assert forward < recomputed < full / 5
    no_sp = m.activation_bytes(d, lay, m.Pass(tokens=4096, sequences=1, sequence_parallel=False))
    assert no_sp > full
    padded = m.activation_bytes(d, lay, m.Pass(tokens=4096, sequences=1, moe_load=1.5))  # capacity factor 1.5
    assert full < padded < 1.5 * full


# ------------------------------------------------------------------------------ verl's runs


# verl's Qwen3.5 Megatron runs and the hardware each script's header names
VERL_RUNS = {
    "grpo_trainer/run_qwen3_5_35b_megatron": "H100-80GB",  # "8 GPUs (80GB each, e.g. 1x8 H100/H200)"
    "grpo_trainer/run_qwen3_5_35b_megatron@npu": "910C",  # "8 NPUs (2*64GB each, e.g. 1x8 A3)": 16 dies
    "grpo_trainer/run_qwen3_5_35b_megatron@npu_bridge": "910C",
    "grpo_trainer/run_qwen3_5_122b_a10b_megatron": "H20",  # "32 GPUs (96GB each, e.g. 4x8 H20)"
    "grpo_trainer/run_qwen3_5_122b_a10b_megatron@npu": "910C",  # 4 nodes x 16 dies
    "grpo_trainer/run_qwen3_5_122b_a10b_megatron@npu_bridge": "910C",
    "grpo_trainer/run_qwen3_5_397b_megatron": "H100-80GB",  # the header names no GPU: verl's usual 80 GB
    "grpo_trainer/run_qwen3_5_397b_megatron@npu": "910C",  # "16 nodes * A3 (16*8*2=256 die)"
    "grpo_trainer/run_qwen3_5_397b_megatron@npu_bridge": "910C",
    "ascend_extras/grpo_trainer/run_qwen3_5_122b_a10b_32k_megatron": "910C",
}


def _verl_run(name, *extra):
    run = corpus.runs()[name]
    cfg, problems = compose_config(corpus.line_of(run) + list(extra))
    assert cfg is not None, problems
    return cfg, run["device"]


@pytest.mark.parametrize("name", sorted(VERL_RUNS))
def test_verls_qwen3_5_runs_are_predicted_to_fit_the_hardware_their_headers_name(name):
    cfg, device = _verl_run(name, f"trainer.device_name={VERL_RUNS[name]}")
    pred = pm.predict(cfg, device)
    peak = pred.peak
    print(f"{name} on {VERL_RUNS[name]}: peak {peak.name} {m.gib(peak.total):.1f} of {pred.capacity.usable_gib:.1f} GiB")
    assert m.gib(peak.total) <= pred.capacity.usable_gib
    assert not pm.memory_problems(cfg, device)


def _qwen3_moe_shapes():
    with open(HERE / "data" / "qwen3_moe_shapes.json", encoding="utf-8") as f:
        return json.load(f)["shapes"]


# verl's Qwen3 MoE Megatron runs (the headers say "NVIDIA GPUs": verl's usual 80 GB) and their model
QWEN3_MOE_RUNS = {
    "grpo_trainer/run_qwen3_30b_a3b_megatron": ("H100-80GB", "Qwen3-30B-A3B"),
    "grpo_trainer/run_qwen3_30b_a3b_megatron@npu": ("910B", "Qwen3-30B-A3B"),
    "grpo_trainer/run_qwen3_235b_a22b_megatron": ("H100-80GB", "Qwen3-235B-A22B"),
    "grpo_trainer/run_qwen3_235b_a22b_megatron@npu": ("910C", "Qwen3-235B-A22B"),
}


def test_the_qwen3_moe_shapes_have_their_model_cards_parameter_counts():
    counts = {name: m.total_params(m.model_dims(hf)) / 1e9 for name, hf in _qwen3_moe_shapes().items()}
    print(counts)
    assert round(counts["Qwen3-30B-A3B"], 1) == 30.5 and round(counts["Qwen3-235B-A22B"]) == 235


@pytest.mark.parametrize("name", sorted(QWEN3_MOE_RUNS))
def test_verls_qwen3_moe_runs_are_predicted_to_fit(name, write_model):
    device_name, shape = QWEN3_MOE_RUNS[name]
    path = write_model(_qwen3_moe_shapes()[shape], name=shape)
    cfg, device = _verl_run(name, f"actor_rollout_ref.model.path={path}", f"trainer.device_name={device_name}")
    pred = pm.predict(cfg, device)
    print(f"{name} on {device_name}: peak {pred.peak.name} {m.gib(pred.peak.total):.1f} of "
          f"{pred.capacity.usable_gib:.1f} GiB")
    assert m.gib(pred.peak.total) <= pred.capacity.usable_gib and not pm.memory_problems(cfg, device)


NO_OFFLOAD = ["actor_rollout_ref.actor.megatron.param_offload=False", "actor_rollout_ref.actor.megatron.grad_offload=False",
              "actor_rollout_ref.actor.megatron.optimizer_offload=False",
              "actor_rollout_ref.ref.megatron.param_offload=False",
              "+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=False"]


def _without_offload(name):
    run = corpus.runs()[name]
    line = [a for a in corpus.line_of(run) if "offload" not in a.partition("=")[0]]
    cfg, problems = compose_config(line + NO_OFFLOAD + ["trainer.device_name=H100-80GB"])
    assert cfg is not None, problems
    return cfg


def test_the_35b_on_8_gpus_of_80gb_without_offload_is_refused_with_its_terms_and_fixes():
    cfg = _without_offload("grpo_trainer/run_qwen3_5_35b_megatron")
    pred = pm.predict(cfg, "cuda")
    state = sum(v for k, v in pred.peak.terms.items() if k.startswith("actor ") and "activ" not in k and "logit" not in k)
    print(f"35B TP2 EP8 without offload: actor weights+grads+Adam {m.gib(state):.1f} GiB, peak {pred.peak.name} "
          f"{m.gib(pred.peak.total):.1f} GiB")
    problems = pm.memory_problems(cfg, "cuda")
    assert len(problems) == 1 and problems[0].startswith("memory: the ")
    text = problems[0]
    assert "78.6 GiB usable (trainer.device_name=H100-80GB" in text
    assert "actor optimizer" in text and "Changes that fit" in text
    assert "actor_rollout_ref.actor.megatron.param_offload=True, actor_rollout_ref.actor.megatron.grad_offload=True" in text
    for fix in text.split("Changes that fit: ")[1].split(" (trainer.memory_check")[0].split("; "):
        assert float(fix.rsplit(": ", 1)[1].split(" GiB")[0]) <= 78.6  # each proposed change is predicted to fit


def test_each_proposed_fix_is_the_prediction_of_the_run_with_that_change():
    from omegaconf import OmegaConf

    cfg = _without_offload("grpo_trainer/run_qwen3_5_35b_megatron")
    text = pm.memory_problems(cfg, "cuda")[0]
    fixes = text.split("Changes that fit: ")[1].split(" (trainer.memory_check")[0].split("; ")
    print(fixes)
    for fix in fixes:
        keys, claimed = fix.rsplit(": ", 1)
        if not all(k.endswith("=True") and k.startswith("actor_rollout_ref.") for k in keys.split(", ")):
            continue  # a layout or batch change: its prediction is checked through the plan above
        changed = _without_offload("grpo_trainer/run_qwen3_5_35b_megatron")
        for key in keys.split(", "):
            OmegaConf.update(changed, key.split("=")[0], True)
        assert f"{m.gib(pm.predict(changed, 'cuda').peak.total):.1f} GiB" == claimed
        assert not pm.memory_problems(changed, "cuda")


def test_memory_check_warn_starts_anyway_with_a_warning_and_off_predicts_nothing():
    cfg = _without_offload("grpo_trainer/run_qwen3_5_35b_megatron")
    cfg.trainer.memory_check = "warn"
    assert pm.memory_problems(cfg, "cuda") == []
    assert any(w.startswith("memory: the ") for w in pm.memory_warnings(cfg, "cuda"))
    cfg.trainer.memory_check = "off"
    assert pm.predict(cfg, "cuda") is None and pm.memory_warnings(cfg, "cuda") == []


def test_an_assumed_device_warns_but_a_layout_no_device_can_hold_is_refused():
    cfg = _without_offload("grpo_trainer/run_qwen3_5_35b_megatron")
    cfg.trainer.device_name = None
    assert pm.memory_problems(cfg, "cuda") == []  # assumed H100-80GB: a warning
    assert any("assumed H100-80GB" in w for w in pm.memory_warnings(cfg, "cuda"))
    # the 397B with its experts over 8 ranks only (EP=8 at TP=2 PP=2 on 4 nodes): ~200 GiB of Adam state per GPU
    cfg, device = _verl_run("grpo_trainer/run_qwen3_5_397b_megatron", "trainer.nnodes=4",
                            "actor_rollout_ref.actor.megatron.expert_model_parallel_size=8",
                            "actor_rollout_ref.ref.megatron.expert_model_parallel_size=8")
    problems = [p for p in collect_problems(cfg, for_training=False) if p.startswith("memory:")]
    print(problems)
    assert len(problems) == 1 and "more than any cuda device in config/devices.py (139.4 GiB)" in problems[0]
    assert "actor grads" in problems[0]


def test_device_memory_gib_wins_over_the_device_name():
    cfg, device = _verl_run("grpo_trainer/run_qwen3_5_35b_megatron", "trainer.device_name=H200",
                            "trainer.device_memory_gib=20")
    cap = pm.capacity(cfg, device, for_training=False)
    assert (cap.usable_gib, cap.known) == (20.0, True) and "device_memory_gib=20" in cap.source
    assert pm.memory_problems(cfg, device)


def test_a_peak_near_the_limit_gets_a_warning_band():
    cfg, device = _verl_run("grpo_trainer/run_qwen3_5_35b_megatron", "trainer.device_name=H100-80GB")

    def share(gib):  # vLLM's reservation grows with the device, so the peak does too
        cfg.trainer.device_memory_gib = gib
        return m.gib(pm.predict(cfg, device).peak.total) / gib

    near = next(g / 2 for g in range(60, 400) if 0.9 < share(g / 2) <= 1.0)
    share(near)
    warnings = [w for w in collect_warnings(cfg) if w.startswith("memory:")]
    assert len(warnings) == 1 and "within 10%" in warnings[0]
    share(2 * near)
    assert not [w for w in collect_warnings(cfg) if w.startswith("memory:")]


def test_the_device_table_matches_driver_names():
    from verl_lite.config.devices import match_device

    assert match_device("NVIDIA H100 80GB HBM3") == "H100-80GB"
    assert match_device("NVIDIA H200") == "H200"
    assert match_device("NVIDIA H20") == "H20"
    assert match_device("NVIDIA A100-SXM4-40GB") == "A100-40GB"
    assert match_device("Ascend910B3") == "910B"
    assert match_device("Ascend910_9392") == "910C"


def test_the_peak_is_the_largest_phase_and_offload_keeps_state_out_of_the_rollout():
    cfg, device = _verl_run("grpo_trainer/run_qwen3_5_35b_megatron", "trainer.device_name=H100-80GB")
    pred = pm.predict(cfg, device)
    assert pred.peak.total == max(ph.total for ph in pred.phases)
    rollout = next(ph for ph in pred.phases if ph.name == "rollout")
    assert not any(k.startswith("actor ") for k in rollout.terms)  # everything offloaded while vLLM generates
    plan = ms.with_role(pred.plan, "actor", param_offload=False, grad_offload=False)
    rollout = next(ph for ph in ms.phases(pred.dims, plan) if ph.name == "rollout")
    assert {"actor weights", "actor grads"} <= set(rollout.terms)


def test_the_check_prints_the_memory_table_for_every_phase(run_module):
    out = run_module("verl_lite.check", *corpus.line_of(corpus.runs()["grpo_trainer/run_qwen3_5_35b_megatron"]),
                     "trainer.device_name=H100-80GB")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("memory        : GiB per device"))
    phases = [line.split()[0] for line in lines[start + 1:start + 7]]
    assert phases == ["rollout", "weight", "actor", "actor", "actor", "ref"]
    assert sum("<- peak" in line for line in lines) == 1


def test_a_cpu_run_is_predicted_against_the_hosts_memory_and_device_name_has_no_effect_there():
    cfg, problems = compose_config(["trainer.device=cpu", "trainer.device_name=H200", "trainer.memory_check=warn"])
    assert problems == []
    warnings = [w for w in collect_warnings(cfg) if "no effect on cpu" in w]
    assert warnings == ["trainer.device_name=H200: no effect on cpu (its rows are cuda and npu devices; the prediction "
                        "is checked against the host's memory: set trainer.device_memory_gib; docs/memory.md)"]
    lines = pm.summary_lines(cfg, "cpu")
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / m.GIB
    assert re.match(rf"memory        : GiB per worker process, {host:.1f} usable \(this host's {host:.1f} "
                    r"GiB / 1 worker process; ", lines[0]), lines[0]
    assert [line[2:].split("  ")[0] for line in lines[1:4]] == ["rollout", "actor log-prob", "actor update"]
    assert not pm.capacity(cfg, "cpu", for_training=True).known  # the host's share: a warning, never a refusal
    # trainer.device_memory_gib is the host's budget on cpu: a peak above it is refused
    cfg, problems = compose_config(["trainer.device=cpu", "trainer.device_memory_gib=0.001"])
    assert problems == []
    refused = [p for p in collect_problems(cfg, for_training=False) if p.startswith("memory:")]
    assert len(refused) == 1 and "more than the 0.0 GiB usable (trainer.device_memory_gib=0.001)" in refused[0]
    assert "offload" not in refused[0]  # on cpu offload moves state to the host it is on: no fix, no change
    offloaded, _ = compose_config(["trainer.device=cpu", "actor_rollout_ref.actor.fsdp_config.param_offload=True",
                                   "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"])
    assert pm.predict(offloaded, "cpu").peak.total == pm.predict(cfg, "cpu").peak.total
    cfg, problems = compose_config(["trainer.device_name=H300"])
    assert problems and "trainer.device_name" in problems[0] and "H200" in problems[0]


def test_the_device_is_detected_from_nvidia_smi_where_the_workers_run(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771'\necho 'NVIDIA H200, 143771'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert pm.detect("cuda") == ("NVIDIA H200", 143771 / 1024)
    cfg, device = _verl_run("grpo_trainer/run_qwen3_5_35b_megatron")
    cap = pm.capacity(cfg, device, for_training=True)
    assert cap.known and cap.usable_gib == pytest.approx(143771 / 1024 - 1.0) and "detected NVIDIA H200" in cap.source
    assert not pm.capacity(cfg, device, for_training=False).known  # a laptop checking a cluster's run assumes


def test_a_value_model_holds_a_one_wide_head_instead_of_the_lm_head():
    d = m.model_dims(_hf("Qwen3.5-35B-A3B"))
    lay = Layout("megatron", 8, tp=2, ep=8)
    lm, value = m.stage_params(d, lay, 0), m.stage_params(d, lay, 0, lm_head=False)
    assert lm[0] - value[0] == m.padded_vocab(d.vocab, 2) * d.hidden / 2 - d.hidden and lm[1] == value[1]
    fsdp = Layout("fsdp", 2, fsdp_shard=2)
    assert m.rank_params(d, fsdp)[0] - m.rank_params(d, fsdp, lm_head=False)[0] == (d.vocab * d.hidden - d.hidden) / 2
