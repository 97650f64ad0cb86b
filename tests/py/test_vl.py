"""Images through the loop on the torch engine and the hf rollout, with the shipped tiny VL model
(tiny-qwen3_vl_moe: a Qwen3VLMoeForConditionalGeneration with a small vision tower, random init) and
two tiny configs built here beside it with the same tokenizer and processor: Qwen3-VL dense
(Qwen3VLForConditionalGeneration) and Qwen3.5 (Qwen3_5ForConditionalGeneration: Gated DeltaNet and
attention layers, Qwen3.5's own vision tower). The model-level checks run over all three.

Reference numbers come from transformers' own model run on the processor's own inputs."""

from __future__ import annotations

import io
import re

import pytest
import torch

from verl_lite.batch import left_pad
from verl_lite.config.schema import ActorConfig, CriticConfig, ModelConfig, RolloutConfig
from verl_lite.data import multimodal
from verl_lite.data.dataset import DataError, PromptDataset, multi_modal_fields
from verl_lite.data.tokenizer import load_tokenizer

MODEL = "tiny-qwen3_vl_moe"


@pytest.fixture(scope="module")
def processor():
    return multimodal.load_processor(MODEL)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def image_data(tmp_path_factory):
    from verl_lite.data.synthetic_images import generate

    d = tmp_path_factory.mktemp("shapes")
    generate(str(d), "colour", n_train=16, n_val=4, seed=0)
    return d


@pytest.fixture(scope="module")
def examples(image_data, tokenizer, processor):
    return PromptDataset(str(image_data / "train.parquet"), tokenizer, 64, processor=processor).examples


def _tiny_configs() -> dict:
    """config.json of the tiny dense Qwen3-VL and Qwen3.5 models: the asset's token ids and vision tower
    sizes, a 2-layer text model of hidden 64 (Qwen3.5: one GDN layer and one attention layer, half of
    each head rotated, in the 3-D sections [2, 1, 1])."""
    import json

    from verl_lite.models import resolve_model_dir

    with open(f"{resolve_model_dir(MODEL)}/config.json") as f:
        moe = json.load(f)
    ids = {k: moe[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    vision = {k: v for k, v in moe["vision_config"].items() if k != "model_type"}
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, vocab_size=moe["text_config"]["vocab_size"], max_position_embeddings=1024,
                rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=2, tie_word_embeddings=False)
    dense = dict(architectures=["Qwen3VLForConditionalGeneration"], model_type="qwen3_vl", tie_word_embeddings=False,
                 text_config=dict(text, model_type="qwen3_vl_text", rope_parameters=moe["text_config"]["rope_parameters"]),
                 vision_config=dict(vision, model_type="qwen3_vl_vision"), **ids)
    vision.pop("deepstack_visual_indexes")  # Qwen3.5's tower has no deepstack layers
    qwen3_5 = dict(architectures=["Qwen3_5ForConditionalGeneration"], model_type="qwen3_5", tie_word_embeddings=False,
                   text_config=dict(text, model_type="qwen3_5_text", layer_types=["linear_attention", "full_attention"],
                                    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                                    linear_num_key_heads=2, linear_num_value_heads=4,
                                    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5,
                                                         mrope_interleaved=True, mrope_section=[2, 1, 1])),
                   vision_config=dict(vision, model_type="qwen3_5_vision"), **ids)
    return {"qwen3_vl": dense, "qwen3_5": qwen3_5}


@pytest.fixture(scope="module", params=["qwen3_vl_moe", "qwen3_vl", "qwen3_5"])
def model_path(request, tmp_path_factory):
    """The shipped MoE model, or a copy of its directory (tokenizer, processor) with a dense Qwen3-VL or a
    Qwen3.5 config."""
    import json
    import shutil

    from verl_lite.models import resolve_model_dir

    if request.param == "qwen3_vl_moe":
        return MODEL
    d = tmp_path_factory.mktemp(request.param) / "model"
    shutil.copytree(resolve_model_dir(MODEL), d)
    (d / "config.json").write_text(json.dumps(_tiny_configs()[request.param], indent=1))
    return str(d)


