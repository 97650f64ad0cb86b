"""Device-layer double of flash-linear-attention-npu's `fla_npu` (its AscendC ops): present means
installed. MindSpeed core_r0.16.0 picks its AscendC GDN kernel and causal_conv1d by `import fla_npu`
(requirements_basic.py:60-65); the kernel doubles compute on CPU. A test hides it with
sys.modules["fla_npu"] = None."""
