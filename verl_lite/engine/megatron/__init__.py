"""The Megatron engines and what they build with. Nothing here imports megatron at module import
time (MindSpeed patches it first on Ascend), and this package's __init__ imports nothing.

  engine       MegatronLMEngine: the lifecycle (registry.ENGINES)
  value        MegatronValueEngine: the critic, the language model engine with a scalar head
  mindspeed    the same engines on Ascend NPUs (MindSpeed's import, repatch, FP8 cache)
  parallel     torch.distributed group, device, model-parallel groups, RNG seed
  model        TransformerConfig, GPT model chunks, DDP wrapping, the value head
  hf           HF weights in (safetensors or seeded random init) and out (the export stream)
  batch        the micro-batch contract: padded and packed (THD) micro-batches, packed outputs mapped back
  conventions  how each kind of model chunk is called (an external bridge's models included)
  schedule     the engine's step: micro-batches prepared and run through megatron's pipeline schedule
  vocab        log-probs, entropy and sum of squared probabilities from vocabulary-parallel logits
  optim        optimizer + LR schedule from the `optim` section, the clipped step
  checkpoint   checkpoint.save_contents / load_contents: per-rank files, the HF copy (hf_export)
  memory       offload (parking flat DDP buffers) and CPU snapshots
  cpu          what lets megatron-core run on CPU over gloo (device cpu only)
  gdn          Qwen3.5's Gated DeltaNet layer (GDN kernel per run, padding masked) and its norms
  norm         the RMSNorm of the layer specs (takes sequence parallelism, unlike megatron's torch norm)
  bridges      HF <-> Megatron per model family, by HF architecture (`registry.BRIDGES`), and the
               Megatron-Bridge / mbridge builds (bridges/select.py)

Layers (tests/py/test_layers.py): bridges.base < cpu, norm, gdn < bridges < model, hf, batch, vocab, optim,
memory, parallel < conventions, checkpoint < schedule < engine < value < mindspeed; nothing imports a module
above its own. The errors they raise (`UnsupportedModelError`) and the interface are `verl_lite.engine.base`'s.
"""
