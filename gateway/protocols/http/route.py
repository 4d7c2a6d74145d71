"""What a route on the HTTP direct path (direct.py) is: the request it reads, the
`Reply` it returns, and the head written before a reply's body. The V2 infer route
(infer_route.py) and TorchServe's predictions (torchserve/inference.py) are two; the
ASGI way writes the same replies (infer_route.send_reply)."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE

_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
# Set by the writer, whatever a handler's headers say.
_FRAMING = (b"content-length", b"transfer-encoding", b"connection")


class Chunks(Protocol):
    """The rest of a streamed answer (an async generator of bytes is one). `aclose` must
    end its source even when no chunk was asked for."""

    def __anext__(self) -> Awaitable[bytes]: ...

    def aclose(self) -> Awaitable[Any]: ...


@dataclass(slots=True)
class Reply:
    """An HTTP answer: status, headers (lower-case names; content-length or
    transfer-encoding is added when written), body."""

    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes | bytearray | memoryview = b""
    # The rest of a streamed answer, chunk by chunk (chunked transfer; `body` is the
    # first chunk). Closed by whoever writes the reply, however the writing ends.
    more: Chunks | None = None
    # Pieces of the body after `body`, sent without being joined to it (a large binary
    # output's bytes, a view of its array). Never with `more`.
    tail: tuple[bytes | memoryview, ...] = ()

    def whole(self) -> bytes:
        """The body (not streamed) in one piece."""
        return b"".join((self.body, *self.tail)) if self.tail else bytes(self.body)


class DirectRequest(Protocol):
    """What a route's handler reads of its request."""

    path: str  # the URL's path, decoded
    headers: list[tuple[bytes, bytes]]  # lower-case names, in the order sent
    scope: dict[str, Any]  # the flags the protocol's other layers set (early_refusal.py)
    disconnected: bool  # the client went away


class DirectRoute(Protocol):
    """The requests one handler answers on the direct path."""

    def match(self, path: str) -> Any:
        """What the handler needs of the path (e.g. the model's name), or None when the
        request is not this route's."""

    def admit(self, request: DirectRequest, matched: Any) -> Reply | None:
        """A refusal before the body is read (authorization, overload), or None."""

    def answer(self, request: DirectRequest, matched: Any, body: bytes) -> Awaitable[Reply]:
        """The reply; never raises (a failure is a reply too)."""

    def failed(self, request: DirectRequest, exc: Exception) -> Reply:
        """The reply to a request that failed outside `answer`, in the route's format."""


def head_bytes(
    status: int, headers: list[tuple[bytes, bytes]], length: int | None, close: bool
) -> bytes:
    """The status line and headers of an answer whose body is `length` bytes (None:
    chunked). ValueError for what would not be a valid answer."""
    if not 200 <= status <= 599:  # (1xx are interim answers, without a body)
        raise ValueError(f"{status} is not a status for a final answer")
    parts = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status]
    for name, value in headers:
        if HEADER_RE.search(name) is not None or HEADER_VALUE_RE.search(value) is not None:
            raise ValueError(f"header {name!r}: {value!r} is not a valid HTTP header")
        if name.lower() in _FRAMING:
            continue
        parts += (name, b": ", value, b"\r\n")
    if length is None:
        parts.append(b"transfer-encoding: chunked\r\n")
    else:
        parts.append(b"content-length: %d\r\n" % length)
    if close:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
