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

from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.calls import CANCELLED, RESOURCE_EXHAUSTED, CallError
from gateway.protocols.grpc.h2.stream import Stream

log = logging.getLogger(__name__)


class Inbound:
    """Connection's part for DATA; the connection gives `server`, `transport`, `streams`,
    `last_stream`, `resets`, `guard`, `held`, `_window`, `_unacked`, `_broken`, `_start`,
    `_continued`, `_arriving` (the DATA frame arriving in reads, or None), `_arriving_left`,
    `_arriving_message`, `fail_call` and `fail_stream`."""

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        """A whole DATA frame."""
        message = f.strip_padding(payload, flags)
        stream = self._data_begins(flags, stream_id, len(payload), len(message))
        if stream is not None and not stream.ended:
            self._data_part(stream, message)
        self._data_ends(stream, flags, len(payload))

    def _data_arriving(self, flags: int, stream_id: int, size: int, first: bytes) -> None:
        """A large DATA frame of which only `first` has come: its message goes to its
        stream read by read (`_data_rest`), not gathered into one frame first (a 1 MiB
        frame copied twice in one turn of the loop held every other client ~2 ms).
        A padded frame needs its first byte (the padding's length) in `first`."""
        if self._continued is not None:
            raise f.H2Error(f.PROTOCOL_ERROR, "a header block was interrupted")
        length_byte, padding = 0, 0  # a padded frame's first byte says its padding
        if flags & f.PADDED:
            length_byte, padding = 1, f.padding(first[0], size)
            first = first[1:]
        message_size = size - length_byte - padding
        stream = self._data_begins(flags, stream_id, size, message_size)
        self._arriving = (stream, flags, size)
        self._arriving_left = size - length_byte - len(first)
        self._arriving_message = message_size
        self._data_piece(first)

    def _data_rest(self, data: bytes) -> bytes:
        """The next bytes of the DATA frame arriving; returns what follows the frame."""
        take = min(self._arriving_left, len(data))
        self._arriving_left -= take
        self._data_piece(data if take == len(data) else data[:take])
        if not self._arriving_left:
            stream, flags, size = self._arriving
            self._arriving = None
            self._data_ends(stream, flags, size)
        return data[take:]

    def _data_piece(self, piece: bytes) -> None:
        """Bytes of the arriving frame: its message's go to the stream, padding nowhere."""
        stream = self._arriving[0]
        if len(piece) > self._arriving_message:
            piece = piece[: self._arriving_message]
        self._arriving_message -= len(piece)
        # The stream may have ended meanwhile (shed, its deadline, answered): the rest
        # of its frame is dropped.
        if piece and stream is not None and not stream.ended and self._open(stream):
            self._data_part(stream, piece)

    def _data_begins(
        self, flags: int, stream_id: int, size: int, message_size: int
    ) -> Stream | None:
        """A DATA frame of `size` bytes, `message_size` of them message, has begun: the
        windows it spends, and the stream its message goes to (None: dropped)."""
        self._window -= size
        if self._window < 0:
            raise f.H2Error(f.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        if not message_size and not flags & f.END_STREAM:
            self.guard.spend("empty", self._now())
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id == 0 or stream_id > self.last_stream:
                raise f.H2Error(f.PROTOCOL_ERROR, "DATA on a stream never opened")
            if stream_id not in self.resets:
                raise f.H2Error(f.STREAM_CLOSED, f"DATA on stream {stream_id} after its end")
            return None  # late data of a call we reset: dropped
        stream.window -= size
        if stream.remote_closed or stream.window < 0:
            code = f.STREAM_CLOSED if stream.remote_closed else f.FLOW_CONTROL_ERROR
            self.fail_stream(stream, code)
            return None
        stream.unacked += size - message_size  # padding: credited with the stream's next
        return stream  # (one already answered, its answer waiting for credit, drops it)

    def _data_part(self, stream: Stream, message: bytes) -> None:
        """Message bytes of a DATA frame, all of them or one read's worth."""
        try:
            stream.messages.feed(message)
        except CallError as exc:
            self.fail_call(stream, exc)
            return
        stream.held += len(message)
        self.held += len(message)
        if self.held > self.server.max_held:
            self._shed_largest()

    def _data_ends(self, stream: Stream | None, flags: int, size: int) -> None:
        """The DATA frame is whole: the client may send as many bytes again, and its
        stream goes on if it is still there."""
        self.consumed(size)
        if stream is None or not self._open(stream):
            return
        if flags & f.END_STREAM:  # (an answered call's too: no RST_STREAM owed to it)
            stream.remote_closed = True
            if stream.arrival is not None:
                stream.arrival.cancel()
                stream.arrival = None
        if stream.ended:
            return
        if stream.handler.request_streaming:
            self.credit(stream)  # taken bytes owed while a message waits for more
            stream.wake()
        elif stream.remote_closed:
            self._start(stream)

    def _open(self, stream: Stream) -> bool:
        return self.streams.get(stream.id) is stream

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
