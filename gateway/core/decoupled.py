"""Decoupled models (`model_transaction_policy { decoupled: true }`): a request may get any
number of responses, sent by the model whenever it likes, the last one marked final.
They travel from the worker over the model-call socket (gateway/core/model_calls.py) into
the queue of the request's stream here, and out over gRPC's ModelStreamInfer.

Each queue is bounded: a model that sends faster than the client reads waits (the
socket's buffer fills, and its `send` blocks), rather than the gateway's memory growing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from accel_base.errors import GatewayError, Unavailable
from gateway.core.inference import InferRequest, InferResponse, Tensor
from gateway.core.scheduling.per_request import failure_error

MAX_QUEUED = 64  # responses of one request waiting for the stream to take them
# How long a delivery waits for room in a full queue before that stream is closed: the
# worker's responses share one connection, so one reader that does not read must not
# hold back every other stream of the worker for long.
OVERFLOW_WAIT_S = 5.0
FINAL_PARAMETER = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"


@dataclass(slots=True)
class Sent:
    """One response as the model sent it."""

    outputs: list[tuple[str, str, Any]]  # (name, datatype, array)
    parameters: dict[str, Any]
    final: bool
    error: tuple[str, str] | None  # (the gateway error class name, the message)


class Stream:
    def __init__(self) -> None:
        # Made on first use: most streams (a TorchServe handler's that sends nothing
        # early) never queue a response, and every request opens one.
        self._queue: asyncio.Queue[Sent] | None = None
        self._closed: asyncio.Event | None = None
        self._waiter: asyncio.Future[bool] | None = None  # a reader's, while it waits
        self.overflowed = False  # its reader fell behind: closed (ResponseStreams.deliver)

    @property
    def queue(self) -> asyncio.Queue[Sent]:
        if self._queue is None:
            self._queue = asyncio.Queue(MAX_QUEUED)
        return self._queue

    @property
    def closed(self) -> asyncio.Event:
        if self._closed is None:
            self._closed = asyncio.Event()
        return self._closed

    def end(self) -> None:
        if self._closed is not None:  # a delivery waiting for room gives up
            self._closed.set()

    def take(self) -> Sent | None:
        """The next response waiting, if one is."""
        if self._queue is None or self._queue.empty():
            return None
        return self._queue.get_nowait()

    def wake(self) -> None:
        """Something for the reader: a response, or the end of the request's run."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(True)

    async def wait(self, timeout_s: float | None, model: str) -> None:
        """Until wake(); Unavailable when it does not come within `timeout_s` (None: no
        bound here; the caller's run is bounded). One future and at most one timer:
        cheaper than waiting on a queue's get and a task together."""
        if self.overflowed:  # closed while its reader was busy: no wake will come
            raise self.overflow_error(model)
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = None
        if timeout_s is not None:
            timer = loop.call_later(timeout_s, lambda: waiter.done() or waiter.set_result(False))
        try:
            woken = await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._waiter = None
        if self.overflowed:
            raise self.overflow_error(model)
        if not woken:
            raise Unavailable(
                f"model '{model}' sent no response for {timeout_s:g} s and no final one; "
                "the stream for this request is closed"
            )

    def overflow_error(self, model: str) -> Unavailable:
        return Unavailable(
            f"the client read model '{model}''s responses slower than it sent them "
            f"({MAX_QUEUED} waiting for {OVERFLOW_WAIT_S:g} s); the stream is closed"
        )


# Streams whose reader left before their final response, remembered for a model's
# is_cancelled() (the most recent ones: a model asks while it still sends).
MAX_CANCELLED = 4096


