"""One spawn of two gloo ranks for the Megatron scenarios of a whole pytest session, and the batch,
config and loss helpers those scenarios share.

A megatron import costs 7-9 s of CPU in every process, so each spawned world is expensive to start.
A test module registers its two-rank scenario with `@scenario`; the `megatron_world` fixture
(conftest.py) runs the scenarios of every module the session selected one after the other in ONE
spawn (`run_scenarios`, in the background), each with its own record dict and folder, and hands each
module the records of its own scenario as soon as they are written. Between scenarios the ranks get back the environment, `sys.path` and torch RNG
state of the start and no model-parallel state, so a scenario sees what a world of its own would
show it. A scenario body is `fn(rank, rec, out_dir)`; an exception lands in its record as "error"
(the fixture fails that module's tests with the traceback) and the next scenario still runs.

Scenarios that need a process of their own (MindSpeed imported before megatron, one rank) keep the
`spawn_ranks` fixture.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

Scenario = Callable[[int, Dict[str, Any], str], None]
SCENARIOS: Dict[str, Scenario] = {}  # test module name -> its scenario (filled as the modules are imported)
RANKS = 2


def scenario(fn: Scenario) -> Scenario:
    """Register `fn(rank, rec, out_dir)` as its test module's scenario in the shared world."""
    if SCENARIOS.get(fn.__module__, fn) is not fn:
        raise ValueError(f"{fn.__module__} registers a second megatron_world scenario ({fn.__name__}): one a module")
    SCENARIOS[fn.__module__] = fn
    return fn


def _destroy_model_parallel() -> None:
    """Megatron's parallel state and every process group but the world's: megatron forgets its
    groups without destroying them, and each gloo group keeps its threads (hundreds of layouts'
    groups would pile up in one process)."""
    if "megatron.core" in sys.modules:  # a scenario that never imported megatron left nothing behind
        from megatron.core import parallel_state as mpu

        mpu.destroy_model_parallel()
    from torch.distributed import distributed_c10d as c10d

    for group in list(c10d._world.pg_map):
        if group is not c10d.GroupMember.WORLD:
            torch.distributed.destroy_process_group(group)


def run_scenarios(rank: int, world: int, port: int, out_dir: str, named: Sequence[Tuple[str, Scenario]]) -> None:
    """The body of each spawned rank: one gloo group, then every scenario in turn; each one's record is
    saved to out_dir/<name>/rank<rank>.pt (with an "error" traceback if it raised)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    # The rendezvous is a file, not the port: the ranks start for seconds (megatron's import) before
    # rank 0 would bind it, time enough for another process (the other pytest worker) to take it.
    torch.distributed.init_process_group("gloo", init_method=f"file://{os.path.join(out_dir, 'rendezvous')}",
                                         rank=rank, world_size=world)
    environ, path, rng = dict(os.environ), list(sys.path), torch.get_rng_state()
    for name, fn in named:
        folder = os.path.join(out_dir, name)
        os.makedirs(folder, exist_ok=True)
        torch.set_rng_state(rng)
        rec: Dict[str, Any] = {}
        try:
            fn(rank, rec, folder)
        except Exception:
            rec["error"] = traceback.format_exc()
        try:
            _destroy_model_parallel()
        except Exception:
            rec.setdefault("error", traceback.format_exc())
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        torch.save(rec, os.path.join(folder, f".rank{rank}.pt"))
        os.replace(os.path.join(folder, f".rank{rank}.pt"), os.path.join(folder, f"rank{rank}.pt"))  # whole or absent
        torch.distributed.barrier()  # the next scenario starts on both ranks together


# ---------------------------------------------------------------------------------------- batches and losses

def padded_batch(rows: int, width: int, response: int, left_pad: Dict[int, int], ended_early: Sequence[int] = (),
                 seed: int = 0, vocab: int = 48) -> Dict[str, torch.Tensor]:
    """A rollout-shaped batch of token ids in [3, vocab): row i left-padded by left_pad[i] tokens (a
    short prompt), the rows in `ended_early` with their last response token padded (a response that
    stopped early); positions count the real tokens; the last `response` columns are the response."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, width), generator=g)
    mask = torch.ones(rows, width, dtype=torch.long)
    for row, count in left_pad.items():
        mask[row, :count] = 0
    for row in ended_early:
        mask[row, -1] = 0
    ids[mask == 0] = 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, responses=ids[:, -response:],
                response_mask=mask[:, -response:])


