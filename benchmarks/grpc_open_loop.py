"""gRPC unary calls for the open-loop generator (benchmarks/open_loop.py), framed by hand.

grpc.aio spends some 100 us of Python a call on the client side, too much for one core
to offer three times what the server saturates at. Here each call is two pre-encoded
HTTP/2 frames (HEADERS with a block of literal fields, so no HPACK state; DATA with the
message) on a kept-alive connection, one call at a time per connection, and the answer
is read only as far as its trailers' grpc-status. The gateway's HTTP/2 server sends
literal, unindexed, unhuffmanned trailers (gateway/protocols/grpc/h2/headers.py), so a byte
search finds the status; a server that compresses its trailers would read as status
unknown. Only for 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
_MAX_WINDOW = 2**31 - 1
_STATUS = b"\x0bgrpc-status"
OK, UNAVAILABLE, UNKNOWN = 200, 503, 599  # gRPC statuses as the HTTP codes the reports use
_STATUSES = {b"0": OK, b"14": UNAVAILABLE}


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + payload


def literal(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing, new name (both under 127 bytes)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_call(path: str, message: bytes, authority: str = "127.0.0.1") -> tuple[bytes, bytes]:
    """(header block, DATA payload) of a unary call to `path` carrying `message`."""
    block = b"\x83\x86"  # the static table's :method POST, :scheme http
    for name, value in ((b":path", path.encode()), (b":authority", authority.encode()),
                        (b"content-type", b"application/grpc"), (b"te", b"trailers")):  # fmt: skip
        block += literal(name, value)
    return block, b"\x00" + len(message).to_bytes(4, "big") + message


# A connection's opening: the preface, a stream window as large as allowed, and the
# connection window raised to match, so that answers never wait for our credit.
_OPENING = (
    PREFACE
    + frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + _MAX_WINDOW.to_bytes(4, "big"))
    + frame(WINDOW_UPDATE, 0, 0, (_MAX_WINDOW - 65535).to_bytes(4, "big"))
)


class GrpcConnection(asyncio.Protocol):
    """One HTTP/2 connection of the generator: `send((block, data), outcome)` starts a
    call on a new stream; the outcome gets the call's status once its trailers come."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.next_stream = 1
        self.stream = 0  # the call in flight's
        self.outcome: Any = None
        self.received = 0  # DATA bytes since the last connection WINDOW_UPDATE

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(_OPENING)

    def send(self, request: tuple[bytes, bytes], outcome: Any) -> None:
        block, data = request
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        self.stream, self.outcome = stream, outcome
        assert self.transport is not None
        self.transport.write(
            frame(HEADERS, END_HEADERS, stream, block) + frame(DATA, END_STREAM, stream, data)
        )

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        buffer = self.buffer
        start = 0
        while len(buffer) - start >= 9:
            length = int.from_bytes(buffer[start : start + 3], "big")
            end = start + 9 + length
            if len(buffer) < end:
                break
            kind, flags = buffer[start + 3], buffer[start + 4]
            payload = bytes(buffer[start + 9 : end])
            start = end
            if kind == HEADERS and flags & END_STREAM:
                self._ended(payload)
            elif kind == DATA:
                self.received += length
            elif kind == RST_STREAM:
                stream = int.from_bytes(buffer[end - length - 4 : end - length], "big")
                if stream & 0x7FFFFFFF == self.stream:  # before its trailers (after: ignored)
                    self._finish(UNKNOWN)
            elif kind == SETTINGS and not flags & ACK:
                self.transport.write(frame(SETTINGS, ACK, 0, b""))
            elif kind == PING and not flags & ACK:
                self.transport.write(frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                self.generator.connections.discard(self)  # no new calls here
        del buffer[:start]
        if self.received > 1 << 30:
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, self.received.to_bytes(4, "big")))
            self.received = 0

    def _ended(self, block: bytes) -> None:
        at = block.find(_STATUS)
        status = UNKNOWN
        if at >= 0:
            size = block[at + len(_STATUS)]
            value = block[at + len(_STATUS) + 1 : at + len(_STATUS) + 1 + size]
            status = _STATUSES.get(value, UNKNOWN)
        self._finish(status)

    def _finish(self, status: int) -> None:
        outcome, self.outcome = self.outcome, None
        if outcome is None:
            return  # not ours to end twice: the connection is idle already
        outcome.status = status
        outcome.latency_s = time.monotonic() - outcome.sent
        if self in self.generator.connections:
            self.generator.idle.append(self)

    def connection_lost(self, exc) -> None:
        self.generator.connections.discard(self)
