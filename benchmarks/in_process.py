"""The CPU time of one of the gateway's whole serving paths for one request, in process.

A request's raw bytes go into the server's own protocol object (uvicorn's httptools
protocol for HTTP, the gateway's HTTP/2 connection for gRPC), through the front, the
inference core and the model, and the response is written to a transport that only
reads it: everything the server's core does for a request but the socket's system
calls. Targets are measured in turn, a short round of `per_round` requests each,
`rounds` times (every other round in the other order): each round gives each target's
CPU time (of this thread) per request, and the rounds' figures are compared pairwise,
since this machine's speed drifts by 10% within a second.

Used where a difference of a few microseconds between two paths must be seen: on a
shared 2-core machine, one perf_analyzer run's throughput swings by 5-15%. The paths:
benchmarks/http_path.py and benchmarks/grpc_path.py.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from gateway.listeners import event_loop_factory
from gateway.operation.heap import settle


class ServedPath(Protocol):
    """One connection of a front, opened on a core, fed raw requests one at a time."""

    async def one(self, request: bytes) -> None:
        """Send `request` and wait for its whole answer."""

    def failure(self) -> str | None:
        """What was wrong with the answers since the last call (every failed one
        counted), or None where all succeeded."""

    def close(self) -> None: ...


class CountingTransport(asyncio.Transport):
    """Takes what the protocol writes, counts it, and hands it to `seen`."""

    def __init__(self, seen: Callable[[bytes], None]) -> None:
        super().__init__()
        self.written = 0
        self._seen = seen
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}
        return addresses.get(name, default)

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += len(data)
        self._seen(data)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def abort(self) -> None:
        self._closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


Opener = Callable[[InferenceCore], ServedPath]


async def _measure(
    repository: Path,
    requests: dict[str, bytes],
    open_path: Opener,
    rounds: int,
    per_round: int,
    before_round: Callable[[InferenceCore, str], None] | None,
    after: Callable[[], Awaitable[None]] | None,
) -> dict[str, list[float]]:
    models = ModelRepository(repository)
    await models.load_startup_models([])
    settle()  # as the server does after a load: collections skip the long-lived heap
    core = InferenceCore(models)
    path: ServedPath | None = None

    def check(name: str) -> None:
        failure = path.failure()
        if failure is not None:  # a path that fails, even now and then, is not priced
            raise RuntimeError(f"{name}: {failure}")

    try:
        path = open_path(core)
        for name, raw in requests.items():  # warm: first calls, caches, the model's first run
            if before_round is not None:
                before_round(core, name)
            for _ in range(200):
                await path.one(raw)
            check(name)
        samples: dict[str, list[float]] = {name: [] for name in requests}
        for round_ in range(rounds):
            names = list(requests)
            if round_ % 2:  # every other round in the other order
                names.reverse()
            for name in names:
                raw = requests[name]
                if before_round is not None:
                    before_round(core, name)
                started = time.thread_time_ns()
                for _ in range(per_round):
                    await path.one(raw)
                samples[name].append((time.thread_time_ns() - started) / per_round)
                check(name)
    finally:
        if path is not None:
            path.close()
        if after is not None:
            await after()
        await models.unload_all()
    return samples


def path_ns(
    repository: Path,
    requests: dict[str, bytes],
    core: int,
    open_path: Opener,
    rounds: int = 200,
    per_round: int = 200,
    before_round: Callable[[InferenceCore, str], None] | None = None,
    after: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, list[float]]:
    """CPU ns per request through the path `open_path` opens on the repository's core,
    for each named raw request: one figure a round, in the rounds' order. On the
    server's own event loop (uvloop), with this process on `core` meanwhile (the
    server's, as pinned in the benchmarks). `before_round(core, name)`, where given,
    sets the core up for a round of `name`; `after()` is awaited on that loop at the end."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(
                _measure(repository, requests, open_path, rounds, per_round, before_round, after)
            )
    finally:
        os.sched_setaffinity(0, before)


def paired_difference(
    rounds: dict[str, list[float]], base: str, other: str
) -> tuple[float, float, float, float]:
    """(`base`'s median ns, the median of the rounds' `other` - `base` differences, and
    that median's 95% interval from the differences' order statistics). Medians: a round
    now and then takes twice as long, whichever path it measures (the machine's doing)."""
    added = sorted(o - b for b, o in zip(rounds[base], rounds[other], strict=True))
    count = len(added)
    reach = 0.98 * math.sqrt(count)  # 1.96 x a Binomial(n, 1/2) count's deviation, sqrt(n)/2
    low, high = max(int(count / 2 - reach), 0), min(math.ceil(count / 2 + reach), count - 1)
    return statistics.median(rounds[base]), statistics.median(added), added[low], added[high]


def priced_verdict(
    share_ns: float, priced: tuple[float, ...], goal: float, path: str = "HTTP"
) -> str:
    """What an added cost (paired_difference's) takes from throughput on a busy core,
    where a request's share of the core is `share_ns`: the ratio, at the interval's top
    too, and whether it meets `goal`."""
    path_ns_, added_ns, low_ns, high_ns = priced
    ratio, worst = share_ns / (share_ns + added_ns), share_ns / (share_ns + high_ns)
    return (
        f"{ratio:.4f} (at the interval's top {worst:.4f}; the {path} path "
        f"{path_ns_ / 1000:.1f} us in process, {added_ns:.0f} ns added, 95% interval "
        f"{low_ns:.0f} to {high_ns:.0f}); goal >= {goal}: {'met' if worst >= goal else 'not met'}"
    )
