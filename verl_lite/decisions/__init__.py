"""Pure decisions that both the preflight and the engines make, each in exactly one function: which
model bridge and GDN kernel a Megatron role uses (`bridge_choice`), whether its micro-batches run
packed (`packing_mode`), which Megatron optimizer overrides act (`optimizer_overrides`), the
MindSpeed repatch plan (`repatch`), and how a switch a user typed reads (`switches`).

Nothing here imports torch, Ray, transformers or Megatron: the preflight calls these on a laptop,
the engines call the same functions where the run happens."""
