"""The span processor that sends finished spans over OTLP/HTTP, from the event loop.

A span is encoded as it ends (otlp.py, a few us, paid by the traced request that made
it) and waits, as bytes, in a bounded queue: a full one drops spans, counted and logged,
and never delays a request. A task on the loop takes them in batches, every schedule
delay or as soon as a batch's worth is waiting, and POSTs each (otlp_http.py). Encoding
at the end keeps up with any load: encoded in the export task, between requests, spans
piled up at 100% tracing and concurrency 64 and the queue overflowed. Nothing runs on a
thread: the SDK's BatchSpanProcessor exports from a thread of its own, whose encoding
held the GIL while the loop waited, so that 1% of requests traced cost 6-8% of the
throughput at concurrency 64 on one core (benchmarks/tracing.py).

The batching is OpenTelemetry's: OTEL_BSP_MAX_QUEUE_SIZE (2048 spans),
OTEL_BSP_SCHEDULE_DELAY (5000 ms), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512) and
OTEL_BSP_EXPORT_TIMEOUT (30000 ms), with --trace-config's bsp_* over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from gateway.operation.log_settings import Occasional
from gateway.operation.tracing import otlp
from gateway.operation.tracing.otlp_http import Destination, ExportFailed, Poster

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0  # drops and failures are logged at most this often


@dataclass(frozen=True)
class Batching:
    max_queue_size: int = 2048
    schedule_delay_millis: int = 5000
    max_export_batch_size: int = 512
    export_timeout_millis: int = 30000

    @classmethod
    def resolve(cls, given: dict[str, int]) -> Batching:
        """`given` (--trace-config's, by these names) over OTEL_BSP_*, over the
        defaults. ValueError naming a bad value."""
        values: dict[str, int] = {}
        for name in cls.__dataclass_fields__:
            variable = "OTEL_BSP_" + name.removesuffix("_millis").upper()
            text = os.environ.get(variable)
            if name in given:
                values[name] = given[name]
            elif text:
                try:
                    values[name] = int(text)
                except ValueError:
                    raise ValueError(f"{variable}='{text}' is not an integer") from None
        bad = [f"{name}={value}" for name, value in values.items() if value < 1]
        if bad:
            raise ValueError(f"span batching: {', '.join(bad)} must be positive")
        queue = values.get("max_queue_size", cls.max_queue_size)
        if "max_export_batch_size" not in values:  # a small queue takes smaller batches
            values["max_export_batch_size"] = min(queue, cls.max_export_batch_size)
        if values["max_export_batch_size"] > queue:
            raise ValueError(
                f"span batching: max_export_batch_size {values['max_export_batch_size']} "
                f"is larger than max_queue_size {queue}"
            )
        return cls(**values)


class SpanExport:
    """An OpenTelemetry span processor (on_end, shutdown through close) that exports
    over OTLP/HTTP from the loop of the first span to end."""

    def __init__(self, destination: Destination, batching: Batching) -> None:
        self.destination = destination
        self.batching = batching
        self._poster = Poster(destination)
        self._queue: deque[Any] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closed = False
        self.exported = self.dropped = self.failed = 0
        self._now_and_then = Occasional(log, logging.WARNING, LOG_EVERY_S)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass  # spans reach this processor finished

    def on_end(self, span: Any) -> None:
        queue = self._queue
        if self._closed:
            self.dropped += 1
            return
        if len(queue) >= self.batching.max_queue_size:
            self.dropped += 1
            self._now_and_then(
                "dropped", "tracing: %d spans dropped so far: the export queue (%d) is full; "
                "raise bsp_max_queue_size or lower the trace rate", self.dropped,
                self.batching.max_queue_size,
            )  # fmt: skip
            return
        try:
            encoded = otlp.span(span)
        except Exception:  # a span is never worth a request: say so, drop it
            self.dropped += 1
            log.exception("tracing: a span '%s' could not be encoded", span.name)
            return
        queue.append((span.resource, span.instrumentation_scope, encoded))
        if self._task is None or len(queue) >= self.batching.max_export_batch_size:
            self._kick()

    def _kick(self) -> None:
        """Start the export task on the running loop (again, where the loop it ran on
        has gone without close()), or wake it for a full batch."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._task is None or self._task.done() or self._loop_gone():
            if running is None:
                return  # queued until a span ends on a loop
            self._loop, self._wake = running, asyncio.Event()
            self._poster.close()  # its connection belonged to the old loop
            # A context of its own: it exports every request's spans, not only those of the
            # request whose span started it (whose id log lines would carry).
            self._task = running.create_task(
                self._run(), name="trace export", context=contextvars.Context()
            )
        elif running is self._loop:
            assert self._wake is not None
            self._wake.set()
        else:
            assert self._loop is not None and self._wake is not None
            with contextlib.suppress(RuntimeError):  # closed meanwhile: the next one starts
                self._loop.call_soon_threadsafe(self._wake.set)

    def _loop_gone(self) -> bool:
        return self._loop is None or self._loop.is_closed()

    async def _run(self) -> None:
        delay_s = self.batching.schedule_delay_millis / 1000
        assert self._wake is not None
        while True:
            woken = False
            with contextlib.suppress(TimeoutError):
                woken = await asyncio.wait_for(self._wake.wait(), delay_s)
            self._wake.clear()
            # Woken for a full batch, it sends full batches; the rest waits its turn.
            await self._export_queued(full_only=woken and not self._closed)
            if self._closed:  # closed meanwhile: what is left goes too
                await self._export_queued()
                return

    async def _export_queued(self, full_only: bool = False) -> None:
        size = self.batching.max_export_batch_size
        timeout_s = self.batching.export_timeout_millis / 1000
        while len(self._queue) >= (size if full_only else 1):
            spans = [self._queue.popleft() for _ in range(min(size, len(self._queue)))]
            try:
                body = otlp.export_request(spans)
                await self._poster.post(body, time.monotonic() + timeout_s)
            except ExportFailed as exc:
                self.failed += len(spans)
                self._now_and_then("failed", "tracing: %d spans lost so far: %s", self.failed, exc)
            except Exception:  # tracing never fails the server: say so, go on
                self.failed += len(spans)
                log.exception("tracing: a batch of %d spans could not be exported", len(spans))
            else:
                self.exported += len(spans)

    async def close(self) -> None:
        """Send what is queued (bounded by the export timeout), then stop; spans that
        end from now on are dropped."""
        self._closed = True
        timeout_s = self.batching.export_timeout_millis / 1000
        task, here = self._task, asyncio.get_running_loop()
        try:
            if task is not None and not task.done() and self._loop is here:
                assert self._wake is not None
                self._wake.set()
                await asyncio.wait_for(task, timeout_s)  # its last round sends all
            elif self._queue:  # no task running here: the queue goes from this loop
                self._poster.close()  # a connection of another loop's is no use here
                await asyncio.wait_for(self._export_queued(), timeout_s)
        except TimeoutError:
            log.warning("tracing: %d spans were not sent before the server stopped",
                        len(self._queue))  # fmt: skip
        except asyncio.CancelledError:
            if task is None or not task.cancelled():
                raise  # this close() itself was cancelled, not the task under it
        self._poster.close()

    def shutdown(self) -> None:
        """The SDK's processor interface; the gateway calls close() on its loop."""
        self._closed = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return not self._queue
