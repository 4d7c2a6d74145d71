"""The dynamic batcher's queue: priority levels, each with Triton's queue policy.

Time is always passed in (`now`, seconds on any monotonic clock), so the queue is
tested with a fake clock and driven by the real one in production.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Triton's ModelQueuePolicy for one priority level."""

    delay_on_timeout: bool = False  # timeout_action DELAY (else REJECT)
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: no per-level limit (the gateway's own bound still holds)

    @classmethod
    def from_proto(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )

    def timeout_us(self, requested: int | None) -> int:
        """A request may shorten the default timeout when the policy allows, never lengthen it."""
        if requested is None or not self.allow_timeout_override or requested <= 0:
            return self.default_timeout_us
        if self.default_timeout_us == 0:
            return requested
        return min(requested, self.default_timeout_us)


@dataclass(eq=False, slots=True)
class Pending:
    """One request waiting for a batch."""

    feed: dict[str, np.ndarray]
    output_names: list[str]
    rows: int
    key: tuple  # batch.merge_key of feed
    priority: int  # 1 is the highest
    arrival: float
    deadline: float | None  # when its queue timeout expires
    sequence: int  # arrival order
    future: asyncio.Future | None = None
    delayed: bool = False  # timed out under DELAY: served after everything else
    context: Any = None  # what the driver needs to answer it (request, timings)
    count: int = 1  # the client requests it stands for (a front's bundle of them)


@dataclass
class RequestQueue:
    levels: int  # priority levels, >= 1
    default_level: int
    policies: dict[int, QueuePolicy]  # per level
    max_total: int  # the gateway's bound over all levels
    _queues: dict[int, deque[Pending]] = field(init=False)
    _delayed: deque[Pending] = field(init=False)
    _next_sequence: int = field(default=0, init=False)
    rows: int = field(default=0, init=False)  # rows of every queued request
    _timeouts: bool = field(default=False, init=False)  # can any request time out at all?

    def __post_init__(self) -> None:
        self._queues = {level: deque() for level in range(1, self.levels + 1)}
        self._delayed = deque()
        self.requests = 0  # client requests queued, a bundle counted as its members
        # The same per level, outside the DELAY queue (what max_queue_size bounds).
        self._level_requests = dict.fromkeys(self._queues, 0)
        self._timeouts = any(
            p.default_timeout_us or p.allow_timeout_override for p in self.policies.values()
        )

    @property
    def can_time_out(self) -> bool:
        """Whether a queued request may ever time out (its policy has a timeout)."""
        return self._timeouts

    @classmethod
    def from_config(cls, batching: mc.ModelDynamicBatching, max_total: int) -> RequestQueue:
        levels = max(batching.priority_levels, 1)
        default_level = batching.default_priority_level or (levels + 1) // 2
        if not 1 <= default_level <= levels:
            raise InvalidArgument(
                f"default_priority_level {default_level} is outside 1..{levels} (priority_levels)"
            )
        default = QueuePolicy.from_proto(batching.default_queue_policy)
        policies = {level: default for level in range(1, levels + 1)}
        for level, policy in batching.priority_queue_policy.items():
            if not 1 <= level <= levels:
                raise InvalidArgument(
                    f"priority_queue_policy names level {level}, outside 1..{levels}"
                )
            policies[level] = QueuePolicy.from_proto(policy)
        return cls(levels, default_level, policies, max_total)

    def __len__(self) -> int:
        """Client requests queued (what max_queue_size bounds)."""
        return self.requests

    def level_for(self, requested: int | None) -> int:
        """Priority 0 or none means the default level, as in Triton."""
        if not requested:
            return self.default_level
        if not 1 <= requested <= self.levels:
            raise InvalidArgument(
                f"priority {requested} is outside 1..{self.levels} (the model's priority_levels)"
            )
        return requested

    def push(
        self,
        feed: dict[str, np.ndarray],
        output_names: list[str],
        rows: int,
        key: tuple,
        now: float,
        priority: int | None = None,
        timeout_us: int | None = None,
        count: int = 1,
    ) -> Pending:
        if rows < 1:  # a 0-row request still takes a row's place: `rows` 0 means empty
            raise ValueError(f"a queued request has at least one row, not {rows}")
        level = self.level_for(priority)
        policy = self.policies[level]
        queue = self._queues[level]
        if self.requests + count > self.max_total:
            raise Unavailable(f"the queue is full ({self.max_total} requests pending); retry later")
        if policy.max_queue_size and self._level_requests[level] + count > policy.max_queue_size:
            raise Unavailable(
                f"the queue of priority level {level} is full (max_queue_size "
                f"{policy.max_queue_size}); retry later"
            )
        timeout = policy.timeout_us(timeout_us)
        pending = Pending(
            feed, output_names, rows, key, level, now,
            now + timeout / 1e6 if timeout else None, self._next_sequence, count=count,
        )  # fmt: skip
        self._next_sequence += 1
        queue.append(pending)
        self.rows += rows
        self.requests += count
        self._level_requests[level] += count
        return pending

    def in_order(self) -> Iterator[Pending]:
        """Highest priority first, FIFO within a level, timed-out DELAY requests last."""
        # The levels were made in order (1 first), and a chain is a generator's cost at
        # C speed: the planner walks the queue twice a batch.
        return itertools.chain(*self._queues.values(), self._delayed)

    def head(self) -> Pending | None:
        for queue in self._queues.values():
            if queue:
                return queue[0]
        return self._delayed[0] if self._delayed else None

    def remove(self, pending: Pending) -> bool:
        """Take a request out (batched or cancelled); False if it was not queued."""
        queue = self._delayed if pending.delayed else self._queues[pending.priority]
        try:
            queue.remove(pending)
        except ValueError:
            return False
        self.rows -= pending.rows
        self.requests -= pending.count
        if not pending.delayed:
            self._level_requests[pending.priority] -= pending.count
        return True

    def expire(self, now: float) -> list[Pending]:
        """Apply timeouts: REJECT ones are removed and returned, DELAY ones move last."""
        rejected: list[Pending] = []
        if not self._timeouts:
            return rejected
        for level, queue in self._queues.items():
            policy = self.policies[level]
            expired = [p for p in queue if p.deadline is not None and p.deadline <= now]
            for pending in expired:
                queue.remove(pending)
                self._level_requests[level] -= pending.count
                if policy.delay_on_timeout:
                    pending.delayed = True
                    self._delayed.append(pending)
                else:
                    rejected.append(pending)
                    self.rows -= pending.rows
                    self.requests -= pending.count
        return rejected

    def next_deadline(self) -> float | None:
        if not self._timeouts:
            return None
        deadlines = [p.deadline for q in self._queues.values() for p in q if p.deadline is not None]
        return min(deadlines, default=None)
