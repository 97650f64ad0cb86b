"""Workers of fully-async training: `TrainWorker` on the training pool, `RolloutWorker` on the
rollout pool (see `async_run` for the loop that drives them).

TrainWorker is the actor (+ ref) half of `ActorRolloutRefWorker` without a rollout. Constructing
it stores the config and nothing else; `ready()` (the first call a worker group makes) builds the
engines. Its CPU snapshots are the engine's own methods (`snapshot_to_cpu`, `restore_from_cpu`),
and the engine modules import megatron only inside their methods, so no megatron.core is imported
before the engine's initialize() has let MindSpeed patch it (verl's fully-async worker resolved
Megatron snapshot helpers in `__init__` and broke NPU runs that way).

RolloutWorker holds one hf rollout replica and generates continuously: it reserves a chunk of
prompt groups in the `ChunkBuffer`, generates it, scores it and puts it in the buffer, until
stopped. Weights pushed by the trainer wait in a slot and are loaded at the next *cut point*:
between chunks, and, with `async_training.rollout_segment_tokens` > 0, every that many tokens.
At a cut inside a chunk:
- partial_rollout=True: the responses in flight are cut and resumed under the new weights
  (generation continues from prompt + partial response); their samples record the oldest
  version that generated any of their tokens;
- partial_rollout=False: the weights wait until the chunk in flight is complete.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional

from verl_lite.batch import left_pad
from verl_lite.config import roles
from verl_lite.config.schema import ModelConfig, VerlLiteConfig
from verl_lite.config.sections import as_section
from verl_lite.data.dataset import multi_modal_fields
from verl_lite.data.tokenizer import load_tokenizer
from verl_lite.decisions.rollout_correction import needs_rollout_log_probs
from verl_lite.engine.base import CPUSnapshotUnsupported
from verl_lite.models import is_vision_language
from verl_lite.models.hf import image_inputs, load_hf_config, model_position_ids, vl_position_ids
from verl_lite.registry import ROLLOUTS
from verl_lite.reward.manager import score_responses
from verl_lite.reward.registry import build_reward_manager
from verl_lite.trainer.dumps import DUMP_ROWS_KEY, sample_rows
from verl_lite.trainer.dynamic_sampling import EXTRA_PREFIX, OVERLONG_KEYS
from verl_lite.trainer.tracking import val_generations
from verl_lite.rollout.hf import position_ids_from
from verl_lite.trainer.workers import ActorRolloutRefWorker, EngineWorker

logger = logging.getLogger(__name__)

POLL_S = 0.5  # how often a waiting replica looks at its stop flag


class TrainWorker(ActorRolloutRefWorker):
    """Actor engine [+ ref] on the training pool; the rollout lives on the rollout pool."""

    def __init__(self, cfg: VerlLiteConfig, rank: int, world_size: int, master_addr: str = "127.0.0.1",
                 master_port: int = 29500, device: str = "cpu", threads: int = 1):
        # Deliberately no super().__init__(): that builds engines and a rollout. Only plain state here.
        self._given_cfg = cfg  # converted by _init_process (a dict is accepted too, see workers.py)
        self.rank, self.world_size, self.device = rank, world_size, device
        self._process = (master_addr, master_port, threads)
        self.cfg: Optional[VerlLiteConfig] = None
        self.actor = self.ref = self.rollout = None
        self.weight_version = 0
        self.cpu_models: Dict[str, Any] = {}

    def init_model(self) -> None:
        if self.actor is not None:
            return
        master_addr, master_port, threads = self._process
        cfg = self._init_process(self._given_cfg, self.rank, self.world_size, master_addr, master_port, self.device,
                                 threads)
        model_cfg, actor_cfg = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
        self.actor = self._make_engine(model_cfg, actor_cfg, actor_cfg.optim, "actor")
        if roles.ref_enabled(cfg) and not roles.ref_in_actor(cfg):  # with LoRA: the actor, adapters disabled
            self.ref = self._make_engine(model_cfg, cfg.actor_rollout_ref.ref, None, "ref")

    def ready(self) -> bool:
        self.init_model()
        return True

    def export_weights(self) -> Dict[str, Any]:
        """Full actor weights (HF names, CPU); a collective: every rank must call it.

        Here, and only here, the exported tensors are collected into one dict: the rollout replicas
        live in other processes (the rollout pool), and the weights cross Ray to them as one object
        (`ray.put` once, every replica reads it). Syncs within a process stream instead."""
        with self.phases.phase("sync", "actor"):
            return dict(self.actor.export_hf_weights())

    def sync_rollout_weights(self, version: int) -> int:
        raise RuntimeError("a TrainWorker has no rollout: weights go to the rollout pool through export_weights")

    def load_checkpoint(self, path: str) -> None:
        EngineWorker.load_checkpoint(self, path)  # no rollout here to sync the loaded weights into

    # -- CPU snapshots ---------------------------------------------------------------------------

    def _no_snapshots(self, error: Exception) -> ValueError:
        return ValueError(
            f"fully-async training keeps CPU snapshots of the actor's weights, and strategy "
            f"{roles.strategy(self.cfg, 'actor')!r} has no CPU snapshot support: set "
            f"actor_rollout_ref.actor.strategy=fsdp or megatron, or async_training.enable=False ({error})")

    def save_model_to_cpu(self, key: str) -> None:
        """Keep this rank's actor weights on CPU under `key` (no collective)."""
        try:
            with self.phases.phase("sync", "actor"):  # the parameters on the device, to copy them
                self.cpu_models[key] = self.actor.snapshot_to_cpu()
        except CPUSnapshotUnsupported as e:
            raise self._no_snapshots(e) from e

    def restore_model_from_cpu(self, key: str) -> None:
        if key not in self.cpu_models:
            raise KeyError(f"no CPU snapshot {key!r} (have: {sorted(self.cpu_models)})")
        try:
            with self.phases.phase("sync", "actor"):
                self.actor.restore_from_cpu(self.cpu_models[key])
        except CPUSnapshotUnsupported as e:
            raise self._no_snapshots(e) from e

    def clear_cpu_model(self, key: str) -> None:
        self.cpu_models.pop(key, None)

    def compute_log_prob_from(self, batch: Dict[str, Any], key: str) -> Dict[str, Any]:
        """Old log-probs under the snapshot `key` (the published weights); the current weights come back."""
        with self.phases.phase("forward", "actor"):  # one load for the snapshots and the pass inside
            return self._log_prob_from(batch, key)

    def _log_prob_from(self, batch: Dict[str, Any], key: str) -> Dict[str, Any]:
        self.save_model_to_cpu("_current")
        try:
            self.restore_model_from_cpu(key)
            return self.compute_log_prob(batch)
        finally:
            self.restore_model_from_cpu("_current")
            self.clear_cpu_model("_current")


