"""The torch engine's wing (backend `fsdp`): the torch-native engines and what only they build with.
This package's __init__ imports nothing; the engines reach the shared pieces of `verl_lite.engine`
(base, logits, hf_export) and nothing of the Megatron wing.

  engine       TorchLMEngine / TorchValueEngine: set-up, step, weights (registry.ENGINES)
  checkpoint   checkpoint.save_contents / load_contents: model.pt, RNG files, the HF copy (hf_export)
  optim        the torch.optim optimizer and the LR schedule from the `optim` section
  fsdp_policy  FSDP2 with torch: the mesh, fully_shard and its policies, compute context, gradient clipping
  fused        the log-prob head: log-probs and entropy from logits, or from hidden states chunk by chunk
  packing      remove-padding: a micro-batch's real tokens in one row, outputs back in the padded layout
  ulysses      Ulysses sequence parallelism over the packed forward
  lora         LoRA with PEFT: wrap, merged weights, the adapter's checkpoint files
  activations  activation offload: saved tensors in host memory between forward and backward

Layers (tests/py/test_layers.py): fsdp_policy, fused, packing, lora, activations, optim < ulysses,
checkpoint < engine; nothing imports a module above its own.
"""
