"""Which bridge a Megatron role builds with (decisions/bridge_choice.py, engine/megatron/bridges/select.py).

- every combination of use_mbridge / vanilla_mbridge / installed packages / device / use_ascend_gdn
  picks one bridge or is refused with a message naming the key and the fix (pure function, no torch);
- the GDN kernel per device and switch;
- in spawned processes with the contract doubles first on sys.path (tests/py/megatron_bridge_double,
  tests/py/mindspeed_double): Megatron-Bridge's AutoBridge path as verl drives it, mbridge's, and on
  npu the order repatch -> `import mindspeed_bridge.models` -> model build, recorded by the doubles
  while the real MindSpeed engine initializes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verl_lite.decisions import bridge_choice as br
from verl_lite.decisions.packing_mode import decide_megatron
from verl_lite.registry import BRIDGES

REPO = Path(__file__).resolve().parents[2]
DOUBLES = REPO / "tests" / "py" / "megatron_bridge_double"
MINDSPEED_DOUBLE = REPO / "tests" / "py" / "mindspeed_double" / "core_r0.16.0"
REGISTERED = [k[0] for k in BRIDGES.keys()]
PREFIX = "actor_rollout_ref.actor.megatron"
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
QWEN35_VL = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe"}
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next"}
NOTHING = {"megatron.bridge": False, "mbridge": False, "mindspeed_bridge": False, "fla": False}


def installed(**present):
    names = {"megatron_bridge": "megatron.bridge", "mbridge": "mbridge", "mindspeed_bridge": "mindspeed_bridge"}
    out = dict(NOTHING)
    out.update({names[k]: v for k, v in present.items()})
    return out


def megatron(use_mbridge=True, vanilla=False, **overrides):
    return {"use_mbridge": use_mbridge, "vanilla_mbridge": vanilla, "override_transformer_config": overrides}


def choose(meg, hf=QWEN3, device="cpu", **present):
    return br.choose_bridge(PREFIX, meg, hf, device, installed(**present), REGISTERED)


@pytest.mark.parametrize("hf,device,meg,present,kind,mindspeed", [
    (QWEN3, "cpu", megatron(), {}, br.VERL_LITE, False),
    (QWEN35_VL, "npu", megatron(use_ascend_gdn=True), {}, br.VERL_LITE, False),  # Ascend kernel in verl_lite's layers
    (QWEN3, "cuda", megatron(), {"megatron_bridge": True}, br.MEGATRON_BRIDGE, False),
    (QWEN35_VL, "npu", megatron(use_ascend_gdn=True, use_triton_gdn=False),
     {"megatron_bridge": True, "mindspeed_bridge": True}, br.MEGATRON_BRIDGE, True),
    (QWEN35_VL, "npu", megatron(), {"megatron_bridge": True, "mindspeed_bridge": True}, br.MEGATRON_BRIDGE, False),
    (QWEN3_NEXT, "cuda", megatron(), {"megatron_bridge": True}, br.MEGATRON_BRIDGE, False),
    (QWEN3, "cuda", megatron(vanilla=True), {"mbridge": True}, br.MBRIDGE, False),
    (QWEN3, "cuda", megatron(vanilla=True), {"mbridge": True, "megatron_bridge": True}, br.MBRIDGE, False),
])
def test_each_switch_combination_picks_its_bridge(hf, device, meg, present, kind, mindspeed):
    choice = choose(meg, hf, device, **present)
    assert (choice.kind, choice.mindspeed_bridge) == (kind, mindspeed)
    assert choice.architecture == hf["architectures"][0]


@pytest.mark.parametrize("hf,device,meg,present,says", [
    (QWEN3, "cpu", megatron(use_mbridge=False), {"megatron_bridge": True},
     [f"{PREFIX}.use_mbridge=False", "without a model bridge", f"Set {PREFIX}.use_mbridge=True"]),
    (QWEN35_VL, "npu", megatron(use_mbridge=False, use_ascend_gdn=True), {},
     [f"{PREFIX}.use_mbridge=False", f"Set {PREFIX}.use_mbridge=True"]),
    (QWEN3, "cuda", megatron(vanilla=True), {"megatron_bridge": True},
     [f"{PREFIX}.vanilla_mbridge=True", "module 'mbridge' not found", "pip install mbridge",
      f"{PREFIX}.vanilla_mbridge=False"]),
    (QWEN35_VL, "npu", megatron(vanilla=True, use_ascend_gdn=True), {"mbridge": True},
     [f"{PREFIX}.vanilla_mbridge=True", "MindSpeed-Bridge", f"Set {PREFIX}.vanilla_mbridge=False"]),
    (QWEN35_VL, "npu", megatron(use_ascend_gdn=True), {"megatron_bridge": True},
     ["use_ascend_gdn=True", "mindspeed_bridge", "Install MindSpeed-Bridge", "USE_MINDSPEED_BRIDGE=False"]),
    (QWEN3_NEXT, "cuda", megatron(), {},
     ["'qwen3_next'", "Qwen3NextForCausalLM", "Qwen3ForCausalLM", "megatron.bridge", "strategy=fsdp"]),
    ({"model_type": "mystery"}, "cuda", megatron(), {}, ["without 'architectures'", "install Megatron-Bridge"]),
])
def test_refusals_name_the_key_and_the_fix(hf, device, meg, present, says):
    with pytest.raises(br.BridgeRefusal) as e:
        choose(meg, hf, device, **present)
    for text in says:
        assert text in str(e.value), (text, str(e.value))


def test_mbridge_for_other_machines_is_chosen_and_says_the_nodes_need_it():
    choice = br.choose_bridge(PREFIX, megatron(vanilla=True), QWEN3, "cuda", NOTHING, REGISTERED, nodes_elsewhere=True)
    assert (choice.kind, choice.missing_here) == (br.MBRIDGE, True)
    assert "the training nodes need `pip install mbridge`" in choice.describe()
    with pytest.raises(br.BridgeRefusal):  # the engine (on the node) and the local checks pass nodes_elsewhere=False
        br.choose_bridge(PREFIX, megatron(vanilla=True), QWEN3, "cuda", NOTHING, REGISTERED)


def test_on_cpu_the_external_bridges_give_way_to_verl_lites_own_or_are_refused():
    """Megatron-Bridge's and mbridge's layer specs need Transformer Engine (CUDA): on cpu the registry builds
    (vanilla_mbridge=False) and vanilla_mbridge=True is refused with the fix."""
    assert choose(megatron(), QWEN3, "cpu", megatron_bridge=True).kind == br.VERL_LITE
    assert choose(megatron(), QWEN3, "cuda", megatron_bridge=True).kind == br.MEGATRON_BRIDGE
    with pytest.raises(br.BridgeRefusal, match="on cpu set actor_rollout_ref.actor.megatron.vanilla_mbridge=False"):
        choose(megatron(vanilla=True), QWEN3, "cpu", mbridge=True)
    with pytest.raises(br.BridgeRefusal, match="AutoBridge does not build on cpu"):
        choose(megatron(), {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}, "cpu",
               megatron_bridge=True)


def test_a_critic_needs_verl_lites_own_bridges():
    with pytest.raises(br.BridgeRefusal) as e:
        br.choose_bridge("critic.megatron", megatron(), QWEN3, "cuda", installed(megatron_bridge=True), REGISTERED,
                         value_model=True)
    assert "critic (value model)" in str(e.value) and "critic.strategy=fsdp" in str(e.value)
    assert br.choose_bridge("critic.megatron", megatron(), QWEN3, "cuda", NOTHING, REGISTERED,
                            value_model=True).kind == br.VERL_LITE


def test_the_registry_is_asked_not_a_fixed_list():
    """The preflight's answer follows registry.BRIDGES: an architecture flips when a bridge registers."""
    custom = {"architectures": ["TinyNewForCausalLM"], "model_type": "tiny_new"}
    with pytest.raises(br.BridgeRefusal):
        br.choose_bridge(PREFIX, megatron(), custom, "cpu", NOTHING, REGISTERED)
    assert br.choose_bridge(PREFIX, megatron(), custom, "cpu", NOTHING, REGISTERED + ["TinyNewForCausalLM"]).kind \
        == br.VERL_LITE


