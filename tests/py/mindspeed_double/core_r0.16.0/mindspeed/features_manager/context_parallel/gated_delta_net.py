"""Double of core_r0.16.0's GDNFeature (mindspeed/features_manager/context_parallel/gated_delta_net.py):
MindSpeed's own GatedDeltaNet replaces megatron's when CP > 1, with EOD packing (reset_position_ids and
reset_attention_mask), with 2-D TP (tp_2d, tp_y > 1) under megatron_cp_algo, or with use_naive_l2norm
(:23-39; a replacement, not force_patch). Its presence marks the stack (decisions/ascend_stack.markers)."""

GDN_TARGET = "megatron.core.ssm.gated_delta_net.GatedDeltaNet"


def register_patches(patch_manager, args) -> None:
    use_cp = int(getattr(args, "context_parallel_size", 1)) > 1
    cp_algo = getattr(args, "context_parallel_algo", "megatron_cp_algo")
    cp_expanded_by_2d_tp = getattr(args, "tp_2d", False) and getattr(args, "tp_y", 1) > 1
    use_naive_l2norm = getattr(args, "use_naive_l2norm", False)
    use_eod_pack = getattr(args, "reset_position_ids", False) and getattr(args, "reset_attention_mask", False)
    if use_cp or use_eod_pack or (cp_expanded_by_2d_tp and cp_algo == "megatron_cp_algo") or use_naive_l2norm:
        from mindspeed.core.ssm.gated_delta_net import GatedDeltaNet

        patch_manager.register_patch(GDN_TARGET, GatedDeltaNet)