class ResponseStreams:
    def __init__(self) -> None:
        self._streams: dict[str, Stream] = {}
        self._tokens = itertools.count(1)
        self._cancelled: dict[str, None] = {}  # insertion-ordered: the oldest go first

    def open_stream(self) -> tuple[str, Stream]:
        token = f"s{next(self._tokens)}"
        stream = self._streams[token] = Stream()
        return token, stream

    def cancelled(self, token: str) -> bool:
        """Whether a stream's reader left before its final response."""
        return token in self._cancelled

    def close(self, token: str) -> None:
        stream = self._streams.pop(token, None)
        if stream is not None:
            stream.end()

    @contextlib.contextmanager
    def running(
        self, request: InferRequest, asked: list[str],
        run: Callable[[InferRequest], Awaitable[InferResponse]],
    ) -> Iterator[tuple[Stream, asyncio.Future[InferResponse]]]:  # fmt: skip
        """A stream for `request` (its responses carry the outputs `asked`) and its run,
        which wakes the stream's reader when it ends; the stream closes, and the run is
        cancelled if it has not ended, when the reader leaves."""
        token, stream = self.open_stream()
        request.stream = (token, asked)
        running = asyncio.ensure_future(run(request))
        running.add_done_callback(lambda _: stream.wake())
        try:
            yield stream, running
        except BaseException:  # its reader left (a cancel, a disconnect) before the end
            self._cancelled[token] = None
            if len(self._cancelled) > MAX_CANCELLED:
                del self._cancelled[next(iter(self._cancelled))]
            raise
        finally:
            self.close(token)
            if not running.done():
                running.cancel()

    async def deliver(self, token: str, sent: Sent) -> None:
        """A response from a worker; one for a stream that is gone is dropped. While the
        stream's queue is full this waits (the worker's send waits with it), until there
        is room or the stream closes."""
        stream = self._streams.get(token)
        if stream is None:
            return
        if not stream.queue.full():
            stream.queue.put_nowait(sent)
            stream.wake()
            return
        put = asyncio.ensure_future(stream.queue.put(sent))
        closed = asyncio.ensure_future(stream.closed.wait())
        try:
            done, _ = await asyncio.wait(
                {put, closed}, timeout=OVERFLOW_WAIT_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            put.cancel()
            closed.cancel()
        if not done:  # its reader fell behind: it is closed, and the others go on
            stream.overflowed = True
            self.close(token)
        stream.wake()


def response_of(request: InferRequest, sent: Sent, model: str, version: str) -> InferResponse:
    """A response the model sent, as the request's answer; whether it is the last, where
    the caller asked (EMPTY_FINAL)."""
    parameters = dict(sent.parameters)
    if request.parameters.get(EMPTY_FINAL) is True:
        parameters[FINAL_PARAMETER] = sent.final
    outputs = [Tensor(n, d, a) for n, d, a in sent.outputs]
    return InferResponse(model, version, request.id, parameters, outputs)


async def stream_responses(
    request: InferRequest,
    streams: ResponseStreams,
    run: Callable[[InferRequest], Awaitable[InferResponse]],
    model: str,
    version: str,
    idle_timeout_s: float,
) -> AsyncIterator[InferResponse | GatewayError]:
    """The responses of one request to a decoupled model, until its final one; an error
    response comes as the error (the stream sends it, and goes on unless it was final).
    `run` schedules the request (its execute() returns before or after the responses)."""
    asked = [o.name for o in request.outputs]
    request.outputs = []  # answered through the stream, not by the batch
    empty_final = request.parameters.get(EMPTY_FINAL) is True
    with streams.running(request, asked, run) as (stream, running):
        while True:
            sent = stream.take()
            if sent is None:
                if running.done() and running.exception():
                    raise running.exception()  # execute() failed: no response will come
                # Each response, the first too, within the idle timeout of the last.
                await stream.wait(idle_timeout_s, model)
                continue
            if sent.error is not None:  # (error class name, message)
                yield failure_error(model, *sent.error)
            elif sent.outputs or not sent.final or empty_final:
                yield response_of(request, sent, model, version)
            if sent.final:
                break
        await running  # execute() may still be returning; its failure is ours too
