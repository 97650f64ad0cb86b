"""Device-layer double of flash-linear-attention-npu's `fla_npu`: present means installed, so MindSpeed
core_r0.16.0 takes its AscendC GDN entry and causal_conv1d (requirements_basic.py:60-65). Its
torch.ops.npu kernels are not provided: a call that reaches them fails, which is how the contract run
shows that the engine reached MindSpeed's AscendC entry. Hide it with sys.modules["fla_npu"] = None."""
