"""One HTTP/2 stream of a gRPC call: what the client has sent, and what waits for flow
control on its way back (RFC 9113 section 5.2)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from gateway.protocols.grpc.h2.calls import INTERNAL, CallError, Context, Messages


class Stream:
    __slots__ = (
        "id", "handler", "context", "messages", "task", "remote_closed", "send_window",
        "outbox", "trailers", "headers_sent", "arrived", "drained", "timer", "expired",
        "unacked", "window", "ended", "held", "arrival", "unary",
    )  # fmt: skip

    def __init__(
        self, stream_id: int, handler: Any, context: Context, messages: Messages, window: int
    ) -> None:
        self.id = stream_id
        self.handler = handler
        self.unary = not (handler.request_streaming or handler.response_streaming)
        self.context = context
        self.messages = messages
        self.task: asyncio.Task | None = None
        self.remote_closed = False  # the client sent END_STREAM
        self.send_window = window  # bytes the client lets us send on this stream
        self.outbox: deque[memoryview] = deque()  # response bytes held by flow control
        self.trailers: bytes | None = None  # sent once the outbox is empty
        self.headers_sent = False
        self.arrived: asyncio.Future | None = None  # a streaming handler waits for data
        self.drained: asyncio.Future | None = None  # ... or for its outbox to empty
        self.timer: asyncio.TimerHandle | None = None  # the call's deadline
        self.expired = False
        self.unacked = 0  # bytes received and not yet credited back to the client
        self.window = 0  # bytes the client may still send (set by the connection)
        self.ended = False  # its response is complete, sent or held for flow control
        self.held = 0  # bytes of the client's messages it holds, not yet taken
        self.arrival: asyncio.TimerHandle | None = None  # a unary message's read timeout

    def wake(self) -> None:
        """Tell a handler waiting for messages that something happened."""
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(None)

    def release(self) -> None:
        """Tell a handler waiting for its outbox that it may go on."""
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def single_message(self) -> bytes:
        """The one request message of a unary call."""
        ready = self.messages.ready
        if len(ready) != 1 or self.messages.partial:
            count = len(ready) + self.messages.partial
            raise CallError(INTERNAL, f"a unary call needs one request message, got {count}")
        return self.messages.take()
