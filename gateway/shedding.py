"""Load shedding at the fronts: refuse a share of new requests while the event loop is late.

Model queues (scheduling/admission.py) only see requests that reached them. When the
event loop itself is the bottleneck -- one core parsing HTTP and running small models
inline -- the backlog builds up before any of that, in socket buffers, and no queue
grows. The event loop's lag measures it: a timer due every few milliseconds runs as
late as a newly arrived request waits to be read. While the smoothed lag is over the
target, each new inference request is refused (503 / UNAVAILABLE, Retry-After) with a
probability that grows with the excess, before its body is read or decoded; a refusal
costs a fraction of a served request, so the loop catches up and admitted requests keep
a short wait. Like Envoy's admission control, the refusal is probabilistic, so some
traffic always gets through and keeps the measurement honest; unlike it, it reacts to
the loop's lag, which rises before any request has failed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from gateway.scheduling.admission import Overloaded

TICK_S = 0.002
IDLE_TICK_S = 0.05  # while nothing is in flight and the loop is on time: fewer wake-ups
DEFAULT_TARGET_LAG_S = 0.050  # with --shed-lag-ms and no value
MAX_REFUSED_SHARE = 0.95


class LoopShedder:
    def __init__(
        self,
        target_lag_s: float = DEFAULT_TARGET_LAG_S,
        draw: Callable[[], float] = random.random,
        busy: Callable[[], bool] = lambda: True,
    ) -> None:
        self.target_lag_s = target_lag_s
        # Whether other requests are being served: a loop that is late with none in
        # flight is slowed by something else (a model loading, a collection), and
        # refusing the only request would not help.
        self.busy = busy
        self.lag_s = 0.0  # smoothed lateness of the loop
        self._draw = draw
        self.refused = 0

    def observe(self, late_s: float) -> None:
        # Smoothed over some ten ticks: a lone stall (a model loading on another thread,
        # holding the GIL for a while) must not refuse requests; lasting overload does.
        self.lag_s = 0.9 * self.lag_s + 0.1 * max(late_s, 0.0)

    def refusal_share(self) -> float:
        """The share of new requests to refuse now: 0 up to the target lag, growing to
        MAX_REFUSED_SHARE at three times the target."""
        if self.target_lag_s <= 0:
            return 0.0
        excess = (self.lag_s - self.target_lag_s) / (2 * self.target_lag_s)
        return min(max(excess, 0.0), MAX_REFUSED_SHARE)

    def check(self) -> None:
        """Raise Overloaded for the share of requests to refuse (never when off)."""
        if self.target_lag_s <= 0:
            return
        share = self.refusal_share()
        if share > 0.0 and self.busy() and self._draw() < share:
            self.refused += 1
            raise Overloaded(
                f"the server is overloaded (its event loop runs {self.lag_s * 1e3:.1f} ms "
                "late); retry later",
                retry_after_s=1,
            )

    async def watch(self) -> None:
        """Measure the loop's lag for as long as the server runs (a task on its loop)."""
        loop = asyncio.get_running_loop()
        while True:
            tick = TICK_S if self.busy() or self.lag_s > TICK_S / 4 else IDLE_TICK_S
            due = loop.time() + tick
            await asyncio.sleep(tick)
            self.observe(loop.time() - due)