@pytest.mark.parametrize("device,overrides,fla,kernel", [
    ("cpu", {}, False, br.TORCH),
    ("cpu", {"use_triton_gdn": True}, True, br.TORCH),  # Triton needs a GPU
    ("cuda", {}, True, br.FLA),  # use_triton_gdn defaults to True, as megatron-core uses fla when present
    ("cuda", {}, False, br.TORCH),
    ("cuda", {"use_triton_gdn": False}, True, br.TORCH),
    ("npu", {"use_triton_gdn": False, "use_ascend_gdn": True}, True, br.ASCEND),  # USE_MINDSPEED_BRIDGE=True
    ("npu", {"use_ascend_gdn": True}, True, br.FLA),  # the real order: fla first when switched on
    ("npu", {"use_ascend_gdn": True}, False, br.ASCEND),
    ("npu", {}, False, br.TORCH),
])
def test_gdn_kernel_per_device_and_switch(device, overrides, fla, kernel):
    assert br.gdn_kernel(device, overrides, fla) == kernel
    # remove-padding left null (auto) packs exactly where the kernel takes cu_seqlens (decisions/packing_mode.py)
    assert decide_megatron(None, device, kernel, overrides).packed == (kernel != br.TORCH)


def test_use_ascend_gdn_is_a_problem_off_npu_only():
    assert br.ascend_gdn_problem("npu", {"use_ascend_gdn": True}) is None
    assert br.ascend_gdn_problem("cpu", {"use_ascend_gdn": False}) is None
    for device in ("cpu", "cuda"):
        assert f"the device is {device}: remove" in br.ascend_gdn_problem(device, {"use_ascend_gdn": "True"})
    with pytest.raises(ValueError, match="'tpu' is not one of cpu, cuda, npu"):
        br.gdn_kernel("tpu", {}, True)


