"""Pure decisions, each in exactly one function, torch-free: what the preflight and the engines (or the
workers) both decide, and the arithmetic the preflight predicts with. The parallel layout (`layout`: the one
reader of the parallel keys, with its checks), which model bridge and GDN kernel a Megatron role uses
(`bridge_choice`), whether its micro-batches run packed (`packing_mode`), Ulysses' rules (`ulysses`), the
micro-batch size a pass runs with (`micro_batch`), which Megatron optimizer overrides act
(`optimizer_overrides`), the MindSpeed repatch plan and the Ascend stack (`repatch`, `ascend_stack`), what a
checkpoint part can give a run (`checkpoint_parts`), the fully-async pools' arithmetic and the ranks'
placement (`async_pools`, `placement`), the rules of verl's settings the workers act on (`fsdp_settings`,
`lr_schedule`, `rollout_correction`, `dynamic_sampling`, `profiling`), and how a switch a user typed reads
(`switches`). The memory model (`memory` terms, `memory_step` phases) is the preflight's alone: it lives
here because it is the same kind of torch-free arithmetic and bench/device scripts check it against the
engines.

Nothing here imports torch, Ray, transformers or Megatron: the preflight calls these on a laptop,
the engines call the same functions where the run happens."""
