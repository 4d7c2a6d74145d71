"""Loads that wait for room: on demand, a load whose room is held by models busy with
requests (or still loading) waits for one of them to fall idle, rather than failing at
once, up to --model-load-timeout from its start.

Polling would miss the moment: under a closed loop a busy model is idle only between
answering its last request and the client's next one, a round trip. So the models say
when they fall idle (`ModelVersion.on_idle`), loads and unloads say when they end, and
every waiting load tries again then. A load reads `generation` before it tries, and
its wait returns at once if anything was said meanwhile, so no word is lost while it
was trying.
"""

from __future__ import annotations

import asyncio
import time


class RoomWaiters:
    def __init__(self) -> None:
        self._waiters: list[asyncio.Future] = []
        self.generation = 0  # how many times room may have come free

    def notify(self) -> None:
        """A model fell idle, a load ended, or a model unloaded: every waiting load tries
        to place again."""
        self.generation += 1
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def wait(self, seen: int, deadline: float) -> bool:
        """Until the next notify after generation `seen` (True; at once if one came
        already), or the monotonic `deadline` (False)."""
        if self.generation != seen:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await asyncio.wait_for(future, left)
            return True
        except TimeoutError:
            return False
        finally:
            if future in self._waiters:
                self._waiters.remove(future)