@pytest.fixture(scope="module")
def hf_model(model_path):
    from verl_lite.models.hf import build_causal_lm

    return build_causal_lm(ModelConfig(path=model_path)).eval()


@pytest.fixture(scope="module")
def moe_model():
    from verl_lite.models.hf import build_causal_lm

    return build_causal_lm(ModelConfig(path=MODEL)).eval()


def _processor_inputs(processor, example):
    """What transformers' processor makes of the example's messages and images (the reference)."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], images=list(example.images), return_tensors="pt")


def test_the_processor_loads_without_torchvision_and_expands_each_image_to_its_merged_patches(processor, examples):
    ex = examples[0]
    ref = _processor_inputs(processor, ex)
    assert ex.prompt_ids == ref["input_ids"][0].tolist()
    mm = ex.multi_modal_inputs()
    assert torch.equal(mm["pixel_values"], ref["pixel_values"]) and torch.equal(mm["image_grid_thw"], ref["image_grid_thw"])
    grid = mm["image_grid_thw"][0]
    pads = ex.prompt_ids.count(processor.image_token_id)
    assert pads == int(grid.prod()) // 4 and pads > 0  # 2x2 merge
    assert ex.multi_modal_data["image"][0].size == (64, 64)


def test_image_entries_as_bytes_paths_and_pil_images_give_the_same_image(tmp_path):
    from PIL import Image

    img = Image.new("RGB", (40, 30), (10, 200, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    path = tmp_path / "a.png"
    img.save(path)
    for entry in ({"bytes": buf.getvalue()}, {"path": str(path)}, {"image": str(path)}, str(path), img):
        assert multimodal.open_image(entry, "row 0").tobytes() == img.tobytes()
    with pytest.raises(multimodal.MultiModalError, match="none of bytes, path, image"):
        multimodal.open_image({"url": "x"}, "row 3")


def test_images_are_resized_to_multiples_of_twice_the_patch_size_as_qwen_vl_utils():
    from PIL import Image

    out = multimodal.resize_for_patches(Image.new("RGB", (100, 61)), 14)
    assert out.size == (112, 56)  # round(100/28)*28, round(61/28)*28


def test_placeholders_must_match_the_images_and_text_models_refuse_images(image_data, tokenizer, processor, tmp_path):
    with pytest.raises(multimodal.MultiModalError, match="1 <image> placeholders but the row has 2 images"):
        multimodal.build_messages([{"role": "user", "content": "<image>hi"}], 2, "data row 0")
    with pytest.raises(DataError, match="model has no processor"):
        PromptDataset(str(image_data / "train.parquet"), load_tokenizer("tiny-qwen3_5"), 64)


def test_overlong_filtering_counts_the_image_tokens(image_data, tokenizer, processor, examples):
    n = len(examples[0].prompt_ids)  # every row: same prompt, one 64x64 image
    assert n > len("colour?") + 10  # the image's placeholder tokens are in the count
    assert len(PromptDataset(str(image_data / "train.parquet"), tokenizer, n, processor=processor,
                             filter_overlong=True)) == len(examples)
    with pytest.raises(DataError, match="every prompt was filtered"):
        PromptDataset(str(image_data / "train.parquet"), tokenizer, n - 1, processor=processor, filter_overlong=True)
    with pytest.raises(DataError, match=f"has {n} tokens"):
        PromptDataset(str(image_data / "train.parquet"), tokenizer, n - 1, processor=processor)


def _rows(tokenizer, examples, k=3):
    """The first k examples as one left-padded prompt batch with their image fields."""
    exs = examples[:k]
    batch = left_pad([e.prompt_ids for e in exs], tokenizer.pad_token_id)
    batch.update(multi_modal_fields(exs))
    return exs, batch


def test_3d_positions_are_the_models_own_over_prompt_and_response(hf_model, tokenizer, examples):
    from verl_lite.models.hf import mm_token_type_ids, vl_position_ids

    exs, batch = _rows(tokenizer, examples)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    grid = torch.cat([m["image_grid_thw"] for m in batch["multi_modal_inputs"]])
    ref, _ = hf_model.model.get_rope_index(ids, mm_token_type_ids(ids, hf_model.config), image_grid_thw=grid,
                                           attention_mask=mask)
    ours = vl_position_ids(hf_model.config, ids, mask, batch["multi_modal_inputs"])
    assert ours.shape == (3, 3, ids.shape[1])
    assert torch.equal(ours, ref.permute(1, 0, 2))
    # the image's positions are not 1-D: height and width rows differ inside the image
    assert not torch.equal(ours[:, 1], ours[:, 2])


def _hf_log_probs(model, ids, mask, responses, pixels=None, suppress=()):
    """transformers' forward with the processor's inputs (its own position computation); `suppress`:
    token ids taken out of the distribution (as generate's suppress_tokens)."""
    from verl_lite.models.hf import mm_token_type_ids

    kwargs = {}
    if pixels:
        kwargs = dict(pixels, mm_token_type_ids=mm_token_type_ids(ids, model.config, ids.shape[1] - responses.shape[1]))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False, **kwargs).logits
    r = responses.shape[1]
    logits = logits[:, -r - 1:-1].float()
    if suppress:
        logits[..., list(suppress)] = float("-inf")
    lp = torch.log_softmax(logits, -1)
    return lp.gather(-1, responses.unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module")
def rollout_out(model_path, tokenizer, examples):
    from verl_lite.rollout.hf import HFRollout

    rollout = HFRollout(ModelConfig(path=model_path), RolloutConfig(calculate_log_probs=True), tokenizer, "cpu")
    torch.manual_seed(0)
    exs, batch = _rows(tokenizer, examples, k=4)
    out = rollout.generate(batch, 4, {"temperature": 1.0, "do_sample": True})
    return rollout, out


def test_the_hf_rollout_generates_from_the_images(rollout_out, hf_model):
    from verl_lite.models.hf import image_inputs, vision_special_ids

    rollout, out = rollout_out
    assert out["position_ids"].shape == (4, 3, out["input_ids"].shape[1])
    pixels = image_inputs(out["multi_modal_inputs"])
    resp = out["responses"]
    special = vision_special_ids(hf_model.config)
    with_images = _hf_log_probs(hf_model, out["input_ids"], out["attention_mask"], resp, pixels, special)
    without = _hf_log_probs(hf_model, out["input_ids"], out["attention_mask"], resp, None, special)
    m = out["response_mask"].bool()
    # the rollout's sampling log-probs are transformers' with the images (the vision tokens suppressed),
    # and not those without them
    assert not any(t in special for t in resp[m].tolist())
    torch.testing.assert_close(out["rollout_log_probs"][m], with_images[m], rtol=1e-4, atol=1e-4)
    assert (out["rollout_log_probs"][m] - without[m]).abs().max() > 1e-2


def test_torch_engine_vl_log_probs_equal_transformers_and_need_the_pixel_inputs(model_path, rollout_out, hf_model):
    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.models.hf import image_inputs

    _, out = rollout_out
    engine = TorchLMEngine(ModelConfig(path=model_path), ActorConfig(), None, "cpu", "actor")
    engine.initialize()
    assert not engine.remove_padding  # vision-language models run padded
    mb = {k: out[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "multi_modal_inputs")}
    got = engine.forward_backward([mb], None, forward_only=True)[0]["log_probs"]
    ref = _hf_log_probs(hf_model, out["input_ids"], out["attention_mask"], out["responses"],
                        image_inputs(out["multi_modal_inputs"]))
    m = out["response_mask"].bool()
    torch.testing.assert_close(got[m], ref[m], rtol=1e-5, atol=1e-5)
    dropped = engine.forward_backward([{k: v for k, v in mb.items() if k != "multi_modal_inputs"}], None,
                                      forward_only=True)[0]["log_probs"]
    assert (dropped[m] - ref[m]).abs().max() > 1e-2  # without the pixels the log-probs are not the model's


@pytest.mark.parametrize("model_path", ["qwen3_5"], indirect=True)  # the text-only twin is Qwen3.5's
def test_qwen3_5_text_rows_through_the_vision_language_model_are_the_text_models(model_path, tokenizer, hf_model):
    """A Qwen3.5 ...ForConditionalGeneration row without images: the engine (3-D positions of a text row,
    no pixel inputs) gives the log-probs of transformers' text-only Qwen3_5ForCausalLM with the same
    language-model weights (what a text checkpoint of the model, or a bridge that drops the tower, runs)."""
    from transformers import AutoModelForCausalLM

    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.models.hf import vl_position_ids

    text = AutoModelForCausalLM.from_config(hf_model.config.text_config).eval()
    assert type(text).__name__ == "Qwen3_5ForCausalLM"
    state = {k.replace("model.language_model.", "model."): v for k, v in hf_model.state_dict().items()
             if not k.startswith("model.visual.")}
    text.load_state_dict(state, strict=True)
    rows = [tokenizer.encode(t) for t in ("colour? red", "a longer text row: blue")]
    batch = left_pad(rows, tokenizer.pad_token_id)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    responses = ids[:, -4:]
    engine = TorchLMEngine(ModelConfig(path=model_path), ActorConfig(), None, "cpu", "actor")
    engine.initialize()
    engine.module.load_state_dict(hf_model.state_dict())
    positions = vl_position_ids(hf_model.config, ids, mask, [None, None])
    got = engine.forward_backward([{"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                                    "responses": responses}], None, forward_only=True)[0]["log_probs"]
    ref = _hf_log_probs(text, ids, mask, responses)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_the_loss_gradient_reaches_the_vision_tower(model_path, rollout_out):
    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.config.schema import OptimConfig

    _, out = rollout_out
    engine = TorchLMEngine(ModelConfig(path=model_path), ActorConfig(), OptimConfig(lr=1e-3, total_training_steps=1),
                           "cpu", "actor")
    engine.initialize()
    engine.train_mode()
    mb = {k: out[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "multi_modal_inputs")}

    def loss_fn(o, b):
        return -(o["log_probs"] * b["responses"].ne(0)).sum(), {}

    engine.forward_backward([mb], loss_fn)
    grad = engine.module.model.visual.patch_embed.proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_the_critic_values_see_the_images(model_path, rollout_out):
    from verl_lite.engine.torch.engine import TorchValueEngine

    _, out = rollout_out
    engine = TorchValueEngine(ModelConfig(path=model_path), CriticConfig(), None, "cpu", "critic")
    engine.initialize()
    mb = {k: out[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "multi_modal_inputs")}
    values = engine.forward_backward([mb], None, forward_only=True)[0]["values"]
    blank = [dict(m, pixel_values=torch.zeros_like(m["pixel_values"])) for m in mb["multi_modal_inputs"]]
    other = engine.forward_backward([dict(mb, multi_modal_inputs=blank)], None, forward_only=True)[0]["values"]
    assert values.shape == out["responses"].shape and not torch.allclose(values, other)


def test_token_budget_micro_batches_keep_the_pixel_inputs_and_3d_positions(rollout_out):
    from verl_lite.trainer.dynamic_batch import MicroBatches

    _, out = rollout_out
    batch = {k: out[k] for k in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask",
                                 "multi_modal_inputs")}
    micro = MicroBatches(batch, max_token_len=2 * out["input_ids"].shape[1])
    assert len(micro.parts) == 2
    for part, rows in zip(micro.parts, micro.indices):
        assert part["position_ids"].shape[:2] == (len(rows), 3)
        assert part["position_ids"].shape[2] == part["input_ids"].shape[1]
        assert [m["pixel_values"].data_ptr() for m in part["multi_modal_inputs"]] == \
            [batch["multi_modal_inputs"][i]["pixel_values"].data_ptr() for i in rows]


def test_packing_is_refused_for_a_vision_language_model(model_path):
    from verl_lite.engine.torch.engine import TorchLMEngine

    engine = TorchLMEngine(ModelConfig(path=model_path, use_remove_padding=True), ActorConfig(), None, "cpu", "actor")
    with pytest.raises(ValueError, match="use_remove_padding=True is not supported here: .*vision-language models run padded"):
        engine.initialize()


@pytest.mark.parametrize("model_path", ["qwen3_5"], indirect=True)  # the models with Gated DeltaNet layers
def test_packed_gdn_refuses_3d_positions(model_path, rollout_out):
    """Split per packed sequence (models/packed_gdn.py), Qwen3.5's GDN layers refuse a packed call with
    images' 3-D positions rather than running the row as one sequence; a text row's packed call still runs."""
    from verl_lite.models.hf import build_causal_lm, image_inputs, model_position_ids
    from verl_lite.models.packed_gdn import split_gdn_by_sequence

    model = build_causal_lm(ModelConfig(path=model_path)).eval()
    assert split_gdn_by_sequence(model) > 0
    _, out = rollout_out
    ids, pos = out["input_ids"][:1], model_position_ids(out["position_ids"][:1])
    with torch.no_grad(), pytest.raises(ValueError, match="3-D rotary positions .*use_remove_padding=False"):
        model(input_ids=ids, position_ids=pos, use_cache=False, **image_inputs(out["multi_modal_inputs"][:1]))
    text = torch.tensor([[7, 8, 9, 10, 11, 12]])
    with torch.no_grad():
        packed = model(input_ids=text, position_ids=torch.tensor([[0, 1, 2, 0, 1, 2]]), use_cache=False).logits
        second = model(input_ids=text[:, 3:], position_ids=torch.tensor([[0, 1, 2]]), use_cache=False).logits
    torch.testing.assert_close(packed[:, 3:], second, rtol=1e-5, atol=1e-5)  # the second sequence starts afresh


@pytest.mark.parametrize("model_path", ["qwen3_vl", "qwen3_5"], indirect=True)  # the two families with the tower
def test_the_megatron_engine_takes_images_with_the_tower_and_refuses_them_for_a_text_bridge(
        model_path, rollout_out, hf_model):
    """Qwen3-VL's and Qwen3.5's conditional-generation bridges build the vision tower and take a batch
    with images; the text model's bridge (Qwen3_5ForCausalLM from the same text config) refuses it
    (it would run without them), a text batch passes both."""
    from verl_lite.engine.megatron.bridges import bridge_for
    from verl_lite.engine.megatron.schedule import refuse_images_without_tower
    from verl_lite.models.hf import load_hf_config

    _, out = rollout_out
    config = load_hf_config(ModelConfig(path=model_path))
    bridge = bridge_for(config)
    assert bridge.has_vision and type(bridge).__name__ == (
        "Qwen3_5VLBridge" if config.model_type == "qwen3_5" else "Qwen3VLBridge")
    images = [{"input_ids": out["input_ids"], "multi_modal_inputs": out["multi_modal_inputs"]}]
    text_rows = [{"input_ids": out["input_ids"], "multi_modal_inputs": [None] * 4}]
    refuse_images_without_tower("actor", bridge, images)
    refuse_images_without_tower("actor", bridge, text_rows)
    if config.model_type == "qwen3_5":
        from verl_lite.engine.megatron.bridges.qwen3_5 import Qwen3_5Bridge

        text = Qwen3_5Bridge(config.text_config)
        refuse_images_without_tower("actor", text, text_rows)
        with pytest.raises(ValueError, match="Qwen3_5Bridge builds no vision tower .*strategy=fsdp"):
            refuse_images_without_tower("actor", text, images)


@pytest.mark.parametrize("model_path", ["qwen3_5"], indirect=True)  # Qwen3.5's text-only export
def test_the_hf_rollout_takes_a_text_only_export_and_then_refuses_images(model_path, tokenizer, examples, hf_model):
    """A text-only export (Qwen3_5ForCausalLM's names: `model.*`, no tower): the hf rollout of the
    conditional-generation checkpoint takes it into its language model, and with no tower synced
    refuses prompts with images instead of using stale tower weights."""
    from transformers import AutoModelForCausalLM

    from verl_lite.rollout.hf import HFRollout

    text = AutoModelForCausalLM.from_config(hf_model.config.text_config)
    rollout = HFRollout(ModelConfig(path=model_path, init_seed=1), RolloutConfig(), tokenizer, "cpu")
    assert rollout.update_weights(text.state_dict().items(), 1) == len(text.state_dict())
    assert torch.equal(rollout.model.model.language_model.embed_tokens.weight, text.model.embed_tokens.weight)
    _, batch = _rows(tokenizer, examples, k=1)
    with pytest.raises(ValueError, match="carried no vision tower"):
        rollout.generate(batch, 2, {"do_sample": False})
    rollout.update_weights(hf_model.state_dict().items(), 2)  # a full export: images again
    assert rollout.generate(batch, 2, {"do_sample": False})["responses"].shape == (1, 2)


def test_the_image_task_scores_the_first_word():
    from verl_lite.reward.manager import default_compute_score

    src = "verl_lite/shapes_colour"
    assert default_compute_score(src, " red", "red") == 1.0
    assert default_compute_score(src, "blue", "red") == 0.1
    assert default_compute_score(src, "x", "red") == 0.0
    assert default_compute_score("verl_lite/shapes_count", "two.", "two") == 1.0


@pytest.mark.parametrize("module, options", [("synthetic", ["--digits", "4"]), ("synthetic_images", ["--task", "count"])])
def test_the_data_generators_command_lines_write_both_splits_and_refuse_an_unwritable_directory(
        module, options, tmp_path, capsys):
    import importlib

    import pandas as pd

    main = importlib.import_module(f"verl_lite.data.{module}").main
    out = tmp_path / "data"
    assert main(["--out-dir", str(out), "--train", "3", "--val", "2", *options]) == 0
    printed = capsys.readouterr().out.splitlines()
    # the image data's lines also give the split's image-blind bound
    bound = r" \(image-blind bound 0\.\d{4}: always '\w+'\)" if module == "synthetic_images" else ""
    assert [bool(re.fullmatch(re.escape(f"{s}: {out / f'{s}.parquet'}") + bound, line))
            for s, line in zip(("train", "val"), printed)] == [True, True], printed
    assert len(printed) == 2
    assert [len(pd.read_parquet(out / f"{s}.parquet")) for s in ("train", "val")] == [3, 2]
    (tmp_path / "file").write_text("")
    assert main(["--out-dir", str(tmp_path / "file" / "x"), "--train", "1", "--val", "1"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("verl_lite: ") and "Not a directory" in line, line


@pytest.mark.parametrize("task,n_colours,n", [("colour", None, 60), ("colour", 2, 41), ("colour", 3, 7), ("count", None, 30)])
def test_the_image_blind_bound_is_the_best_score_of_any_fixed_response(task, n_colours, n):
    """Every prompt of a task is the same text, so a policy blind to the image gives each row the same
    response distribution; its mean score is linear in that distribution, so the best is a single
    response. Brute force over every word any scorer rewards, a miss and the empty response."""
    from verl_lite.data.synthetic_images import TASKS, blind_bound, compute_score, make_rows

    rows = make_rows(n, task, seed=3, split="train", n_colours=n_colours)
    answers = {r["reward_model"]["ground_truth"] for r in rows}
    assert answers <= set(TASKS[task][:n_colours or len(TASKS[task])])
    candidates = sorted({w for words in TASKS.values() for w in words}) + ["purple", ""]
    brute = {w: sum(compute_score(r["data_source"], w, r["reward_model"]["ground_truth"]) for r in rows) / n
             for w in candidates}
    bound, answer = blind_bound(rows)
    assert bound == pytest.approx(max(brute.values()), abs=1e-12)
    assert brute[answer] == pytest.approx(bound, abs=1e-12)


def test_n_colours_draws_from_the_first_colours_and_is_refused_outside_its_range(tmp_path):
    from verl_lite.data.synthetic_images import generate, make_rows

    assert {r["reward_model"]["ground_truth"] for r in make_rows(40, "colour", 0, "train", n_colours=2)} == {"red", "green"}
    for task, bad in (("colour", 1), ("colour", 5), ("count", 2)):
        with pytest.raises(ValueError, match=rf"n_colours={bad} \(the colour task only, 2..4\)"):
            generate(str(tmp_path), task, n_train=2, n_val=2, n_colours=bad)
    for task, bad in (("colour", 19), ("colour", 65), ("count", 30)):
        with pytest.raises(ValueError, match=rf"min_size={bad} \(the colour task only, 20..64 pixels\)"):
            generate(str(tmp_path), task, n_train=2, n_val=2, min_size=bad)


def test_min_size_gives_larger_solid_regions_of_the_answer_colour():
    from verl_lite.data.multimodal import open_image
    from verl_lite.data.synthetic_images import COLOURS, make_rows

    def coloured_share(row):
        image, rgb = open_image(row["images"][0], "row"), COLOURS[row["reward_model"]["ground_truth"]]
        data = image.tobytes()  # RGB, 3 bytes a pixel
        near = [all(abs(p - c) <= 25 for p, c in zip(px, rgb)) for px in zip(data[0::3], data[1::3], data[2::3])]
        return sum(near) / len(near)

    small = [coloured_share(r) for r in make_rows(12, "colour", 0, "train")]
    large = [coloured_share(r) for r in make_rows(12, "colour", 0, "train", min_size=56)]
    # a disc of side 56 covers pi/4 * 56^2 / 64^2 = 0.60 of the image; the default 20..44 as little as 0.08
    assert min(large) > 0.55 and min(small) < 0.3, (small, large)


def test_verls_image_keys_are_accepted_and_return_multi_modal_inputs_false_is_refused():
    from verl_lite.config import load_config
    from verl_lite.preflight.run import verl_problems

    cfg = load_config(["data.image_key=images", "data.image_patch_size=14", "data.return_multi_modal_inputs=True"])
    assert cfg.data.image_key == "images" and cfg.data.image_patch_size == 14
    assert not [p for p in verl_problems(cfg) if "data." in p]
    problems = verl_problems(load_config(["data.return_multi_modal_inputs=False"]))
    assert any("data.return_multi_modal_inputs=False is refused" in p for p in problems), problems


def test_a_fully_async_rollout_chunk_carries_each_rows_pixel_inputs_and_3d_positions(image_data, examples, moe_model):
    """The rollout pool's chunks, segment by segment (rollout_segment_tokens=1: every token a new
    generate call from prompt + tokens so far, the images resent), hold what the training pool's
    forward needs: the rows' pixel inputs and the model's own 3-D positions."""
    from omegaconf import OmegaConf

    from verl_lite.config import load_config
    from verl_lite.models.hf import mm_token_type_ids
    from verl_lite.trainer.async_workers import RolloutWorker

    cfg = load_config([f"data.train_files={image_data}/train.parquet", "data.val_files=null",
                       "actor_rollout_ref.model.path=tiny-qwen3_vl_moe", "data.max_prompt_length=40",
                       "data.max_response_length=3", "actor_rollout_ref.rollout.n=2", "data.train_batch_size=2",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=2", "async_training.enable=True",
                       "async_training.rollout_segment_tokens=1", "trainer.device=cpu"])
    worker = RolloutWorker(OmegaConf.to_container(cfg, resolve=True), 0, "cpu", 1, examples)
    calls = []
    plain = worker.rollout.generate

    def generate(prompts, length, sampling):
        calls.append(len(prompts["multi_modal_inputs"]))
        return plain(prompts, length, sampling)

    worker.rollout.generate = generate
    chunk = worker.generate_chunk([0, 1], serial=0)
    assert calls and all(n > 0 for n in calls)
    assert len(chunk["multi_modal_inputs"]) == 4 and all(m is not None for m in chunk["multi_modal_inputs"])
    assert torch.equal(chunk["multi_modal_inputs"][0]["pixel_values"], examples[0].multi_modal_inputs()["pixel_values"])
    ids, mask = chunk["input_ids"], chunk["attention_mask"]
    grid = torch.cat([m["image_grid_thw"] for m in chunk["multi_modal_inputs"]])
    types = mm_token_type_ids(ids, moe_model.config, chunk["prompts"].shape[1])
    ref, _ = moe_model.model.get_rope_index(ids, types, image_grid_thw=grid, attention_mask=mask)
    assert torch.equal(chunk["position_ids"], ref.permute(1, 0, 2))
