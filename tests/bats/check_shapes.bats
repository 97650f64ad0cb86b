#!/usr/bin/env bats
# CHECK=1 on the Qwen3.5 scripts with the real interpreter (not the stub): on a machine without the
# checkpoints, the layout is checked against the shipped public shape of the model's name, and the
# summary names the shape, the Ascend stack, the bridge and the GDN kernel.

load test_helper

setup() {
  common_setup
  REAL_PYTHON=$(command -v python3)
  # The interpreter this suite runs with must import verl_lite (the venv of the test command).
  "$REAL_PYTHON" -c 'import verl_lite' 2>/dev/null || fail "python3 on PATH ($REAL_PYTHON) cannot import verl_lite"
}

# the default stack (core_r0.16.0): verl_lite's own bridge, whose layout rules the shape checks
check() {
  run_script PYTHON="$REAL_PYTHON" CHECK=1 DEVICE=npu "$@"
}

assert_shape_summary() { # SHAPE LAYOUT
  assert_success
  assert_line --partial "shape         : shipped $1 (source: "
  assert_line "actor         : $2"
  assert_line "ref           : $2"
  assert_line --partial "ascend stack  : core_r0.16.0: Megatron-LM 0.16 + MindSpeed core_r0.16.0"
  assert_line "  bridge      : verl_lite registry (Qwen3_5MoeForConditionalGeneration) (installed here: Megatron-Bridge no, mbridge no, MindSpeed-Bridge no, fla no)"
  assert_line "  GDN kernel  : fla.ops.gated_delta_rule.chunk_gated_delta_rule as MindSpeed core_r0.16.0 replaces it: mindspeed.core.ssm.ops.flash_gated_delta_rule.flash_gated_delta_rule with fla_npu, else mindspeed.core.ssm.chunk_gated_delta_rule.chunk_gated_delta_rule without fla_npu (takes packed input)"
  assert_line --partial "verl_lite.check: OK ("
}

@test "CHECK=1 35B on npu checks TP2 PP2 EP8 against the shipped Qwen3.5-35B-A3B shape" {
  check bash "$S35"
  assert_shape_summary Qwen3.5-35B-A3B "megatron TP 2 PP 2 CP 1 EP 8 ETP 1 -> DP 4"
  assert_line --partial "40 layers, 16 heads, 2 kv heads, 16 GDN key heads, 32 GDN value heads, 256 experts"
}

@test "CHECK=1 35B with MindSpeed-Bridge names the core_r0.18.0 stack and the bridges its nodes need" {
  check USE_MINDSPEED_BRIDGE=True bash "$S35"
  assert_success
  assert_line "actor         : megatron TP 2 PP 2 CP 1 EP 8 ETP 1 -> DP 4"
  assert_line --partial "ascend stack  : core_r0.18.0: Megatron-LM core_v0.18.0 + MindSpeed and MegatronAdaptor core_r0.18.0"
  assert_line "  bridge      : Megatron-Bridge AutoBridge (not installed on this machine: the training nodes need Megatron-Bridge and MindSpeed-Bridge) + MindSpeed-Bridge (import mindspeed_bridge.models after the repatch, before the model build) (installed here: Megatron-Bridge no, mbridge no, MindSpeed-Bridge no, fla no)"
  assert_line --partial "  GDN layers  : built by MindSpeed-Bridge's Qwen3.5 bridge; use_triton_gdn=False, use_ascend_gdn=True choose its kernel (unverified: "
}

@test "CHECK=1 122B on npu checks TP2 PP4 EP16 against the shipped Qwen3.5-122B-A10B shape" {
  check bash "$S122"
  assert_shape_summary Qwen3.5-122B-A10B "megatron TP 2 PP 4 CP 1 EP 16 ETP 1 -> DP 8"
  assert_line --partial "48 layers, 32 heads, 2 kv heads, 16 GDN key heads, 64 GDN value heads, 256 experts"
}

@test "CHECK=1 397B on npu checks TP2 PP4 EP64 against the shipped Qwen3.5-397B-A17B shape" {
  check bash "$S397"
  assert_shape_summary Qwen3.5-397B-A17B "megatron TP 2 PP 4 CP 1 EP 64 ETP 1 -> DP 32"
  assert_line --partial "60 layers, 32 heads, 2 kv heads, 16 GDN key heads, 64 GDN value heads, 512 experts"
}

@test "CHECK=1 refuses TP=4 for 35B: its 2 key/value heads do not split over 4 ranks" {
  check TP=4 bash "$S35"
  assert_failure 1
  assert_stderr_has "tensor_model_parallel_size=4 does not divide the 2 key/value heads of $TEST_HOME/models/Qwen3.5-35B-A3B (shipped shape Qwen3.5-35B-A3B): 2 % 4 = 2"
}

@test "CHECK=1 refuses PP=8 for 397B: its 60 layers do not split over 8 stages" {
  check PP=8 EP=32 bash "$S397"
  assert_failure 1
  assert_stderr_has "60 layers of $TEST_HOME/models/Qwen3.5-397B-A17B (shipped shape Qwen3.5-397B-A17B) do not split evenly over PP*VPP = 8*1 = 8 stages: 60 % 8 = 4"
}

@test "a readable config.json wins over the shipped shape of the same name" {
  mkdir -p "$TEST_HOME/models/Qwen3.5-35B-A3B"
  printf '%s' '{"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "text_config": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 8, "num_attention_heads": 4,
    "num_key_value_heads": 4, "num_experts": 8, "full_attention_interval": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention",
                    "linear_attention", "linear_attention", "linear_attention", "full_attention"]}}' \
    >"$TEST_HOME/models/Qwen3.5-35B-A3B/config.json"
  check bash "$S35"
  assert_success
  assert_line "shape         : $TEST_HOME/models/Qwen3.5-35B-A3B/config.json (the model's config.json): 8 layers, 4 heads, 4 kv heads, 8 experts"
}
