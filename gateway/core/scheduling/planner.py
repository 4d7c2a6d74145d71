"""When to send a batch and which requests go in it: Triton's dynamic batching rules.

Called whenever an instance is free. Pure: it reads the queue and the time and
returns a decision; the driver (dynamic.py) carries it out.

- The batch window opens at the arrival of the oldest request that would go first
  and lasts `max_queue_delay`.
- A batch goes at once when it reaches max_batch_size, or when the queue can fill
  a preferred batch size (the largest one it can), or when the window is over
  (then with every compatible request, up to max_batch_size), or when waiting cannot
  help: no other request is expected before the window ends (window.py; unless the
  rules say `adaptive=False`, Triton's rule).
- Requests go in priority order; those whose inputs cannot be concatenated with the
  first one's (other trailing dimensions) wait for a batch of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.scheduling.queue import Pending, RequestQueue
from gateway.core.scheduling.window import worth_waiting


@dataclass(frozen=True, slots=True)
class BatchingRules:
    max_batch_size: int
    preferred_sizes: tuple[int, ...] = ()
    max_queue_delay_s: float = 0.0
    adaptive: bool = True  # send a partial batch at once when no company is expected


@dataclass(frozen=True, slots=True)
class Send:
    requests: list[Pending]

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.requests)


@dataclass(frozen=True, slots=True)
class WaitUntil:
    time: float | None  # None: until something new arrives


def plan(
    queue: RequestQueue, now: float, rules: BatchingRules, arrivals_per_s: float = math.inf
) -> Send | WaitUntil:
    """`arrivals_per_s`: how fast requests arrive while others are pending (window.py)."""
    head = queue.head()
    if head is None:
        return WaitUntil(None)
    chosen: list[Pending] = []
    rows = 0
    sizes_reached: list[int] = []  # cumulative rows after each chosen request
    for pending in queue.in_order():
        if pending.key != head.key or rows + pending.rows > rules.max_batch_size:
            continue
        chosen.append(pending)
        rows += pending.rows
        sizes_reached.append(rows)
        if rows == rules.max_batch_size:
            return Send(chosen)
    preferred = _largest_preferred(sizes_reached, rules.preferred_sizes)
    if preferred:
        return Send(chosen[: sizes_reached.index(preferred) + 1])
    window_end = head.arrival + rules.max_queue_delay_s
    if now >= window_end:
        return Send(chosen)
    if rules.adaptive and not worth_waiting(arrivals_per_s, window_end - now):
        return Send(chosen)
    return WaitUntil(window_end)


def _largest_preferred(sizes_reached: Sequence[int], preferred: Sequence[int]) -> int | None:
    reachable = set(sizes_reached).intersection(preferred)
    return max(reachable) if reachable else None