# ---------------------------------------------------------------------------- spawned, with the doubles


def _run(code: str, extra_path, tmp_path, timeout=240):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in extra_path] + [str(REPO)])
    env.setdefault("WORLD_SIZE", "1")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=str(tmp_path), env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _checkpoint(tmp_path, kind: str):
    """A tiny seeded HF checkpoint (config.json + model.safetensors: the external builds load them) and its
    tensors (also in tmp_path/state.pt, for the spawned process): `qwen3` (Qwen3ForCausalLM) or `qwen3_5_moe`
    (Qwen3_5MoeForConditionalGeneration, the tower included)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    if kind == "qwen3":
        config = Qwen3Config(vocab_size=48, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                             architectures=["Qwen3ForCausalLM"])
        model = Qwen3ForCausalLM(config)
    else:
        from test_qwen3_5_vl_megatron import MOE, _hf_class, tiny_config

        config = tiny_config(MOE)
        model = _hf_class(MOE)(config)
    d = tmp_path / "model"
    config.save_pretrained(d)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(d / "model.safetensors"))
    torch.save(state, tmp_path / "state.pt")
    return d, state


def test_megatron_bridge_and_mbridge_paths_as_verl_drives_them(tmp_path):
    """AutoBridge as verl drives it, on a tiny Qwen3 checkpoint: the double builds a real megatron-core GPTModel
    (bf16, so inside Float16Module as Megatron-Bridge's get_model wraps it), loads the safetensors and exports
    every HF tensor; the build is marked with the GPT forward convention."""
    model, state = _checkpoint(tmp_path, "qwen3")
    out = _run(f"""
        import json, sys, torch
        from verl_lite.decisions.bridge_choice import installed_here
        res = {{"installed": installed_here(), "megatron_imported_by_probe": "megatron" in sys.modules}}
        from verl_lite.device import init_one_rank_group
        from verl_lite.engine.megatron import conventions, parallel
        from verl_lite.engine.megatron.bridges import select
        from verl_lite.engine.base import UnsupportedModelError
        init_one_rank_group("gloo")
        parallel.prepare_device("cpu")
        from megatron.core import parallel_state as mpu
        mpu.initialize_model_parallel(1, 1)
        parallel.seed("cpu", 1)
        hf = json.load(open({str(model / 'config.json')!r}))
        meg = {{"use_mbridge": True, "vanilla_mbridge": False, "override_transformer_config": {{"recompute_num_layers": 1}}}}
        sel = select.select_bridge(meg, hf, "cuda", {str(model)!r})
        b = sel.external
        b.configure({{"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1}}, {{"recompute_num_layers": 1}},
                    torch.bfloat16)
        chunks = b.build()
        res["convention"] = conventions.mark_forward_convention(chunks, "cuda")
        res["wrapped"] = [type(c).__name__ + "/" + type(conventions.innermost(c)).__name__ for c in chunks]
        b.load(chunks)
        exported = dict(b.export(chunks))
        res["names"] = sorted(exported)
        res["dtypes"] = sorted({{str(v.dtype) for v in exported.values()}})
        checkpoint = torch.load({str(tmp_path / 'state.pt')!r})
        res["bf16_equal"] = all(torch.equal(exported[k], v.to(torch.bfloat16)) for k, v in checkpoint.items())
        import megatron.bridge._double as d
        res.update(kind=sel.choice.kind, events=[(k, {{kk: str(vv) for kk, vv in v.items()}}) for k, v in d.EVENTS])
        # A GDN switch on a provider that does not declare it: Megatron-Bridge refuses it by name.
        b2 = select.select_bridge(meg, hf, "cuda", {str(model)!r}).external
        try:
            b2.configure({{}}, {{"use_ascend_gdn": True}}, torch.bfloat16)
        except AttributeError as e:
            res["unknown_override"] = str(e)
        try:
            select.select_bridge(meg, hf, "cuda", {str(model)!r}, model_type="value_model")
        except UnsupportedModelError as e:
            res["critic"] = str(e)
        # vanilla_mbridge=True: mbridge's AutoBridge (its presence double is on sys.path)
        import mbridge
        sel = select.select_bridge(dict(meg, vanilla_mbridge=True), hf, "cuda", {str(model)!r})
        sel.external.configure({{}}, {{"recompute_num_layers": 1}}, torch.bfloat16)
        sel.external.load(sel.external.build())
        res["mbridge"] = [sel.choice.kind] + [k for k, _ in mbridge.EVENTS]
        print(json.dumps(res))
    """, [DOUBLES, DOUBLES / "mbridge_installed"], tmp_path)
    assert out["installed"]["megatron.bridge"] and out["installed"]["mbridge"]
    assert out["megatron_imported_by_probe"] is False  # probing for megatron.bridge imports nothing
    assert out["kind"] == br.MEGATRON_BRIDGE
    kinds = [k for k, _ in out["events"]]
    order = ["from_hf_pretrained", "to_megatron_provider", "apply_overrides_and_finalize", "provide_distributed_model",
             "load_weights_hf_to_megatron", "stream_weights_megatron_to_hf"]
    assert [k for k in kinds if k in order] == order
    events = dict(out["events"])
    assert events["to_megatron_provider"]["load_weights"] == "False"
    assert events["to_megatron_provider"]["bridge"] == "Qwen3Bridge"
    assert events["provide_distributed_model"]["wrap_with_ddp"] == "False"  # verl_lite wraps in its own DDP
    assert events["provide_distributed_model"]["tp"] == "1" and events["provide_distributed_model"]["bf16"] == "True"
    assert "'recompute_num_layers': 1" in events["apply_overrides_and_finalize"]["overrides"]
    assert "'variable_seq_lengths': True" in events["apply_overrides_and_finalize"]["overrides"]
    assert events["load_weights_hf_to_megatron"]["path"] == str(model)
    assert out["convention"] == "gpt" and out["wrapped"] == ["Float16Module/GPTModel"]
    assert out["names"] == sorted(state) and out["dtypes"] == ["torch.bfloat16"] and out["bf16_equal"]
    assert "has no attribute 'use_ascend_gdn'" in out["unknown_override"]
    assert "critic" in out["critic"] and "strategy=fsdp" in out["critic"]
    assert out["mbridge"] == [br.MBRIDGE, "from_config", "set_extra_args", "get_model", "load_weights"]


def test_npu_mindspeed_bridge_registers_after_the_repatch_and_before_the_build(tmp_path):
    """The real MindSpeed engine (a ref: frozen, no optimizer) initializes through Megatron-Bridge's AutoBridge
    with MindSpeed-Bridge on a tiny Qwen3.5-MoE checkpoint: MindSpeed-Bridge's Qwen3VLModel is built, loaded,
    called in its convention (log-probs as transformers'), and exports the checkpoint."""
    import torch
    from megatron_world import padded_batch, response_log_probs
    from test_qwen3_5_vl_megatron import MOE, _hf_class, tiny_config

    model, state = _checkpoint(tmp_path, "qwen3_5_moe")
    batch = padded_batch(3, 12, 4, left_pad={0: 5, 2: 2}, ended_early=(1,), seed=3, vocab=400)
    torch.save(batch, tmp_path / "batch.pt")
    hf_model = _hf_class(MOE)(tiny_config(MOE)).eval()  # transformers' log-probs here: MindSpeed's double stands
    hf_model.load_state_dict(state)  # in for fla in the spawned process, and its kernel takes bf16 only
    with torch.no_grad():
        reference = response_log_probs(hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                                position_ids=batch["position_ids"]).logits, batch)
    out = _run(f"""
        import json, sys, torch
        res = {{}}
        import mindspeed._double as ms
        try:
            import mindspeed_bridge.models  # before MindSpeed's repatch: refused
        except RuntimeError as e:
            res["early"] = str(e)
        from omegaconf import OmegaConf
        from verl_lite.config.schema import VerlLiteConfig
        from verl_lite.engine.megatron import mindspeed as engine_ms
        from verl_lite.engine.megatron import conventions
        engine_ms.MindSpeedEngineMixin.internals_device = "cpu"
        cfg = OmegaConf.structured(VerlLiteConfig)
        sec = cfg.actor_rollout_ref
        sec.model.path = {str(model)!r}
        sec.actor.strategy = "megatron"
        sec.actor.megatron.override_transformer_config = {{"use_triton_gdn": False, "use_ascend_gdn": True}}
        engine = engine_ms.MindSpeedLMEngine(sec.model, sec.ref, None, "npu", "ref")
        engine.initialize()  # the ref: the model built and loaded through AutoBridge, frozen, no optimizer
        exported = dict(engine.export_hf_weights())
        checkpoint = torch.load({str(tmp_path / 'state.pt')!r})
        inner = conventions.innermost(engine.model[0])
        batch = torch.load({str(tmp_path / 'batch.pt')!r})
        log_probs = engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
        import megatron.bridge._double as d
        res.update(kind=engine.external.kind, names=sorted(exported), vocab=engine.layout.vocab, frozen=not any(
            p.requires_grad for c in engine.model for p in c.parameters()), mindspeed=ms.kinds(),
            bitwise=all(torch.equal(exported[k], v) for k, v in checkpoint.items()),
            model=type(inner).__module__ + "." + type(inner).__name__, packed=engine.remove_padding,
            convention=conventions.convention_of(engine.model[0]),
            log_probs=log_probs.tolist(),
            bridge=[(k, {{kk: str(vv) for kk, vv in v.items()}}) for k, v in d.EVENTS])
        print(json.dumps(res))
    """, [DOUBLES, MINDSPEED_DOUBLE], tmp_path, timeout=400)
    assert "before MindSpeed's repatch" in out["early"]
    assert "repatch" in out["mindspeed"]
    kinds = [k for k, _ in out["bridge"]]
    # import mindspeed_bridge.models -> (its registrations) -> AutoBridge resolves -> the model is built
    first = kinds.index("mindspeed_bridge_models_imported")
    assert first < kinds.index("from_hf_pretrained") < kinds.index("provide_distributed_model")
    events = out["bridge"]
    assert dict(events[first][1])["mindspeed_events"].count("repatch") >= 1
    registered = [dict(data) for kind, data in events if kind == "register_bridge"
                  and dict(data)["source"] == "Qwen3_5MoeForConditionalGeneration"]
    # Megatron-Bridge's own VL bridge first, then MindSpeed-Bridge's, which replaces it
    assert [r["bridge"] for r in registered] == ["Qwen35VLMoEBridge", "Qwen35MoeNpuBridge"]
    resolved = dict(events)["to_megatron_provider"]
    assert resolved["bridge"] == "Qwen35MoeNpuBridge" and resolved["provider"] == "Qwen35NpuProvider"
    assert "'use_ascend_gdn': True" in dict(events)["apply_overrides_and_finalize"]["overrides"]
    assert out["kind"] == br.MEGATRON_BRIDGE and out["frozen"] and out["vocab"] == 512
    assert kinds.index("provide_distributed_model") < kinds.index("load_weights_hf_to_megatron")
    assert dict(events)["load_weights_hf_to_megatron"]["path"].endswith("/model")
    # MindSpeed-Bridge's Qwen3VLModel, in Megatron-Bridge's convention; GDN layers on megatron-core 0.16: auto decides
    # padded (its GatedDeltaNet takes no THD)
    assert out["model"] == "mindspeed_bridge.models.qwen_vl.modelling_qwen3_vl.model.Qwen3VLModel"
    assert out["convention"] == "qwen3_vl" and out["packed"] is False
    assert [dict(data)["packed"] for kind, data in events if kind == "qwen3_vl_forward"] == ["False"]
    gap = (torch.tensor(out["log_probs"]) - reference)[batch["response_mask"].bool()].abs().max().item()
    assert gap < 1e-5, gap
    assert out["names"] == sorted(state) and out["bitwise"]  # export goes through the bridge


def _run_ranks(code: str, extra_path, tmp_path, world: int = 2, timeout=400):
    """`code` on `world` ranks (one process each, a gloo group set up from the environment)."""
    from verl_lite.device import free_port

    from conftest import PORT_TRIES

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in extra_path] + [str(REPO)])
    env.update(WORLD_SIZE=str(world))
    for attempt in range(PORT_TRIES):  # a new port when another process took the free one first
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
                                  env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank))) for rank in range(world)]
        outs = [proc.communicate(timeout=timeout) for proc in procs]
        if not any("EADDRINUSE" in err for _, err in outs):
            break
    for proc, (_, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-4000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_an_error_on_the_external_bridge_path_names_the_roles_own_key(tmp_path):
    """Through Megatron-Bridge the engine sets the built chunks up as it does its own bridges' (one DDP
    wrap, one optimizer build): a training actor of an MoE model at TP=2 without sequence parallelism is
    refused naming actor_rollout_ref.actor.megatron, not a bare `megatron` (after the real build and load at
    TP=2 of a tiny Qwen3.5-MoE checkpoint)."""
    model, _ = _checkpoint(tmp_path, "qwen3_5_moe")
    outs = _run_ranks(f"""
        import json, torch
        torch.distributed.init_process_group("gloo")
        from omegaconf import OmegaConf
        from verl_lite.config.schema import VerlLiteConfig
        from verl_lite.engine.megatron import mindspeed as engine_ms
        engine_ms.MindSpeedEngineMixin.internals_device = "cpu"
        cfg = OmegaConf.structured(VerlLiteConfig)
        sec = cfg.actor_rollout_ref
        sec.model.path = {str(model)!r}
        sec.actor.strategy = "megatron"
        sec.actor.megatron.tensor_model_parallel_size = 2
        sec.actor.megatron.sequence_parallel = False
        sec.actor.megatron.override_transformer_config = {{"use_triton_gdn": False, "use_ascend_gdn": True}}
        engine = engine_ms.MindSpeedLMEngine(sec.model, sec.actor, sec.actor.optim, "npu", "actor")
        res = {{}}
        try:
            engine.initialize()
        except Exception as e:
            res["error"] = f"{{type(e).__name__}}: {{e}}"
        res["kind"] = getattr(engine.external, "kind", None)
        print(json.dumps(res))
    """, [DOUBLES, MINDSPEED_DOUBLE], tmp_path)
    for out in outs:
        assert out["kind"] == br.MEGATRON_BRIDGE
        error = out.get("error", "")
        assert error.startswith("UnsupportedModelError: training an MoE model"), error
        assert "set actor_rollout_ref.actor.megatron.sequence_parallel=True" in error  # the role's own key
        assert "actor_rollout_ref.actor.megatron.expert_model_parallel_size" in error


def test_the_shipped_shapes_load_in_transformers():
    """The shapes are valid Qwen3.5 MoE configs for transformers (its own Qwen3_5MoeConfig parses them)."""
    transformers = pytest.importorskip("transformers")
    for name in ("Qwen3.5-35B-A3B", "Qwen3.5-122B-A10B", "Qwen3.5-397B-A17B"):
        data = json.loads((REPO / "verl_lite" / "assets" / "shapes" / f"{name}.json").read_text())
        config = transformers.AutoConfig.for_model(**data)
        text = config.text_config
        assert text.num_hidden_layers == len(text.layer_types) == data["text_config"]["num_hidden_layers"]
        assert text.layer_types.count("full_attention") == text.num_hidden_layers // 4
