"""The preflight: every problem of a composed run config, found in well under a second without
importing torch, megatron, ray or transformers. One module per subject (layout, bridge, machine,
data, rollout, fully_async, algorithm, loss, optimizer, engine_settings, memory_knobs, packing, lora,
checkpoint, reward, generation, ray_env, ...), each rule returning a list of problem messages;
`run.py` resolves each role once (`roles.py`) and runs them, `summary.py` says what a run that passed
would do. `python -m verl_lite.check` is the command line, `python -m verl_lite.main` runs it before
training.
"""
