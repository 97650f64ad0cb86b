"""Models built by Megatron-Bridge's AutoBridge, called in their own forward conventions
(`verl_lite/engine/megatron/conventions.py`: `forward_convention`, `external_item`), against verl_lite's own
bridges on the same safetensors and against transformers.

Megatron-Bridge does not install here; its contract double (tests/py/megatron_bridge_double) builds
real models: megatron-core GPTModel chunks for Qwen3ForCausalLM (the GPT convention) and its
`Qwen3VLModel` (Megatron-Bridge's forward: keywords, right-padded [b, s] ids and a [b, s] keep mask, its
own packing and 3-D positions) around verl_lite's own chunks for the Qwen3-VL and Qwen3.5
conditional-generation checkpoints. What runs:

- device cpu, in the two-rank world the Megatron test modules share (`_scenario`): the cuda engine class
  with its megatron internals on CPU (`CudaEngineOnCpu`: on device cpu the engine builds with verl_lite's
  registry, decisions/bridge_choice.py), which selects Megatron-Bridge; TP=1 and TP=2 (sequence
  parallel); dense Qwen3 padded and packed, Qwen3-VL-MoE and Qwen3-VL with images padded and packed,
  Qwen3.5-MoE text-only (auto runs it padded and an explicit use_remove_padding=True is refused:
  megatron-core 0.16's GDN takes no packed input);
  a backward step that changes the weights; calls in the wrong convention refused by the double;
- device npu, the MindSpeed engine with its internals on CPU and the MindSpeed double imported before
  megatron (`_npu_scenario`, one rank): dense Qwen3 (packed: MindSpeed's flash attention takes TND),
  Qwen3-VL-MoE with images (padded: no mask on npu, as verl), Qwen3.5-MoE text-only, training steps.
  MindSpeed-Bridge (`use_ascend_gdn=True`, which MindSpeed's process-wide repatch would give every
  engine of the process, and which Megatron-Bridge's own providers refuse) is in test_bridge_select.py.

Micro-batches with images go through `schedule.run_schedule` with the engine's own preparation and
postprocess (`_schedule`): the engine's `forward_backward` refuses images when no verl_lite bridge built
the model (`schedule.refuse_images_without_tower` is given `self.bridge`, None on the external path).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import pytest
import torch
from megatron_world import megatron_sections, nll_loss, padded_batch, response_log_probs, scenario

HERE = Path(__file__).resolve().parent
DOUBLES = str(HERE / "megatron_bridge_double")


def mindspeed_double() -> str:
    """The sys.path root of the MindSpeed double (the default Ascend stack's, tests/py/ascend_doubles.py)."""
    try:
        from ascend_doubles import double_dir
    except ImportError:  # the double before it was split per Ascend stack
        return str(HERE / "mindspeed_double")
    return double_dir()
SEED = 11
DENSE, VL, VL_MOE, Q35_MOE = "qwen3", "qwen3_vl", "qwen3_vl_moe", "qwen3_5_moe"
TOL = 1e-5


# ---------------------------------------------------------------------------------------- models and batches

def dense_config():
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, max_position_embeddings=256, pad_token_id=0,
                       tie_word_embeddings=False, architectures=["Qwen3ForCausalLM"])


def config_of(kind):
    if kind == DENSE:
        return dense_config()
    if kind == Q35_MOE:
        from test_qwen3_5_vl_megatron import MOE, tiny_config

        return tiny_config(MOE)
    from test_qwen3_vl_megatron import DENSE as VL_DENSE, MOE, tiny_config

    return tiny_config(MOE if kind == VL_MOE else VL_DENSE)


def hf_class(kind):
    import transformers

    return getattr(transformers, config_of(kind).architectures[0])


def write_checkpoint(kind, path):
    """A seeded random HF model saved as config.json + model.safetensors (both bridges load them; every rank
    writes its own: transformers' save_pretrained writes on rank 0 only); the model in eval mode."""
    from safetensors.torch import save_file

    torch.manual_seed(SEED)
    config = config_of(kind)
    model = hf_class(kind)(config).eval()
    config.save_pretrained(path)
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(path, "model.safetensors"))
    return model


