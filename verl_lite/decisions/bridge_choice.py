"""Which model bridge and which Gated DeltaNet (GDN) kernel a Megatron role uses: pure functions of
config values and of which packages are importable. The preflight calls them without torch; the
engines (`engine/megatron/bridges/select.py`, `engine/megatron/model.py`) call the same functions,
so what the check prints is what the engine does.

Bridge keys, as verl's Megatron engine reads them (`megatron.use_mbridge`, `megatron.vanilla_mbridge`):

| use_mbridge | vanilla_mbridge | installed                   | bridge                                       |
|-------------|-----------------|-----------------------------|----------------------------------------------|
| False       | any             | -                           | refused: every Megatron model is built through a bridge |
| True        | True            | `mbridge`                   | the legacy mbridge package (cuda, npu; refused on cpu: its specs need Transformer Engine) |
| True        | True            | no `mbridge`                | refused where the workers run (device cpu, `--training`, the engine); a cluster's run checked elsewhere: accepted, the summary says the nodes need `pip install mbridge` |
| True        | False           | Megatron-Bridge             | Megatron-Bridge's AutoBridge (cuda, npu; on cpu verl_lite's registry: its specs need Transformer Engine) |
| True        | False           | no Megatron-Bridge          | verl_lite's registry (`registry.BRIDGES`)    |

MindSpeed-Bridge: on npu, `override_transformer_config.use_ascend_gdn=True` (what
`USE_MINDSPEED_BRIDGE=True` emits) is the signal. It is the key MindSpeed-Bridge's GatedDeltaNet
reads, and MindSpeed-Bridge is a plug-in of Megatron-Bridge: with Megatron-Bridge in use,
`import mindspeed_bridge.models` runs after MindSpeed's repatch and before the model build so its
Qwen3.5 bridges register into Megatron-Bridge's registry; it needs `vanilla_mbridge=False` and the
`mindspeed_bridge` package. With verl_lite's own registry the same key selects the Ascend GDN
kernel inside verl_lite's Qwen3.5 layers.

GDN kernel per layer (the real stack's order):
  `use_triton_gdn` (default True, megatron-core's own behaviour) and `fla` importable -> Triton fla
  `chunk_gated_delta_rule`; elif `use_ascend_gdn` -> Ascend `flash_gated_delta_rule`
  (flash-linear-attention-npu); else the pure-torch rule. Packed (THD) sequences need `cu_seqlens`:
  the Triton and Ascend kernels take them, the torch rule does not (verl_lite's GDN layer then runs it
  once per packed sequence; which of them remove-padding uses: `packing_mode`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional

from verl_lite.decisions.switches import switch

VERL_LITE = "verl_lite"
MEGATRON_BRIDGE = "megatron_bridge"
MBRIDGE = "mbridge"

# Importable module -> what it is, for messages.
PACKAGES = {
    "megatron.bridge": "Megatron-Bridge",
    "mbridge": "mbridge",
    "mindspeed_bridge": "MindSpeed-Bridge",
    "fla": "flash-linear-attention (Triton)",
}

# Distribution names of the dotted modules, for installs that sys.path does not show.
DISTRIBUTIONS = {"megatron.bridge": ("megatron-bridge", "megatron_bridge")}

# The GDN kernels, as the engine's GatedDeltaLayer takes them in `config.gdn_kernel`.
FLA = "fla"
ASCEND = "ascend"
TORCH = "torch"
GDN_KERNELS = (FLA, ASCEND, TORCH)
# Not a kernel of verl_lite's layer: on npu, MindSpeed's own GatedDeltaNet (swapped in by the repatch,
# decisions/ascend_stack.py) runs the GDN layers with the kernel MindSpeed binds.
MINDSPEED_GDN = "mindspeed"
KERNEL_NAMES = {
    FLA: "Triton fla chunk_gated_delta_rule",
    ASCEND: "Ascend flash_gated_delta_rule (flash-linear-attention-npu)",
    TORCH: "pure-torch gated delta rule",
    MINDSPEED_GDN: "MindSpeed's GatedDeltaNet",
}


class BridgeRefusal(ValueError):
    """A bridge setting the engines cannot honour; the message names the key and the fix."""


@dataclass(frozen=True)
class BridgeChoice:
    kind: str  # VERL_LITE | MEGATRON_BRIDGE | MBRIDGE
    mindspeed_bridge: bool  # import mindspeed_bridge.models after the repatch, before the build
    architecture: Optional[str]  # the registered architecture (VERL_LITE) or the first one asked for
    missing_here: bool = False  # chosen for a cluster's nodes, but the package is not on this machine

    def describe(self) -> str:
        if self.kind == VERL_LITE:
            return f"verl_lite registry ({self.architecture or 'architecture unknown here'})"
        if self.kind == MBRIDGE:
            if self.missing_here:
                return ("mbridge AutoBridge (vanilla_mbridge=True; mbridge is not installed on this machine: the "
                        "training nodes need `pip install mbridge`, which `--training` checks there)")
            return "mbridge AutoBridge (vanilla_mbridge=True)"
        text = "Megatron-Bridge AutoBridge"
        if self.missing_here:
            text += " (not installed on this machine: the training nodes need Megatron-Bridge"
            text += " and MindSpeed-Bridge)" if self.mindspeed_bridge else ")"
        if self.mindspeed_bridge:
            text += " + MindSpeed-Bridge (import mindspeed_bridge.models after the repatch, before the model build)"
        return text


def _setting(megatron: Any, key: str, default: Any) -> Any:
    if isinstance(megatron, Mapping):
        return megatron.get(key, default)
    getter = getattr(megatron, "get", None)
    if callable(getter) and not hasattr(megatron, "__dataclass_fields__"):
        return getter(key, default)
    return getattr(megatron, key, default)


def overrides_of(megatron: Any) -> Dict[str, Any]:
    node = _setting(megatron, "override_transformer_config", None) or {}
    return dict(node.items()) if hasattr(node, "items") else dict(node)


def mindspeed_bridge_requested(device: str, overrides: Mapping[str, Any]) -> bool:
    """On npu, `use_ascend_gdn=True` is what USE_MINDSPEED_BRIDGE=True sets."""
    return device == "npu" and switch(overrides.get("use_ascend_gdn"))


def architectures_of(hf: Optional[Mapping[str, Any]]) -> List[str]:
    if not hf:
        return []
    return [str(a) for a in (hf.get("architectures") or [])]


def choose_bridge(prefix: str, megatron: Any, hf: Optional[Mapping[str, Any]], device: str,
                  installed: Mapping[str, bool], registered: Iterable[str], value_model: bool = False,
                  nodes_elsewhere: bool = False, own_refused: Optional[str] = None) -> BridgeChoice:
    """The bridge a Megatron role builds its model with, or BridgeRefusal.

    prefix: where the role's megatron section lives (for messages), e.g. actor_rollout_ref.actor.megatron.
    installed: module name -> importable (keys of PACKAGES).
    registered: the architectures of verl_lite's own registry (`registry.BRIDGES`).
    value_model: the role is a critic (a value head, which only verl_lite's own bridges attach).
    nodes_elsewhere: the workers do not run on this machine (a cuda/npu run checked without `--training`),
    so a package missing here is not refused: the choice says the nodes need it.
    own_refused: why verl_lite's own registry cannot build this model here (the Ascend stack's
    megatron-core is not the one verl_lite's Qwen3.5 layers are built on, `ascend_stack.own_bridge_refusal`):
    Megatron-Bridge must, or the choice is refused with this reason."""
    choice = _choose(prefix, megatron, hf, device, installed, registered, nodes_elsewhere, own_refused)
    if value_model and choice.kind != VERL_LITE:
        raise BridgeRefusal(
            f"{choice.describe()} builds language models only in verl_lite: a critic (value model) on megatron is "
            f"built by verl_lite's own bridges, which serve where Megatron-Bridge is not installed and "
            f"{prefix}.vanilla_mbridge=False; set critic.strategy=fsdp, or run the critic where that holds")
    return choice


def _choose(prefix: str, megatron: Any, hf: Optional[Mapping[str, Any]], device: str,
            installed: Mapping[str, bool], registered: Iterable[str], nodes_elsewhere: bool,
            own_refused: Optional[str] = None) -> BridgeChoice:
    use_mbridge = switch(_setting(megatron, "use_mbridge", True))
    vanilla = switch(_setting(megatron, "vanilla_mbridge", False))
    ms_bridge = mindspeed_bridge_requested(device, overrides_of(megatron))
    asked = architectures_of(hf)
    if not use_mbridge:
        raise BridgeRefusal(
            f"{prefix}.use_mbridge=False asks for a Megatron build without a model bridge, which verl_lite does not "
            f"have (verl's Megatron engine also requires use_mbridge=True): every model is built and its weights "
            f"mapped through a bridge. Set {prefix}.use_mbridge=True (the default)")
    if vanilla and device == "cpu":
        raise BridgeRefusal(
            f"{prefix}.vanilla_mbridge=True selects the mbridge package, whose model build uses Transformer "
            f"Engine's layer specs, which need CUDA: on cpu set {prefix}.vanilla_mbridge=False (verl_lite's own "
            f"bridges build the model there)")
    if vanilla:
        if ms_bridge:
            raise BridgeRefusal(
                f"{prefix}.vanilla_mbridge=True cannot run MindSpeed-Bridge (override_transformer_config."
                f"use_ascend_gdn=True on npu, from USE_MINDSPEED_BRIDGE=True): MindSpeed-Bridge registers into "
                f"Megatron-Bridge's AutoBridge. Set {prefix}.vanilla_mbridge=False")
        if not installed.get("mbridge"):
            if nodes_elsewhere:
                return BridgeChoice(MBRIDGE, False, asked[0] if asked else None, missing_here=True)
            raise BridgeRefusal(
                f"{prefix}.vanilla_mbridge=True selects the legacy mbridge package, which is not installed "
                f"(module 'mbridge' not found): pip install mbridge, or set {prefix}.vanilla_mbridge=False "
                f"(Megatron-Bridge's AutoBridge, or verl_lite's own bridges)")
        return BridgeChoice(MBRIDGE, False, asked[0] if asked else None)
    # On cpu Megatron-Bridge's layer specs (Transformer Engine) cannot build: verl_lite's registry serves there.
    if installed.get("megatron.bridge") and device != "cpu":
        if ms_bridge and not installed.get("mindspeed_bridge"):
            raise BridgeRefusal(
                f"{prefix}.override_transformer_config.use_ascend_gdn=True on npu (USE_MINDSPEED_BRIDGE=True) with "
                f"Megatron-Bridge needs MindSpeed-Bridge, whose `import mindspeed_bridge.models` registers the "
                f"Qwen3.5 bridges: module 'mindspeed_bridge' is not installed. Install MindSpeed-Bridge, or set "
                f"USE_MINDSPEED_BRIDGE=False")
        return BridgeChoice(MEGATRON_BRIDGE, ms_bridge, asked[0] if asked else None)
    if own_refused:
        if nodes_elsewhere:
            return BridgeChoice(MEGATRON_BRIDGE, ms_bridge, asked[0] if asked else None, missing_here=True)
        raise BridgeRefusal(f"{own_refused}; Megatron-Bridge (module megatron.bridge) is not installed here")
    names = list(registered)
    if hf is None:  # no config.json readable and no shipped shape: the architecture is checked on the nodes
        return BridgeChoice(VERL_LITE, False, None)
    for name in asked:
        if name in names:
            return BridgeChoice(VERL_LITE, False, name)
    what = f"architectures {asked}" if asked else "a config.json without 'architectures'"
    model_type = str((hf or {}).get("model_type") or ((hf or {}).get("text_config") or {}).get("model_type") or "?")
    raise BridgeRefusal(
        f"model_type {model_type!r} ({what}) has no bridge on megatron: verl_lite's registry has "
        f"{', '.join(sorted(names)) or 'none'}, and "
        + ("Megatron-Bridge's AutoBridge does not build on cpu (its layer specs need Transformer Engine). Use a "
           "registered model, a cuda/npu device with Megatron-Bridge, or set the role's strategy=fsdp"
           if device == "cpu" else
           "Megatron-Bridge (module megatron.bridge) is not installed here, so its AutoBridge cannot build it "
           "either. Use a registered model, install Megatron-Bridge, or set the role's strategy=fsdp"))


def module_installed(name: str) -> bool:
    """Whether `name` is importable, without importing anything: a dotted name is looked up along
    sys.path as files, because find_spec would import its parent package (`megatron` must not be
    imported before MindSpeed, nor by the preflight)."""
    if name in sys.modules:
        return True
    if "." not in name:
        return importlib.util.find_spec(name) is not None
    rel = os.path.join(*name.split("."))
    for entry in sys.path:
        base = os.path.join(entry or os.getcwd(), rel)
        if os.path.isfile(os.path.join(base, "__init__.py")) or os.path.isfile(base + ".py"):
            return True
    # An editable install (pip install -e) is found by an import hook, not on sys.path: its metadata says so.
    for dist in DISTRIBUTIONS.get(name, ()):
        try:
            importlib.metadata.distribution(dist)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def installed_here() -> Dict[str, bool]:
    return {name: module_installed(name) for name in PACKAGES}


def fla_importable(device: str, installed_fla: bool) -> bool:
    """Whether the name `fla.ops.gated_delta_rule` imports where the layers run. On npu it always does:
    MindSpeed core_r0.16.0's always-on pre-patch creates it (create_dummy) and points it at its own kernel
    whether or not the Triton fla package is installed (MegatronAdaptor does the same on core_r0.18.0),
    so what is installed on the checking machine does not matter (decisions/ascend_stack.py says which
    kernel the name is). Elsewhere: whether flash-linear-attention is installed."""
    return True if device == "npu" else bool(installed_fla)


def gdn_kernel(device: str, overrides: Mapping[str, Any], have_fla: bool) -> str:
    """FLA, ASCEND or TORCH: the GDN kernel of a run on `device` (cpu, cuda, npu) from the two switches
    of `override_transformer_config` and whether `fla` imports where the layers run (`have_fla`:
    `fla_importable`, which is always true on npu).

    The order is the real stack's: fla when importable and use_triton_gdn (default True, megatron-core's
    own behaviour), then the Ascend kernel when use_ascend_gdn on npu, else the torch rule. fla is
    Triton: never chosen on cpu. use_ascend_gdn=True off npu is a problem of its own
    (`ascend_gdn_problem`), refused by the preflight and the engine."""
    if device not in ("cpu", "cuda", "npu"):
        raise ValueError(f"device {device!r} is not one of cpu, cuda, npu")
    if switch(overrides.get("use_triton_gdn"), True) and have_fla and device != "cpu":
        return FLA
    if switch(overrides.get("use_ascend_gdn")) and device == "npu":
        return ASCEND
    return TORCH


def ascend_gdn_problem(device: str, overrides: Mapping[str, Any]) -> Optional[str]:
    """use_ascend_gdn=True selects an AscendC kernel: refused off npu."""
    if switch(overrides.get("use_ascend_gdn")) and device != "npu":
        return (f"use_ascend_gdn=True selects the Ascend GDN kernel (AscendC, npu only) but the device is {device}: "
                f"remove override_transformer_config.use_ascend_gdn, or run with trainer.device=npu")
    return None


def kernel_takes_packed_input(kernel: str) -> bool:
    """Whether a GDN kernel takes packed (THD) sequences with cu_seqlens itself: fla and Ascend do (the
    layer runs the torch rule once per packed sequence instead). MindSpeed's GatedDeltaNet does where its
    stack allows (`ascend_stack.mindspeed_gdn_packs`, which callers pass on)."""
    if kernel not in GDN_KERNELS + (MINDSPEED_GDN,):
        raise ValueError(f"GDN kernel {kernel!r} is not one of {', '.join(GDN_KERNELS + (MINDSPEED_GDN,))}")
    return kernel != TORCH
