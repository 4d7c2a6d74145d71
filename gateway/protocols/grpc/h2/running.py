"""Running one call: its handler with the request (or the stream of requests), then the
response, whatever the handler's shape (unary or streaming either way)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from gateway.protocols.grpc.h2.calls import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    INTERNAL,
    CallError,
    decode,
    framed,
)
from gateway.protocols.grpc.h2.headers import trailers
from gateway.protocols.grpc.h2.stream import Stream

log = logging.getLogger(__name__)


async def run_call(connection: Any, stream: Stream) -> None:
    """`connection`: the Connection the call came on (it ends and forgets calls)."""
    handler, context = stream.handler, stream.context
    try:
        if handler.request_streaming:
            request = _requests(connection, stream)
        else:
            message = stream.single_message()
            connection.taken(stream)  # its bytes are the handler's now: credit comes back
            request = decode(handler, message)
        if handler.response_streaming:
            behaviour = handler.stream_stream or handler.unary_stream
            result = behaviour(request, context)
            if hasattr(result, "__aiter__"):
                try:
                    async for message in result:
                        await send_message(connection, stream, message)
                finally:
                    await result.aclose()
            else:
                await result  # it wrote with context.write
        else:
            behaviour = handler.unary_unary or handler.stream_unary
            response = await behaviour(request, context)
            if context.code is None or context.code == 0:
                payload = framed(handler, response)
                connection.answer(stream, payload, trailers(0, "", context.trailing))
                return
        connection.end_call(stream, context.code or 0, context.details, context.trailing)
    except grpc.aio.AbortError:
        connection.end_call(stream, context.code or 0, context.details, context.trailing)
    except CallError as exc:
        connection.end_call(stream, exc.status, exc.message)
    except asyncio.CancelledError:
        if stream.expired:
            connection.end_call(stream, DEADLINE_EXCEEDED, "Deadline Exceeded")
        else:  # the server is stopping (a call the client reset is already forgotten)
            connection.end_call(stream, CANCELLED, "the call was cancelled")
    except Exception as exc:
        if context.code:  # a status the handler set before it raised (grpc's generated
            # servicer: UNIMPLEMENTED for a method the service does not override)
            log.debug("gRPC call %s raised after setting its status", context.headers.path,
                      exc_info=exc)  # fmt: skip
            connection.end_call(stream, context.code, context.details, context.trailing)
            return
        connection.end_call(stream, INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        raise  # logged where the task ends (Connection._after)


async def _requests(connection: Any, stream: Stream) -> AsyncIterator[Any]:
    """A streaming call's request messages as they arrive. A message that does not
    parse, or a stream that ends inside one, ends the call with INTERNAL at once (the
    handler's reader may be a task of its own, which would not report it)."""
    messages, loop = stream.messages, asyncio.get_running_loop()
    while stream.id in connection.streams:
        while messages.ready:
            try:
                message = messages.take()
                connection.taken(stream)  # the client may send more once these are taken
                request = decode(stream.handler, message)
            except CallError as exc:
                connection.fail_call(stream, exc)
                raise asyncio.CancelledError from None
            yield request
        if stream.remote_closed:
            if messages.partial:
                error = CallError(INTERNAL, "the client's stream ended inside a message")
                connection.fail_call(stream, error)
                raise asyncio.CancelledError
            return
        stream.arrived = loop.create_future()
        await stream.arrived
    raise asyncio.CancelledError  # the call was reset or ended


async def send_message(connection: Any, stream: Stream, message: Any) -> None:
    """One message of a streaming response; waits while flow control holds it."""
    if stream.id not in connection.streams or stream.ended:
        raise asyncio.CancelledError  # the client reset the call
    await connection.writer.send(stream, framed(stream.handler, message))
