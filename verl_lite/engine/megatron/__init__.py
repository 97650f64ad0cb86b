"""The Megatron engines and what they build with. Nothing here imports megatron at module import
time (MindSpeed patches it first on Ascend), and this package's __init__ imports nothing.

  engine      MegatronLMEngine / MegatronValueEngine: the lifecycle (registry.ENGINES)
  mindspeed   the same engines on Ascend NPUs (MindSpeed's import, repatch, FP8 cache)
  parallel    torch.distributed group, device, model-parallel groups, RNG seed
  model       TransformerConfig, GPT model chunks, DDP wrapping, the value head
  hf          HF weights in (safetensors or seeded random init) and out (the export stream)
  batch       the micro-batch contract, vocab-parallel log-probs, the pipeline schedule
  optim       optimizer + LR schedule from the `optim` section, the clipped step
  checkpoint  checkpoint.save_contents / load_contents: per-rank files, the HF copy (hf_export)
  memory      offload (parking flat DDP buffers) and CPU snapshots
  cpu         what lets megatron-core run on CPU over gloo (device cpu only)
  gdn         Qwen3.5's Gated DeltaNet layer (GDN kernel per run, padding masked) and its norms
  norm        the RMSNorm of the layer specs (takes sequence parallelism, unlike megatron's torch norm)
  bridges     HF <-> Megatron per model family, by HF architecture (`registry.BRIDGES`), and the
              Megatron-Bridge / mbridge builds (bridges/select.py)

Layers (tests/py/test_layers.py): bridges.base < cpu, norm, gdn < bridges < model, hf, batch, optim,
memory, checkpoint, parallel < engine < mindspeed; nothing imports a module above its own.
"""
