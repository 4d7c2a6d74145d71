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

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def timed_protocol(read_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with this read timeout (a class, as uvicorn wants)."""

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        _read_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._read_timer = self.loop.call_later(read_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _timed_out(self) -> None:
            self._read_timer = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # the request's reader sees the end
                cycle.message_event.set()
            if cycle is None or not cycle.response_started:
                body = (
                    b'{"error":"the request did not arrive whole within the read timeout '
                    b'(%g s, --read-timeout)"}' % read_timeout_s
                )
                self.transport.write(_TIMEOUT_RESPONSE % (len(body), body))
            self.transport.close()

    return TimedHttpToolsProtocol