class _Seq:
    __slots__ = ("prompt", "tokens", "log_probs", "versions", "done", "example")

    def __init__(self, prompt: List[int], example: Any = None):
        self.prompt, self.tokens, self.log_probs, self.versions, self.done = prompt, [], [], set(), False
        self.example = example  # the dataset row: its images (multi_modal_fields) go with every segment


class RolloutWorker:
    """One rollout replica: generates groups into the ChunkBuffer until stopped (a threaded Ray actor)."""

    def __init__(self, cfg: VerlLiteConfig, replica: int, device: str, threads: int, examples: List[Any],
                 val_examples: Optional[List[Any]] = None):
        import torch

        self.cfg = cfg = as_section(VerlLiteConfig, cfg)  # a dict is accepted too, as by the train workers
        self.replica, self.device = replica, device
        torch.set_num_threads(max(1, threads))
        torch.manual_seed(int(cfg.trainer.seed) * 1000 + 500 + replica)
        model_cfg, rollout_cfg = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.rollout
        self.tokenizer = load_tokenizer(model_cfg.tokenizer_path or model_cfg.path, model_cfg.trust_remote_code)
        self.rollout = ROLLOUTS.load(rollout_cfg.name)(model_cfg, rollout_cfg, self.tokenizer, device)
        # a vision-language model's rows carry its 3-D rotary positions (computed from its config)
        hf_config = load_hf_config(as_section(ModelConfig, model_cfg))
        self.vl_config = hf_config if is_vision_language(hf_config.to_dict()) else None
        self.reward_fn = build_reward_manager(cfg)
        self.examples, self.val_examples = examples, val_examples or []
        async_cfg = cfg.async_training
        self.n, self.response_length = int(rollout_cfg.n), int(cfg.data.max_response_length)
        self.prompt_width = int(cfg.data.max_prompt_length)
        self.segment = int(async_cfg.rollout_segment_tokens) or self.response_length
        self.partial = bool(async_cfg.partial_rollout)
        # the rollout's own log-probs: for the reweighting of stale groups, and for rollout correction
        self.with_log_probs = (async_cfg.stale_policy == "reweight"
                               or needs_rollout_log_probs(cfg.algorithm.rollout_correction))
        self.sampling = {"temperature": rollout_cfg.temperature, "top_k": rollout_cfg.top_k,
                         "top_p": rollout_cfg.top_p, "do_sample": rollout_cfg.do_sample}
        self.version = -1  # no weights yet: the trainer publishes version 0 before run()
        self._pending = None
        self._slot = threading.Lock()  # the pending-weights slot
        self._model = threading.Lock()  # generation and validation share the model
        self._stop = threading.Event()
        self._chunk_active = False  # a chunk is being generated (its responses may be in flight)
        self.stats_ = {"tokens": 0, "sequences": 0, "chunks": 0, "gen_s": 0.0, "wait_s": 0.0, "syncs": 0,
                       "resumed": 0, "started": None}

    def ready(self) -> bool:
        return True

    # -- weights ---------------------------------------------------------------------------------

    def update_weights(self, weights: Dict[str, Any], version: int) -> int:
        """Park the weights of `version`; the generation loop loads them at its next cut point."""
        with self._slot:
            self._pending = (weights, int(version))
        return int(version)

    def _apply_pending(self, in_flight: bool) -> bool:
        if in_flight and not self.partial:
            return False
        # the model lock first: a second caller (validation and the generation loop run in their own
        # threads) waits until the weights it did not take are loaded, and then sees their version
        with self._model:  # the version changes with the weights, as the generation loop reads it
            with self._slot:
                pending, self._pending = self._pending, None
            if pending is None:
                return False
            weights, version = pending
            self.rollout.update_weights(weights.items(), version)
            self.version = version
        self.stats_["syncs"] += 1
        return True

    # -- the generation loop ---------------------------------------------------------------------

    def run(self, buffer: Any) -> Dict[str, Any]:
        """Generate chunks into `buffer` until stop() or the buffer closes; raises what generation raised."""
        import ray

        self._apply_pending(in_flight=False)
        if self.version < 0:
            raise RuntimeError(f"rollout replica {self.replica}: run() before any weights were pushed")
        self.stats_["started"] = time.time()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            job = ray.get(buffer.reserve.remote(POLL_S))
            self.stats_["wait_s"] += time.perf_counter() - t0
            if job is None:
                continue
            if job.get("closed"):
                break
            t0 = time.perf_counter()
            chunk = self.generate_chunk(job["indices"], job["serial"])
            self.stats_["gen_s"] += time.perf_counter() - t0
            ray.get(buffer.put.remote(chunk, len(job["indices"])))
            self.stats_["chunks"] += 1
        return self.stats()

    def stop(self) -> None:
        self._stop.set()

    def stats(self) -> Dict[str, Any]:
        out = dict(self.stats_)
        out["version"] = self.version
        out["elapsed_s"] = time.time() - out["started"] if out["started"] else 0.0
        return out

    def generate_chunk(self, indices: List[int], serial: int) -> Dict[str, Any]:
        """Generate `n` responses for each prompt index, cutting at segments to take new weights."""
        import torch

        seqs = [_Seq(list(self.examples[i].prompt_ids), self.examples[i]) for i in indices for _ in range(self.n)]
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        self._chunk_active = True
        try:
            self._generate_segments(seqs, pad, eos)
        finally:
            self._chunk_active = False
        self.stats_["sequences"] += len(seqs)
        return self._assemble(seqs, indices, serial, torch)

    def _generate_segments(self, seqs: List[_Seq], pad: int, eos: int) -> None:
        while True:
            active = [s for s in seqs if not s.done]
            if not active:
                break
            in_flight = bool(active[0].tokens)  # active sequences always share one response length
            self._apply_pending(in_flight=in_flight)
            length = min(self.segment, self.response_length - len(active[0].tokens))
            with self._model:
                version = self.version
                if in_flight and version not in active[0].versions:
                    self.stats_["resumed"] += len(active)  # cut at a sync, resumed under the new weights
                prompts = left_pad([s.prompt + s.tokens for s in active], pad)
                prompts.update(multi_modal_fields([s.example for s in active]))
                out = self.rollout.generate(prompts, length, self.sampling)
                log_probs = None
                if self.with_log_probs:  # the vllm rollout returns its own; the hf one is scored here
                    log_probs = out["rollout_log_probs"] if "rollout_log_probs" in out else self._log_probs(out)
            for i, s in enumerate(active):
                mask = out["response_mask"][i].bool()
                new = out["responses"][i][mask].tolist()
                s.tokens += new
                if log_probs is not None:
                    s.log_probs += log_probs[i][mask].tolist()
                s.versions.add(version)
                s.done = eos in new or len(s.tokens) >= self.response_length or not new
            self.stats_["tokens"] += int(out["response_mask"].sum())

    def _log_probs(self, out: Dict[str, Any]):
        """Log-probs of the sampled tokens under the weights that sampled them (the behaviour policy)."""
        import torch

        length = out["responses"].shape[1]
        with torch.no_grad():
            logits = self.rollout.model(input_ids=out["input_ids"].to(self.rollout.device),
                                        attention_mask=out["attention_mask"].to(self.rollout.device),
                                        position_ids=model_position_ids(out["position_ids"]).to(self.rollout.device),
                                        use_cache=False, **image_inputs(out.get("multi_modal_inputs"),
                                                                        self.rollout.device)
                                        ).logits[:, -length - 1:-1, :].float()
        temperature = float(self.sampling["temperature"] or 1.0)
        if temperature != 1.0:
            logits = logits / temperature
        lp = torch.log_softmax(logits, dim=-1)
        return lp.gather(-1, out["responses"].to(lp.device).unsqueeze(-1)).squeeze(-1).cpu()

    def _assemble(self, seqs: List[_Seq], indices: List[int], serial: int, torch) -> Dict[str, Any]:
        pad, width, R, B = self.tokenizer.pad_token_id, self.prompt_width, self.response_length, len(seqs)
        prompt_ids = torch.full((B, width), pad, dtype=torch.long)
        prompt_mask = torch.zeros((B, width), dtype=torch.long)
        responses = torch.full((B, R), pad, dtype=torch.long)
        response_mask = torch.zeros((B, R), dtype=torch.long)
        rollout_lp = torch.zeros((B, R), dtype=torch.float32)
        for i, s in enumerate(seqs):
            p = s.prompt[-width:]
            prompt_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            prompt_mask[i, width - len(p):] = 1
            responses[i, :len(s.tokens)] = torch.tensor(s.tokens, dtype=torch.long)
            response_mask[i, :len(s.tokens)] = 1
            if s.log_probs:
                rollout_lp[i, :len(s.log_probs)] = torch.tensor(s.log_probs)
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
        rep = [self.examples[i] for i in indices for _ in range(self.n)]
        input_ids = torch.cat([prompt_ids, responses], dim=1)
        mm = multi_modal_fields(rep)
        if self.vl_config is not None:
            position_ids = vl_position_ids(self.vl_config, input_ids, attention_mask, mm.get("multi_modal_inputs"),
                                           width)
        else:
            position_ids = position_ids_from(attention_mask)
        chunk: Dict[str, Any] = {
            "prompts": prompt_ids, "responses": responses, "response_mask": response_mask,
            "input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
            "uid": [f"{e.uid}/{serial}" for e in rep], "data_source": [e.data_source for e in rep],
            "ground_truth": [e.ground_truth for e in rep], "extra_info": [e.extra_info for e in rep],
            "version_min": torch.tensor([min(s.versions) for s in seqs], dtype=torch.long),
            "version_max": torch.tensor([max(s.versions) for s in seqs], dtype=torch.long),
        }
        if "multi_modal_inputs" in mm:
            chunk["multi_modal_inputs"] = mm["multi_modal_inputs"]
        if self.with_log_probs:
            chunk["rollout_log_probs"] = rollout_lp
        chunk["token_level_scores"] = self._score(chunk)
        return chunk

    def _score(self, batch: Dict[str, Any]):
        token_scores, _, extra = score_responses(self.tokenizer, self.reward_fn, batch)
        # the dapo manager's logged overlong penalty rides along to the trainer's metrics (per-row lists), and
        # all the reward's extra values for trainer.rollout_data_dir's dump
        dump = bool(self.cfg.trainer.rollout_data_dir)
        batch.update({EXTRA_PREFIX + k: v for k, v in extra.items() if dump or k in OVERLONG_KEYS})
        return token_scores

    # -- validation ------------------------------------------------------------------------------

    def validate(self, step: int = 0) -> Dict[str, Any]:
        """Score the validation prompts with the newest pushed weights (between two segments; with
        partial_rollout=False, weights that arrive while a chunk is in flight wait for it). With
        trainer.validation_data_dir, the rows of verl's dump of training step `step` ride along under
        DUMP_ROWS_KEY for the driver to write."""
        from collections import defaultdict

        if not self.val_examples:
            return {}
        self._apply_pending(in_flight=self._chunk_active)
        val_kwargs = dict(self.cfg.actor_rollout_ref.rollout.val_kwargs)
        n = int(val_kwargs.get("n", 1))
        rep = [e for e in self.val_examples for _ in range(n)]
        with self._model:
            version = self.version
            prompts = left_pad([e.prompt_ids for e in rep], self.tokenizer.pad_token_id)
            prompts.update(multi_modal_fields(rep))
            out = self.rollout.generate(prompts, self.response_length, val_kwargs)
        out.update(data_source=[e.data_source for e in rep], ground_truth=[e.ground_truth for e in rep],
                   extra_info=[e.extra_info for e in rep])
        token_scores, texts, extra = score_responses(self.tokenizer, self.reward_fn, out)
        scores = token_scores.sum(-1).tolist()
        metrics = val_generations(self.tokenizer, out, texts, scores, int(self.cfg.trainer.log_val_generations))
        if self.cfg.trainer.validation_data_dir:
            out.update({"_texts": texts, **{EXTRA_PREFIX + k: v for k, v in extra.items()}})
            metrics[DUMP_ROWS_KEY] = sample_rows(self.tokenizer, out, scores, step, reward=True)
        by_source: Dict[str, List[float]] = defaultdict(list)
        for ds, s in zip(out["data_source"], scores):
            by_source[ds].append(s)
        metrics.update({f"val/test_score/{ds}": sum(v) / len(v) for ds, v in by_source.items()})
        metrics["val/score"] = sum(scores) / len(scores)
        metrics["val/weight_version"] = version
        return metrics
