"""The model host asking every front process something and waiting for each one's
answer (a copy loaded, a region mapped), bounded in time; a front that goes away is
not waited for (it gets the state there is when it starts again)."""

from __future__ import annotations

import asyncio

from gateway.front_processes.host import FrontLink


class AskingFronts:
    def __init__(self, links: list[FrontLink]) -> None:
        self.links = links
        self._waits: dict[tuple[str, int, int], asyncio.Future] = {}  # (reply, key, front)

    def answered(self, reply: str, key: int, index: int, result: str | None = None) -> bool:
        """A front's answer (`result`: an error, or None); False if nobody waits for it."""
        waiter = self._waits.get((reply, key, index))
        if waiter is None or waiter.done():
            return False
        waiter.set_result(result)
        return True

    def detached(self, index: int) -> None:
        """A front is gone: nothing waits for its answers."""
        for (_, _, front), waiter in list(self._waits.items()):
            if front == index and not waiter.done():
                waiter.set_result(None)

    def broadcast(self, message: tuple) -> None:
        for link in self.links:
            if link.channel is not None and not link.channel.closed:
                link.channel.send(message)

    async def ask_all(self, message: tuple, reply: str, key: int, timeout_s: float) -> list[str]:
        """Send `message` to every front and wait for each one's `reply`; the errors,
        one per front that failed or did not answer in time."""
        loop = asyncio.get_running_loop()
        waiting: dict[int, asyncio.Future] = {}
        for link in self.links:
            if link.channel is None or link.channel.closed:
                continue  # when it starts again it gets what there is then
            waiter = waiting[link.index] = loop.create_future()
            self._waits[(reply, key, link.index)] = waiter
            link.channel.send(message)
        try:
            if waiting:
                await asyncio.wait(waiting.values(), timeout=timeout_s)
        finally:
            for index in waiting:
                self._waits.pop((reply, key, index), None)
        errors = []
        for index, waiter in waiting.items():
            if not waiter.done():
                errors.append(f"front {index} did not answer in {timeout_s:.0f} s")
            elif waiter.result() is not None:
                errors.append(f"front {index}: {waiter.result()}")
        return errors