def text_batch(seed=3, vocab=90):
    """Left-padded prompts of different lengths, a response that ended early."""
    return padded_batch(3, 12, 4, left_pad={0: 5, 2: 2}, ended_early=(1,), seed=seed, vocab=vocab)


def vl_batch(hf_model, seed=0):
    from test_qwen3_vl_megatron import make_vl_batch

    return make_vl_batch(hf_model, seed=seed)


def hf_log_probs(hf_model, batch):
    from test_qwen3_vl_megatron import hf_logits

    if batch.get("multi_modal_inputs"):
        logits = hf_logits(hf_model, batch)
    else:
        with torch.no_grad():
            logits = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              position_ids=batch["position_ids"]).logits
    return response_log_probs(logits, batch)


def gap(a, b, batch):
    mask = batch["response_mask"].bool()
    return (a - b)[mask].abs().max().item()


def _schedule(engine, batches, packed, loss_fn=None):
    """schedule.forward_backward's preparation and schedule for micro-batches with images (see the module)."""
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron import batch as megatron_batch
    from verl_lite.engine.megatron import schedule as megatron_schedule

    device, tp = torch.device("cpu"), mpu.get_tensor_model_parallel_world_size()
    if packed:
        prepared = [megatron_batch.prepare_packed_batch(b, device, 0, align=tp) for b in batches]
    else:
        multiple = tp if getattr(engine.tf_config, "sequence_parallel", False) else 1
        prepared = [megatron_batch.prepare_batch(b, device, 0, 0, multiple=multiple) for b in batches]
    return megatron_schedule.run_schedule(engine.model, prepared, engine.postprocess, loss_fn, loss_fn is None, False)


def log_probs(engine, batch, packed=None):
    """Forward-only log-probs: the engine's own forward_backward (packed as asked), `_schedule` for batches
    with images on the external path."""
    if batch.get("multi_modal_inputs") and engine.external is not None:
        return _schedule(engine, [batch], bool(packed))[0]["log_probs"]
    before = engine.remove_padding
    if packed is not None:
        engine.remove_padding = packed
    try:
        return engine.forward_backward([batch], forward_only=True)[0]["log_probs"]
    finally:
        engine.remove_padding = before


def exported(engine):
    return {k: v.clone() for k, v in engine.export_hf_weights()}


def train_step(engine, batch, packed=False):
    """One optimizer step on nll_loss; the loss and how far the exported weights moved (tower included)."""
    before = exported(engine)
    engine.train_mode()
    engine.optimizer_zero_grad()
    if batch.get("multi_modal_inputs"):
        loss = _schedule(engine, [batch], packed, nll_loss)[0]["metrics"]["loss"]
    else:
        engine.remove_padding = packed
        loss = engine.forward_backward([batch], nll_loss)[0]["metrics"]["loss"]
    engine.optimizer_step()
    engine.eval_mode()
    after = exported(engine)
    moved = {k: (after[k] - before[k]).abs().max().item() for k in before}
    return loss, moved


def _convention_of(engine):
    from verl_lite.engine.megatron import conventions

    return conventions.convention_of(engine.model[0]), type(conventions.innermost(engine.model[0])).__name__


def _clean_bridge_modules():
    """Forget the doubles' modules, so that later scenarios in the shared world find no Megatron-Bridge."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("mindspeed_bridge", "mbridge") or name == "megatron.bridge" or \
                name.startswith("megatron.bridge."):
            del sys.modules[name]


# ---------------------------------------------------------------------------------------- device cpu (shared world)

def cuda_engine_on_cpu():
    from verl_lite.engine.megatron.engine import MegatronLMEngine

    class CudaEngineOnCpu(MegatronLMEngine):
        """The cuda engine (device cuda: the bridge choice, the packing decision) with its megatron internals
        on CPU, as the MindSpeed engines' `internals_device` does for npu."""

        @property
        def compute_device(self):
            return "cpu"

    return CudaEngineOnCpu


