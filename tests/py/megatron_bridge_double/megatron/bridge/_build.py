"""What the double's models are made of: verl_lite's own bridge (its registry, `bridge_for`) builds the
language model as megatron-core GPTModel chunks on CPU, loads and exports the HF weights. Megatron-Bridge
builds these models with its own layer specs (Transformer Engine, which does not install on CPU); the
double takes verl_lite's local specs instead, so its numbers are those of verl_lite's own bridges, and
its forward conventions are Megatron-Bridge's (`models/qwen_vl/modelling_qwen3_vl/model.py`,
megatron-core's GPTModel for the text models).

The chunks get verl_lite's per-sequence CPU core attention (it takes padded and packed input), and on
each chunk `double_bridge` = (the verl_lite bridge, its layout) for weight loading and export."""

from typing import Any, Dict, Iterator, List, Tuple

import torch

PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
            "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size")
# provider fields that describe the checkpoint (the bridge reads them from the HF config) or the dtype
_NOT_OVERRIDES = {"num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "vocab_size",
                  "num_moe_experts", "share_embeddings_and_output_weights", "params_dtype", "fp16", "bf16",
                  "perform_initialization", "sequence_parallel", "use_triton_gdn", "use_ascend_gdn",
                  "linear_attention_freq",
                  # verl's setting (and verl_lite's): on CPU the MoE layers take megatron's allgather dispatcher,
                  # which refuses it at config time; the schedule turns it on per run where shapes vary
                  "variable_seq_lengths"}


def language_chunks(provider: Any) -> List[Any]:
    """verl_lite's GPTModel chunks (one per virtual pipeline stage of this rank) for the provider's
    checkpoint, with the provider's parallel layout and settings. The layout must be the one megatron's
    groups were initialized with (Megatron-Bridge's get_model builds on those groups)."""
    from megatron.core import parallel_state as mpu

    from transformers import AutoConfig

    from verl_lite.engine.megatron import model as megatron_model
    from verl_lite.engine.base import UnsupportedModelError
    from verl_lite.engine.megatron.bridges import bridge_for

    hf = provider.hf_config  # config.json as a dict (the double's AutoBridge reads no transformers)
    config = AutoConfig.from_pretrained(hf["_path"])  # as Megatron-Bridge's PreTrainedCausalLM / PreTrainedVLM
    try:
        bridge = bridge_for(config)
    except UnsupportedModelError as e:
        raise NotImplementedError(f"the Megatron-Bridge double builds models through verl_lite's registry, which has "
                                  f"no bridge for {hf.get('architectures')}: {e}") from e
    sizes: Dict[str, Any] = {k: getattr(provider, k) for k in PARALLEL}
    for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                 "expert_model_parallel_size"):
        sizes[name] = int(sizes[name] or 1)
    have = (mpu.get_tensor_model_parallel_world_size(), mpu.get_pipeline_model_parallel_world_size())
    want = (sizes["tensor_model_parallel_size"], sizes["pipeline_model_parallel_size"])
    if have != want:
        raise ValueError(f"provider TP/PP {want} differ from megatron's initialized groups {have}")
    fields = provider.field_names()
    overrides = {k: getattr(provider, k) for k in fields
                 if k not in _NOT_OVERRIDES and k not in PARALLEL and getattr(provider, k) is not None}
    dtype = provider.params_dtype or torch.float32
    # device "cpu", both GDN switches off: the GDN layers run megatron's torch rule (the provider's switches, on
    # MindSpeed-Bridge's provider, stay its fields; MindSpeed's repatch may give the TransformerConfig the switches)
    overrides.update(use_ascend_gdn=False, use_triton_gdn=False)
    tf_config = megatron_model.transformer_config(bridge, sizes, dtype, overrides, bool(provider.sequence_parallel),
                                                  "cpu", "megatron-bridge double", device="cpu")
    _swapped_gdn(tf_config)
    layout = bridge.layout(mpu.get_tensor_model_parallel_world_size(), mpu.get_tensor_model_parallel_rank())
    chunks = megatron_model.build_chunks(tf_config, bridge, layout, torch.device("cpu"), "cpu", layout.tied,
                                         lambda module: None, packed_attention=True)
    for chunk in chunks:
        chunk.double_bridge = (bridge, layout)
    return chunks


def _swapped_gdn(tf_config: Any) -> None:
    """Where MindSpeed's repatch replaced megatron's GatedDeltaNet (core_r0.18.0 always, core_r0.16.0 under
    some plans), Megatron-Bridge's specs, built after the repatch, name that class: the double builds its GDN
    layers with it too (`gdn.gdn_layer_class`), in deterministic mode, where MindSpeed's class takes its
    pure-torch rule on CPU (its kernels are Triton / AscendC)."""
    if getattr(tf_config, "gdn_kernel", None) is None:
        return
    from megatron.core.ssm import gated_delta_net as gdn

    from verl_lite.decisions import bridge_choice
    from verl_lite.engine.megatron.gdn import MEGATRON_GDN_MODULE

    cls = gdn.GatedDeltaNet
    if cls.__module__ == MEGATRON_GDN_MODULE:
        return
    tf_config.gdn_layer, tf_config.mindspeed_gdn_class = "mindspeed", f"{cls.__module__}:{cls.__qualname__}"
    tf_config.gdn_kernel = bridge_choice.MINDSPEED_GDN
    tf_config.deterministic_mode = True


def language_model(chunk: Any) -> Any:
    """The verl_lite GPTModel of a built model (inside Float16Module and the Qwen3VLModel double)."""
    while isinstance(getattr(chunk, "module", None), torch.nn.Module):
        chunk = chunk.module
    inner = getattr(chunk, "language_model", None)
    return chunk if inner is None else inner


def load(model: List[Any], path: str) -> None:
    """The checkpoint's *.safetensors into the chunks, through verl_lite's bridge."""
    import glob
    import os

    from verl_lite.engine.megatron import hf as megatron_hf

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    inner = [language_model(chunk) for chunk in model]
    bridge, layout = inner[0].double_bridge
    megatron_hf.load_hf_weights(megatron_hf.local_params(inner, lambda n: n), bridge, layout,
                                megatron_hf.SafetensorsSource(files))


def export(model: List[Any]) -> Iterator[Tuple[str, torch.Tensor]]:
    """Every HF tensor on every rank (gathered over TP, streamed over PP), through verl_lite's bridge."""
    from verl_lite.engine.megatron import hf as megatron_hf

    inner = [language_model(chunk) for chunk in model]
    bridge, layout = inner[0].double_bridge

    def stage() -> Iterator[Tuple[str, torch.Tensor]]:
        return megatron_hf.stage_hf_tensors(megatron_hf.local_params(inner, lambda n: n), bridge, layout,
                                            skip_output_layer=layout.tied)

    return megatron_hf.stream_over_pipeline(stage, layout.tied, torch.device("cpu"))
