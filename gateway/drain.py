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


class InFlight:
    """The inference requests being served now."""

    def __init__(self) -> None:
        self.count = 0
        # For the shedder: requests answered, and seconds spent by requests in flight
        # (the integral of `count`), ever.
        self.answered = 0
        self.occupied_s = 0.0
        self._since = time.monotonic()
        self._idle: asyncio.Event | None = None  # made on first use, on the serving loop

    def _tally(self) -> None:
        now = time.monotonic()
        self.occupied_s += self.count * (now - self._since)
        self._since = now

    def served(self) -> tuple[int, float]:
        """(requests answered, seconds they and those in flight spent inside) so far."""
        self._tally()
        return self.answered, self.occupied_s

    def enter(self) -> None:
        self._tally()
        self.count += 1

    def leave(self, answered: bool = True) -> None:
        """One request is over; `answered`: with a result, not an error (a request
        that failed fast says nothing of how long serving takes)."""
        self._tally()
        self.count -= 1
        self.answered += answered
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
