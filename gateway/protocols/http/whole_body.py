"""A large inference request's body is read into one buffer made for its declared length.

uvicorn hands a body to the application in pieces: it appends each read (up to 256 KiB
with uvloop) to a buffer, stops reading once that holds 64 KiB until the application
asks for more, and copies the buffer into each message; the application then joins the
messages. A 4 MiB tensor paid three copies of itself and, for every piece, a turn of the
event loop and two system calls to pause and resume reading. Here, when the first
piece of an inference request's body is 8 KiB or more (a read of a loopback or LAN
upload holds a segment or more) and its declared Content-Length is past 64 KiB and
within the server's body limit, the protocol appends each read to one buffer of the
request's own, without pausing: the body's only copy, and memory that grows with the
bytes received, as before. The handler's receive() then sees the end of an empty body,
and read_body (body.py) takes the buffer from the request's scope.

A body that starts small, or declares no length (chunked), or is over the limit, takes
uvicorn's way, where read_body answers 413 past the limit as before.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.protocols.http.early_refusal import is_infer

# The key of the request's ASGI scope that holds the filled buffer.
WHOLE_BODY = "gateway.whole_body"
# A first piece at least this long has its request's Content-Length looked at (a small
# request's whole body comes in one short piece: it pays one comparison).
FIRST_PIECE_BYTES = 8192


def declared_length(headers: list[tuple[bytes, bytes]], limit: int) -> int | None:
    """The request's Content-Length if it declares one within `limit`, else None."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() and int(value) <= limit else None
    return None


def whole_body_protocol(base: type[HttpToolsProtocol], limit: int) -> type[HttpToolsProtocol]:
    """`base` reading a large inference request's body into one buffer (see the module)."""

    class WholeBodyProtocol(base):  # type: ignore[valid-type,misc]
        __slots__ = ("_seen", "_buffer")  # as the base's (timeouts.py)
        _seen: Any  # the cycle whose body began last: a new one is a new request's
        _buffer: bytearray | None  # the body's buffer, while one is being filled

        def connection_made(self, transport: Any) -> None:
            self._seen, self._buffer = None, None
            super().connection_made(transport)

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if self._seen is not cycle:  # the request's first piece of body
                self._seen, self._buffer = cycle, None
                if len(body) >= FIRST_PIECE_BYTES and self._begin(cycle):
                    self._fill(body)
                    return
            elif self._buffer is not None:
                self._fill(body)
                return
            base.on_body(self, body)  # (not super(): it costs as much as the rest here)

        def _begin(self, cycle: Any) -> bool:
            """Take a large inference request's body into a buffer of its own; False:
            uvicorn's way."""
            if (
                cycle.response_complete
                or cycle.body
                or not is_infer(self.url)
                or self.parser.should_upgrade()
            ):
                return False
            length = declared_length(cycle.scope["headers"], limit)
            if length is None or length <= HIGH_WATER_LIMIT:  # uvicorn's way is one piece
                return False
            # Grown as the body comes (bytearray grows in place, by realloc), never made
            # to the declared size at once: memory follows the bytes a client has sent.
            self._buffer = cycle.scope[WHOLE_BODY] = bytearray()
            return True

        def _fill(self, body: bytes) -> None:
            cycle = self.cycle
            if cycle.response_complete:  # answered already (a refusal): drop the rest
                self._buffer = None
                cycle.scope.pop(WHOLE_BODY, None)
                return
            assert self._buffer is not None
            self._buffer += body

        def on_message_complete(self) -> None:
            cycle = self.cycle
            if self._buffer is not None and cycle is not None and cycle.response_complete:
                cycle.scope.pop(WHOLE_BODY, None)  # answered without reading it
            # The buffer stays in the scope, for read_body; nothing here holds it now.
            self._seen = self._buffer = None
            base.on_message_complete(self)

        def connection_lost(self, exc: Exception | None) -> None:
            self._seen, self._buffer = None, None
            super().connection_lost(exc)

    return WholeBodyProtocol
