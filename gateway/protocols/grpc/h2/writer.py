"""What the server sends on one connection, under HTTP/2 flow control: the client's
window for the connection and for each stream, its largest frame, and the transport's
own back-pressure (RFC 9113 sections 5.2 and 6.9)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from accel_base.datatypes import VIEW_FROM_BYTES
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.calls import Payload, payload_size
from gateway.protocols.grpc.h2.coalesce import CoalescingTransport
from gateway.protocols.grpc.h2.headers import RESPONSE_HEADERS
from gateway.protocols.grpc.h2.stream import Stream


class Writer:
    def __init__(self, transport: CoalescingTransport, sent: Callable[[Stream], None]) -> None:
        """`sent` is called when a stream's held trailers have finally gone out."""
        self.transport = transport
        self.sent = sent
        self.window = f.DEFAULT_WINDOW  # the connection's send window
        self.initial_window = f.DEFAULT_WINDOW  # each new stream's
        self.max_frame = f.DEFAULT_MAX_FRAME
        self.blocked: dict[int, Stream] = {}  # streams with bytes held, oldest first
        # WINDOW_UPDATEs the client may send for what we sent: 4 an answer, 2 a DATA frame
        # (grpc's client sends about two for a small answer, and one or two for each
        # message of a streamed answer, which has no trailers of its own).
        self.earned = 0
        self.paused = False
        self._resumed: asyncio.Future | None = None

    # ---- the client's settings and credit --------------------------------------------

    def configure(self, values: dict[int, int], streams: Iterable[Stream]) -> None:
        if f.INITIAL_WINDOW_SIZE in values:
            delta = values[f.INITIAL_WINDOW_SIZE] - self.initial_window
            self.initial_window = values[f.INITIAL_WINDOW_SIZE]
            for stream in streams:  # open streams' windows move by the difference
                stream.send_window += delta
                if stream.send_window > f.MAX_WINDOW:
                    raise f.H2Error(f.FLOW_CONTROL_ERROR, "a stream's window past 2^31-1")
        self.max_frame = values.get(f.MAX_FRAME_SIZE, self.max_frame)
        self._flush_blocked()

    def credit(self, stream_id: int, increment: int, stream: Stream | None) -> None:
        if stream_id == 0:
            if increment == 0:
                raise f.H2Error(f.PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self.window += increment
            if self.window > f.MAX_WINDOW:
                raise f.H2Error(f.FLOW_CONTROL_ERROR, "the connection window past 2^31-1")
            self._flush_blocked()
        elif stream is not None and increment:
            stream.send_window += increment
            if stream.send_window > f.MAX_WINDOW:
                raise f.H2Error(f.FLOW_CONTROL_ERROR, f"stream {stream_id}'s window past 2^31-1")
            self._flush(stream)

    # ---- a call's response -----------------------------------------------------------

    def answer(self, stream: Stream, payload: Payload, trailers: bytes) -> None:
        """A unary call's whole response: in one write when the windows allow."""
        size = payload_size(payload)
        if (
            not stream.headers_sent
            and size <= self.window
            and size <= stream.send_window
            and size <= self.max_frame
        ):
            self.window -= size
            stream.send_window -= size
            stream.headers_sent = True
            self.earned += 2
            sid = stream.id
            head = f.frame(f.HEADERS, f.END_HEADERS, sid, RESPONSE_HEADERS) + f.frame_head(
                f.DATA, 0, sid, size
            )
            if isinstance(payload, bytes):
                self.transport.write(head + payload + self._trailers(sid, trailers))
            else:
                self.transport.writelines([head, *payload, self._trailers(sid, trailers)])
            return
        self._hold(stream, payload)
        self.finish(stream, trailers)

    async def send(self, stream: Stream, payload: Payload) -> None:
        """One message of a streaming response; returns once it has left (or the stream
        is gone), so a handler cannot run ahead of its client."""
        self._hold(stream, payload)
        loop = asyncio.get_running_loop()
        while stream.id in self.blocked or self.paused:
            if self.paused:
                if self._resumed is None or self._resumed.done():
                    self._resumed = loop.create_future()
                await self._resumed
            else:  # forget() or the client's credit ends this wait
                stream.drained = loop.create_future()
                await stream.drained

    def finish(self, stream: Stream, trailers: bytes) -> None:
        """End the stream with `trailers`, after the bytes it holds."""
        if not stream.headers_sent:  # nothing sent: a trailers-only response
            stream.headers_sent = True
            self.transport.write(self._trailers(stream.id, RESPONSE_HEADERS + trailers))
            return
        if stream.outbox:
            stream.trailers = trailers
            return
        self.transport.write(self._trailers(stream.id, trailers))

    def forget(self, stream: Stream) -> None:
        self.blocked.pop(stream.id, None)
        stream.outbox.clear()

    # ---- the transport's back-pressure -------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    def lost(self) -> None:
        self.resume()
        for stream in list(self.blocked.values()):
            stream.release()
        self.blocked.clear()

    # ---- inside ------------------------------------------------------------------------

    def _trailers(self, stream_id: int, block: bytes) -> bytes:
        self.earned += 4
        return f.header_frames(stream_id, block, True, self.max_frame)

    def _hold(self, stream: Stream, payload: Payload) -> None:
        if not stream.headers_sent:
            stream.headers_sent = True
            self.transport.write(f.frame(f.HEADERS, f.END_HEADERS, stream.id, RESPONSE_HEADERS))
        if isinstance(payload, bytes):
            stream.outbox.append(memoryview(payload))
        else:
            stream.outbox.extend(memoryview(piece) for piece in payload)
        self.blocked[stream.id] = stream
        self._flush(stream)

    def _flush_blocked(self) -> None:
        for stream in list(self.blocked.values()):
            if self.window <= 0:
                return
            self._flush(stream)

    def _flush(self, stream: Stream) -> None:
        outbox = stream.outbox
        pieces: list[bytes | memoryview] = []
        sent = 0
        while outbox and self.window > 0 and stream.send_window > 0:
            room = min(self.window, stream.send_window, self.max_frame)
            head = len(pieces)
            pieces.append(b"")  # the frame's header, once its size is known
            size = 0
            while outbox and size < room:  # a frame may take several held pieces
                piece = outbox[0]
                take = min(len(piece), room - size)
                if take == len(piece):
                    outbox.popleft()
                else:
                    outbox[0] = piece[take:]
                    piece = piece[:take]
                pieces.append(piece)
                size += take
            pieces[head] = f.frame_head(f.DATA, 0, stream.id, size)
            self.earned += 2
            self.window -= size
            stream.send_window -= size
            sent += size
        if not outbox:
            self.blocked.pop(stream.id, None)
            if stream.trailers is not None:
                pieces.append(self._trailers(stream.id, stream.trailers))
        if sent >= VIEW_FROM_BYTES:  # large: the socket takes the views as they are
            self.transport.writelines(pieces)
        elif pieces:
            self.transport.write(b"".join(pieces))
        if not outbox:
            stream.release()
            if stream.trailers is not None:
                stream.trailers = None
                self.sent(stream)
