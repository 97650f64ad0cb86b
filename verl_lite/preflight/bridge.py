"""Preflight rules of a Megatron role's bridge (`decisions/bridge_choice.py` decides which one):
MindSpeed-Bridge keys off npu, why no bridge can build the model, the MindSpeed repatch on npu, and
HF weights the external bridges load from the model directory.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Dict, List, Optional, Sequence

from verl_lite.config import roles
from verl_lite.decisions import ascend_stack, bridge_choice
from verl_lite.decisions.layout import deepstack_stage_problem
from verl_lite.decisions.packing_mode import VISION_BRIDGED
from verl_lite.decisions.repatch import RepatchError, build_repatch_dict
from verl_lite.decisions.switches import switch
from verl_lite.models import is_gdn_model, read_hf_config, resolve_model_dir
from verl_lite.preflight.roles import RoleView, override_config

BRIDGE_KEYS = ("use_ascend_gdn", "use_triton_gdn")


def _same_as_actor(view: RoleView) -> bool:
    """The ref inherits the actor's overrides by default: report their problems once, on the actor."""
    return view.role == "ref" and view.overrides == override_config(view.actor_section)


def role_stack(cfg: Any, view: RoleView) -> Optional[ascend_stack.Stack]:
    """The Ascend stack of a Megatron role on npu (None elsewhere, or where the stack setting is refused)."""
    if view.device != "npu":
        return None
    return ascend_stack.role_stack_or_none(cfg.trainer.ascend_stack, view.section.megatron)


def choose_role_bridge(cfg: Any, view: RoleView, hf: Optional[Dict[str, Any]],
                       installed: Optional[Dict[str, bool]], registered: Any,
                       nodes_elsewhere: bool = False) -> bridge_choice.BridgeChoice:
    """The bridge the role's engine builds with for the model config `hf` (BridgeRefusal: why none can)."""
    stack = role_stack(cfg, view)
    own_refused = ascend_stack.own_bridge_refusal(stack, hf is not None and is_gdn_model(hf)) if stack else None
    return bridge_choice.choose_bridge(
        f"{view.prefix}.megatron", view.section.megatron, hf, view.device,
        bridge_choice.installed_here() if installed is None else installed, registered,
        value_model=roles.MODEL_TYPE[view.role] == "value_model", nodes_elsewhere=nodes_elsewhere,
        own_refused=own_refused)


def bridge_problems(cfg: Any, view: RoleView, installed: Optional[Dict[str, bool]] = None, registered: Any = (),
                    nodes_elsewhere: bool = False) -> List[str]:
    """MindSpeed-Bridge keys off npu, and the bridge switches (`decisions/bridge_choice.py`): the bridge
    the role's engine would build with, or why none can. `installed` defaults to this machine's packages."""
    role, device = view.role, view.device
    problems = []
    if device != "npu" and not _same_as_actor(view):
        overrides = view.overrides
        problems += [
            f"{view.prefix}.megatron.override_transformer_config.{k} is a MindSpeed-Bridge setting for "
            f"device npu, but the target device is {device}: remove it "
            "(USE_MINDSPEED_BRIDGE=True applies only with DEVICE=npu)"
            for k in BRIDGE_KEYS
            if k in overrides
        ]
    try:
        choice = choose_role_bridge(cfg, view, view.hf, installed, registered, nodes_elsewhere)
    except bridge_choice.BridgeRefusal as e:
        problems.append(f"{role}: {e}")
        return problems
    tower = vision_tower(view.hf) if choice.kind == bridge_choice.VERL_LITE else None
    if tower is not None:
        megatron = view.section.megatron
        text = view.hf.get("text_config") or {}
        problem = deepstack_stage_problem(
            tower["deepstack"], int(text.get("num_hidden_layers") or 0), int(view.layout.pp), view.layout.vpp,
            bridge_choice.overrides_of(megatron).get("num_layers_in_first_pipeline_stage"), f"{view.prefix}.megatron")
        if problem:
            problems.append(f"{role}: {problem}")
    return problems


