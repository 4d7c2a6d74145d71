"""The CPU time of the gateway's whole HTTP path for one request, in process.

A request's raw bytes go into uvicorn's httptools protocol (the gateway's own subclass,
as it serves), through the ASGI app, the inference core and the model, and the response
is written to a transport that only counts the bytes: everything the server's core does
for a request but the socket's system calls. Targets are measured in turn, a short round
of `per_round` requests each, `rounds` times (every other round in the other order):
each round gives each target's CPU time (of this thread) per request, and the rounds'
figures are compared pairwise, since this machine's speed drifts by 10% within a second.

Used where a difference of a few microseconds between two paths must be seen: on a
shared 2-core machine, one perf_analyzer run's throughput swings by 5-15%.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from gateway.core import InferenceCore
from gateway.heap import settle
from gateway.http.app import create_app
from gateway.http.infer_route import with_infer_route
from gateway.http.timeouts import timed_protocol
from gateway.listeners import event_loop_factory
from gateway.repository import ModelRepository


class _Transport(asyncio.Transport):
    """Takes what the protocol writes, and counts it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.status = b""  # the latest response's
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}
        return addresses.get(name, default)

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += len(data)
        if data.startswith(b"HTTP/1.1 "):
            self.status = bytes(data[9:12])

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _protocol_class() -> type:
    base = timed_protocol(60.0)

    class Measured(base):  # type: ignore[misc, valid-type]
        answered: asyncio.Future | None = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.answered is not None and not self.answered.done():
                self.answered.set_result(None)

    return Measured


async def _measure(
    repository: Path,
    requests: dict[str, bytes],
    rounds: int,
    per_round: int,
    before_round: Callable[[InferenceCore, str], None] | None,
    after: Callable[[], Awaitable[None]] | None,
) -> dict[str, list[float]]:
    models = ModelRepository(repository)
    await models.load_startup_models([])
    settle()  # as the server does after a load: collections skip the long-lived heap
    core = InferenceCore(models)
    limit = 64 * 1024 * 1024
    app = with_infer_route(create_app(core, limit), core, limit)  # as gateway.listeners
    config = uvicorn.Config(
        app, loop="none", lifespan="off", access_log=False,
        log_config=None, proxy_headers=False, server_header=False, date_header=False,
    )  # fmt: skip
    config.load()
    protocol = _protocol_class()(config=config, server_state=ServerState(), app_state={})
    transport = _Transport()
    protocol.connection_made(transport)
    loop = asyncio.get_running_loop()

    async def one(raw: bytes) -> None:
        protocol.answered = loop.create_future()
        protocol.data_received(raw)
        await asyncio.wait_for(protocol.answered, 30)  # an app that never ends its answer

    try:
        for name, raw in requests.items():  # warm: first calls, caches, the model's first run
            if before_round is not None:
                before_round(core, name)
            for _ in range(200):
                await one(raw)
            if transport.status != b"200":
                raise RuntimeError(f"{name}: the gateway answered {transport.status.decode()}")
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
                    await one(raw)
                samples[name].append((time.thread_time_ns() - started) / per_round)
                if transport.status != b"200":  # a path that fails is not priced
                    raise RuntimeError(f"{name}: the gateway answered {transport.status.decode()}")
    finally:
        protocol.connection_lost(None)
        if after is not None:
            await after()
        await models.unload_all()
    return samples


def http_path_ns(
    repository: Path,
    requests: dict[str, bytes],
    core: int,
    rounds: int = 200,
    per_round: int = 200,
    before_round: Callable[[InferenceCore, str], None] | None = None,
    after: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, list[float]]:
    """CPU ns per request through the whole HTTP path, for each named raw request: one
    figure a round, in the rounds' order. On the server's own event loop (uvloop), with
    this process on `core` meanwhile (the server's, as pinned in the benchmarks).
    `before_round(core, name)`, where given, sets the core up for a round of `name`;
    `after()` is awaited on that loop at the end."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(
                _measure(repository, requests, rounds, per_round, before_round, after)
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


def priced_verdict(share_ns: float, priced: tuple[float, ...], goal: float) -> str:
    """What an added cost (paired_difference's) takes from throughput on a busy core,
    where a request's share of the core is `share_ns`: the ratio, at the interval's top
    too, and whether it meets `goal`."""
    path_ns, added_ns, low_ns, high_ns = priced
    ratio, worst = share_ns / (share_ns + added_ns), share_ns / (share_ns + high_ns)
    return (
        f"{ratio:.4f} (at the interval's top {worst:.4f}; the HTTP path {path_ns / 1000:.1f} "
        f"us in process, {added_ns:.0f} ns added, 95% interval {low_ns:.0f} to {high_ns:.0f}"
        f"); goal >= {goal}: {'met' if worst >= goal else 'not met'}"
    )
