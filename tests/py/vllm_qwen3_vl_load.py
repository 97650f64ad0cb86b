"""Run by tests/py/test_vllm_vision.py in a process of its own: the vllm rollout's weight-sync stream
of a tiny Qwen3-VL-MoE (transformers' state dict, through verl_lite.rollout.vllm_weights.to_vllm_checkpoint)
loaded by vLLM's own code: its Qwen3-VL-MoE `hf_to_vllm_mapper`, then the `load_weights` of its
vision tower (Qwen3_VisionTransformer) and of its language model (Qwen3MoeLLMForCausalLM with the
Qwen3-VL-MoE decoder layers), built on CPU in one gloo rank; then the same stream without the
conversion ("raw"). Prints one JSON line, for each stream: what loaded, what did not, and whether
each vLLM parameter equals the transformers tensor it came from.

vLLM's qwen3_vl module imports `smart_resize` from transformers' torchvision image processor, which
cannot be imported without torchvision (absent beside the CPU torch); the same function of
transformers' PIL image processor stands in for that one module. Nothing else is replaced.

    python tests/py/vllm_qwen3_vl_load.py WORKDIR
"""

import json
import os
import sys
import types


def stand_in_torchvision_processor() -> None:
    import transformers.models.qwen2_vl.image_processing_pil_qwen2_vl as pil

    name = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
    module = types.ModuleType(name)
    module.smart_resize = pil.smart_resize
    sys.modules[name] = module


def tiny_config():
    from transformers import Qwen3VLMoeConfig

    # hidden 96, experts' intermediate 32 (vLLM's CPU MoE kernel wants multiples of 32): no fused-expert
    # dimension equals another (gate_up 4 x 64 x 96, down 4 x 96 x 32), so a layout
    # mix-up cannot load by accident
    text = dict(hidden_size=96, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=12, num_experts=4, num_experts_per_tok=2,
                vocab_size=320, decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=256,
                tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 2, 2],
                                 "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=4, out_hidden_size=96, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, deepstack_visual_indexes=[0],
                  num_position_embeddings=16)
    return Qwen3VLMoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=False)


def main(workdir: str) -> None:
    stand_in_torchvision_processor()
    import torch
    from transformers import AutoModelForImageTextToText

    from verl_lite.rollout.vllm_weights import to_vllm_checkpoint

    torch.manual_seed(0)
    cfg = tiny_config()
    hf = AutoModelForImageTextToText.from_config(cfg).float()
    state = hf.state_dict()
    streams = {"converted": [to_vllm_checkpoint("qwen3_vl_moe", n, t) for n, t in state.items()],
               "raw": list(state.items())}

    # vLLM's ModelConfig for the language model (its registry inspects the architecture in a
    # subprocess, where the stand-in above is absent: a text Qwen3-MoE config passes it)
    text_dir = os.path.join(workdir, "text")
    os.makedirs(text_dir, exist_ok=True)
    text = cfg.text_config.to_dict()
    text.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"])
    with open(os.path.join(text_dir, "config.json"), "w") as f:
        json.dump(text, f)

    from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    vllm_config = VllmConfig(model_config=ModelConfig(model=text_dir, skip_tokenizer_init=True, dtype="float32",
                                                      max_model_len=128, enforce_eager=True))
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{os.path.join(workdir, 'dist')}")
        initialize_model_parallel(1, 1)
        from vllm.model_executor.models.qwen3_vl import Qwen3_VisionTransformer
        from vllm.model_executor.models.qwen3_vl_moe import Qwen3MoeLLMForCausalLM, Qwen3VLMoeForConditionalGeneration

        # each stream into modules of their own (vLLM registers attention layers by prefix, once)
        reports = {kind: load(cfg, vllm_config, state, stream, Qwen3_VisionTransformer, Qwen3MoeLLMForCausalLM,
                              Qwen3VLMoeForConditionalGeneration.hf_to_vllm_mapper, kind)
                   for kind, stream in streams.items()}
    print("RESULT " + json.dumps(reports))


def load(cfg, vllm_config, state, stream, vision_cls, language_cls, mapper, kind):
    """One stream through vLLM's mapper and loaders, into freshly built vLLM modules."""
    import torch

    mapped = list(mapper.apply(stream))
    parts = {"visual.": [], "language_model.": []}
    unrouted = []
    for name, tensor in mapped:
        prefix = next((p for p in parts if name.startswith(p)), None)
        if prefix is None:
            unrouted.append(name)
        else:
            parts[prefix].append((name[len(prefix):], tensor))
    visual = vision_cls(cfg.vision_config, norm_eps=1e-6, prefix=f"{kind}.visual").float()
    language = language_cls(vllm_config=vllm_config.with_hf_config(
        cfg.text_config, architectures=["Qwen3MoeForCausalLM"]), prefix=f"{kind}.language_model").float()
    report = {"mapped": [n for n, _ in mapped], "unrouted": unrouted}
    for prefix, module in (("visual.", visual), ("language_model.", language)):
        try:
            loaded = module.load_weights(parts[prefix])
            error = None
        except Exception as e:  # a layout vLLM cannot take fails in its loader
            loaded, error = set(), f"{type(e).__name__}: {e}"
        params = dict(module.named_parameters())
        report[prefix] = {"params": sorted(params), "not_loaded": sorted(set(params) - set(loaded)),
                          "error": error}
    vis = dict(visual.named_parameters())
    lm = dict(language.named_parameters())
    layer = "model.layers.0.mlp.experts.routed_experts."
    hf_layer = "model.language_model.layers.0.mlp.experts."
    checks = {
        "visual.blocks.1.attn.qkv.weight": (vis, "blocks.1.attn.qkv.weight", "model.visual.blocks.1.attn.qkv.weight"),
        "visual.patch_embed.proj.weight": (vis, "patch_embed.proj.weight", "model.visual.patch_embed.proj.weight"),
        "visual.deepstack_merger_list.0.linear_fc1.weight": (
            vis, "deepstack_merger_list.0.linear_fc1.weight", "model.visual.deepstack_merger_list.0.linear_fc1.weight"),
        "visual.merger.linear_fc2.weight": (vis, "merger.linear_fc2.weight", "model.visual.merger.linear_fc2.weight"),
        "language_model.w13 == gate_up_proj": (lm, layer + "w13_weight", hf_layer + "gate_up_proj"),
        "language_model.w2 == down_proj": (lm, layer + "w2_weight", hf_layer + "down_proj"),
        "language_model.lm_head": (lm, "lm_head.weight", "lm_head.weight"),
    }
    equal = {}
    for label, (params, name, hf_name) in checks.items():
        ours, theirs = params[name], state[hf_name]
        equal[label] = bool(ours.shape == theirs.shape and torch.equal(ours.detach(), theirs))
    # vLLM fuses q, k, v into qkv_proj: its rows are q, then k, then v
    qkv = lm["model.layers.1.self_attn.qkv_proj.weight"].detach()
    prefix = "model.language_model.layers.1.self_attn."
    equal["language_model.qkv_proj == q|k|v"] = bool(torch.equal(
        qkv, torch.cat([state[prefix + p + "_proj.weight"] for p in "qkv"])))
    report["equal"] = equal
    return report


if __name__ == "__main__":
    main(sys.argv[1])
