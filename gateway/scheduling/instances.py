"""Model instances: each backend object runs on a thread of its own.

A dedicated thread per instance keeps a backend single-threaded from its own
point of view (no backend has to be thread-safe) while the event loop stays free.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from backends.base import Backend


class Instance:
    def __init__(self, backend: Backend, name: str) -> None:
        self.backend = backend
        self.name = name
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        """The backend's outputs and the nanoseconds it took."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._timed_run, inputs, output_names)

    def _timed_run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        start = time.perf_counter_ns()
        outputs = self.backend.run(inputs, output_names)
        return outputs, time.perf_counter_ns() - start

    def close(self) -> None:
        """Unload the backend on its own thread (some frameworks insist), then stop the thread."""
        self._thread.submit(self.backend.unload).result()
        self._thread.shutdown(wait=True)


class InstancePool:
    """Idle instances handed out first come, first served."""

    def __init__(self, instances: list[Instance]) -> None:
        if not instances:
            raise ValueError("an instance pool needs at least one instance")
        self.instances = instances
        self._idle: deque[Instance] = deque(instances)
        self._waiters: deque[asyncio.Future[Instance]] = deque()

    async def acquire(self) -> Instance:
        if self._idle and not self._waiters:
            return self._idle.popleft()
        waiter: asyncio.Future[Instance] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            # A waiter cancelled after it was handed an instance must pass it on.
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())
            else:
                self._waiters.remove(waiter)
            raise

    def release(self, instance: Instance) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(instance)
                return
        self._idle.append(instance)

    def close(self) -> None:
        for instance in self.instances:
            instance.close()
