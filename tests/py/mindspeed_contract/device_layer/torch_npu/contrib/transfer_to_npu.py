"""The real module maps torch.cuda / nccl calls to npu / hccl (MindSpeed core_r0.16.0 imports it in
megatron_adaptor.py:11). The engines' internals run on CPU here (engine/megatron/cpu.py maps
torch.cuda to the CPU), so there is nothing to map."""
