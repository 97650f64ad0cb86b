"""Double of core_r0.18.0's NpuEnhancementFeature GDN step (npu_enhancement.py:195-211): MindSpeed's
GatedDeltaNet subclass always replaces megatron's (force_patch=True); an ImportError skips it with a
debug log. Its presence marks the stack (decisions/ascend_stack.markers)."""

import logging

GDN_TARGET = "megatron.core.ssm.gated_delta_net.GatedDeltaNet"
logger = logging.getLogger(__name__)


def register_patches(patch_manager, args) -> None:
    try:
        from mindspeed.core.ssm.gated_delta_net import GatedDeltaNet

        patch_manager.register_patch(GDN_TARGET, GatedDeltaNet, force_patch=True)
    except ImportError as e:
        logger.debug("GDN GatedDeltaNet patch skipped: %s", e)
