"""Load shedding at the fronts: refuse a share of new requests while the event loop is late.

Model queues (scheduling/admission.py) only see requests that reached them. When the
event loop itself is the bottleneck -- one core parsing HTTP and running small models
inline -- the backlog builds up before any of that, in socket buffers, and no queue
grows. The event loop's lag measures it: a timer due every few milliseconds runs as
late as a newly arrived request waits to be read (one turn of the loop reads every
ready socket, then runs what it read). While shedding, a share of new inference
requests is refused (503 / UNAVAILABLE, Retry-After) before its body is read or
decoded -- at the HTTP front before uvicorn builds a request or starts a task for it
(gateway/protocols/http/early_refusal.py), at the gRPC front before a call exists
(gateway/protocols/grpc/h2/server.py). A refusal costs a fraction of a served request, so the
loop catches up and admitted requests keep a short wait.

When to start: a loop that is late but no later turn after turn is serving a bounded
backlog -- a closed loop of clients, each waiting for its answer -- and refusing it would
only turn a benchmark's waits into errors. Arrivals that outrun the loop make each turn
longer than the last: shedding starts once the lag has grown by half over two ticks in
a row past the target, or at once when it passes ENTER_TARGETS targets. It also starts
when the lag stays past the target for LIMITED_TICKS ticks while the admitted limit
(below) refuses requests: the limit holds the backlog steady, so the lag no longer
grows, and the loop is still late from serving and refusing (at 27,000 calls a second,
the lag held at 5.5 targets for ten seconds with no share refused). It ends when the
controller has come back to refusing nothing with the loop on time.

How much: the share is a controller's output, not a fixed function of the lag. A
proportional part answers a sudden surge within a turn or two of the loop, and an
integral part settles on the share that holds the lag at the target whatever the excess
(at three times saturation most requests must be refused; at 1.2 times, few), so the
admitted wait does not grow with the overload. Like Envoy's admission control, the
refusal is probabilistic, so some traffic always gets through and keeps the measurement
honest. A controller updated once a tick is still too slow for a surge: the tick waits
for the very turn that reads the surge. So each decision also looks at the tick that is
due: overdue by more than OVERDUE_FROM targets now, the loop is at least that late, and
the request is refused with a share that grows with how late (all at OVERDUE_ALL).

The loop can be on time while requests still wait (a model on threads of the same core,
a thousand connections each with one request out): the fronts also admit at most
AdmittedLimit's count at once (gateway/operation/admitted_limit.py), a wait of LIMIT_WAIT_TARGETS
targets. Off with the rest when the target is 0: a user who sets a target asks for short
waits, even from a bounded backlog.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from gateway.core.scheduling.admission import Overloaded
from gateway.operation.admitted_limit import AdmittedLimit, Served

TICK_S = 0.002
# While no request came since the last tick and the loop is on time: fewer wake-ups. The
# first request to come wakes the watch at once (a surge that began during a 50 ms sleep
# went unseen for 60 ms, and the first second's refusals waited 11-13 ms at p99).
IDLE_TICK_S = 0.05
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
OVERDUE_FROM = 2.0  # targets a due tick is late by before requests are refused for it
OVERDUE_ALL = 4.0  # ... and by which every request is (up to MAX_REFUSED_SHARE)
GROWTH = 1.5  # a tick this many times later than the last: the loop falls behind
GROWING_TICKS = 2  # ... so many in a row past the target, and shedding starts
ENTER_TARGETS = 25.0  # a lag of so many targets starts it at once (a surge)
LIMITED_TICKS = 5  # ticks in a row past the target with the limit refusing: it starts
LIMIT_WAIT_TARGETS = 4.0
RETRY_AFTER_S = 1
REFUSAL = "the server is overloaded (more requests than it can answer soon); retry later"


class LoopShedder:
    def __init__(
        self,
        target_lag_s: float = DEFAULT_TARGET_LAG_S,
        draw: Callable[[], float] = random.random,
        busy: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        served: Callable[[], Served] | None = None,
    ) -> None:
        self.target_lag_s = target_lag_s
        # Whether other requests are being served: a loop that is late with none in
        # flight is slowed by something else (a model loading, a collection), and
        # refusing the only request would not help.
        self.busy = busy
        # Requests the fronts may hold admitted at once; `served`: the core's counters
        # of answers and seconds inside, per model (InFlight.served). None: no limit.
        self.limit = AdmittedLimit(LIMIT_WAIT_TARGETS * target_lag_s, served)
        self.lag_s = 0.0  # the loop's lateness at the last tick
        self._excess = 0.0  # the last tick's
        self.shedding = False  # started by a growing lag, ended by the controller
        self._growing = 0  # ticks in a row whose lag grew past the target
        self._limited = 0  # ticks in a row past the target with the limit refusing
        self.limit_refused = 0  # requests the admitted limit refused
        self._limit_refused_seen = 0  # ... as of the last tick
        self.integral = 0.0  # the controller's integral part, a share of requests
        self.share = 0.0  # of new requests to refuse now
        self._draw = draw
        self._clock = clock  # seconds, finer than a millisecond
        self.due = float("inf")  # when the next tick is due, on that clock
        self.refused = 0
        # Requests a front admitted and has not answered yet, counted by the fronts that
        # admit before a task exists (the HTTP protocol): in the turn of the loop that
        # reads them, none is in the core's count yet.
        self.pending = 0
        self._asked = False  # a request was asked about since the last tick
        self._idle_wait: asyncio.Future | None = None  # the watch's idle sleep

    @property
    def enabled(self) -> bool:
        return self.target_lag_s > 0

    def observe(self, late_s: float) -> None:
        """One tick's lateness: the share follows it."""
        before, self.lag_s = self.lag_s, max(late_s, 0.0)
        target = self.target_lag_s
        if target <= 0:
            return
        limited, self._limit_refused_seen = (
            self.limit_refused > self._limit_refused_seen,
            self.limit_refused,
        )
        if not self.shedding:
            growing = self.lag_s > target and self.lag_s >= GROWTH * before
            self._growing = self._growing + 1 if growing else 0
            self._limited = self._limited + 1 if limited and self.lag_s > target else 0
            if (
                self._growing < GROWING_TICKS
                and self._limited < LIMITED_TICKS
                and self.lag_s < ENTER_TARGETS * target
            ):
                return
            self.shedding = True
        excess = min(self.lag_s / target - 1.0, MAX_EXCESS)
        self.integral = min(max(self.integral + KI * excess, 0.0), MAX_REFUSED_SHARE)
        lasting, self._excess = min(excess, self._excess), excess
        self.share = min(self.integral + KP * max(lasting, 0.0), MAX_REFUSED_SHARE)
        if self.integral == 0.0 and self.lag_s <= target:
            self.shedding, self.share, self._excess = False, 0.0, 0.0
            self._growing = self._limited = 0

    def refusal_share(self) -> float:
        """The share of new requests to refuse now: the controller's, or more while the
        next tick is overdue."""
        if self.target_lag_s <= 0:
            return 0.0
        overdue = (self._clock() - self.due) / self.target_lag_s
        if overdue <= OVERDUE_FROM or not (self.shedding or overdue >= ENTER_TARGETS):
            return self.share
        now = (overdue - OVERDUE_FROM) / (OVERDUE_ALL - OVERDUE_FROM)
        return min(max(self.share, now), MAX_REFUSED_SHARE)

    def refuse(self, waiting: int = 0, counted: bool = False) -> bool:
        """Whether to refuse a new request now (counted when so); never when off.
        `waiting`: requests the asking front holds unanswered (the gRPC server's open
        unary calls), for fronts that do not count into `pending`; `counted`: the request
        asked about is in `pending` already."""
        if self.target_lag_s <= 0:  # off: nothing to measure, nothing refused
            return False
        if not self._asked:
            self._asked = True
            self._wake()  # the watch ticks from now on
        others = self.pending + waiting - counted
        if others >= self.limit.value:
            self.refused += 1
            self.limit_refused += 1
            return True
        share = self.refusal_share()
        if share > 0.0 and self._draw() < share and (others > 0 or self.busy()):
            self.refused += 1
            return True
        return False

    def check(self, counted: bool = False) -> None:
        """Raise Overloaded for a request to refuse (never when off); `counted`: it is
        in `pending` already."""
        if self.target_lag_s > 0 and self.refuse(counted=counted):  # (off: no call)
            raise Overloaded(REFUSAL, retry_after_s=RETRY_AFTER_S)

    async def watch(self) -> None:
        """Measure the loop's lag for as long as the server runs (a task on its loop).

        On the shedder's own clock, not the loop's: uvloop's counts whole milliseconds,
        and a target of 1 ms read through it saw lags of 0, 1 or 2 ms and nothing
        between. Its timers can fire up to a millisecond early, so while requests are in
        flight the lag is also one turn of the loop, timed: from the tick to the step
        after it, the loop reads and runs every socket that is ready -- what a request
        arriving now waits before it is read (and while it does, that turn is how
        overdue the loop is)."""
        clock = self._clock
        loop = asyncio.get_running_loop()
        while True:
            working = self.pending > 0 or self.busy() or self._asked
            self._asked = False
            self.limit.follow(clock(), working)
            calm = self.share == 0 and self.lag_s < TICK_S / 4
            if calm and not working:
                await self._sleep_idle(loop)
                continue
            due = self.due = clock() + TICK_S
            await asyncio.sleep(TICK_S)
            woke = clock()
            late = woke - due
            if working:
                self.due = min(due, woke)  # (a timer can fire early; a late one stays late)
                await asyncio.sleep(0)  # the next turn of the loop
                late = max(late, clock() - woke)
            self.observe(late)

    async def _sleep_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Sleep IDLE_TICK_S, or until a request is asked about. The idle tick keeps a
        real due time: a stall while idle (a collection, a load) is measured, and the
        requests it piled up can be refused as overdue in the turn that reads them."""
        due = self.due = self._clock() + IDLE_TICK_S
        self._idle_wait = loop.create_future()
        timer = loop.call_later(IDLE_TICK_S, self._wake)
        try:
            await self._idle_wait
        finally:
            timer.cancel()
            self._idle_wait = None
        self.observe(max(self._clock() - due, 0.0))  # woken early by a request: on time

    def _wake(self) -> None:
        if self._idle_wait is not None and not self._idle_wait.done():
            self._idle_wait.set_result(None)
