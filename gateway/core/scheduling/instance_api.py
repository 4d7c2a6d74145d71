"""The seam between a model's scheduler and where its batches run: `ModelInstance`.

Two kinds implement it: a thread instance (instances.py: a backend on a thread of the
gateway's process, or on the event loop itself for short runs) and a process instance
(process_instance.py: a backend in a worker process, tensors in shared memory). The
schedulers (dynamic.py, direct.py, sequence/) and the pool (pool.py) use nothing else;
mypy checks both kinds against it in the test command (tests/typecheck/).

A process instance adds what only a worker has: `run_requests` (a Python model's
batch answered request by request, per_request.py) and its restart bookkeeping
(`restart_wait_s`, `back_at`, restarts.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from accel_base.batch import Allocator


def after_run(instance: ModelInstance, done: Callable[[], None]) -> None:
    """Call `done` once the instance's run ends: now, or later if its caller left while
    the run goes on (a thread's or a worker's run, `running`; never a restart's recovery
    task, which runs no batch of this caller's)."""
    running = instance.running
    if running is not None and not running.done() and not isinstance(running, asyncio.Task):
        running.add_done_callback(lambda _: done())
    else:
        done()


class ModelInstance(Protocol):
    # Not done while a run goes on (or a worker restarts): the pool waits for it.
    running: asyncio.Future[Any] | None
    retired: bool  # for good (a worker that stopped restarting): never back in the pool
    down_reason: str | None  # why it cannot run now, for the 503 that says so
    recent_run_ns: float | None  # moving average of its runs; None until the first
    name: str  # "<model>_<n>", in logs and in what management APIs describe

    @property
    def pid(self) -> int | None:
        """Its worker process's id; None for a thread of the server's, or a worker that
        is restarting."""
        ...

    @property
    def allowed_batch_sizes(self) -> tuple[int, ...] | None:
        """The batch sizes it was compiled for (None: any), for padding."""
        ...

    @property
    def runs_inline(self) -> bool:
        """Whether the next run happens on the event loop without suspending: the
        batcher's driver then runs the batch itself."""
        ...

    async def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        """The outputs of one batch, and the nanoseconds the backend took."""
        ...

    def allocator(self) -> Allocator | None:
        """Where the batcher merges a batch (a worker's shared memory), or None."""
        ...

    def attach(self) -> None:
        """Start watching on the running event loop (a worker's socket)."""

    def detach(self) -> None:
        """Let go of the event loop before close()."""

    def close(self) -> None:
        """Unload the backend and end its thread or process (blocking)."""
