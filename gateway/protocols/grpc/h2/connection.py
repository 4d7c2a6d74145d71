"""One client connection of the gateway's HTTP/2 gRPC server: frames in, calls started
(gateway/protocols/grpc/h2/running.py runs them), calls ended, and the limits a client must keep.

A unary call whose answer fits the client's windows goes out in one write (headers,
message, trailers), which is most calls; the rest wait in their stream's outbox for
WINDOW_UPDATE (writer.py). What a client sends, and what a connection may hold of it,
is inbound.py's; its header blocks are opening.py's, its other frames control.py's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.call_table import CallTable
from gateway.protocols.grpc.h2.coalesce import CoalescingTransport
from gateway.protocols.grpc.h2.control import ControlFrames
from gateway.protocols.grpc.h2.guard import FloodGuard
from gateway.protocols.grpc.h2.headers import (
    MAX_HEADER_LIST,
    HeaderDecoder,
)
from gateway.protocols.grpc.h2.inbound import Inbound
from gateway.protocols.grpc.h2.opening import CallOpening
from gateway.protocols.grpc.h2.stream import Stream
from gateway.protocols.grpc.h2.writer import Writer

log = logging.getLogger(__name__)

MAX_FRAME = 1 << 20  # the largest frame we accept (fewer frames for large tensors)
_GATHER_PAST = 1 << 16  # a frame still missing more than this is gathered in pieces
LINGER_S = 1.0  # after GOAWAY, calls the client had already sent are refused, not lost


class Connection(ControlFrames, CallOpening, Inbound, CallTable, asyncio.Protocol):
    def __init__(self, server: Any) -> None:
        """`server`: the H2Server (its methods, limits and set of connections)."""
        self.server = server
        self.transport: CoalescingTransport | None = None
        self.writer: Writer | None = None
        self.decoder = HeaderDecoder(self._header_time)
        self.streams: dict[int, Stream] = {}
        self.last_stream = 0
        self.closing = False  # GOAWAY sent: no new calls
        self.peer = "unknown"
        self.idle_since: float | None = None  # when its last call ended (None: calls open)
        self.resets: dict[int, None] = {}
        self.settings_acked = False
        self.earned_seen = 0
        self._stalled: asyncio.TimerHandle | None = None  # our answers left unread
        self._buffer = b""  # the start of a frame not yet whole
        # A large frame arriving in many reads: its pieces, joined once it is whole (a
        # buffer grown by each read copied a 1 MiB frame some ten times over).
        self._pieces: list[bytes] = []
        self._pieces_size = 0
        self._frame_end = 0  # the bytes the pieces must add up to
        # A large DATA frame arriving read by read (inbound.py): (its stream or None,
        # flags, size), its bytes still to come, and how many of them are message.
        self._arriving: tuple[Stream | None, int, int] | None = None
        self._arriving_left = 0
        self._arriving_message = 0
        self._preface = False
        # A header block still coming: stream, first frame's flags, block, frames so far.
        self._continued: tuple[int, int, bytearray, int] | None = None
        self._window = server.receive_window  # bytes the client may still send
        self._unacked = 0  # ... received and not yet credited back
        self.held = 0  # bytes of request messages its calls have not taken
        self._idle: asyncio.TimerHandle | None = None
        self._broken = False

    # ---- the connection's life -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        self.guard = FloodGuard(self.server.flood_limits, loop.time())
        self.transport = CoalescingTransport(transport, loop, lambda: len(self.streams) > 1)
        self.writer = Writer(self.transport, self._sent)
        address = transport.get_extra_info("peername")
        if address:
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            self.peer = f"{'ipv6' if ':' in address[0] else 'ipv4'}:{host}:{address[1]}"
        if not self.server.admit(self):
            refusal = f.goaway(0, f.ENHANCE_YOUR_CALM, "the server has too many connections")
            self.transport.write(f.settings({}) + refusal)
            self.closing = True
            self._linger()
            return
        window = self.server.receive_window
        settings = {
            f.MAX_CONCURRENT_STREAMS: self.server.max_streams,
            f.INITIAL_WINDOW_SIZE: window,
            f.MAX_FRAME_SIZE: MAX_FRAME,
            f.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
        }
        increment = window - f.DEFAULT_WINDOW  # a WINDOW_UPDATE of 0 is an error
        credit = f.window_update(0, increment) if increment > 0 else b""
        self.transport.write(f.settings(settings) + credit)
        self._became_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        if self._stalled is not None:
            self._stalled.cancel()
        self._drop_calls()
        self.writer.lost()

    def _drop_calls(self) -> None:
        """Every call ends unanswered and what it held goes, at once."""
        for stream in list(self.streams.values()):
            self.drop(stream)
        self._buffer = b""
        self._pieces = []
        self._continued = None
        self._arriving = None

    def pause_writing(self) -> None:
        # A client that does not read gets nothing more read from it either: its pings,
        # settings and calls would otherwise pile answers up in the write buffer. One
        # that reads none of them for the read timeout loses its connection: it would
        # hold its calls, and its place among the connections, for good.
        self.writer.pause()
        self.transport.pause_reading()
        self._watch_stall(self.transport.get_write_buffer_size())

    def resume_writing(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        self.writer.resume()
        self.transport.resume_reading()

    def _watch_stall(self, unsent: int) -> None:
        timeout = self.server.read_timeout_s
        self._stalled = asyncio.get_running_loop().call_later(timeout, self._stall_check, unsent)

    def _stall_check(self, unsent_before: int) -> None:
        """Still paused: cut the connection only if nothing left since the last look (a
        slow reader of a large answer reads on)."""
        unsent = self.transport.get_write_buffer_size()
        if unsent < unsent_before:
            self._watch_stall(unsent)
            return
        log.debug("gRPC connection from %s left our answers unread: closed", self.peer)
        self._stalled = None
        self._broken = self.closing = True
        self._drop_calls()
        self.transport.abort()

    def go_away(self, code: int = f.NO_ERROR, message: str = "") -> None:
        """No new calls; calls in flight finish, then the connection closes."""
        if self.closing or self.transport is None:
            return
        self.closing = True
        self.transport.write(f.goaway(self.last_stream, code, message))
        if not self.streams:
            self._linger()

    def evict(self) -> None:
        """Make room for a new client: this idle connection is no longer counted, and
        closes after GOAWAY's moment."""
        self.server.connections.discard(self)
        self.go_away(f.NO_ERROR, "the server is at its connection limit and this one was idle")

    def _linger(self) -> None:
        """Close after a moment: calls the client sent before it read GOAWAY get
        REFUSED_STREAM meanwhile (which its library retries), not a closed socket."""
        loop = asyncio.get_running_loop()
        loop.call_later(LINGER_S, self.transport.close)
        # close() waits for what is written to leave; a client that does not read
        # would keep the socket open for ever.
        loop.call_later(2 * LINGER_S, self.transport.abort)

    def _became_idle(self) -> None:
        if self.closing:
            self._linger()
            return
        loop = asyncio.get_running_loop()
        self.idle_since = loop.time()
        self._idle = loop.call_later(self.server.idle_s, self.go_away)

    # ---- frames in -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
        try:
            self._received(data)
        except f.H2Error as exc:
            self._fail(exc.code, str(exc))
        except Exception:  # a fault of ours: this connection ends, the server goes on
            log.exception("gRPC connection from %s failed", self.peer)
            self._fail(f.INTERNAL_ERROR, "internal error")

    def _received(self, data: bytes) -> None:
        if self._arriving is not None:
            data = self._data_rest(data)
            if not data or self._broken:
                return
        if self._pieces:
            self._pieces.append(data)
            self._pieces_size += len(data)
            if self._pieces_size < self._frame_end:
                return
            buffer, self._pieces = b"".join(self._pieces), []
        else:
            buffer = self._buffer + data if self._buffer else data
        if not self._preface:
            if len(buffer) < len(f.PREFACE):
                self._buffer = buffer
                return
            if not buffer.startswith(f.PREFACE):
                raise f.H2Error(f.PROTOCOL_ERROR, "not an HTTP/2 connection (gRPC needs HTTP/2)")
            buffer = buffer[len(f.PREFACE) :]
            self._preface = True
        position, end = 0, len(buffer)
        while end - position >= 9:
            high, low, kind, flags, stream_id = f.HEADER.unpack_from(buffer, position)
            size = (high << 8) | low
            if size > MAX_FRAME:
                raise f.H2Error(f.FRAME_SIZE_ERROR, f"a frame of {size} bytes")
            if end - position - 9 < size:
                if kind == f.DATA and size - (end - position - 9) > _GATHER_PAST:
                    # (a padded frame waits for its padding's length: one byte more)
                    if end - position > 9 or not flags & f.PADDED:
                        first = buffer[position + 9 :]
                        self._buffer = b""
                        self._data_arriving(flags, stream_id & 0x7FFFFFFF, size, first)
                        return
                    self._buffer = buffer[position:]
                    return
                break
            payload = buffer[position + 9 : position + 9 + size]
            position += 9 + size
            self._frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
            if self._broken:
                return
        rest = end - position
        if rest >= 9:
            high, low = buffer[position], int.from_bytes(buffer[position + 1 : position + 3])
            whole = 9 + ((high << 16) | low)
            if whole - rest > _GATHER_PAST:
                self._pieces, self._pieces_size = [buffer[position:]], rest
                self._frame_end, self._buffer = whole, b""
                return
        self._buffer = buffer[position:] if position else buffer

    def _fail(self, code: int, message: str) -> None:
        log.debug("gRPC connection from %s broke the protocol: %s", self.peer, message)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(f.goaway(self.last_stream, code, message))
            # Closed at once with the client's frames unread, the socket would send RST,
            # which can throw GOAWAY away before the client reads it: our side ends
            # now, and what still comes is read and dropped for a moment.
            if self.transport.can_write_eof():
                self.transport.write_eof()
                self._linger()
            else:
                self.transport.close()
        self._broken = True  # whatever still arrives is dropped unread
        self.closing = True
        self._drop_calls()

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
                if len(block) < 5:
                    raise f.H2Error(f.FRAME_SIZE_ERROR, "HEADERS too short for its priority")
                block = block[5:]
            self._check_block(len(block))
            if flags & f.END_HEADERS:
                self._headers(stream_id, flags, block)
            else:
                if not block:
                    self.guard.spend("empty", self._now())
                self._continued = (stream_id, flags, bytearray(block), 1)
        elif kind == f.CONTINUATION:
            self._continuation(flags, stream_id, payload)
        else:
            self._control(kind, flags, stream_id, payload)
