"""Reading a request body from ASGI messages, bounded: past the limit it is a 413 at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from accel_base.errors import InvalidArgument, PayloadTooLarge

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


async def read_body(receive: Receive, declared: bytes | None, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to exceed `limit`."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"request body of {declared.decode()} bytes is over the {limit}-byte limit"
        )
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidArgument("the client disconnected while sending the body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the {limit}-byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
