"""The bounded queue between the rollout replicas and the trainer, run as one async Ray actor.

It also deals out the prompts, so several replicas never generate the same group twice and the
prompt order can be checkpointed. A replica first `reserve`s a chunk (it gets prompt indices), generates
it, then `put`s it; the trainer `get`s chunks.

How much the rollouter may generate is verl's rule (fully_async_rollouter.py): a counter of the
groups started with the current weights *plus* those carried over from older ones (verl's
`staleness_samples`) may not pass `budget` (its `max_required_samples`, decisions/async_pools.py);
at each weight sync the trainer resets it to the groups still queued, in flight or in its hands
(`reset_staleness`, verl's :605). The queue itself holds at most `capacity` finished groups (verl's
max_queue_size). A chunk is cut to the room left, so exactly `budget` groups can start a version.
With `limit` the buffer deals that many prompts in the whole run (verl's total_rollout_steps) and
then reports `exhausted` once everything dealt has been taken.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Dict, List, Optional
from verl_lite.data.dataset import BatchSampler


class ChunkBuffer:
    def __init__(self, n_prompts: int, batch_size: int, seed: int, shuffle: bool, capacity_groups: int,
                 chunk_groups: int, sampler_state: Optional[Dict[str, Any]] = None, budget: Optional[int] = None,
                 limit: Optional[int] = None, dealt: int = 0):
        if chunk_groups < 1 or capacity_groups < 1:
            raise ValueError(f"queue capacity {capacity_groups} groups and chunks of {chunk_groups} groups must be >= 1")
        self.sampler = BatchSampler(n_prompts, batch_size, seed, shuffle)
        self.pending: List[int] = []
        if sampler_state:
            self.sampler.load_state_dict(sampler_state["sampler"])
            self.pending = list(sampler_state.get("pending", []))
        self.capacity, self.chunk_groups = capacity_groups, chunk_groups
        self.budget = capacity_groups if budget is None else int(budget)
        self.limit, self.dealt = limit, int(dealt)
        self.items: collections.deque = collections.deque()
        self.held = 0  # groups in self.items
        self.reserved = 0  # groups being generated
        self.staleness = 0  # verl's staleness_samples: started this version + carried over at the last sync
        self.serial = 0
        self.closed = False
        self._cond: Optional[asyncio.Condition] = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created on the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    def _next_indices(self, count: int) -> List[int]:
        while len(self.pending) < count:
            batch = self.sampler.next_batch()
            if batch is None:  # end of an epoch: the sampler moved to the next one
                batch = self.sampler.next_batch()
            self.pending.extend(batch)
        out, self.pending = self.pending[:count], self.pending[count:]
        return out

    def _room(self) -> int:
        """Groups the next chunk may have: verl's pause rules (fully_async_rollouter.py:1147, :1155)."""
        left = min(self.chunk_groups, self.budget - self.staleness, self.capacity - self.held - self.reserved)
        if self.limit is not None:
            left = min(left, self.limit - self.dealt)
        return left

    async def reserve(self, timeout: float) -> Optional[Dict[str, Any]]:
        """Prompt indices of the next chunk once it has room; None on timeout (or when every prompt of
        `limit` is dealt), {"closed": True} when closed."""
        cond = self._condition()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: self.closed or self._room() > 0), timeout)
            except asyncio.TimeoutError:
                return None
            if self.closed:
                return {"closed": True}
            groups = self._room()
            self.reserved += groups
            self.staleness += groups
            self.dealt += groups
            self.serial += 1
            return {"indices": self._next_indices(groups), "serial": self.serial}

    async def put(self, chunk: Dict[str, Any], groups: int) -> None:
        cond = self._condition()
        async with cond:
            self.items.append((chunk, groups))
            self.held += groups
            self.reserved -= groups
            cond.notify_all()

    def _exhausted(self) -> bool:
        return self.limit is not None and self.dealt >= self.limit and not self.items and not self.reserved

    async def get(self, timeout: float) -> Optional[Dict[str, Any]]:
        """{"chunk", "groups", "depth_chunks", "depth_groups"} (depth after taking it), None on timeout,
        {"exhausted": True} when the run's `limit` prompts are all dealt and taken."""
        cond = self._condition()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: self.closed or bool(self.items) or self._exhausted()),
                                       timeout)
            except asyncio.TimeoutError:
                return None
            if not self.items:
                return {"exhausted": True} if self._exhausted() else None
            chunk, groups = self.items.popleft()
            self.held -= groups
            cond.notify_all()
            return {"chunk": chunk, "groups": groups, "depth_chunks": len(self.items), "depth_groups": self.held}

    async def reset_staleness(self, carried: int = 0) -> int:
        """At a weight sync: what is queued, in flight, or taken but not yet trained on (`carried`, the
        trainer's leftovers) was generated with older weights and counts against the new version's budget."""
        cond = self._condition()
        async with cond:
            self.staleness = self.held + self.reserved + int(carried)
            cond.notify_all()
            return self.staleness

    async def close(self) -> None:
        cond = self._condition()
        async with cond:
            self.closed = True
            cond.notify_all()

    def depth(self) -> Dict[str, int]:
        return {"chunks": len(self.items), "groups": self.held, "reserved": self.reserved, "capacity": self.capacity,
                "staleness": self.staleness, "budget": self.budget, "dealt": self.dealt}

    def sampler_state(self) -> Dict[str, Any]:
        """Where the prompt order stands (ahead of training by what is queued or being generated)."""
        return {"sampler": self.sampler.state_dict(), "pending": list(self.pending)}
