"""One client connection of the gateway's HTTP/2 gRPC server: frames in, calls started,
responses out under flow control.

Each call runs as one task: its handler, then the response. A unary call whose answer
fits the client's windows goes out in one write (headers, message, trailers), which is
most calls; the rest wait in their stream's outbox for WINDOW_UPDATE.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from gateway.grpc.h2 import frames as f
from gateway.grpc.h2.calls import (
    CANCELLED,
    DEADLINE_EXCEEDED,
    INTERNAL,
    UNIMPLEMENTED,
    CallError,
    Context,
    Messages,
    decode,
    framed,
)
from gateway.grpc.h2.headers import BadCall, HeaderDecoder, call_headers, error_response, trailers
from gateway.grpc.h2.stream import Stream
from gateway.grpc.h2.writer import Writer

log = logging.getLogger(__name__)

RECEIVE_WINDOW = 1 << 20  # bytes a client may send on one stream before we credit it
CONNECTION_WINDOW = 1 << 24  # ... on the whole connection
MAX_FRAME = 1 << 20  # the largest frame we accept (fewer frames for large tensors)


class Connection(asyncio.Protocol):
    def __init__(self, server: Any) -> None:
        """`server`: the H2Server (its methods, limits and set of connections)."""
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.writer: Writer | None = None
        self.decoder = HeaderDecoder()
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self._buffer = b""
        self._preface = False
        self._continued: tuple[int, int, bytearray] | None = None  # stream, flags, block
        self._unacked = 0  # connection-level bytes received and not yet credited
        self.closing = False  # GOAWAY sent: no new calls
        self._idle: asyncio.TimerHandle | None = None
        self.peer = "unknown"

    # ---- the connection's life -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.writer = Writer(self.transport, self._sent)
        address = transport.get_extra_info("peername")
        if address:
            family = "ipv6" if ":" in address[0] else "ipv4"
            self.peer = f"{family}:{address[0]}:{address[1]}"
        if len(self.server.connections) >= self.server.max_connections:
            refusal = f.goaway(0, f.REFUSED_STREAM, "the server has too many connections")
            self.transport.write(f.settings({}) + refusal)
            self.transport.close()
            return
        self.server.connections.add(self)
        settings = {
            f.MAX_CONCURRENT_STREAMS: self.server.max_streams,
            f.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW,
            f.MAX_FRAME_SIZE: MAX_FRAME,
        }
        increment = CONNECTION_WINDOW - f.DEFAULT_WINDOW
        self.transport.write(f.settings(settings) + f.window_update(0, increment))
        self._became_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        for stream in list(self.streams.values()):
            self._forget(stream)
            if stream.task is not None:
                stream.task.cancel()
        self.writer.lost()

    def pause_writing(self) -> None:
        self.writer.pause()

    def resume_writing(self) -> None:
        self.writer.resume()

    def go_away(self, code: int = f.NO_ERROR, message: str = "") -> None:
        """No new calls; calls in flight finish. The connection closes when none is left."""
        if not self.closing and self.transport is not None:
            self.closing = True
            self.transport.write(f.goaway(self.last_stream, code, message))
        if not self.streams and self.transport is not None:
            self.transport.close()

    def _became_idle(self) -> None:
        if self.closing:
            self.transport.close()
            return
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(self.server.idle_s, self.go_away)

    # ---- frames in -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        if not self._preface:
            if len(buffer) < len(f.PREFACE):
                self._buffer = buffer
                return
            if not buffer.startswith(f.PREFACE):
                self._fail(f.PROTOCOL_ERROR, "not an HTTP/2 connection (gRPC needs HTTP/2)")
                return
            buffer = buffer[len(f.PREFACE) :]
            self._preface = True
        position, end = 0, len(buffer)
        try:
            while end - position >= 9:
                high, low, kind, flags, stream_id = f.HEADER.unpack_from(buffer, position)
                size = (high << 8) | low
                if size > MAX_FRAME:
                    raise f.H2Error(f.FRAME_SIZE_ERROR, f"a frame of {size} bytes")
                if end - position - 9 < size:
                    break
                payload = buffer[position + 9 : position + 9 + size]
                position += 9 + size
                self._frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
        except f.H2Error as exc:
            self._fail(exc.code, str(exc))
            return
        except Exception:  # a fault of ours: this connection ends, the server goes on
            log.exception("gRPC connection from %s failed", self.peer)
            self._fail(f.INTERNAL_ERROR, "internal error")
            return
        self._buffer = buffer[position:]
        if self._unacked >= CONNECTION_WINDOW // 4:
            self.transport.write(f.window_update(0, self._unacked))
            self._unacked = 0

    def _fail(self, code: int, message: str) -> None:
        log.debug("gRPC connection from %s broke the protocol: %s", self.peer, message)
        if self.transport is not None:
            self.transport.write(f.goaway(self.last_stream, code, message))
            self.transport.close()

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is not None and kind != f.CONTINUATION:
            raise f.H2Error(f.PROTOCOL_ERROR, "a header block was interrupted")
        if kind == f.DATA:
            self._data(flags, stream_id, payload)
        elif kind == f.HEADERS:
            if stream_id == 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "HEADERS on stream 0")
            block = f.strip_padding(payload, flags)
            if flags & f.PRIORITY_FLAG:
                block = block[5:]
            if flags & f.END_HEADERS:
                self._headers(stream_id, flags, block)
            else:
                self._continued = (stream_id, flags, bytearray(block))
        elif kind == f.CONTINUATION:
            self._continuation(flags, stream_id, payload)
        elif kind == f.SETTINGS:
            self._settings(flags, stream_id, payload)
        elif kind == f.WINDOW_UPDATE:
            increment = f.parse_u32(payload, "WINDOW_UPDATE")
            self.writer.credit(stream_id, increment, self.streams.get(stream_id))
        elif kind == f.PING:
            if len(payload) != 8:
                raise f.H2Error(f.FRAME_SIZE_ERROR, "a PING payload must be 8 bytes")
            if not flags & f.ACK:
                self.transport.write(f.frame(f.PING, f.ACK, 0, payload))
        elif kind == f.RST_STREAM:
            f.parse_u32(payload, "RST_STREAM")
            stream = self.streams.get(stream_id)
            if stream is not None:  # the client gave up on the call
                self._forget(stream)
                if stream.task is not None:
                    stream.task.cancel()
        elif kind == f.GOAWAY:
            self.go_away()
        elif kind == f.PUSH_PROMISE:
            raise f.H2Error(f.PROTOCOL_ERROR, "a client may not push")
        # PRIORITY and unknown frame types are ignored, as the protocol says.

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is None or self._continued[0] != stream_id:
            raise f.H2Error(f.PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        block = self._continued[2]
        block += payload
        if len(block) > 4 * 64 * 1024:
            raise f.H2Error(f.ENHANCE_YOUR_CALM, "a header block past 256 KiB")
        if flags & f.END_HEADERS:
            first_flags = self._continued[1]
            self._continued = None
            self._headers(stream_id, first_flags, bytes(block))

    def _settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id != 0:
            raise f.H2Error(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            return
        values = f.parse_settings(payload)
        self.transport.write(f.frame(f.SETTINGS, f.ACK, 0))
        self.writer.configure(values, self.streams.values())

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        self._unacked += len(payload)
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "DATA on a stream never opened")
            return  # a call already answered or reset: its late data is dropped
        if stream.remote_closed:
            self._reset(stream, f.STREAM_CLOSED)
            return
        data = f.strip_padding(payload, flags)
        try:
            stream.messages.feed(data)
        except CallError as exc:
            self._end(stream, exc.status, exc.message)
            return
        streaming = stream.handler.request_streaming
        if flags & f.END_STREAM:
            stream.remote_closed = True
        else:
            stream.unacked += len(payload)
            self._credit(stream)
        if streaming:
            stream.wake()
        elif stream.remote_closed:
            self._start(stream)

    def _credit(self, stream: Stream) -> None:
        """Let the client send as many bytes again as it has sent. A unary call's at once
        (its one message is bounded by the size limit). A streaming call's in quarters of
        the window, and not while half a window of whole messages waits for its handler:
        a client cannot run further ahead of a slow handler than that."""
        if not stream.unacked or stream.remote_closed:
            return
        if stream.handler.request_streaming and (
            stream.unacked < RECEIVE_WINDOW // 4
            or stream.messages.ready_bytes >= RECEIVE_WINDOW // 2
        ):
            return
        self.transport.write(f.window_update(stream.id, stream.unacked))
        stream.unacked = 0

    # ---- calls -----------------------------------------------------------------------

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self.decoder.decode(block)  # always: HPACK's table must stay in step
        if stream_id in self.streams:  # trailers from the client end its messages
            stream = self.streams[stream_id]
            if flags & f.END_STREAM:
                self._data(f.END_STREAM, stream_id, b"")
            return
        if stream_id % 2 == 0 or stream_id <= self.last_stream:
            raise f.H2Error(f.PROTOCOL_ERROR, f"stream {stream_id} cannot open now")
        self.last_stream = stream_id
        if self.closing or len(self.streams) >= self.server.max_streams:
            self.transport.write(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        try:
            call = call_headers(headers)
            handler = self.server.methods.get(call.path)
            if handler is None:
                raise BadCall(UNIMPLEMENTED, f"Method not found: {call.path}")
            messages = Messages(call.encoding, self.server.max_message_bytes)
        except (BadCall, CallError) as exc:
            status = exc.status
            http = getattr(exc, "http_status", 200)
            block = error_response(http, status, str(exc))
            self.transport.write(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, stream_id, block))
            if not flags & f.END_STREAM:
                self.transport.write(f.rst_stream(stream_id, f.NO_ERROR))
            return
        context = Context(call, None, self.peer)
        stream = Stream(stream_id, handler, context, messages, self.writer.initial_window)
        if handler.response_streaming:
            context.write = lambda message, s=stream: self._send(s, message)
        self.streams[stream_id] = stream
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if call.timeout_s is not None:
            loop = asyncio.get_running_loop()
            stream.timer = loop.call_later(call.timeout_s, self._expire, stream)
        if flags & f.END_STREAM:
            stream.remote_closed = True
        if handler.request_streaming or stream.remote_closed:
            self._start(stream)

    def _start(self, stream: Stream) -> None:
        stream.task = asyncio.get_running_loop().create_task(self._run(stream))

    def _expire(self, stream: Stream) -> None:
        stream.expired = True
        if stream.task is not None:
            stream.task.cancel()
        else:
            self._end(stream, DEADLINE_EXCEEDED, "Deadline Exceeded")

    async def _run(self, stream: Stream) -> None:
        handler, context = stream.handler, stream.context
        try:
            if handler.request_streaming:
                request = self._requests(stream)
            else:
                request = decode(handler, stream.single_message())
            if handler.response_streaming:
                behaviour = handler.stream_stream or handler.unary_stream
                result = behaviour(request, context)
                if hasattr(result, "__aiter__"):
                    async for message in result:
                        await self._send(stream, message)
                else:
                    await result  # it wrote with context.write
            else:
                behaviour = handler.unary_unary or handler.stream_unary
                response = await behaviour(request, context)
                if context.code is None or context.code == 0:
                    payload = framed(handler, response)
                    self.writer.answer(stream, payload, trailers(0, "", context.trailing))
                    self._done(stream)
                    return
            self._end(stream, context.code or 0, context.details, context.trailing)
        except grpc.aio.AbortError:
            self._end(stream, context.code or 0, context.details, context.trailing)
        except CallError as exc:
            self._end(stream, exc.status, exc.message)
        except asyncio.CancelledError:
            if stream.expired:
                self._end(stream, DEADLINE_EXCEEDED, "Deadline Exceeded")
            elif stream.id in self.streams:  # the server is stopping
                self._end(stream, CANCELLED, "the server is shutting down")
        except Exception as exc:
            log.exception("gRPC method %s failed", stream.context.headers.path)
            self._end(stream, INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    async def _requests(self, stream: Stream):
        """A streaming call's request messages as they arrive."""
        handler, ready = stream.handler, stream.messages.ready
        loop = asyncio.get_running_loop()
        while True:
            while ready:
                message = stream.messages.take()
                self._credit(stream)  # the client may send more once these are taken
                yield decode(handler, message)
            if stream.remote_closed:
                if stream.messages.partial:
                    raise CallError(INTERNAL, "the client's stream ended inside a message")
                return
            stream.arrived = loop.create_future()
            await stream.arrived

    async def _send(self, stream: Stream, message: Any) -> None:
        """One message of a streaming response; waits while flow control holds it."""
        if stream.id not in self.streams:
            raise asyncio.CancelledError  # the client reset the call
        payload = framed(stream.handler, message)
        await self.writer.send(stream, payload)

    def _end(self, stream: Stream, status: int, message: str, metadata=()) -> None:
        """The call ends with `status`: trailers (after any held data), then forgotten."""
        if stream.id not in self.streams:
            return
        self.writer.finish(stream, trailers(status, message, metadata))
        self._done(stream)

    def _done(self, stream: Stream) -> None:
        """The response is written, or held in the outbox until the client's credit lets
        it go (the writer then calls `_sent`)."""
        if not stream.outbox:
            self._sent(stream)

    def _sent(self, stream: Stream) -> None:
        """`stream`'s trailers have gone: if the client is still sending, RST_STREAM
        NO_ERROR tells it to stop; the call is forgotten."""
        if not stream.remote_closed:
            self.transport.write(f.rst_stream(stream.id, f.NO_ERROR))
        self._forget(stream)

    def _reset(self, stream: Stream, code: int) -> None:
        self.transport.write(f.rst_stream(stream.id, code))
        self._forget(stream)
        if stream.task is not None:
            stream.task.cancel()

    def _forget(self, stream: Stream) -> None:
        if self.streams.pop(stream.id, None) is None:
            return
        if stream.timer is not None:
            stream.timer.cancel()
        stream.wake()
        stream.release()
        self.writer.forget(stream)
        if not self.streams and self.transport is not None and not self.transport.is_closing():
            self._became_idle()