def _engines(path, tp, optim=False, remove_padding=None, pp=1):
    """(external engine through Megatron-Bridge, verl_lite's own engine) on the same checkpoint."""
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron.engine import MegatronLMEngine

    model, actor = megatron_sections(path, tp, pp)
    model.use_remove_padding = remove_padding
    external = cuda_engine_on_cpu()(model, actor, actor.optim if optim else None, "cuda", "actor")
    external.initialize()
    own_model, own_actor = megatron_sections(path, tp, pp)
    own = MegatronLMEngine(own_model, own_actor, None, "cpu", "actor")  # forward only; shares the mesh
    own.initialize()
    assert mpu.get_tensor_model_parallel_world_size() == tp
    return external, own


def _wrong_calls(rec, vl_engine, vl_batch_, dense_engine):
    """Calls in the wrong convention, each refused by the double (or by megatron-core's GPTModel)."""
    from megatron.core import parallel_state as mpu

    from verl_lite.engine.megatron import batch as megatron_batch
    from verl_lite.engine.megatron import conventions

    tp = mpu.get_tensor_model_parallel_world_size()
    vl = conventions.innermost(vl_engine.model[0])
    padded = megatron_batch.prepare_batch(vl_batch_, torch.device("cpu"), 0, 0, multiple=tp)
    packed = megatron_batch.prepare_packed_batch(vl_batch_, torch.device("cpu"), 0, align=tp)
    right = conventions.external_item(padded, conventions.QWEN3_VL, vl)["call"][1]
    good_packed = conventions.external_item(packed, conventions.QWEN3_VL, vl)["call"][1]
    mm = conventions.multi_modal_kwargs(vl_batch_, torch.device("cpu"))
    calls = {
        # verl_lite's own GPT-style call: left-padded ids, positions, the 4-D True=masked mask
        "gpt_positional_4d": lambda: vl(padded["input_ids"], padded["position_ids"], padded["mask4d"], **mm),
        # a 4-D mask by keyword
        "keyword_4d_mask": lambda: vl(input_ids=right["input_ids"], attention_mask=padded["mask4d"], **mm),
        # GPT-style THD: packed [1, T] ids, no mask, the packed params by keyword
        "gpt_thd": lambda: vl(packed["input_ids"], packed["position_ids"], None,
                              packed_seq_params=packed["packed_seq_params"], **mm),
        # the packed params 4th positional: that is `labels`
        "params_as_4th_positional": lambda: vl(good_packed["input_ids"], None, good_packed["attention_mask"],
                                               good_packed["packed_seq_params"], **mm),
        # packed params of another alignment (TP + 1) than the model's own
        "params_disagree": lambda: vl(**dict(good_packed, packed_seq_params=megatron_batch.prepare_packed_batch(
            vl_batch_, torch.device("cpu"), 0, align=tp + 1)["packed_seq_params"])),
        # left padding with the keep mask
        "left_padded": lambda: vl(input_ids=padded["input_ids"], attention_mask=padded["batch"]["attention_mask"]
                                  .bool(), **mm),
    }
    gpt = conventions.innermost(dense_engine.model[0])
    calls["gpt_model_given_qwen3_vl_keywords"] = lambda: gpt(input_ids=right["input_ids"],
                                                             attention_mask=right["attention_mask"],
                                                             position_ids=None, pixel_values=torch.zeros(1))
    for name, call in calls.items():
        try:
            with torch.no_grad():
                call()
            rec[f"wrong:{name}"] = "no error"
        except Exception as e:  # noqa: BLE001 - the type and message are what is checked
            rec[f"wrong:{name}"] = f"{type(e).__name__}: {e}"
    rec["right_call_runs"] = tuple(vl(**right).shape) if tp == 1 else None


