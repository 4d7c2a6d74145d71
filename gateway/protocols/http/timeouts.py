"""A deadline for each HTTP request to arrive whole, on top of uvicorn's httptools protocol.

uvicorn times out idle kept-alive connections, but not a client that opens a connection
and sends nothing, sends its headers a byte at a time, or declares a Content-Length and
sends less: each holds a connection (and, for a body, a request in the gateway) for as
long as it likes. Here every request must arrive, headers and body, within the read
timeout of its first byte (or of the connection opening); past it the answer is 408 and
the connection closes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def timed_protocol(read_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with this read timeout (a class, as uvicorn wants)."""

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        _read_timer: asyncio.TimerHandle | None = None
        # When the request being read must have arrived (None: none is due). The timer
        # is not moved for each request -- making one cost as much as the rest of a
        # refused request -- but checks this when it fires, and waits on if it moved.
        _deadline: float | None = None
        _reading = False  # between a request's first byte and its last
        _requests = 0  # requests begun on this connection
        _message_cycle: Any = None  # the cycle of the request being read, once it has one

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that never sends a byte

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._reading, self._message_cycle = True, None
            self._requests += 1
            self._arm()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._message_cycle = self.cycle

        def on_message_complete(self) -> None:
            self._reading = False
            super().on_message_complete()
            cycle = self._message_cycle
            if cycle is not None and cycle.response_complete:
                # Answered before its body ended (a 413, a refusal): the connection is
                # idle now, and uvicorn's keep-alive timer went when the body came.
                self._arm()
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.time() + read_timeout_s
            if self._read_timer is None:
                self._read_timer = self.loop.call_at(self._deadline, self._due)

        def _disarm(self) -> None:
            self._deadline = None

        def _due(self) -> None:
            self._read_timer = None
            if self._deadline is None:
                return
            if self.loop.time() < self._deadline:  # re-armed since: wait for that
                self._read_timer = self.loop.call_at(self._deadline, self._due)
                return
            self._deadline = None
            self._timed_out()

        def _timed_out(self) -> None:
            if self.transport.is_closing():
                return
            if self.flow.read_paused:  # the server stopped reading (pipelining, a full
                self._arm()  # buffer): the wait is not the client's
                return
            if self._reading or self._requests == 0:
                self._refuse_late_request()
            self.transport.close()

        def _refuse_late_request(self) -> None:
            cycle = self._message_cycle
            if cycle is not None:
                if cycle.response_started:
                    return  # the answer is on its way; only the connection goes
                cycle.disconnected = True  # the request's reader sees the end
                cycle.message_event.set()
            earlier = self.cycle if self.cycle is not cycle else None
            if earlier is not None and not earlier.response_complete:
                return  # a 408 now would cut into an earlier request's answer
            body = (
                b'{"error":"the request did not arrive whole within the read timeout '
                b'(%g s, --read-timeout)"}' % read_timeout_s
            )
            self.transport.write(_TIMEOUT_RESPONSE % (len(body), body))

    return TimedHttpToolsProtocol
