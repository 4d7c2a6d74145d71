"""One gRPC call on the gateway's own HTTP/2 server: the context its handler sees (the
part of grpc.aio's ServicerContext the services use) and the messages it reads.

Handlers are the ones grpc's generated code registers (`add_..._to_server`), so the
same servicers run on grpc.aio's server and on this one.
"""

from __future__ import annotations

import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from gateway.protocols.grpc.h2.headers import CallHeaders

# gRPC status codes by name, as numbers on the wire.
STATUS = {code: code.value[0] for code in grpc.StatusCode}
CANCELLED, INTERNAL = 1, 13
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNIMPLEMENTED = 4, 8, 12


class CallError(Exception):
    """A call ends with gRPC `status` and `message` (bad messages, limits)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Context:
    """What a servicer may ask of its call: metadata, the time left, its status."""

    __slots__ = ("headers", "deadline", "code", "details", "trailing", "write", "peer_name")

    def __init__(
        self,
        headers: CallHeaders,
        write: Callable[[Any], Any] | None,
        peer: str,
    ) -> None:
        self.headers = headers
        self.deadline = (
            time.monotonic() + headers.timeout_s if headers.timeout_s is not None else None
        )
        self.code: int | None = None
        self.details = ""
        self.trailing: tuple[tuple[str, str], ...] = ()
        self.write = write  # server streaming: `await context.write(message)`
        self.peer_name = peer

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self.headers.metadata

    def time_remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(self.deadline - time.monotonic(), 0.0)

    def peer(self) -> str:
        return self.peer_name

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing = tuple(metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = STATUS[code]

    def set_details(self, details: str) -> None:
        self.details = details

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: tuple = ()
    ) -> None:
        self.code = STATUS[code]
        self.details = details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()


_SMALL_PART = 1 << 16  # reads smaller than this are gathered into one buffer


class Messages:
    """The messages a call's client sends, cut from its DATA frames as they come
    (a 1-byte compressed flag, a 4-byte length, the message)."""

    def __init__(self, encoding: str, max_bytes: int, single: bool = False) -> None:
        """`single`: a unary call's, which may send one message only."""
        if encoding not in ("identity", "gzip", "deflate"):
            raise CallError(UNIMPLEMENTED, f"grpc-encoding {encoding!r} is not supported")
        self.encoding = encoding
        self.max_bytes = max_bytes
        self.single = single
        # A message not yet whole, as its reads came (joined once it is whole: a buffer
        # grown by each read copied a 4 MiB message some eight times over), their size,
        # and the size it is whole at (its prefix's 5 bytes until the prefix is whole).
        self._parts: list[bytes | bytearray] = []
        self._partial = 0
        self._need = 5
        # Whole messages not yet taken, each with its size on the wire (prefix included:
        # what a streaming call credits back to the client once the handler takes it)
        # and its compressed flag.
        self.ready: deque[tuple[bytes, int, int]] = deque()
        self.ready_bytes = 0  # their wire sizes, summed

    def feed(self, data: bytes) -> None:
        if self._parts:
            parts = self._parts
            if len(data) >= _SMALL_PART:
                parts.append(data)
            elif isinstance(parts[-1], bytearray):
                parts[-1] += data  # small reads, one object (each its own: 20x the bytes)
            else:
                parts.append(bytearray(data))
            self._partial += len(data)
            if self._partial < self._need:
                return
            parts, extra = self._parts, self._partial - self._need
            self._parts, self._partial = [], 0
            if len(parts[0]) < 5:  # its prefix came in pieces: read afresh
                data = b"".join(parts)
            else:
                # Whole: joined without its prefix, one copy; what follows it (all in
                # the last read) is read on below.
                data = b""
                if extra:  # (views: the message's share of the last read is joined once)
                    last = memoryview(parts[-1])
                    data = bytes(last[len(last) - extra :])
                    parts[-1] = last[: len(last) - extra]
                head = parts[0]
                parts[0] = head[5:]
                self._ready(b"".join(parts), self._need, head[0])
        position, end, need = 0, len(data), 5  # (5: the next prefix is not whole)
        while end - position >= 5:
            size = self._size(data[position : position + 5])
            if end - position < 5 + size:
                need = 5 + size
                break
            self._ready(data[position + 5 : position + 5 + size], 5 + size, data[position])
            position += 5 + size
        if position < end:
            rest = data[position:] if position else data
            self._parts, self._partial, self._need = [rest], len(rest), need

    def _size(self, prefix: bytes) -> int:
        """The size a message's prefix declares, checked."""
        if self.single and self.ready:
            raise CallError(INTERNAL, "a unary call sent more than one request message")
        size = int.from_bytes(prefix[1:5], "big")
        if size > self.max_bytes:
            raise CallError(
                RESOURCE_EXHAUSTED,
                f"received message larger than max ({size} vs. {self.max_bytes})",
            )
        return size

    def _ready(self, message: bytes, wire_size: int, compressed: int) -> None:
        self.ready.append((message, wire_size, compressed))
        self.ready_bytes += wire_size

    def take(self) -> bytes:
        """The next whole message, decompressed now (not as it came: a connection's
        bound counts what came on the wire, and a small message can inflate to the
        limit)."""
        message, wire_size, compressed = self.ready.popleft()
        self.ready_bytes -= wire_size
        return self._decompress(message) if compressed else message

    @property
    def buffered(self) -> int:
        """Wire bytes held: whole messages not taken, and a message not yet whole."""
        return self.ready_bytes + self._partial

    def clear(self) -> None:
        """Drop what is held (the call is gone): its memory goes at once."""
        self._parts, self._partial = [], 0
        self.ready.clear()
        self.ready_bytes = 0

    @property
    def partial(self) -> bool:
        """Bytes of a message not yet whole."""
        return bool(self._parts)

    def _decompress(self, message: bytes) -> bytes:
        if self.encoding == "identity":
            raise CallError(INTERNAL, "a compressed message without grpc-encoding")
        wbits = 31 if self.encoding == "gzip" else 15
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(message, self.max_bytes + 1)
        except zlib.error as exc:
            message = f"a {self.encoding} message did not decompress: {exc}"
            raise CallError(INTERNAL, message) from None
        if len(data) > self.max_bytes or inflater.unconsumed_tail:
            raise CallError(
                RESOURCE_EXHAUSTED, f"a message decompresses past the limit of {self.max_bytes}"
            )
        return data


# A message on its way out: one buffer, or pieces that are sent without being joined
# (views of a large tensor: raw_fields.py).
Payload = bytes | list[bytes | memoryview]


def framed(handler: Any, response: Any) -> Payload:
    """A response message, serialized (unless the handler gives it as bytes or as a list
    of pieces), with its 5-byte prefix (never compressed)."""
    serialize = handler.response_serializer
    message = serialize(response) if serialize is not None else response
    if isinstance(message, list):
        if len(message) > 1:
            prefix = b"\x00" + payload_size(message).to_bytes(4, "big")
            return [prefix + message[0], *message[1:]]
        message = message[0]
    return b"\x00" + len(message).to_bytes(4, "big") + message


def payload_size(payload: Payload) -> int:
    if isinstance(payload, bytes):
        return len(payload)
    return sum(len(piece) for piece in payload)  # (byte views: a length is a byte count)


def decode(handler: Any, message: bytes) -> Any:
    """The request message as the handler takes it (bytes where it names no parser)."""
    if handler.request_deserializer is None:
        return message
    try:
        return handler.request_deserializer(message)
    except Exception as exc:
        raise CallError(INTERNAL, f"the request message did not parse: {exc}") from None
