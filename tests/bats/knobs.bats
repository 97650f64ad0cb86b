#!/usr/bin/env bats
# The environment as input: misspelled knobs get a warning, secrets are never printed.

load test_helper

setup() { common_setup; }

@test "a misspelled USE_MINDSPEED_BRIGDE gets a warning naming USE_MINDSPEED_BRIDGE" {
  run_script DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIGDE=True bash "$S35"
  assert_success
  assert_equal "$stderr" "verl_lite: warning: USE_MINDSPEED_BRIGDE is not a known setting and is ignored (did you mean USE_MINDSPEED_BRIDGE?)"
  refute_output --partial "use_ascend_gdn"
}

@test "a knob with a dropped letter gets a warning naming the knob" {
  run_script DRY_RUN=1 DEVICE=npu HCCL_BUFSIZE=100 bash "$S35"
  assert_success
  assert_equal "$stderr" "verl_lite: warning: HCCL_BUFSIZE is not a known setting and is ignored (did you mean HCCL_BUFFSIZE?)"
}

@test "a knob with an extra letter gets a warning naming the knob" {
  run_script DRY_RUN=1 DEVICES=npu bash "$STINY"
  assert_success
  assert_equal "$stderr" "verl_lite: warning: DEVICES is not a known setting and is ignored (did you mean DEVICE?)"
}

@test "a knob typed in lower case gets a warning naming the upper-case knob" {
  run_script DRY_RUN=1 DEVICE=cuda all_offload=False bash "$S35"
  assert_success
  assert_equal "$stderr" "verl_lite: warning: all_offload is not read, the launcher reads ALL_OFFLOAD (did you mean ALL_OFFLOAD?)"
}

@test "correctly spelled knobs and unrelated variables give no warning" {
  run_script DRY_RUN=1 DEVICE=npu USE_MINDSPEED_BRIDGE=True NNODES=1 EDITOR=vi SHELL=/bin/bash bash "$S35"
  assert_success
  assert_equal "$stderr" ""
}

@test "secret-looking variables are masked in the dry run and their values never printed" {
  run_script DRY_RUN=1 DEVICE=cuda HF_TOKEN=hf_s3cr3t WANDB_API_KEY=wb_s3cr3t \
    DB_PASSWORD=pw_s3cr3t my_secret=lc_s3cr3t bash "$S35"
  assert_success
  assert_line "# env from the caller: HF_TOKEN=<masked>"
  assert_line "# env from the caller: WANDB_API_KEY=<masked>"
  assert_line "# env from the caller: DB_PASSWORD=<masked>"
  assert_line "# env from the caller: my_secret=<masked>"
  refute_output --partial "s3cr3t"
  [[ $stderr != *s3cr3t* ]] || fail "a secret reached stderr"
}

@test "a TOKENIZER switch is not a secret: its value shows in the dry run, as verl_lite/secrets.py reads the names" {
  run_script DRY_RUN=1 DEVICE=cuda TOKENIZERS_PARALLELISM=false MY_TOKENIZER_TOKEN=tk_s3cr3t bash "$S35"
  assert_success
  assert_line "# env from the caller: TOKENIZERS_PARALLELISM=false"
  assert_line "# env from the caller: MY_TOKENIZER_TOKEN=<masked>"
  refute_output --partial "s3cr3t"
  [[ $stderr != *s3cr3t* ]] || fail "a secret reached stderr"
}

@test "a secret still reaches the training process unmasked" {
  run_script DEVICE=cuda HF_TOKEN=hf_s3cr3t bash "$S35"
  assert_success
  assert_equal "$(stub_env python3 1 HF_TOKEN)" hf_s3cr3t
}

@test "job-relevant variables from the caller are shown in clear, others are not listed" {
  run_script DRY_RUN=1 DEVICE=npu HCCL_IF_IP=10.1.2.3 ASCEND_RT_VISIBLE_DEVICES=0,1 EDITOR=vi bash "$S35"
  assert_success
  assert_line "# env from the caller: ASCEND_RT_VISIBLE_DEVICES=0,1"
  assert_line "# env from the caller: HCCL_IF_IP=10.1.2.3"
  refute_output --partial "EDITOR"
}
