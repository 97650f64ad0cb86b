"""Write verl_lite/config/generated/verl_accepted.json: verl's keys that verl_lite has no setting for,
but whose value (verl's default, a switch set off, a size of 1) asks for exactly what verl_lite
does. A line setting one of those values is taken and changes nothing; any other value of the key
is refused as before ("not supported by verl_lite: ...").

The decision is made per key, here, with the reason, and reviewed like code: REVIEWED lists
patterns of verl keys with the values to accept (None: verl's default of each matching key, read
from verl_keys.json) and why the value means what verl_lite does. Never a blanket "equals verl's
default" rule: some of verl's defaults switch on what verl_lite lacks (data.image_key=images reads
images, data.return_raw_chat is a schema key).

    python tools/gen_verl_accepted.py          # rewrites the table from verl_keys.json and REVIEWED

`render` is the writer: tests/py/test_verl_accepted.py re-emits the table and compares byte for
byte, composes every accepted line (none may be refused) and a different value of each key (it must be).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "verl_lite" / "config" / "generated" / "verl_accepted.json"

# (verl key pattern, the values accepted (None: verl's default), why that value is what verl_lite does)
REVIEWED = [
    ("actor_rollout_ref.rollout.ignore_eos", None, "generation stops at EOS, as verl_lite's rollouts do"),
    ("*.megatron.use_dist_checkpointing", None,
     "initial weights are read from the HF checkpoint at model.path, as verl_lite loads them"),
    ("*.megatron.use_megatron_fsdp", None, "Megatron's own DDP and distributed optimizer, as verl_lite builds them"),
    # verl's True gathers a LoRA model's FSDP shards layer by layer for the rollout sync, to bound memory;
    # verl_lite's sync gathers one tensor at a time (and merges that layer's adapter), which holds less
    ("actor_rollout_ref.rollout.layered_summon", [False, True],
     "the rollout gets the weights gathered one tensor at a time (with LoRA merged tensor by tensor), as "
     "verl_lite syncs them; that holds less at once than verl's layer-by-layer gather (True)"),
    ("*.fsdp_config.dtype", ["bfloat16", "bf16"],
     "verl's FSDP engine does not read fsdp_config.dtype (only its Megatron engine does), so the line changes "
     "nothing in verl either: the compute dtype is fsdp_config.mixed_precision.param_dtype"),
    # the critic computes no entropy: its copies of the actor's entropy settings at verl's defaults ask for nothing
    ("critic.*.entropy_from_logits_with_chunking", None, "the critic computes no entropy"),
    ("critic.*.entropy_from_logits_chunk_size", None, "the critic computes no entropy"),
    ("critic.*.entropy_checkpointing", [False], "the critic computes no entropy"),
    ("*.fsdp_config.use_orig_params", [False, True],
     "verl_lite's torch engine is FSDP2 (fully_shard), which always keeps the original parameters (FSDP1's "
     "use_orig_params=True); verl reads the key only in its FSDP1 wrapper, and its FSDP2 path ignores it"),
    ("actor_rollout_ref.rollout.multi_stage_wake_up", [False, True],
     "verl declares it (workers/config/rollout.py) but no code of verl reads it: either value runs as verl's"),
    ("*.fsdp_config.strategy", ["fsdp", "fsdp2"],
     "verl_lite's torch engine is FSDP2 (fully_shard); verl's FSDP1 (fsdp) runs on it too"),
    ("distillation.enabled", None, "no distillation"),
    ("actor_rollout_ref.model.mtp.enable", None, "no multi-token prediction head"),
    ("reward.reward_model.enable_resource_pool", None, "no reward model, so no pool of its own"),
    # the settings of a feature at verl's default, where the feature's own switch is refused when on
    # (above: mtp.enable, distillation.enabled; the profiler's switches are in the schema):
    # at its default such a setting asks for nothing, and with the feature on the run is refused anyway
    ("*.profiler.*", None, "a profiler setting at verl's default, asking for nothing verl_lite's "
                           "profilers do not do"),
    ("global_profiler.*", None, "a profiler setting at verl's default, asking for nothing verl_lite's "
                                "profilers do not do"),
    ("actor_rollout_ref.model.mtp.*", None, "an MTP setting at verl's default; MTP is off unless mtp.enable "
                                            "(refused when True)"),
    ("distillation.*", None, "a distillation setting at verl's default; distillation is off unless "
                             "distillation.enabled (refused when True)"),
    ("data.validation_shuffle", None, "validation prompts are generated in file order, as verl_lite reads them"),
    ("actor_rollout_ref.rollout.enable_rollout_routing_replay", None, "MoE routing is not replayed, as in verl_lite"),
    # verl's model.lora.* is its Megatron LoRA section (the fsdp engine reads model.lora_rank & co., and lora.merge)
    ("*.lora.rank", [0], "0 = no Megatron LoRA adapter (LoRA on fsdp is model.lora_rank)"),
    ("*.lora.merge", [True], "the rollout gets the merged weights (base + scaling * B @ A), as verl_lite syncs them "
                             "with LoRA on"),
    # verl's top-level precision-aware optimizer keys at verl's defaults: what verl_lite's optimizer does
    ("*.optim.use_precision_aware_optimizer", None,
     "megatron's default optimizer, as verl_lite builds it (True: override_optimizer_config)"),
    ("*.optim.main_grads_dtype", ["fp32"], "fp32, megatron's default, as verl_lite keeps it"),
    ("*.optim.exp_avg_dtype", ["fp32"], "fp32, megatron's default, as verl_lite keeps it"),
    ("*.optim.exp_avg_sq_dtype", ["fp32"], "fp32, megatron's default, as verl_lite keeps it"),
    # verl's defaults restated on the lines of its docs and scripts
    ("trainer.default_hdfs_dir", None, "no copy of the checkpoints to HDFS: verl_lite saves them to "
                                       "trainer.default_local_dir only"),
    ("actor_rollout_ref.rollout.quantization", None, "no quantized rollout: vLLM runs in rollout.dtype, as "
                                                     "verl_lite starts it"),
    # verl's vLLM server passes skip_tokenizer_init=False whatever the key says (vllm_async_server.py:305);
    # only its sglang server reads the key
    ("actor_rollout_ref.rollout.skip_tokenizer_init", [True, False],
     "verl's vLLM rollout does not read it (vllm_async_server.py:305 passes False; only sglang reads the key): "
     "either value runs as verl's, and verl_lite sets vLLM's own from the model (True for text models)"),
    ("actor_rollout_ref.rollout.full_determinism", None, "vLLM's batch-invariant mode off, as verl_lite starts it"),
    ("actor_rollout_ref.rollout.prometheus.enable", None, "no Prometheus export of the rollout servers' metrics"),
    ("actor_rollout_ref.model.use_shm", None, "the checkpoint is read from model.path (not copied to /dev/shm "
                                              "first), as verl_lite loads it"),
    ("*.megatron.router_replay.mode", None, "MoE routing is not replayed, as in verl_lite"),
    ("actor_rollout_ref.actor.use_prefix_grouper", None, "no shared-prefix grouping of a prompt's responses: each "
                                                         "sequence is computed whole, as in verl_lite"),
    ("transfer_queue.enable", None, "no TransferQueue: batches go from the driver to the workers through Ray"),
]


def table() -> dict:
    """{verl key: {"values": [...], "reason": ...}} for every refused verl key a REVIEWED pattern matches."""
    from verl_lite.config import verl_names
    from verl_lite.config.generated import verl_keys

    out = {}
    for key in verl_names.leaf_keys():
        if verl_names.classify(key)[0] != "refused":
            continue
        for pattern, values, reason in REVIEWED:
            if fnmatch.fnmatchcase(key, pattern):
                if values is None:
                    default = verl_keys.DEFAULTS.get(key)
                    if (key not in verl_keys.DEFAULTS) or (isinstance(default, str) and "${" in default):
                        break  # verl's default is an interpolation or a section: nothing to accept by default
                    values = [default]
                out[key] = {"values": values, "reason": reason}
                break
    return out


def render(entries: dict) -> str:
    from verl_lite.config.generated import verl_keys

    return json.dumps({
        "about": "verl keys verl_lite has no setting for, with the values that ask for what verl_lite does "
                 "(taken, changing nothing) and why. Generated by tools/gen_verl_accepted.py; do not edit.",
        "verl_commit": verl_keys.VERL_COMMIT,
        "accepted": dict(sorted(entries.items())),
    }, indent=1) + "\n"


def main() -> int:
    entries = table()
    unused = [p for p, _, _ in REVIEWED if not any(fnmatch.fnmatchcase(k, p) for k in entries)]
    if unused:
        print(f"patterns that match no refused verl key (remove them): {unused}", file=sys.stderr)
        return 1
    OUT.write_text(render(entries))
    print(f"{OUT}: {len(entries)} keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
