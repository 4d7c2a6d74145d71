"""Refusing an inference request at the HTTP front before anything is built for it.

Under overload every request must still be answered, and the answer to one the server
cannot take must cost far less than serving it, or the event loop falls behind reading
and the whole front goes silent. uvicorn turns each request into a scope, a
request-response cycle and a task before the application sees it, and the refusal
then goes through the ASGI send path: most of what serving a small model costs. Here,
once a POST's headers have arrived for /v2/models/.../infer and the shedder
(gateway/operation/shedding.py) says refuse, the protocol writes a prepared 503 with Retry-After
at once, skips the request's body as it comes, and keeps the connection for the next
request. Requests it cannot answer out of turn (an earlier answer still due on the
connection, `Connection: close`, `Expect: 100-continue`) take the ordinary path, where
the infer handler asks the shedder again.
"""

from __future__ import annotations

from typing import Any

from gateway.operation.shedding import REFUSAL, RETRY_AFTER_S, LoopShedder

# In the scope of an inference request the protocol admitted: the shedder was asked once.
ADMITTED = "gateway.shedder_admitted"
# In the scope of every inference request the protocol counts into the shedder's
# `pending` (when the handler asks the shedder, the request itself is one of them).
COUNTED = "gateway.shedder_counted"
_BODY = b'{"error":"%s"}' % REFUSAL.encode()
REFUSED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: %d\r\ncontent-length: %d\r\n\r\n%s" % (RETRY_AFTER_S, len(_BODY), _BODY)
)


def is_infer(url: bytes) -> bool:
    return url.startswith(b"/v2/models/") and url.endswith(b"/infer")


def refusing_protocol(base: type, shedder: LoopShedder) -> type:
    """`base` (gateway/protocols/http/timeouts.py's protocol) refusing early for `shedder`, and
    counting the inference requests it admits into `shedder.pending` until answered."""

    class RefusingProtocol(base):
        __slots__ = ("_refusing", "_admitted")  # as the base's (timeouts.py): no dict keys
        _refusing: bool  # skipping the body of a request answered already
        _admitted: int  # inference requests admitted here and not answered yet

        def connection_made(self, transport: Any) -> None:
            self._refusing, self._admitted = False, 0
            super().connection_made(transport)

        def on_headers_complete(self) -> None:
            if (
                self.parser.get_method() != b"POST"
                or not is_infer(self.url)
                or self.parser.should_upgrade()  # uvicorn hands it to another protocol,
            ):  # which would never count it out
                super().on_headers_complete()
                return
            earlier = self.cycle
            early = (
                (earlier is None or earlier.response_complete)
                and not self.expect_100_continue
                and self.parser.should_keep_alive()
                # HTTP/1.0 keep-alive wants a header the prepared 503 has not: its client
                # would read until the connection closed.
                and self.parser.get_http_version() == "1.1"
            )
            if early and shedder.refuse():
                self._refusing = True
                self.transport.write(REFUSED_RESPONSE)
                return
            self._admitted += 1
            shedder.pending += 1
            super().on_headers_complete()
            self.scope[COUNTED] = True
            if early:  # the handler need not ask again (one draw a request)
                self.scope[ADMITTED] = True

        def on_body(self, body: bytes) -> None:
            if not self._refusing:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if not self._refusing:
                super().on_message_complete()
                return
            self._refusing = False
            self._answered_early()  # the refused request is over (timeouts.py)

        def on_response_complete(self) -> None:
            if self._admitted:
                self._admitted -= 1
                shedder.pending -= 1
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            shedder.pending -= self._admitted
            self._admitted = 0
            super().connection_lost(exc)

        def _timed_out(self) -> None:
            if self._refusing:  # its answer went already; only the connection goes
                self.transport.close()
                return
            super()._timed_out()

    return RefusingProtocol


def protocol_for(base: type, shedder: Any) -> type:
    """`base`, refusing early where `shedder` is a LoopShedder that is on."""
    if isinstance(shedder, LoopShedder) and shedder.enabled:
        return refusing_protocol(base, shedder)
    return base
