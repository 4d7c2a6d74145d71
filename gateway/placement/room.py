"""Loads that wait for room: on demand, a load whose room is held by models busy with
requests waits for one of them to fall idle (or for a model to unload), rather than
failing at once, up to --model-load-timeout from its start.

Polling would miss the moment: under a closed loop a busy model is idle only between
answering its last request and the client's next one, a round trip. So the models say
when they fall idle (`ModelVersion.on_idle`), and every waiting load tries again then.
"""

from __future__ import annotations

import asyncio
import time


class RoomWaiters:
    def __init__(self) -> None:
        self._waiters: list[asyncio.Future] = []

    def notify(self) -> None:
        """A model fell idle or unloaded: every waiting load tries to place again."""
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def wait(self, deadline: float) -> bool:
        """Until the next notify (True) or the monotonic `deadline` (False)."""
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

    def __len__(self) -> int:
        return len(self._waiters)
