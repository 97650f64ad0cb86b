"""Write tests/py/data/megatron_memory_cases.json: Megatron-LM's own weight-and-optimizer memory
(megatron/training/theoretical_memory_usage.py: compute_weight_and_optimizer_memory) for dense and MoE
GPT layouts, which tests/py/test_memory.py compares with verl_lite's prediction.

Megatron-LM's training package is not installed with megatron-core, so the file is read from a git
repository of Megatron-LM (a checkout or a bare clone: `git show HEAD:<file>`, HEAD's commit recorded),
its one in-package import, `.utils`, replaced by the two names it uses.

Usage:
  python tools/gen_memory_cases.py /path/to/Megatron-LM
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "py" / "data" / "megatron_memory_cases.json"

# model sizes (Llama-like: RMSNorm, SwiGLU, untied) x layouts; the MoE one with no shared expert
MODELS = {
    "dense-8b": dict(hidden_size=4096, num_layers=32, num_attention_heads=32, num_query_groups=8, kv_channels=128,
                     ffn_hidden_size=14336, padded_vocab_size=128256, num_experts=None, moe_ffn_hidden_size=None),
    "dense-70b": dict(hidden_size=8192, num_layers=80, num_attention_heads=64, num_query_groups=8, kv_channels=128,
                      ffn_hidden_size=28672, padded_vocab_size=128256, num_experts=None, moe_ffn_hidden_size=None),
    "moe-30b": dict(hidden_size=2048, num_layers=48, num_attention_heads=32, num_query_groups=4, kv_channels=128,
                    ffn_hidden_size=6144, padded_vocab_size=151936, num_experts=128, moe_ffn_hidden_size=768),
}
LAYOUTS = [dict(world_size=8, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, expert_model_parallel_size=1),
           dict(world_size=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=1, expert_model_parallel_size=1),
           dict(world_size=16, tensor_model_parallel_size=4, pipeline_model_parallel_size=2, expert_model_parallel_size=1),
           dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, expert_model_parallel_size=4)]


def load(repo: Path):
    source = subprocess.run(["git", "-C", str(repo), "show", "HEAD:megatron/training/theoretical_memory_usage.py"],
                            capture_output=True, text=True, check=True).stdout
    utils = types.ModuleType("megatron_training_utils_stub")
    utils.is_hybrid_model = lambda args: False
    utils.print_rank_0 = print
    module = types.ModuleType("theoretical_memory_usage")
    module.__dict__["__package__"] = "stub"
    sys.modules["stub"] = types.ModuleType("stub")
    sys.modules["stub.utils"] = utils
    exec(compile(source, "theoretical_memory_usage.py", "exec"), module.__dict__)
    return module


def main(checkout: str) -> None:
    root = Path(checkout)
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    module = load(root)
    cases = []
    for name, model in MODELS.items():
        for layout in LAYOUTS:
            if model["num_experts"] is None and layout["expert_model_parallel_size"] > 1:
                continue
            for dist in (False, True):
                args = types.SimpleNamespace(
                    **model, **layout, expert_tensor_parallel_size=1, group_query_attention=True, swiglu=True,
                    moe_shared_expert_intermediate_size=None, moe_layer_freq=1, mtp_num_layers=None,
                    normalization="RMSNorm", multi_latent_attention=False, untie_embeddings_and_output_weights=True,
                    moe_router_topk=8, moe_latent_size=None, add_bias_linear=False, use_distributed_optimizer=dist,
                    data_parallel_size=layout["world_size"] // (layout["tensor_model_parallel_size"]
                                                                * layout["pipeline_model_parallel_size"]))
                cases.append({"model": name, **model, **layout, "use_distributed_optimizer": dist,
                              "bytes": module.compute_weight_and_optimizer_memory(args)})
    OUT.write_text(json.dumps({"source": f"NVIDIA/Megatron-LM {commit} megatron/training/theoretical_memory_usage.py",
                               "cases": cases}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/gen_memory_cases.py /path/to/Megatron-LM")
    main(sys.argv[1])
