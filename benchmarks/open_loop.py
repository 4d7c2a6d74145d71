"""An open-loop HTTP/1.1 load generator: requests leave on a schedule, whatever the answers.

A closed loop (perf_analyzer's concurrency mode, Locust's users) sends the next request
only when one comes back, so it slows down with the server and never shows what an
overloaded server does to callers who do not wait. Here each request goes out at its
time on a kept-alive connection that is idle, or on a new one; every request ends as
an answer (its status and latency) or as unanswered after the timeout.

Only for 127.0.0.1 and pre-encoded request bytes: the parsing is the least HTTP/1.1
needs (a status line, Content-Length), so that one core sends as much as it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import re
import subprocess
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")
MAX_CONNECTIONS = 4096
TICK_S = 0.001


@dataclass
class Outcome:
    sent: float  # loop time
    status: int | None = None  # None: unanswered
    latency_s: float | None = None
    unsent: bool = False  # due while every connection waited for an answer


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)
    late_sends: int = 0  # requests that left later than 10 ms after their time
    started: float = 0.0  # loop time of the first send
    ended: float = 0.0  # loop time of the last send

    def count(self, status: int | None) -> int:
        return sum(1 for o in self.outcomes if o.status == status)


class _Connection(asyncio.Protocol):
    def __init__(self, generator: _Generator) -> None:
        self.generator = generator
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.expected: tuple[int, int] | None = None  # (status, total bytes) of the answer
        self.outcome: Outcome | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def send(self, request: bytes, outcome: Outcome) -> None:
        self.outcome = outcome
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if self.expected is None:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buffer[: end + 2])
                length = _LENGTH.search(head)
                self.expected = (int(head[9:12]), end + 4 + int(length[1]) if length else 0)
            status, total = self.expected
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            self.expected = None
            outcome, self.outcome = self.outcome, None
            if outcome is not None:
                outcome.status = status
                outcome.latency_s = time.monotonic() - outcome.sent
            self.generator.idle.append(self)

    def connection_lost(self, exc) -> None:
        self.generator.connections.discard(self)
        if self in self.generator.idle:
            self.generator.idle.remove(self)


class _Generator:
    def __init__(
        self, host: str, port: int, request: bytes | Callable[[], bytes],
        max_connections: int = MAX_CONNECTIONS, connection: type = _Connection,
    ) -> None:  # fmt: skip
        """`request`: the bytes of every request, or what makes each next one.
        `connection`: the protocol class a connection speaks (HTTP/1.1 here; a gRPC one
        in benchmarks/grpc_open_loop.py), with send(request, outcome)."""
        self.host, self.port, self.request = host, port, request
        self.max_connections = max_connections
        self.connection = connection
        self.idle: deque = deque()
        self.connections: set = set()
        self.opening = 0

    async def open(self, count: int) -> None:
        """Open `count` connections (fewer if the limit says so) and keep them idle."""
        loop = asyncio.get_running_loop()
        count = min(count, self.max_connections - len(self.connections))
        for first in range(0, count, 100):  # a hundred at a time: the listen queue holds them
            opened = await asyncio.gather(*(
                loop.create_connection(lambda: self.connection(self), self.host, self.port)
                for _ in range(min(100, count - first))
            ))  # fmt: skip
            for _, connection in opened:
                self.connections.add(connection)
                self.idle.append(connection)
        await asyncio.sleep(0.2)  # a gRPC connection's settings are exchanged meanwhile

    async def _open_and_send(self, outcome: Outcome) -> None:
        try:
            loop = asyncio.get_running_loop()
            _, connection = await loop.create_connection(
                lambda: self.connection(self), self.host, self.port
            )
        except OSError:
            return  # stays unanswered
        finally:
            self.opening -= 1
        self.connections.add(connection)
        connection.send(self.next_request(), outcome)

    def next_request(self) -> bytes:
        request = self.request
        return request if isinstance(request, bytes) else request()

    def send(self, outcome: Outcome, tasks: set[asyncio.Task]) -> None:
        while self.idle:
            connection = self.idle.popleft()
            if connection in self.connections:
                connection.send(self.next_request(), outcome)
                return
        if len(self.connections) + self.opening >= self.max_connections:
            outcome.unsent = True  # every connection is waiting for an answer: unanswered
            return
        self.opening += 1  # now, not when the task starts: sends in this turn count it
        task = asyncio.ensure_future(self._open_and_send(outcome))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def close(self) -> None:
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()


def run_generator(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a generator's coroutine on uvloop where installed (it comes with uvicorn's
    standard extras): against a server that answers at once, asyncio's own loop doubled
    the generator's median latency at 21,000 requests a second."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


@contextlib.contextmanager
def no_collector_pauses():
    """The load generator's own collector off while it sends: a full collection of its
    heap pauses its loop, and the requests due meanwhile would leave as one burst."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def offer(
    host: str, port: int, request: bytes, rate: float, seconds: float, timeout_s: float = 10.0,
    max_connections: int = MAX_CONNECTIONS, connection: type = _Connection, opened: int = 0,
) -> Run:  # fmt: skip
    """Send `rate` requests a second for `seconds`, then wait for answers up to `timeout_s`
    after the last send. A request due while `max_connections` all wait for answers is
    not sent, and counts as unanswered. `opened`: connections opened before the clock
    starts (kept-alive clients that were there before the load), the rest as needed."""
    generator = _Generator(host, port, request, max_connections, connection)
    await generator.open(opened)
    run = Run()
    tasks: set[asyncio.Task] = set()
    start = run.started = time.monotonic()
    total = int(rate * seconds)
    while len(run.outcomes) < total:
        now = time.monotonic()
        due = min(int((now - start) * rate) + 1, total)
        for index in range(len(run.outcomes), due):
            scheduled = start + index / rate
            if now - scheduled > 0.010:
                run.late_sends += 1
            outcome = Outcome(sent=now)
            run.outcomes.append(outcome)
            generator.send(outcome, tasks)
        await asyncio.sleep(TICK_S)
    run.ended = time.monotonic()
    deadline = run.ended + timeout_s
    while time.monotonic() < deadline and any(o.status is None for o in run.outcomes):
        await asyncio.sleep(0.01)
    generator.close()
    for task in tasks:
        task.cancel()
    return run