@scenario
def _scenario(rank, rec, out_dir):
    from megatron.core import parallel_state as mpu

    sys.path.insert(0, DOUBLES)  # the world restores sys.path after the scenario
    try:
        paths, hf_models = {}, {}
        for kind in (DENSE, VL_MOE, VL, Q35_MOE):
            paths[kind] = os.path.join(out_dir, f"rank{rank}", kind)
            hf_models[kind] = write_checkpoint(kind, paths[kind])
        text = text_batch()
        images = vl_batch(hf_models[VL_MOE])
        for tp in (1, 2):
            # dense Qwen3: the GPT convention, padded and packed
            external, own = _engines(paths[DENSE], tp, optim=tp == 1)
            rec[f"{DENSE}:tp{tp}:convention"] = _convention_of(external)
            reference = log_probs(own, text)
            rec[f"{DENSE}:tp{tp}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[DENSE], text), text)
            for packed in (False, True):
                rec[f"{DENSE}:tp{tp}:packed={packed}"] = gap(log_probs(external, text, packed), reference, text)
            if tp == 1:
                rec[f"{DENSE}:export_equal"] = all(torch.equal(v, hf_models[DENSE].state_dict()[k])
                                                   for k, v in exported(external).items())
                rec[f"{DENSE}:train"] = train_step(external, text, packed=True)
                dense_engine = external
            else:
                rec[f"{DENSE}:tp2:sp"] = bool(external.tf_config.sequence_parallel)
            mpu.destroy_model_parallel()
            # Qwen3-VL-MoE with images: the Qwen3VLModel convention, padded (BSHD) and packed (THD)
            external, own = _engines(paths[VL_MOE], tp)
            rec[f"{VL_MOE}:tp{tp}:convention"] = _convention_of(external)
            reference = log_probs(own, images)
            rec[f"{VL_MOE}:tp{tp}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[VL_MOE], images), images)
            for packed in (False, True):
                rec[f"{VL_MOE}:tp{tp}:packed={packed}"] = gap(log_probs(external, images, packed), reference, images)
            rec[f"{VL_MOE}:tp{tp}:text_packed"] = gap(log_probs(external, text, True), log_probs(own, text), text)
            if tp == 1:
                _wrong_calls(rec, external, images, dense_engine)
            mpu.destroy_model_parallel()
        # PP=2: every stage gets the padded ids and the mask (the positions are computed on each), two
        # micro-batches of different shapes cross the stages
        external, own = _engines(paths[VL_MOE], 1, pp=2)
        second = vl_batch(hf_models[VL_MOE], seed=2)
        for packed in (False, True):
            got = _schedule(external, [images, second], packed)
            rec[f"{VL_MOE}:pp2:packed={packed}"] = max(
                gap(got[0]["log_probs"], hf_log_probs(hf_models[VL_MOE], images), images),
                gap(got[1]["log_probs"], hf_log_probs(hf_models[VL_MOE], second), second))
        from verl_lite.engine.megatron import conventions

        rec[f"{VL_MOE}:pp2:stage"] = [conventions.innermost(c).pre_process for c in external.model]
        mpu.destroy_model_parallel()
        # Qwen3-VL dense with images, and its training step (the vision tower moves)
        external, own = _engines(paths[VL], 1, optim=True)
        vl_images = vl_batch(hf_models[VL], seed=1)
        reference = log_probs(own, vl_images)
        rec[f"{VL}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[VL], vl_images), vl_images)
        for packed in (False, True):
            rec[f"{VL}:packed={packed}"] = gap(log_probs(external, vl_images, packed), reference, vl_images)
        rec[f"{VL}:train"] = train_step(external, vl_images, packed=True)
        mpu.destroy_model_parallel()
        # Qwen3.5-MoE text-only: auto runs it padded (megatron-core 0.16's GDN takes no THD)
        external, own = _engines(paths[Q35_MOE], 1, optim=True, remove_padding=None)
        rec[f"{Q35_MOE}:convention"] = _convention_of(external)
        rec[f"{Q35_MOE}:engine_packs"] = external.remove_padding
        text35 = text_batch(vocab=400)
        reference = log_probs(own, text35)
        rec[f"{Q35_MOE}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[Q35_MOE], text35), text35)
        rec[f"{Q35_MOE}:external"] = gap(log_probs(external, text35), reference, text35)
        from verl_lite.engine.megatron import batch as megatron_batch
        from verl_lite.engine.megatron import conventions

        inner = conventions.innermost(external.model[0])
        right = conventions._right_padded(text35, 0, 1)
        params = megatron_batch.prepare_packed_batch(text35, torch.device("cpu"), 0, align=1)["packed_seq_params"]
        try:
            with torch.no_grad():
                inner(input_ids=right["input_ids"], attention_mask=right["keep"], packed_seq_params=params)
            rec["wrong:gdn_packed"] = "no error"
        except Exception as e:  # noqa: BLE001
            rec["wrong:gdn_packed"] = f"{type(e).__name__}: {e}"
        rec[f"{Q35_MOE}:train"] = train_step(external, text35, packed=False)
        mpu.destroy_model_parallel()
    finally:
        _clean_bridge_modules()


@pytest.fixture(scope="module")
def run(megatron_world):
    return megatron_world(__name__)


def test_each_model_is_called_in_its_own_convention(run):
    for rec in run:
        for tp in (1, 2):
            assert rec[f"{DENSE}:tp{tp}:convention"] == ("gpt", "GPTModel")
            assert rec[f"{VL_MOE}:tp{tp}:convention"] == ("qwen3_vl", "Qwen3VLModel")
        assert rec[f"{Q35_MOE}:convention"] == ("qwen3_vl", "Qwen3VLModel")
        assert rec[f"{DENSE}:tp2:sp"]  # TP=2 ran with sequence parallelism (aligned, scattered inputs)


@pytest.mark.parametrize("kind", [DENSE, VL_MOE])
def test_external_log_probs_equal_the_own_bridges_padded_and_packed_at_tp1_and_tp2(run, kind):
    for rec in run:
        gaps = {f"tp{tp}:packed={p}": rec[f"{kind}:tp{tp}:packed={p}"] for tp in (1, 2) for p in (False, True)}
        assert max(gaps.values()) < TOL, gaps
        assert max(rec[f"{kind}:tp{tp}:own_vs_hf"] for tp in (1, 2)) < TOL  # the own path is transformers'
        if kind == VL_MOE:  # text-only micro-batches through the engine's own packing
            assert max(rec[f"{kind}:tp{tp}:text_packed"] for tp in (1, 2)) < TOL


def test_qwen3_vl_moe_with_images_across_two_pipeline_stages(run):
    assert [rec[f"{VL_MOE}:pp2:stage"] for rec in run] == [[True], [False]]
    for rec in run:  # log-probs reach both stages
        assert max(rec[f"{VL_MOE}:pp2:packed={p}"] for p in (False, True)) < TOL


def test_qwen3_vl_dense_with_images_padded_and_packed(run):
    for rec in run:
        assert rec[f"{VL}:own_vs_hf"] < TOL
        assert max(rec[f"{VL}:packed={p}"] for p in (False, True)) < TOL, rec


def test_qwen3_5_moe_runs_padded_on_megatron_core_0_16_and_equals_the_own_bridge(run):
    for rec in run:
        assert rec[f"{Q35_MOE}:engine_packs"] is False  # auto: the external GDN model takes no packed input
        assert rec[f"{Q35_MOE}:own_vs_hf"] < TOL
        assert rec[f"{Q35_MOE}:external"] < TOL
        # the double refuses THD as megatron-core 0.16's GatedDeltaNet does
        assert rec["wrong:gdn_packed"] == "NotImplementedError: GDN does not support packed sequence for now."


def test_packing_an_external_gdn_model_on_megatron_core_0_16_is_refused_naming_why():
    from verl_lite.decisions.packing_mode import decide_megatron

    decision = decide_megatron(True, "npu", "torch", {}, external=True)
    assert decision.refusal and "takes no packed input (its GatedDeltaNet refuses THD; 0.18 takes it)" in decision.refusal
    assert decide_megatron(None, "npu", "torch", {}, external=True).packed is False


@pytest.mark.parametrize("kind", [DENSE, VL, Q35_MOE])
def test_a_backward_step_through_the_external_path_changes_the_weights(run, kind):
    for rec in run:
        loss, moved = rec[f"{kind}:train"]
        assert loss > 0 and max(moved.values()) > 0, moved
        layers = [k for k in moved if ".layers.0." in k and "visual" not in k]
        assert layers and max(moved[k] for k in layers) > 0
        if kind == VL:
            assert max(v for k, v in moved.items() if k.startswith("model.visual.")) > 0  # the tower trains


def test_the_external_export_is_the_checkpoint_bitwise(run):
    assert all(rec[f"{DENSE}:export_equal"] for rec in run)


@pytest.mark.parametrize("name,says", [
    ("gpt_positional_4d", "ValueError: attention_mask must be the [b, s] keep mask"),
    ("keyword_4d_mask", "rope.py:179-184"),
    ("gpt_thd", "ValueError: packed_seq_params without attention_mask"),
    ("params_as_4th_positional", "TypeError: labels (the 4th positional parameter"),
    ("params_disagree", "ValueError: packed_seq_params disagree with the model's own packing"),
    ("left_padded", "ValueError: attention_mask is not right-padded"),
    ("gpt_model_given_qwen3_vl_keywords", "TypeError"),
])
def test_a_call_in_the_wrong_convention_fails_in_the_double(run, name, says):
    rec = run[0]
    assert says in rec[f"wrong:{name}"], rec[f"wrong:{name}"]
    assert rec["right_call_runs"][0] == 3  # the same inputs in the right convention run: [b, s, V] logits


# ---------------------------------------------------------------------------------------- device npu (MindSpeed)

def _npu_scenario(rank, world, port, out_dir):
    """The MindSpeed engine (internals on CPU) with Megatron-Bridge: MindSpeed imported before megatron, as
    on Ascend; the own-bridge references are the cpu engine's in the same process."""
    import importlib

    sys.path.insert(0, DOUBLES)
    sys.path.insert(0, mindspeed_double())
    sys.path.insert(0, str(HERE))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    rec = {}
    try:
        importlib.import_module("mindspeed._double")  # the package only: megatron is not imported yet
        from verl_lite.engine.megatron import conventions
        from verl_lite.engine.megatron import mindspeed as ms
        from verl_lite.engine.megatron.engine import MegatronLMEngine
        from verl_lite.registry import ENGINES

        ms.MindSpeedEngineMixin.internals_device = "cpu"
        npu_engine = ENGINES.load("language_model", "megatron", "npu")

        def engines(kind, optim=False):
            model, actor = megatron_sections(paths[kind])
            engine = npu_engine(model, actor, actor.optim if optim else None, "npu", "actor")
            engine.initialize()
            own_model, own_actor = megatron_sections(paths[kind])
            own = MegatronLMEngine(own_model, own_actor, None, "cpu", "actor")
            own.initialize()
            return engine, own

        paths, hf_models = {}, {}
        for kind in (DENSE, VL_MOE, Q35_MOE):
            paths[kind] = os.path.join(out_dir, kind)
            hf_models[kind] = write_checkpoint(kind, paths[kind])
        text = text_batch()
        # dense Qwen3 (the GPT convention): auto packs on MindSpeed's flash attention
        engine, own = engines(DENSE, optim=True)
        rec["class"] = type(engine).__name__
        rec[f"{DENSE}:convention"] = _convention_of(engine)
        rec[f"{DENSE}:packed"] = engine.remove_padding
        reference = log_probs(own, text)
        rec[f"{DENSE}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[DENSE], text), text)
        for packed in (False, True):
            rec[f"{DENSE}:packed={packed}"] = gap(log_probs(engine, text, packed), reference, text)
        rec[f"{DENSE}:train"] = train_step(engine, text, packed=True)
        # Qwen3-VL-MoE with images: padded on npu goes without a mask (verl's build_vlm_attn_mask_bshd)
        engine, own = engines(VL_MOE)
        images = vl_batch(hf_models[VL_MOE])
        rec[f"{VL_MOE}:convention"] = _convention_of(engine)
        reference = log_probs(own, images)
        rec[f"{VL_MOE}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[VL_MOE], images), images)
        for packed in (False, True):
            rec[f"{VL_MOE}:packed={packed}"] = gap(log_probs(engine, images, packed), reference, images)
        import megatron.bridge._double as events

        calls = [d for k, d in events.EVENTS if k == "qwen3_vl_forward"]
        rec[f"{VL_MOE}:forwards"] = [(d["packed"], d["images"], d["mask"]) for d in calls]
        # Qwen3.5-MoE text-only: Megatron-Bridge's Qwen3VLModel; the engine may pack, the model runs BSHD
        engine, own = engines(Q35_MOE, optim=True)
        text35 = text_batch(vocab=400)
        rec[f"{Q35_MOE}:convention"] = _convention_of(engine)
        rec[f"{Q35_MOE}:model_module"] = type(conventions.innermost(engine.model[0])).__module__
        rec[f"{Q35_MOE}:packed"] = engine.remove_padding
        reference = log_probs(own, text35)
        rec[f"{Q35_MOE}:own_vs_hf"] = gap(reference, hf_log_probs(hf_models[Q35_MOE], text35), text35)
        rec[f"{Q35_MOE}:external"] = gap(log_probs(engine, text35), reference, text35)
        rec[f"{Q35_MOE}:train"] = train_step(engine, text35, packed=True)
        rec["bridge_events"] = [k for k, _ in events.EVENTS if k != "qwen3_vl_forward"]
    except Exception:
        rec["error"] = traceback.format_exc()
    torch.save(rec, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def npu_run(spawn_ranks):
    return spawn_ranks(_npu_scenario, "external_bridge_npu", nprocs=1)[0]


def test_the_mindspeed_npu_engine_calls_each_external_model_in_its_convention(npu_run):
    rec = npu_run
    assert rec["class"] == "MindSpeedLMEngine"
    assert rec[f"{DENSE}:convention"] == ("gpt", "GPTModel") and rec[f"{DENSE}:packed"] is True
    assert rec[f"{VL_MOE}:convention"] == ("qwen3_vl", "Qwen3VLModel")
    assert rec[f"{Q35_MOE}:convention"] == ("qwen3_vl", "Qwen3VLModel")
    assert rec[f"{Q35_MOE}:model_module"] == "megatron.bridge.models.qwen_vl.modelling_qwen3_vl.model"
    assert "mindspeed_bridge_models_imported" not in rec["bridge_events"]  # use_ascend_gdn unset
    # the VL model ran padded without a mask (npu, as verl's build_vlm_attn_mask_bshd) and packed with the keep
    # mask, the images reaching it each time
    assert rec[f"{VL_MOE}:forwards"] == [(False, 2, False), (True, 2, True)]


@pytest.mark.parametrize("kind", [DENSE, VL_MOE])
def test_npu_external_log_probs_equal_the_own_bridges_padded_and_packed(npu_run, kind):
    rec = npu_run
    assert rec[f"{kind}:own_vs_hf"] < TOL
    gaps = {p: rec[f"{kind}:packed={p}"] for p in (False, True)}
    assert max(gaps.values()) < TOL, gaps


def test_npu_qwen3_5_moe_runs_padded_and_equals_the_own_bridge_and_training_steps_move_the_weights(npu_run):
    rec = npu_run
    assert rec[f"{Q35_MOE}:own_vs_hf"] < TOL and rec[f"{Q35_MOE}:external"] < TOL
    for kind in (DENSE, Q35_MOE):
        loss, moved = rec[f"{kind}:train"]
        assert loss > 0 and max(moved.values()) > 0
