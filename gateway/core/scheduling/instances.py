"""Thread instances: each backend object runs on a thread of the gateway's process.

(Instances in worker processes are in process_instance.py; both offer the same
`run`, `running`, `retired`, `down_reason`, `allocator`, `detach` and `close`.)

A dedicated thread per instance keeps a backend single-threaded from its own
point of view (no backend has to be thread-safe) while the event loop stays free.

Handing a run to that thread and back costs the event loop about 100-200 us on a
busy core, more than a small model's whole run; and on a single core a thread buys
no parallel compute, only the overlap of the loop's I/O with long runs. So a backend
that allows it (`Backend.inline_capable`) runs on the event loop itself while its
recent runs stay under INLINE_BELOW_NS (INLINE_BELOW_NS_SINGLE_CORE when the process
may use one core only), and on its thread as soon as they grow longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

# usable_cores: the process's affinity capped by its cgroup's CPU quota (re-exported).
from accel_base.cpu import lower_priority, usable_cores
from backends.base import Backend
from gateway.core.scheduling.rate_limiter import Needs, RateLimiter, run_limited

# Runs shorter than this (moving average) execute on the event loop instead of a thread.
INLINE_BELOW_NS = 100_000
# On a single core a thread buys no parallel compute, only overlap of the loop's I/O
# with the run: worth its hand-off cost for long runs only. Past a millisecond, an inline
# run delays every other request, overload refusals and health checks included.
INLINE_BELOW_NS_SINGLE_CORE = 1_000_000


def inline_limit_ns(single_core: bool) -> int:
    """Runs whose moving average is below this are waited for on the event loop itself."""
    return INLINE_BELOW_NS_SINGLE_CORE if single_core else INLINE_BELOW_NS


def moving_average(previous: float | None, run_ns: int) -> float:
    """The recent run time, updated with one more run (the first run sets it)."""
    return run_ns if previous is None else 0.8 * previous + 0.2 * run_ns


class Instance:
    def __init__(
        self,
        backend: Backend,
        name: str,
        cores: int | None = None,
        thread: ThreadPoolExecutor | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,  # times runs (tests give their own)
    ) -> None:
        self.backend = backend
        self._clock_ns = clock_ns
        self.name = name
        self._thread = thread or ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._inline_capable = backend.inline_capable()
        self._single_core = (cores if cores is not None else usable_cores()) == 1
        self.recent_run_ns: float | None = None  # moving average; None until the first run
        # The run on the thread, which goes on even if its caller is cancelled.
        self.running: asyncio.Future | None = None
        # A thread instance never goes down on its own (see ProcessInstance).
        self.retired = False
        self.down_reason: str | None = None
        # With Triton's rate limiter on: the server's limiter and what a run takes.
        self.limit: tuple[RateLimiter, Needs] | None = None

    @property
    def pid(self) -> int | None:
        return None  # a thread of the server's process

    @classmethod
    def load(cls, make_backend: Callable[[], Backend], name: str, nice: int) -> Instance:
        """Make the backend on the instance's own thread, `nice` steps below the event
        loop's priority (accel_base/cpu.py): the pools a framework starts from that thread
        (ONNX Runtime's, at session creation) inherit the lower priority."""
        thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=lower_priority, initargs=(nice,)
        )
        backend = None
        try:
            backend = thread.submit(make_backend).result()
            return cls(backend, name, thread=thread)
        except BaseException:
            if backend is not None:
                with contextlib.suppress(Exception):  # the first failure is the news
                    thread.submit(backend.unload).result()
            thread.shutdown(wait=True)
            raise

    @property
    def runs_inline(self) -> bool:
        """Whether the next run happens on the event loop, without suspending: the
        batcher's driver then runs the batch itself (an instance type that says True must
        never await in run())."""
        if not self._inline_capable or self.limit is not None:  # a limited run may wait
            return False
        limit = inline_limit_ns(self._single_core)
        return self.recent_run_ns is not None and self.recent_run_ns < limit

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> Coroutine[Any, Any, tuple[dict[str, np.ndarray], int]]:
        """The backend's outputs and the nanoseconds it took, to be awaited (no coroutine
        of its own: every run passes here)."""
        if self.limit is not None:  # rate_limiter.py: its resources first
            return run_limited(self, lambda: self._run(inputs, output_names))
        return self._run(inputs, output_names)

    async def _run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        if self.runs_inline:
            outputs, run_ns = self._timed_run(inputs, output_names)
        else:
            loop = asyncio.get_running_loop()
            self.running = loop.run_in_executor(self._thread, self._timed_run, inputs, output_names)
            # shield: a cancelled caller must not cancel the bookkeeping of a run in progress.
            outputs, run_ns = await asyncio.shield(self.running)
            # Ended, and its caller here: nothing for the pool to wait for (it checks the
            # future only while one is set: the common case is then a plain test).
            self.running = None
        self.recent_run_ns = moving_average(self.recent_run_ns, run_ns)
        return outputs, run_ns

    def _timed_run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        start = self._clock_ns()
        outputs = self.backend.run(inputs, output_names)
        return outputs, self._clock_ns() - start

    @property
    def allowed_batch_sizes(self) -> tuple[int, ...] | None:
        return self.backend.allowed_batch_sizes()

    def allocator(self) -> None:
        """No staging area: a batch is merged into ordinary arrays (see ProcessInstance)."""
        return None

    def attach(self) -> None:
        """Nothing to watch on the event loop (see ProcessInstance)."""

    def detach(self) -> None:
        """Nothing on the event loop to let go of before close()."""

    def close(self) -> None:
        """Unload the backend on its own thread (some frameworks insist), then stop the thread."""
        try:
            self._thread.submit(self.backend.unload).result()
        finally:
            self._thread.shutdown(wait=True)
