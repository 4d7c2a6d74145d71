"""DATA in: a call's messages, and the flow control that bounds what a client may send
(RFC 9113 sections 5.2 and 6.9).

Every stream's window and the connection's are sized to the largest request message
(H2Server.receive_window). The connection's credit comes back only as calls take their
messages (or as bytes are dropped): a client that opens many calls and never finishes
their messages stops at one window's worth, not at streams x message limit. A unary
call's stream gets no credit at all (its one message fits its window); a streaming
call's, as its handler takes messages. A unary message must arrive within the server's
read timeout of its headers.
"""

from __future__ import annotations

from gateway.grpc.h2 import frames as f
from gateway.grpc.h2.calls import CANCELLED, CallError
from gateway.grpc.h2.stream import Stream


class Inbound:
    """Connection's part for DATA; the connection gives `server`, `transport`, `streams`,
    `last_stream`, `resets`, `guard`, `_window`, `_unacked`, `_broken`, `_start`,
    `fail_call` and `fail_stream`."""

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        size = len(payload)
        self._window -= size
        if self._window < 0:
            raise f.H2Error(f.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        if not size and not flags & f.END_STREAM:
            self.guard.spend("empty", self._now())
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "DATA on a stream never opened")
            if stream_id not in self.resets:
                raise f.H2Error(f.STREAM_CLOSED, f"DATA on stream {stream_id} after its end")
            self.consumed(size)  # late data of a call we reset: dropped
            return
        stream.window -= size
        if stream.remote_closed or stream.window < 0:
            self.consumed(size)
            code = f.STREAM_CLOSED if stream.remote_closed else f.FLOW_CONTROL_ERROR
            self.fail_stream(stream, code)
            return
        message = f.strip_padding(payload, flags)
        padding = size - len(message)
        stream.held += len(message)
        if padding:  # bytes no call holds: credited back at once
            self.consumed(padding)
            stream.window += padding
        try:
            stream.messages.feed(message)
        except CallError as exc:
            self.fail_call(stream, exc)
            return
        if flags & f.END_STREAM:
            stream.remote_closed = True
            if stream.arrival is not None:
                stream.arrival.cancel()
                stream.arrival = None
        if stream.handler.request_streaming:
            stream.wake()
        elif stream.remote_closed:
            self._start(stream)

    # ---- flow control of what the client sends --------------------------------------

    def consumed(self, size: int) -> None:
        """`size` bytes the client sent are no longer held: it may send as many again.
        Credited in quarters of the window, so that small calls cost no extra frame."""
        self._unacked += size
        if self._unacked >= self.server.receive_window // 4 and not self._broken:
            self.transport.write(f.window_update(0, self._unacked))
            self._window += self._unacked
            self._unacked = 0

    def taken(self, stream: Stream) -> None:
        """A call took messages (or ended): the connection's credit for the bytes no
        longer buffered, and a streaming call's own credit, as in `credit`."""
        freed = stream.held - stream.messages.buffered
        if freed > 0:
            stream.held -= freed
            stream.unacked += freed
            self.consumed(freed)
        if stream.handler.request_streaming:
            self.credit(stream)

    def credit(self, stream: Stream) -> None:
        """Let a streaming call's client send as many bytes again as its handler took,
        in quarters of the window; not while half a window of whole messages waits for
        its handler: a client cannot run further ahead of a slow handler than that."""
        window = self.server.receive_window
        if stream.unacked < window // 4 or stream.remote_closed:
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
