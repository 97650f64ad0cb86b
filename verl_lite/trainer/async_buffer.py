"""The bounded queue between the rollout replicas and the trainer, run as one async Ray actor.

It also deals out the prompts, so several replicas never generate the same group twice and the
prompt order can be checkpointed. A replica first `reserve`s a chunk (it gets prompt indices and
room in the queue), generates it, then `put`s it; the trainer `get`s chunks. The capacity counts
groups held *and* groups being generated, so a replica never generates what has no room: a full
queue stops generation instead of letting finished samples age behind it.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Dict, List, Optional
from verl_lite.data.dataset import BatchSampler


class ChunkBuffer:
    def __init__(self, n_prompts: int, batch_size: int, seed: int, shuffle: bool, capacity_groups: int,
                 chunk_groups: int, sampler_state: Optional[Dict[str, Any]] = None):
        if chunk_groups < 1 or capacity_groups < chunk_groups:
            raise ValueError(f"queue capacity {capacity_groups} groups cannot hold a chunk of {chunk_groups} groups")
        self.sampler = BatchSampler(n_prompts, batch_size, seed, shuffle)
        self.pending: List[int] = []
        if sampler_state:
            self.sampler.load_state_dict(sampler_state["sampler"])
            self.pending = list(sampler_state.get("pending", []))
        self.capacity, self.chunk_groups = capacity_groups, chunk_groups
        self.items: collections.deque = collections.deque()
        self.held = 0  # groups in self.items
        self.reserved = 0  # groups being generated
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

    async def reserve(self, timeout: float) -> Optional[Dict[str, Any]]:
        """Prompt indices of the next chunk once it has room; None on timeout, {"closed": True} when closed."""
        cond = self._condition()
        async with cond:
            try:
                room = lambda: self.closed or self.held + self.reserved + self.chunk_groups <= self.capacity  # noqa: E731
                await asyncio.wait_for(cond.wait_for(room), timeout)
            except asyncio.TimeoutError:
                return None
            if self.closed:
                return {"closed": True}
            self.reserved += self.chunk_groups
            self.serial += 1
            return {"indices": self._next_indices(self.chunk_groups), "serial": self.serial}

    async def put(self, chunk: Dict[str, Any], groups: int) -> None:
        cond = self._condition()
        async with cond:
            self.items.append((chunk, groups))
            self.held += groups
            self.reserved -= self.chunk_groups
            cond.notify_all()

    async def get(self, timeout: float) -> Optional[Dict[str, Any]]:
        """{"chunk", "groups", "depth_chunks", "depth_groups"} (depth after taking it), or None on timeout."""
        cond = self._condition()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: self.closed or bool(self.items)), timeout)
            except asyncio.TimeoutError:
                return None
            if not self.items:
                return None
            chunk, groups = self.items.popleft()
            self.held -= groups
            cond.notify_all()
            return {"chunk": chunk, "groups": groups, "depth_chunks": len(self.items), "depth_groups": self.held}

    async def close(self) -> None:
        cond = self._condition()
        async with cond:
            self.closed = True
            cond.notify_all()

    def depth(self) -> Dict[str, int]:
        return {"chunks": len(self.items), "groups": self.held, "reserved": self.reserved, "capacity": self.capacity}

    def sampler_state(self) -> Dict[str, Any]:
        """Where the prompt order stands (ahead of training by what is queued or being generated)."""
        return {"sampler": self.sampler.state_dict(), "pending": list(self.pending)}
