"""DATA in: a call's messages, and the flow control that bounds what a client may send
(RFC 9113 sections 5.2 and 6.9).

Every stream's window and the connection's are sized to the largest request message
(H2Server.receive_window), so a large tensor crosses without waiting for credit. The
connection's credit comes back as bytes arrive: withheld until calls took their
messages, two calls whose unfinished messages filled the window between them could
never finish (nor could a streaming call stuck on its own partial message). What a
connection holds in request messages not yet taken is bounded instead: past four
windows (H2Server.max_held), the call holding the most ends with RESOURCE_EXHAUSTED and
its bytes go. A streaming call's own credit comes back as its handler takes messages,
so its client runs at most half a window ahead of a slow handler. Messages are counted
as they came on the wire, and decompressed only when taken. A unary message must arrive
within the server's read timeout of its headers.
"""

from __future__ import annotations

import logging

from gateway.grpc.h2 import frames as f
from gateway.grpc.h2.calls import CANCELLED, RESOURCE_EXHAUSTED, CallError
from gateway.grpc.h2.stream import Stream

log = logging.getLogger(__name__)


class Inbound:
    """Connection's part for DATA; the connection gives `server`, `transport`, `streams`,
    `last_stream`, `resets`, `guard`, `held`, `_window`, `_unacked`, `_broken`, `_start`,
    `fail_call` and `fail_stream`."""

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        size = len(payload)
        self._window -= size
        if self._window < 0:
            raise f.H2Error(f.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        self.consumed(size)
        message = f.strip_padding(payload, flags)
        if not message and not flags & f.END_STREAM:
            self.guard.spend("empty", self._now())
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "DATA on a stream never opened")
            if stream_id not in self.resets:
                raise f.H2Error(f.STREAM_CLOSED, f"DATA on stream {stream_id} after its end")
            return  # late data of a call we reset: dropped
        stream.window -= size
        if stream.remote_closed or stream.window < 0:
            code = f.STREAM_CLOSED if stream.remote_closed else f.FLOW_CONTROL_ERROR
            self.fail_stream(stream, code)
            return
        stream.unacked += size - len(message)  # padding: credited with the stream's next
        if stream.ended:  # answered, its answer waiting for credit: the rest is dropped
            return
        try:
            stream.messages.feed(message)
        except CallError as exc:
            self.fail_call(stream, exc)
            return
        stream.held += len(message)
        self.held += len(message)
        if self.held > self.server.max_held:
            self._shed_largest()
            if stream_id not in self.streams:
                return
        if flags & f.END_STREAM:
            stream.remote_closed = True
            if stream.arrival is not None:
                stream.arrival.cancel()
                stream.arrival = None
        if stream.handler.request_streaming:
            self.credit(stream)  # taken bytes owed while a message waits for more
            stream.wake()
        elif stream.remote_closed:
            self._start(stream)

    def _shed_largest(self) -> None:
        """Past what one connection may hold: the calls holding the most end, until
        it holds no more than that."""
        limit = self.server.max_held
        while self.held > limit and self.streams:
            largest = max(self.streams.values(), key=lambda s: s.held)
            if not largest.held:  # (cannot be: what is held is the open calls')
                return
            log.debug("gRPC connection from %s holds %d bytes of messages: stream %d ends",
                      self.peer, self.held, largest.id)  # fmt: skip
            message = (
                f"this connection holds more than {limit} bytes of request messages not yet "
                "taken (4 x --max-request-bytes); send fewer large messages at once"
            )
            self.fail_call(largest, CallError(RESOURCE_EXHAUSTED, message))

    # ---- flow control of what the client sends --------------------------------------

    def consumed(self, size: int) -> None:
        """`size` bytes the client sent have arrived: it may send as many again.
        Credited in quarters of the window, so that small calls cost no extra frame."""
        self._unacked += size
        if self._unacked >= self.server.receive_window // 4 and not self._broken:
            self.transport.write(f.window_update(0, self._unacked))
            self._window += self._unacked
            self._unacked = 0

    def taken(self, stream: Stream) -> None:
        """A call took messages: the bytes it no longer holds, and a streaming call's
        own credit, as in `credit`."""
        freed = stream.held - stream.messages.buffered
        if freed > 0:
            stream.held -= freed
            self.held -= freed
            stream.unacked += freed
        if stream.handler.request_streaming:
            self.credit(stream)

    def credit(self, stream: Stream) -> None:
        """Let a streaming call's client send as many bytes again as its handler took:
        in quarters of the window, or at once while part of a message waits for more
        (which could otherwise never come); not while half a window of whole messages
        waits for its handler."""
        window = self.server.receive_window
        if stream.remote_closed or not stream.unacked:
            return
        if stream.unacked < window // 4 and not stream.messages.partial:
            return
        if stream.messages.ready_bytes >= window // 2:
            return
        self.transport.write(f.window_update(stream.id, stream.unacked))
        stream.window += stream.unacked
        stream.unacked = 0

    def _too_slow(self, stream: Stream) -> None:
        """A unary call's message did not arrive in time: its stream and bytes go."""
        stream.arrival = None
        timeout = self.server.read_timeout_s
        self.fail_call(
            stream, CallError(CANCELLED, f"the request message did not arrive within "
                                         f"{timeout:g} s (the server's --read-timeout)")
        )  # fmt: skip
