"""Graceful drain: what the server needs to stop without losing a request.

On SIGTERM or SIGINT the server turns unready at once and answers new inference
requests with 503 while the listeners stay open (a client on a kept-alive connection
gets an answer, not a reset), waits for the requests in flight, then closes the
listeners and unloads the models, all within `--drain-seconds`. A watchdog ends the
process when that time (plus a margin for unloading) has passed, whatever state a
child process or a library's pool is in.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections.abc import Awaitable
from typing import TypeVar

log = logging.getLogger(__name__)

DEFAULT_DRAIN_SECONDS = 30.0
# After the drain, unloading gets this long before the watchdog ends the process.
UNLOAD_MARGIN_S = 15.0
EXIT_CODE_WATCHDOG = 3
T = TypeVar("T")


class _Served:
    """One model's part of the requests in flight."""

    __slots__ = ("count", "answered", "inside_s", "since", "epoch")

    def __init__(self, now: float, epoch: int) -> None:
        self.count = 0
        self.answered = 0  # ever, with a result
        self.inside_s = 0.0  # seconds its requests spent inside, ever (count's integral)
        self.since = now
        self.epoch = epoch  # a name's counters made anew start from 0 again

    def tally(self, now: float) -> None:
        self.inside_s += self.count * (now - self.since)
        self.since = now


class InFlight:
    """The inference requests being served now, and for the shedder's admitted limit,
    what each model's cost: answers and time inside (a cheap model's and a slow one's
    mixed would tell neither's service time).

    A request is counted under the name it came with: `enter` gives the token that
    `leave` takes (a router renames the request it passes on)."""

    def __init__(self, per_model: bool = True) -> None:
        self.count = 0
        # Per-model answers and time inside are for the shedder's admitted limit only:
        # without it, a request costs a count up and down.
        self.per_model = per_model
        self._models: dict[str, _Served] = {}
        self._epochs = itertools.count()
        self._idle: asyncio.Event | None = None  # made on first use, on the serving loop

    def served(self) -> dict[str, tuple[int, int, float]]:
        """Per model: (its counters' epoch, requests answered, seconds they and those in
        flight spent inside) so far."""
        now = time.monotonic()
        for model in self._models.values():
            model.tally(now)
        return {name: (m.epoch, m.answered, m.inside_s) for name, m in self._models.items()}

    def enter(self, model: str | None) -> tuple[str, _Served] | None:
        """One request to `model` begins (None: a call made inside another request, a
        Python model's, counted for the drain only: its time is its caller's)."""
        self.count += 1
        if model is None or not self.per_model:
            return None
        served = self._models.get(model)
        now = time.monotonic()
        if served is None:
            served = self._models[model] = _Served(now, next(self._epochs))
        served.tally(now)
        served.count += 1
        return model, served

    def leave(self, token: tuple[str, _Served] | None, answered: bool) -> None:
        """The request `enter` gave `token` for is over; `answered`: with a result, not
        an error (a request that failed fast says nothing of how long serving takes)."""
        self.count -= 1
        if self.count == 0 and self._idle is not None:
            self._idle.set()
        if token is None:
            return
        model, served = token
        served.tally(time.monotonic())
        served.count -= 1
        served.answered += answered
        if not served.count and not served.answered and self._models.get(model) is served:
            # (a name that never answered -- an unknown model's -- is not kept: any
            # client could grow the table)
            del self._models[model]

    async def serve(self, model: str | None, call: Awaitable[T]) -> T:
        """`call`, counted in flight under `model` while it runs."""
        token = self.enter(model)
        answered = False
        try:
            result = await call
            answered = True
            return result
        finally:
            self.leave(token, answered)

    async def wait_idle(self, timeout_s: float) -> bool:
        """Whether every request in flight finished within `timeout_s`."""
        if self.count == 0:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), max(timeout_s, 0.0))
        except TimeoutError:
            return False
        finally:
            self._idle = None
        return True


def start_exit_watchdog(seconds: float) -> threading.Timer:
    """End the process after `seconds` unless it has exited by then (a daemon thread, so
    it runs even while the event loop is stuck)."""

    def expire() -> None:
        log.error("the server did not stop within %.0f s; exiting now", seconds)
        logging.shutdown()
        os._exit(EXIT_CODE_WATCHDOG)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer
