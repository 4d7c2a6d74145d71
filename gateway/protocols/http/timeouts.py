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

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


def timed_protocol(read_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with this read timeout (a class, as uvicorn wants)."""

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        # Slots, not instance attributes: uvicorn's protocol has nearly as many as
        # CPython shares keys for (30), and past that the attribute accesses of all its
        # per-request code get slower (~0.5 us a request).
        __slots__ = ("_read_timer", "_deadline", "_reading")
        _read_timer: asyncio.TimerHandle | None
        # When the request being read must have arrived (None: none is due). The timer
        # is not moved for each request -- making one cost as much as the rest of a
        # refused request -- but checks this when it fires, and waits on if it moved.
        _deadline: float | None
        _reading: bool  # between a request's first byte and its last

        def connection_made(self, transport) -> None:  # type: ignore[override]
            self._read_timer = self._deadline = None
            self._reading = False
            super().connection_made(transport)
            self._arm()  # a connection that never sends a byte

        # The two parser callbacks below run on every request: they call uvicorn's
        # directly (super() costs as much as the rest of either) and keep no cycle,
        # finding the request's from uvicorn's state when needed (_message_cycle).

        def on_message_begin(self) -> None:
            HttpToolsProtocol.on_message_begin(self)
            self._reading = True
            # self._arm(), inline
            self._deadline = deadline = self.loop.time() + read_timeout_s
            if self._read_timer is None:
                self._read_timer = self.loop.call_at(deadline, self._due)

        def on_message_complete(self) -> None:
            HttpToolsProtocol.on_message_complete(self)
            # self.cycle is this request's: its headers are complete (one refused before
            # it had a cycle is completed by early_refusal.py's protocol, not here).
            cycle = self.cycle
            if cycle is not None and cycle.response_complete:
                self._answered_early()
            else:
                self._reading, self._deadline = False, None

        def _answered_early(self) -> None:
            """The request read is over, and was answered before it ended (a 413, a
            refusal): the connection is idle now, for at most the read timeout (uvicorn's
            keep-alive timer went when the rest of the body came)."""
            self._reading = False
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._deadline = None
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.time() + read_timeout_s
            if self._read_timer is None:
                self._read_timer = self.loop.call_at(self._deadline, self._due)

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
            if self._reading or self.scope is None:  # (None: no request begun yet)
                self._refuse_late_request()
            self.transport.close()

        def _message_cycle(self) -> RequestResponseCycle | None:
            """The cycle of the request being read, once its headers gave it one."""
            cycle = self.cycle
            return cycle if cycle is not None and cycle.scope is self.scope else None

        def _refuse_late_request(self) -> None:
            cycle = self._message_cycle()
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
