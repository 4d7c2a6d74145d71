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
import logging
import os
import threading
import time

log = logging.getLogger(__name__)

DEFAULT_DRAIN_SECONDS = 30.0
# After the drain, unloading gets this long before the watchdog ends the process.
UNLOAD_MARGIN_S = 15.0
EXIT_CODE_WATCHDOG = 3


class _Served:
    """One model's part of the requests in flight."""

    __slots__ = ("count", "answered", "inside_s", "since")

    def __init__(self, now: float) -> None:
        self.count = 0
        self.answered = 0  # ever, with a result
        self.inside_s = 0.0  # seconds its requests spent inside, ever (count's integral)
        self.since = now

    def tally(self, now: float) -> None:
        self.inside_s += self.count * (now - self.since)
        self.since = now


class InFlight:
    """The inference requests being served now, and for the shedder's admitted limit,
    what each model's cost: answers and time inside (a cheap model's and a slow one's
    mixed would tell neither's service time)."""

    def __init__(self) -> None:
        self.count = 0
        self._models: dict[str, _Served] = {}
        self._idle: asyncio.Event | None = None  # made on first use, on the serving loop

    def served(self) -> dict[str, tuple[int, float]]:
        """Per model: (requests answered, seconds they and those in flight spent inside)
        so far."""
        now = time.monotonic()
        for model in self._models.values():
            model.tally(now)
        return {name: (m.answered, m.inside_s) for name, m in self._models.items()}

    def enter(self, model: str = "") -> None:
        served = self._models.get(model)
        now = time.monotonic()
        if served is None:
            served = self._models[model] = _Served(now)
        served.tally(now)
        served.count += 1
        self.count += 1

    def leave(self, model: str = "", answered: bool = True) -> None:
        """One request to `model` is over; `answered`: with a result, not an error (a
        request that failed fast says nothing of how long serving takes)."""
        served = self._models[model]
        served.tally(time.monotonic())
        served.count -= 1
        served.answered += answered
        if not served.count and not served.answered:
            # (a name that never answered -- an unknown model's -- is not kept: any
            # client could grow the table)
            del self._models[model]
        self.count -= 1
        if self.count == 0 and self._idle is not None:
            self._idle.set()

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
