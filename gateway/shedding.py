"""Load shedding at the fronts: refuse a share of new requests while the event loop is late.

Model queues (scheduling/admission.py) only see requests that reached them. When the
event loop itself is the bottleneck -- one core parsing HTTP and running small models
inline -- the backlog builds up before any of that, in socket buffers, and no queue
grows. The event loop's lag measures it: a timer due every few milliseconds runs as
late as a newly arrived request waits to be read (one turn of the loop reads every
ready socket, then runs what it read). While the lag is over the target, a share of
new inference requests is refused (503 / UNAVAILABLE, Retry-After) before its body is
read or decoded -- at the HTTP front before uvicorn builds a request or starts a task
for it (gateway/http/timeouts.py). A refusal costs a fraction of a served request, so
the loop catches up and admitted requests keep a short wait.

The share is a controller's output, not a fixed function of the lag: a proportional part
answers a sudden surge within a turn or two of the loop, and an integral part settles
on the share that holds the lag at the target whatever the excess (at three times
saturation most requests must be refused; at 1.2 times, few), so the admitted wait does
not grow with the overload. Like Envoy's admission control, the refusal is
probabilistic, so some traffic always gets through and keeps the measurement honest.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from gateway.scheduling.admission import Overloaded

TICK_S = 0.002
IDLE_TICK_S = 0.05  # while nothing is in flight and the loop is on time: fewer wake-ups
DEFAULT_TARGET_LAG_S = 0.050  # with --shed-lag-ms and no value
MAX_REFUSED_SHARE = 0.98
# The controller, per tick, on the excess (lag / target - 1, at most MAX_EXCESS): the
# share is KP * excess (the lesser of the last two ticks', so that a lone stall -- a
# collection, a model loading on another thread -- refuses little) plus the integral of
# KI * excess. At a 2 ms tick the integral falls from its top to 0 within some 100 ms of
# the lag going.
KP = 0.2
KI = 0.02
MAX_EXCESS = 4.0
RETRY_AFTER_S = 1
REFUSAL = "the server is overloaded (its event loop runs late); retry later"


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
        self.lag_s = 0.0  # the loop's lateness at the last tick
        self._excess = 0.0  # the last tick's
        self.integral = 0.0  # the controller's integral part, a share of requests
        self.share = 0.0  # of new requests to refuse now
        self._draw = draw
        self.refused = 0
        # Requests a front admitted and has not answered yet, counted by the fronts that
        # admit before a task exists (the HTTP protocol): in the turn of the loop that
        # reads them, none is in the core's count yet.
        self.pending = 0

    @property
    def enabled(self) -> bool:
        return self.target_lag_s > 0

    def observe(self, late_s: float) -> None:
        """One tick's lateness: the share follows it."""
        self.lag_s = max(late_s, 0.0)
        if self.target_lag_s <= 0:
            return
        excess = min(self.lag_s / self.target_lag_s - 1.0, MAX_EXCESS)
        self.integral = min(max(self.integral + KI * excess, 0.0), MAX_REFUSED_SHARE)
        lasting, self._excess = min(excess, self._excess), excess
        self.share = min(self.integral + KP * max(lasting, 0.0), MAX_REFUSED_SHARE)

    def refusal_share(self) -> float:
        """The share of new requests to refuse now."""
        return self.share if self.target_lag_s > 0 else 0.0

    def refuse(self) -> bool:
        """Whether to refuse a new request now (counted when so); never when off."""
        if (
            self.share > 0.0
            and self.target_lag_s > 0
            and self._draw() < self.share
            and (self.pending > 0 or self.busy())
        ):
            self.refused += 1
            return True
        return False

    def check(self) -> None:
        """Raise Overloaded for the share of requests to refuse (never when off)."""
        if self.refuse():
            raise Overloaded(REFUSAL, retry_after_s=RETRY_AFTER_S)

    async def watch(self) -> None:
        """Measure the loop's lag for as long as the server runs (a task on its loop)."""
        loop = asyncio.get_running_loop()
        while True:
            calm = self.share == 0 and self.lag_s < TICK_S / 4
            tick = IDLE_TICK_S if calm and not (self.pending or self.busy()) else TICK_S
            due = loop.time() + tick
            await asyncio.sleep(tick)
            self.observe(loop.time() - due)