def vision_tower(hf: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The vision tower verl_lite's Megatron bridge builds for this config.json (None: none), as the
    summary and the DeepStack rule read it."""
    if not hf or hf.get("model_type") not in VISION_BRIDGED:
        return None
    vision = hf.get("vision_config") or {}  # none in config.json: transformers' default (depth unknown here)
    return {"depth": vision.get("depth"), "deepstack": len(vision.get("deepstack_visual_indexes") or [])}


def replicates_kv(cfg: Any, view: RoleView, installed: Dict[str, bool], registered: List[str],
                  nodes_elsewhere: bool = False) -> bool:
    """Megatron-Bridge and mbridge build megatron-core's attention, which takes TP > key/value heads."""
    try:
        choice = choose_role_bridge(cfg, view, view.hf, installed, registered, nodes_elsewhere)
    except bridge_choice.BridgeRefusal:
        return False
    return choice.kind != bridge_choice.VERL_LITE


def npu_problems(cfg: Any, view: RoleView) -> List[str]:
    """The MindSpeed repatch of a Megatron role on npu: its dict builds, the Ascend stack is a documented
    one (and, where MindSpeed is installed here, the installed one with its megatron-core), the stack
    has every setting the plan asks for, and no flag MindSpeed rejects."""
    layout = view.layout
    prefix = f"{layout.prefix}.override_transformer_config"
    if _same_as_actor(view):
        return []
    try:
        plan = build_repatch_dict(view.section.megatron)
    except RepatchError as e:
        return [f"{layout.role}: {e}"]
    try:
        stack = ascend_stack.role_stack(cfg.trainer.ascend_stack, view.section.megatron)
    except ascend_stack.StackError as e:
        return [f"{layout.role}: {e}"]
    problems = [f"{layout.role}: {p}" for p in ascend_stack.stack_problems(stack, plan)]
    if ascend_stack.installed_stack():  # the nodes: their megatron-core must be the stack's
        problem = ascend_stack.megatron_core_problem(stack, ascend_stack.installed_megatron_core())
        problems += [f"{layout.role}: {problem}"] if problem else []
    if problems:
        return problems
    if switch(view.overrides.get("use_flash_attn_npu_batch_invariant")) and layout.cp > 1:
        return [
            f"{layout.role}: {prefix}.use_flash_attn_npu_batch_invariant does not work with context parallelism "
            f"(CP={layout.cp}); MindSpeed rejects it ('--use-flash-attn-npu-batch-invariant does not support context "
            f"parallelism yet.'): set {layout.prefix}.context_parallel_size=1 or drop the flag"
        ]
    return []


def npu_warnings(cfg: Any, views: Sequence[RoleView]) -> List[str]:
    """What the Ascend stack of each Megatron role on npu accepts and does nothing with
    (ascend_stack.stack_warnings)."""
    warnings = []
    for view in views:
        if not view.megatron or _same_as_actor(view):
            continue
        stack = role_stack(cfg, view)
        if stack is None:
            continue
        try:
            plan = build_repatch_dict(view.section.megatron)
        except RepatchError:
            continue  # npu_problems reports it
        warnings += [f"{view.role}: {w}" for w in ascend_stack.stack_warnings(stack, plan)]
    return warnings


def external_bridge_weight_problems(cfg: Any, views: Sequence[RoleView], installed: Dict[str, bool],
                                    registered: List[str]) -> List[str]:
    """Megatron-Bridge and mbridge load HF weights from the model directory: no random init there."""
    problems = []
    for view in views:
        if not view.megatron:
            continue
        role, path = view.role, view.model_path
        hf = read_hf_config(path)
        if hf is None:
            continue  # path_problems reports it
        try:
            choice = choose_role_bridge(cfg, view, hf, installed, registered)
        except bridge_choice.BridgeRefusal:
            continue  # bridge_problems reports it
        if choice.kind != bridge_choice.VERL_LITE and not glob.glob(os.path.join(resolve_model_dir(path), "*.safetensors")):
            problems.append(f"{role}: {path} has no *.safetensors, but {choice.describe()} loads the HF weights from the "
                            "model directory (random init is verl_lite's own bridges only): point the model path at a "
                            "checkpoint with weights")
    return problems
