"""A large inference request's body is read whole at the protocol, and joined once.

uvicorn hands a body to the application in pieces: it appends each read (up to 256 KiB
with uvloop) to a buffer, stops reading once that holds 64 KiB until the application
asks for more, and copies the buffer into each message; the application then joins the
messages. A 4 MiB tensor paid three copies of itself and, for every piece, a turn of the
event loop and two system calls to pause and resume reading. Here, when the first
piece of an inference request's body is 8 KiB or more (a read of a loopback or LAN
upload holds a segment or more) and its declared Content-Length is past 64 KiB and
within the server's body limit, the protocol keeps each read, without pausing, and joins
them once when the body is whole: its only copy, with memory that grows with the bytes
received, as before. The handler's receive() then sees the end of an empty body, and
read_infer_body (body.py) takes the joined body from the request's scope.

A body that starts small, or declares no length (chunked), or is over the limit, takes
uvicorn's way, where read_body answers 413 past the limit as before.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.protocols.http.early_refusal import is_infer

# The key of the request's ASGI scope that holds the body read whole.
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
    """`base` reading a large inference request's body whole itself (see the module)."""

    class WholeBodyProtocol(base):  # type: ignore[valid-type,misc]
        __slots__ = ("_seen", "_pieces")  # as the base's (timeouts.py)
        _seen: Any  # the cycle whose body began last: a new one is a new request's
        _pieces: list[bytes] | None  # the body's pieces so far, while it is being read

        def connection_made(self, transport: Any) -> None:
            self._seen, self._pieces = None, None
            super().connection_made(transport)

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if self._seen is not cycle:  # the request's first piece of body
                self._seen, self._pieces = cycle, None
                if len(body) >= FIRST_PIECE_BYTES and self._begin(cycle):
                    self._pieces = [body]
                    return
            elif self._pieces is not None:
                self._pieces.append(body)
                return
            base.on_body(self, body)  # (not super(): it costs as much as the rest here)

        def _begin(self, cycle: Any) -> bool:
            """Whether to read this inference request's body here (else uvicorn's way)."""
            if (
                cycle.response_complete
                or cycle.body
                or not is_infer(self.url)
                or self.parser.should_upgrade()
            ):
                return False
            length = declared_length(cycle.scope["headers"], limit)
            # (A body within uvicorn's 64 KiB is one piece its way too.)
            return length is not None and length > HIGH_WATER_LIMIT

        def on_message_complete(self) -> None:
            pieces, cycle = self._pieces, self.cycle
            if pieces is not None and cycle is not None and not cycle.response_complete:
                # Joined once, whole: memory followed the bytes the client sent, never the
                # length it declared.
                cycle.scope[WHOLE_BODY] = b"".join(pieces)
            self._seen = self._pieces = None
            base.on_message_complete(self)

        def connection_lost(self, exc: Exception | None) -> None:
            self._seen, self._pieces = None, None
            super().connection_lost(exc)

    return WholeBodyProtocol
