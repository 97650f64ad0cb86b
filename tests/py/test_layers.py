"""The house plan, enforced: verl_lite's modules import only their own layer or the layers below,
and no two modules import each other, directly or round a loop. Every import statement counts,
also the ones inside functions (they run too, only later). docs/architecture.md explains the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "verl_lite"

# Lowest first. A module belongs to the first entry that is it or a package above it.
LAYERS: List[tuple] = [
    # shared pieces with no verl_lite imports of their own layer's concern: devices, secrets, fault
    # points, the batch dict, safe checkpoint reads
    ("verl_lite", "verl_lite.device", "verl_lite.secrets", "verl_lite.faults", "verl_lite.batch",
     "verl_lite.checkpoint_files"),
    ("verl_lite.models",),  # HF config files and the transformers model builder
    ("verl_lite.config",),  # what users type: schema, choices, composition, keys, roles, shapes
    # pure decisions the preflight and the engines both call (the parallel layout, bridge and GDN kernel,
    # packing, optimizer overrides, the MindSpeed repatch plan, switches) and the memory model: torch-free
    ("verl_lite.decisions",),
    ("verl_lite.data",),  # rows, tokenizers, synthetic data
    ("verl_lite.reward",),  # scorers, the reward managers and their settings' rules
    ("verl_lite.registry", "verl_lite.runtime_env"),  # which engine, which worker env
    # the preflight: one module of rules per subject, the orchestrator and the summary (torch-free)
    ("verl_lite.preflight",),
    # what runs on a device: the engines' shared pieces (the interface and its errors, log-probs from logits,
    # the HF export), rollouts; a shared module never imports a wing
    ("verl_lite.engine", "verl_lite.rollout"),
    # the torch (FSDP2) engine's wing, lowest first
    ("verl_lite.engine.torch", "verl_lite.engine.torch.fsdp_policy", "verl_lite.engine.torch.fused",
     "verl_lite.engine.torch.packing", "verl_lite.engine.torch.lora", "verl_lite.engine.torch.activations",
     "verl_lite.engine.torch.optim"),  # FSDP2 policies, log-prob head, packing, LoRA, offload, optimizer
    ("verl_lite.engine.torch.ulysses", "verl_lite.engine.torch.checkpoint"),  # SP over the packed forward; checkpoints
    ("verl_lite.engine.torch.engine",),  # TorchLMEngine / TorchValueEngine
    # the Megatron engines' sub-layers, lowest first: a bridge never imports the engine that uses it
    ("verl_lite.engine.megatron.bridges.base",),  # ModelShard, ModelBridge
    ("verl_lite.engine.megatron.cpu", "verl_lite.engine.megatron.norm",
     "verl_lite.engine.megatron.gdn"),  # layers the specs use, megatron on CPU
    ("verl_lite.engine.megatron.bridges",),  # HF <-> Megatron per family, the external-bridge builds
    ("verl_lite.engine.megatron.model", "verl_lite.engine.megatron.hf", "verl_lite.engine.megatron.batch",
     "verl_lite.engine.megatron.vocab", "verl_lite.engine.megatron.optim", "verl_lite.engine.megatron.memory",
     "verl_lite.engine.megatron.parallel"),  # model chunks, weights, micro-batches, log-probs, optimizer, set-up
    ("verl_lite.engine.megatron.conventions",
     "verl_lite.engine.megatron.checkpoint"),  # how each kind of chunk is called; checkpoints
    ("verl_lite.engine.megatron.schedule",),  # the step: micro-batches through the pipeline schedule
    ("verl_lite.engine.megatron.engine",),  # MegatronLMEngine
    ("verl_lite.engine.megatron.value",),  # MegatronValueEngine
    ("verl_lite.engine.megatron.mindspeed",),  # the same engines on Ascend
    ("verl_lite.trainer",),  # the driver, the workers, Ray
    ("verl_lite.check", "verl_lite.main"),  # entry points
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best, found = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), i
    assert found is not None, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return found


def known(module: str, modules: Set[str]) -> str:
    """The verl_lite module an import names (`from pkg import mod` names pkg.mod when that is a module)."""
    while module not in modules and "." in module:
        module = module.rsplit(".", 1)[0]
    return module


def import_graph() -> Dict[str, Set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: Dict[str, Set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: List[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from pkg import mod` names pkg.mod; `from mod import thing` names mod
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                         for a in node.names]
            for name in names:
                if name == "verl_lite" or name.startswith("verl_lite."):
                    target = known(name, set(files))
                    if target != module:
                        graph[module].add(target)
    return graph


def test_every_module_imports_only_its_layer_or_lower_ones():
    upward = sorted(f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
                    for m, targets in import_graph().items() for t in targets if layer_of(t) > layer_of(m))
    assert upward == [], "\n".join(upward)


def test_no_modules_import_each_other_round_a_loop():
    graph = import_graph()
    cycles, state = [], {}

    def visit(node: str, path: List[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == [], "\n".join(cycles)


def test_the_walk_sees_imports_inside_functions_and_package_relative_names():
    graph = import_graph()
    assert "verl_lite.trainer.run" in graph["verl_lite.main"]  # imported inside main()
    assert "verl_lite.config.choices" in graph["verl_lite.preflight.run"]  # `from verl_lite.config import choices`