async def closed_loop(
    host: str, port: int, request: bytes, connections: int, seconds: float,
    connection: type = _Connection,
) -> float:  # fmt: skip
    """Answers a second (2xx only) with `connections` clients that each wait for the last."""
    rate, _ = await closed_loop_latencies(host, port, request, connections, seconds, connection)
    return rate


async def closed_loop_latencies(
    host: str, port: int, request: bytes | Callable[[], bytes], connections: int, seconds: float,
    connection: type = _Connection,
) -> tuple[float, list[float]]:  # fmt: skip
    """closed_loop's answers a second, and the seconds each 2xx answer took."""
    generator = _Generator(host, port, request, connection=connection)
    tasks: set[asyncio.Task] = set()
    outcomes: list[Outcome] = []
    start = time.monotonic()
    for _ in range(connections):
        outcomes.append(Outcome(sent=time.monotonic()))
        generator.send(outcomes[-1], tasks)
    while time.monotonic() - start < seconds:
        while generator.idle:
            outcomes.append(Outcome(sent=time.monotonic()))
            generator.send(outcomes[-1], tasks)
        await asyncio.sleep(0)
    elapsed = time.monotonic() - start
    generator.close()
    answered = [o.latency_s for o in outcomes if o.status == 200 and o.latency_s is not None]
    return len(answered) / elapsed, answered


def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def binary_infer_request(
    port: int, model: str, shape: tuple[int, ...], input_name: str, output_name: str
) -> bytes:
    """A whole HTTP request for one FP32 input of random values (seeded) with the binary
    tensor extension both ways."""
    data = np.random.default_rng(0).random(shape, dtype=np.float32).tobytes()
    header = json.dumps({
        "inputs": [{"name": input_name, "datatype": "FP32", "shape": list(shape),
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": output_name, "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    return http_request(
        "127.0.0.1", port, f"/v2/models/{model}/infer", header + data,
        {"Inference-Header-Content-Length": str(len(header)),
         "Content-Type": "application/octet-stream"},
    )  # fmt: skip


def wait_for_model(
    port: int, request: bytes, timeout_s: float = 300, process: subprocess.Popen | None = None
) -> None:
    """Until a request to `port` is answered (a server may listen before its models load);
    a `process` that exits ends the wait."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        rate, _ = run_generator(closed_loop_latencies("127.0.0.1", port, request, 1, 0.5))
        if rate > 0:
            return
        time.sleep(1)
    raise RuntimeError(f"no prediction answered on port {port} in {timeout_s:g} s")
