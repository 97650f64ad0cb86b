"""vllm-ascend's differences from vLLM that the vllm rollout works around on npu, and the worker steps it
runs for them.

On NPU, MindSpeed's repatch and torch-npu are imported by the engine built before the rollout in the
same worker, so they come before vLLM (vllm-ascend's plugin loads when vLLM is imported by the rollout).
What vllm-ascend (v0.23.0, with vLLM 0.23.0: verl's Ascend images) does differently, and what the
rollout does about it on npu (tests/py/test_vllm_ascend.py runs each against a fake worker that has
vllm-ascend's attributes):
- its `wake_up` raises unless `weight_nz_mode` is 0 (FRACTAL_NZ weights; on by default): the engine
  gets `additional_config={"weight_nz_mode": 0}` (preflight.rollout.NPU_ADDITIONAL_CONFIG), merged into
  engine_kwargs.vllm's;
- its model runner builds its sampler without vLLM's `logprobs_mode` (always raw log-probs, before
  temperature): after the engine starts, every worker's sampler is set to processed_logprobs and
  read back (`set_processed_logprobs`, `use_processed_logprobs`);
- its `wake_up` of the weights turns each fused-MoE `w13_weight` / `w2_weight` (unquantized) into a
  transposed view, the checkpoint's layout, for a full reload that ends in
  `process_weights_after_loading` (verl's path); MoE kernels and vLLM's layerwise reload (which
  copies each processed layer into the tensors it found) need the kernel layout, so right after a
  wake of the weights the rollout turns those views back (`restore_fused_moe_layout`: the same
  storage, nothing copied);
- a sync runs under `torch.device(worker.device)`, as vLLM's and vllm-ascend's workers run their
  reloads; `reset_lora_state` (vLLM >= 0.32 only) is called where the runner has it
  (vllm_weights.begin_sync / load_bucket / finish_sync).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

# vLLM's logprobs_mode of the log-probs after temperature, top-k and top-p (the actor's log_softmax(logits / T)).
PROCESSED = "processed_logprobs"


# vllm-ascend (npu) worker steps. Attribute names as vllm-ascend v0.23.0 defines them (file:line there).

def set_processed_logprobs(worker: Any) -> Tuple[Optional[str], List[str]]:
    """Set the sampler of this worker's model runner to processed log-probs and read it back:
    (the attribute path that is missing or None, the modes read back). vllm-ascend builds the runner's
    sampler without vLLM's logprobs_mode (`vllm_ascend/worker/model_runner_v1.py:333`: `AscendSampler()`,
    whose default is `raw_logprobs`, `sample/sampler.py:15,73-76`); the mode is read at each call, by
    vLLM's Sampler (vllm 0.23.0 `v1/sample/sampler.py:79,255`) and by AscendTopKTopPSampler's
    `forward_native` (`sample/sampler.py:164-180`), so setting both attributes after start-up takes."""
    runner = getattr(worker, "model_runner", None)
    if runner is None:
        return "worker.model_runner", []
    sampler = getattr(runner, "sampler", None)
    if sampler is None or not hasattr(sampler, "logprobs_mode"):
        return f"{type(runner).__name__}.sampler.logprobs_mode", []
    inner = getattr(sampler, "topk_topp_sampler", None)
    if inner is None or not hasattr(inner, "logprobs_mode"):
        return f"{type(sampler).__name__}.topk_topp_sampler.logprobs_mode", []
    sampler.logprobs_mode = inner.logprobs_mode = PROCESSED
    return None, [str(sampler.logprobs_mode), str(inner.logprobs_mode)]


def use_processed_logprobs(llm: Any) -> None:
    """vllm-ascend's runner ignores the engine's logprobs_mode (see set_processed_logprobs): set every
    worker's sampler of the engine `llm` to processed_logprobs and check that it took."""
    for rank, (missing, modes) in enumerate(llm.collective_rpc(set_processed_logprobs)):
        if missing is not None:
            raise RuntimeError(f"vLLM worker {rank} has no {missing}: the vllm rollout on npu sets vllm-ascend's "
                               f"sampler to {PROCESSED} there (its model runner ignores logprobs_mode and returns "
                               "log-probs before temperature, top-k and top-p); use vllm-ascend v0.23.0, whose "
                               "NPUModelRunner has it, or set actor_rollout_ref.rollout.calculate_log_probs=False "
                               "(no rollout_log_probs)")
        if any(m != PROCESSED for m in modes):
            raise RuntimeError(f"vLLM worker {rank}'s sampler reads logprobs_mode {modes} after it was set to "
                               f"{PROCESSED}: rollout_log_probs would not be the actor's log_softmax(logits / T)")


def restore_fused_moe_layout(worker: Any) -> int:
    """Undo what vllm-ascend's `NPUWorker.wake_up` does to an unquantized model's fused-MoE weights when the
    weights wake (v0.23.0 `vllm_ascend/worker/worker.py:251-270`): each `w2_weight` whose dim 2 is the hidden
    size, and each `w13_weight` whose dim 1 is, becomes a `transpose(1, 2)` view (the checkpoint's layout,
    for a full reload followed by `process_weights_after_loading`, verl's path). The MoE kernels read the
    layout `process_weights_after_loading` made (`ops/fused_moe/fused_moe.py:112-119`, contiguous), and
    vLLM's layerwise reload copies each processed layer into the tensors it found at the start of a sync,
    which must have that shape. Each such view is transposed back into a Parameter over the same storage
    (the tensor as it was before the sleep: its shape, strides and memory, nothing copied). Returns how many
    were restored; 0 for a dense or quantized model, or when nothing is a view."""
    config = worker.vllm_config
    if getattr(config, "quant_config", None) is not None:
        return 0
    hidden = config.model_config.hf_text_config.hidden_size
    model = worker.model_runner.get_model()
    views = [name for name, p in model.named_parameters()
             if p.dim() == 3 and not p.is_contiguous() and p.transpose(1, 2).is_contiguous()
             and (("w2_weight" in name and p.shape[1] == hidden) or ("w13_weight" in name and p.shape[2] == hidden))]
    for name in views:
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        view = getattr(module, attr)
        setattr(module, attr, torch.nn.Parameter(view.transpose(1, 2), requires_grad=False))
    return len(views)
