"""One client connection of the gateway's HTTP/2 gRPC server: frames in, calls started
(gateway/grpc/h2/running.py runs them), calls ended, and the limits a client must keep.

A unary call whose answer fits the client's windows goes out in one write (headers,
message, trailers), which is most calls; the rest wait in their stream's outbox for
WINDOW_UPDATE (writer.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.grpc.h2 import frames as f
from gateway.grpc.h2.call_table import CallTable
from gateway.grpc.h2.calls import (
    UNIMPLEMENTED,
    CallError,
    Context,
    Messages,
)
from gateway.grpc.h2.coalesce import CoalescingTransport
from gateway.grpc.h2.headers import (
    MAX_HEADER_BLOCK,
    MAX_HEADER_LIST,
    BadCall,
    HeaderDecoder,
    call_headers,
    error_response,
)
from gateway.grpc.h2.running import send_message
from gateway.grpc.h2.stream import Stream
from gateway.grpc.h2.writer import Writer

log = logging.getLogger(__name__)

RECEIVE_WINDOW = 1 << 20  # bytes a client may send on one stream before we credit it
CONNECTION_WINDOW = 1 << 24  # ... on the whole connection
MAX_FRAME = 1 << 20  # the largest frame we accept (fewer frames for large tensors)
LINGER_S = 1.0  # after GOAWAY, calls the client had already sent are refused, not lost
MAX_RESETS_PER_S = 1000  # streams a client may reset or have refused (the rapid-reset attack)


class Connection(CallTable, asyncio.Protocol):
    def __init__(self, server: Any) -> None:
        """`server`: the H2Server (its methods, limits and set of connections)."""
        self.server = server
        self.transport: CoalescingTransport | None = None
        self.writer: Writer | None = None
        self.decoder = HeaderDecoder()
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self.closing = False  # GOAWAY sent: no new calls
        self.peer = "unknown"
        self._buffer = b""
        self._preface = False
        self._continued: tuple[int, int, bytearray] | None = None  # stream, flags, block
        self._window = CONNECTION_WINDOW  # bytes the client may still send
        self._unacked = 0  # ... received and not yet credited back
        self._idle: asyncio.TimerHandle | None = None
        self._resets = (0.0, 0)  # (the second they were counted in, how many)
        self._broken = False

    # ---- the connection's life -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        self.transport = CoalescingTransport(transport, loop, lambda: len(self.streams) > 1)
        self.writer = Writer(self.transport, self._sent)
        address = transport.get_extra_info("peername")
        if address:
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            self.peer = f"{'ipv6' if ':' in address[0] else 'ipv4'}:{host}:{address[1]}"
        if len(self.server.connections) >= self.server.max_connections:
            refusal = f.goaway(0, f.ENHANCE_YOUR_CALM, "the server has too many connections")
            self.transport.write(f.settings({}) + refusal)
            self.closing = True
            self._linger()
            return
        self.server.connections.add(self)
        settings = {
            f.MAX_CONCURRENT_STREAMS: self.server.max_streams,
            f.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW,
            f.MAX_FRAME_SIZE: MAX_FRAME,
            f.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
        }
        increment = CONNECTION_WINDOW - f.DEFAULT_WINDOW
        self.transport.write(f.settings(settings) + f.window_update(0, increment))
        self._became_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        for stream in list(self.streams.values()):
            self.forget(stream)
            if stream.task is not None:
                stream.task.cancel()
        self.writer.lost()

    def pause_writing(self) -> None:
        # A client that does not read gets nothing more read from it either: its pings,
        # settings and calls would otherwise pile answers up in the write buffer.
        self.writer.pause()
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writer.resume()
        self.transport.resume_reading()

    def go_away(self, code: int = f.NO_ERROR, message: str = "") -> None:
        """No new calls; calls in flight finish, then the connection closes."""
        if self.closing or self.transport is None:
            return
        self.closing = True
        self.transport.write(f.goaway(self.last_stream, code, message))
        if not self.streams:
            self._linger()

    def _linger(self) -> None:
        """Close after a moment: calls the client sent before it read GOAWAY get
        REFUSED_STREAM meanwhile (which its library retries), not a closed socket."""
        asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    def _became_idle(self) -> None:
        if self.closing:
            self._linger()
            return
        self._idle = asyncio.get_running_loop().call_later(self.server.idle_s, self.go_away)

    # ---- frames in -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
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
            self._window += self._unacked
            self._unacked = 0

    def _fail(self, code: int, message: str) -> None:
        log.debug("gRPC connection from %s broke the protocol: %s", self.peer, message)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(f.goaway(self.last_stream, code, message))
            self.transport.close()
        self._broken = True  # whatever still arrives is not read

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
            self._check_block(len(block))
            if flags & f.END_HEADERS:
                self._headers(stream_id, flags, block)
            else:
                self._continued = (stream_id, flags, bytearray(block))
        elif kind == f.CONTINUATION:
            self._continuation(flags, stream_id, payload)
        elif kind == f.SETTINGS:
            if stream_id != 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "SETTINGS on a stream")
            if not flags & f.ACK:
                values = f.parse_settings(payload)
                self.transport.write(f.frame(f.SETTINGS, f.ACK, 0))
                self.writer.configure(values, self.streams.values())
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
                self._count_reset()
                self.forget(stream)
                if stream.task is not None:
                    stream.task.cancel()
        elif kind == f.GOAWAY:
            self.go_away()
        elif kind == f.PUSH_PROMISE:
            raise f.H2Error(f.PROTOCOL_ERROR, "a client may not push")
        # PRIORITY and unknown frame types are ignored, as the protocol says.

    def _check_block(self, size: int) -> None:
        if size > MAX_HEADER_BLOCK:
            raise f.H2Error(f.ENHANCE_YOUR_CALM, f"a header block past {MAX_HEADER_BLOCK} bytes")

    def _continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is None or self._continued[0] != stream_id:
            raise f.H2Error(f.PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        block = self._continued[2]
        block += payload
        self._check_block(len(block))
        if flags & f.END_HEADERS:
            first_flags = self._continued[1]
            self._continued = None
            self._headers(stream_id, first_flags, bytes(block))

    def _count_reset(self) -> None:
        second = asyncio.get_running_loop().time() // 1
        since, count = self._resets
        count = count + 1 if since == second else 1
        self._resets = (second, count)
        if count > MAX_RESETS_PER_S:
            raise f.H2Error(f.ENHANCE_YOUR_CALM, "too many streams reset or refused")

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        self._window -= len(payload)
        self._unacked += len(payload)
        if self._window < 0:
            raise f.H2Error(f.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "DATA on a stream never opened")
            return  # a call already answered or reset: its late data is dropped
        stream.window -= len(payload)
        if stream.remote_closed or stream.window < 0:
            code = f.STREAM_CLOSED if stream.remote_closed else f.FLOW_CONTROL_ERROR
            self.transport.write(f.rst_stream(stream.id, code))
            self.forget(stream)
            if stream.task is not None:
                stream.task.cancel()
            return
        try:
            stream.messages.feed(f.strip_padding(payload, flags))
        except CallError as exc:
            self.fail_call(stream, exc)
            return
        if flags & f.END_STREAM:
            stream.remote_closed = True
        else:
            stream.unacked += len(payload)
            self.credit(stream)
        if stream.handler.request_streaming:
            stream.wake()
        elif stream.remote_closed:
            self._start(stream)

    def credit(self, stream: Stream) -> None:
        """Let the client send as many bytes again as it has sent, in quarters of the
        window. A unary call's as they come (its one message is bounded by the size
        limit); a streaming call's not while half a window of whole messages waits for
        its handler: a client cannot run further ahead of a slow handler than that."""
        if stream.unacked < RECEIVE_WINDOW // 4 or stream.remote_closed:
            return
        if stream.handler.request_streaming and stream.messages.ready_bytes >= RECEIVE_WINDOW // 2:
            return
        self.transport.write(f.window_update(stream.id, stream.unacked))
        stream.window += stream.unacked
        stream.unacked = 0

    # ---- calls -----------------------------------------------------------------------

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self.decoder.decode(block)  # always: HPACK's table must stay in step
        if stream_id in self.streams:  # trailers from the client end its messages
            if flags & f.END_STREAM:
                self._data(f.END_STREAM, stream_id, b"")
            return
        if stream_id % 2 == 0:
            raise f.H2Error(f.PROTOCOL_ERROR, f"a client stream with an even id, {stream_id}")
        if stream_id <= self.last_stream:  # closed: answered, reset, or skipped over
            self.transport.write(f.rst_stream(stream_id, f.STREAM_CLOSED))
            return
        self.last_stream = stream_id
        if self.closing or len(self.streams) >= self.server.max_streams:
            self.transport.write(f.rst_stream(stream_id, f.REFUSED_STREAM))
            self._count_reset()
            return
        try:
            call = call_headers(headers)
            handler = self.server.methods.get(call.path)
            if handler is None:
                raise BadCall(UNIMPLEMENTED, f"Method not found: {call.path}")
            single = not handler.request_streaming
            messages = Messages(call.encoding, self.server.max_message_bytes, single)
        except (BadCall, CallError) as exc:
            block = error_response(getattr(exc, "http_status", 200), exc.status, str(exc))
            end = f.header_frames(stream_id, block, True, self.writer.max_frame)
            reset = b"" if flags & f.END_STREAM else f.rst_stream(stream_id, f.NO_ERROR)
            self.transport.write(end + reset)
            return
        context = Context(call, None, self.peer)
        stream = Stream(stream_id, handler, context, messages, self.writer.initial_window)
        stream.window = RECEIVE_WINDOW
        if handler.response_streaming:
            context.write = lambda message, s=stream: send_message(self, s, message)
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