def nll_loss(outputs: Dict[str, torch.Tensor], mb: Dict[str, torch.Tensor]):
    """The mean negative log-prob of the response tokens, and it as the "loss" metric."""
    mask = mb["response_mask"].float()
    loss = -(outputs["log_probs"] * mask).sum() / mask.sum()
    return loss, {"loss": loss.item()}


def value_loss(outputs: Dict[str, torch.Tensor], mb: Dict[str, torch.Tensor]):
    """The mean squared distance of the response tokens' values from 1."""
    mask = mb["response_mask"].float()
    loss = (((outputs["values"] - 1.0) ** 2) * mask).sum() / mask.sum()
    return loss, {"loss": loss.item()}


def response_log_probs(logits: torch.Tensor, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
    """The log-probs of the response tokens under full-sequence logits (the token before predicts)."""
    r = batch["responses"].shape[1]
    return torch.log_softmax(logits[:, -r - 1: -1].float(), -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def train_steps(engine, batch: Dict[str, torch.Tensor], steps: int = 3) -> List[float]:
    """`steps` optimizer steps of `nll_loss` on one batch in train mode; the loss before each step."""
    engine.train_mode()
    losses = []
    for _ in range(steps):
        engine.optimizer_zero_grad()
        losses.append(engine.forward_backward([batch], nll_loss)[0]["metrics"]["loss"])
        engine.optimizer_step()
    return losses


def hf_response_log_probs(path: str, seed: int, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
    """transformers' fp32 causal LM of `path`'s config with the engines' random init of `seed`: its
    log-probs of the batch's response tokens (what an engine built with init seed `seed` must give)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl_lite.engine.megatron.hf import random_hf_state
    from verl_lite.models import resolve_model_dir

    config = AutoConfig.from_pretrained(resolve_model_dir(path))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict(random_hf_state(AutoModelForCausalLM, config, seed).__self__, strict=True)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    return response_log_probs(logits, batch)


def megatron_sections(path: str, tp: int = 1, pp: int = 1, ep: int = 1, init_seed: Optional[int] = None,
                      overrides: Optional[Dict[str, Any]] = None, critic: bool = False):
    """(model, actor or critic section) of a schema config on the megatron strategy with this layout."""
    from omegaconf import OmegaConf

    from verl_lite.config.schema import VerlLiteConfig

    cfg = OmegaConf.structured(VerlLiteConfig)
    model, section = (cfg.critic.model, cfg.critic) if critic else (cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor)
    model.path = path
    if init_seed is not None:
        model.init_seed = init_seed
    section.strategy = "megatron"
    section.megatron.tensor_model_parallel_size = tp
    section.megatron.pipeline_model_parallel_size = pp
    section.megatron.expert_model_parallel_size = ep
    section.megatron.override_transformer_config = dict(overrides or {})
    return model, section


def start(out_dir: str, port: int, named: Sequence[Tuple[str, Scenario]]):
    """Spawn the RANKS processes of `run_scenarios` without waiting for them."""
    return torch.multiprocessing.start_processes(run_scenarios, args=(RANKS, port, out_dir, named), nprocs=RANKS,
                                                 join=False, start_method="spawn")


def wait_for(context, folder) -> List[Dict[str, Any]]:
    """The records of the scenario whose folder is `folder`, one a rank, once every rank wrote its own;
    fails with a rank's traceback, or when the world ended (or died) without writing them."""
    paths = [os.path.join(str(folder), f"rank{r}.pt") for r in range(RANKS)]
    while not all(os.path.exists(p) for p in paths):
        if context.join(timeout=2):  # raises when a rank died
            if not all(os.path.exists(p) for p in paths):
                raise AssertionError(f"the megatron world ended without the records of {folder}")
    recs = [torch.load(p, weights_only=False) for p in paths]
    for r, rec in enumerate(recs):
        assert "error" not in rec, f"rank {r} failed:\n{rec['error']}"
    return recs


def stop(context) -> None:
    """At the session's end: the ranks are done (join) or, when the session stopped early, ended."""
    for process in context.processes:
        if process.is_alive():
            process.terminate()
    for process in context.processes:
        process.join(timeout=30)
