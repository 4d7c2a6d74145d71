"""ModelStreamInfer: the requests of one bidirectional stream, run concurrently and
answered in the order they finish, each response with its request's id."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from accel_base.errors import GatewayError, Internal
from accel_base.logs import REQUEST_ID
from accel_base.proto import grpc_service_pb2 as pb
from gateway.core.interface import Core
from gateway.operation.log_settings import Occasional
from gateway.protocols.grpc.codec import decode_request, encode_response

log = logging.getLogger(__name__)
# A model failing every request is one line every 10 s per model, not one a request.
_backend_failed = Occasional(log, logging.ERROR, 10.0)

# Requests of one ModelStreamInfer call that may be in flight at once, and their bytes
# (one request larger than this runs alone): the HTTP/2 server's bound on what a
# connection holds ends when a request is taken, and a stream takes them eagerly.
STREAM_IN_FLIGHT = 256
STREAM_IN_FLIGHT_BYTES = 64 * 1024 * 1024


class _Bytes:
    """Bytes of requests in flight, and a wait for room (one reader waits at a time)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Event()

    async def take(self, size: int) -> None:
        while self.used and self.used + size > self.limit:
            self._freed.clear()
            await self._freed.wait()
        self.used += size

    def give_back(self, size: int) -> None:
        self.used -= size
        self._freed.set()


async def serve_stream(
    core: Core, request_iterator: AsyncIterator[pb.ModelInferRequest], header: Any
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    """The responses of one ModelStreamInfer call: its requests run concurrently, and
    each response (or error) carries its request's id. `header` looks up the call's
    metadata."""
    # Bounded both ways: at most STREAM_IN_FLIGHT requests run (each holds its slot
    # until its last response is queued, a decoupled model's many included), and at
    # most STREAM_IN_FLIGHT responses wait to be sent (a full queue holds the
    # producers, and a decoupled model's sender with them).
    results: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue(STREAM_IN_FLIGHT)
    slots = asyncio.Semaphore(STREAM_IN_FLIGHT)
    in_flight = _Bytes(STREAM_IN_FLIGHT_BYTES)
    tasks: set[asyncio.Task] = set()

    async def answer(message: pb.ModelInferRequest, size: int) -> None:
        trace, last = None, None
        failure: BaseException | None = None
        try:
            started = time.perf_counter_ns() if core.tracing.settings.enabled else 0
            request = decode_request(message, core.shared_memory.input_array)
            request.header = header
            REQUEST_ID.set(request.id)  # this request's task: the lines it logs name it
            if started:  # each request of a stream is traced as a unary call would be
                trace = core.tracing.start(request, "grpc", started, request.header)
            async for item in core.infer_stream(request):
                if isinstance(item, GatewayError):  # a decoupled model's error response
                    await results.put(_stream_error(item.message, message))
                    continue
                encoded, last = encode_response(item), item
                await results.put(pb.ModelStreamInferResponse(infer_response=encoded))
        except GatewayError as exc:
            failure = exc
            if isinstance(exc, Internal):  # a backend's own failure: the operator's news too
                _backend_failed(
                    message.model_name, "a ModelStreamInfer request failed: %s", exc.message
                )
            await results.put(_stream_error(exc.message, message))
        except Exception as exc:
            failure = exc
            log.exception("unexpected error in ModelStreamInfer")
            await results.put(
                _stream_error(f"internal error: {type(exc).__name__}: {exc}", message)
            )
        except BaseException as exc:  # the stream was cancelled: its trace still ends
            failure = exc
            raise
        finally:
            slots.release()
            in_flight.give_back(size)
            if trace is not None:
                trace.finish(time.perf_counter_ns(), last, failure)

    async def read() -> None:
        try:
            async for message in request_iterator:
                await slots.acquire()
                size = message.ByteSize()
                await in_flight.take(size)
                task = asyncio.create_task(answer(message, size))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await results.put(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await results.get()) is not None:
            yield item
    finally:
        reader.cancel()
        for task in list(tasks):
            task.cancel()


def _stream_error(message: str, request: pb.ModelInferRequest) -> pb.ModelStreamInferResponse:
    # The id lets a client match the error to its request.
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )
