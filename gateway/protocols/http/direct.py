"""The direct path: inference requests answered by the protocol, without ASGI.

Under load a small inference request spent about a third of the gateway's CPU in
uvicorn's ASGI machinery: a scope, a request-response cycle with its event, a task
started before the body came and woken for it, two messages through `send`, each header
checked again. Here, once a request's headers show a route that takes the direct path
(`DirectRoute`: a POST to a V2 infer URL, or to TorchServe's predictions or
explanations, with a Content-Length within the body limit), one task serves it: the
route's `admit` first (a refusal before the body: overload, a missing token), then, once
the protocol has the body whole, the route's handler, which returns a `Reply`, written
in one call (a stream's chunks as they come).

A direct request takes the place of uvicorn's cycle in the protocol (`DirectCycle`
carries the attributes uvicorn's protocol and ours read), so uvicorn's own pipelining,
keep-alive, shutdown, concurrency limit and the read timeout (timeouts.py) and early
refusal (early_refusal.py) work on it unchanged. Every other request, and one whose
headers want what only uvicorn's way gives (an upgrade; a chunked, oversized or oddly
declared body; an absolute or %-encoded URL; the connection limit reached), takes
uvicorn's way to the ASGI app.

A large body is kept as its reads (short ones added together), without pausing, and
joined once: memory follows the
bytes received, never the length declared (a body declared past the limit takes
uvicorn's way, which answers 413 at once). A large answer goes out as head and body in
one vectored write, without joining them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from accel_base.errors import Unavailable
from gateway.protocols.http.route import Chunks, DirectRoute, Reply, head_bytes

log = logging.getLogger(__name__)

# An answer body at least this long is written beside its head, not joined to it.
VECTORED_BYTES = 64 * 1024
# A read shorter than this is added to the body's last piece, not kept on its own: a
# client sending a byte a segment holds a byte a byte, not a bytes object each.
SMALL_READ_BYTES = 16 * 1024


class DirectCycle:
    """One request on the direct path, where uvicorn keeps its RequestResponseCycle."""

    __slots__ = (
        "protocol", "route", "matched", "scope", "path", "headers", "pieces", "more_body",
        "keep_alive", "disconnected", "response_started", "response_complete",
        "waiting_for_100_continue", "_body_whole",
    )  # fmt: skip

    def __init__(self, protocol: Any, route: DirectRoute, matched: Any, path: str) -> None:
        self.protocol, self.route, self.matched, self.path = protocol, route, matched, path
        self.scope: dict[str, Any] = protocol.scope
        self.headers: list[tuple[bytes, bytes]] = protocol.headers
        self.pieces: list[bytes | bytearray] = []
        self.more_body = True
        parser = protocol.parser
        self.keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
        self.disconnected = self.response_started = self.response_complete = False
        self.waiting_for_100_continue = protocol.expect_100_continue
        self._body_whole: asyncio.Future[None] | None = None

    # uvicorn's protocol calls `cycle.message_event.set()` when the body is whole
    # (on_message_complete) and when the connection is lost.
    @property
    def message_event(self) -> DirectCycle:
        return self

    def set(self) -> None:
        waiter = self._body_whole
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run_asgi(self, _app: Any) -> None:
        """Read the rest of the body, answer, write: started where uvicorn starts a
        cycle (at once, or when the answers before it on the connection are out)."""
        protocol, route = self.protocol, self.route
        try:
            refusal = route.admit(self, self.matched)
            if refusal is not None:  # its body, when it comes, is skipped (on_body)
                if self.waiting_for_100_continue and self.more_body and not self.pieces:
                    # The client may never send the body it held back: what it sends
                    # next would be read as that body.
                    self.keep_alive = False
                await self._write(refusal)
                return
            if self.more_body and not self.disconnected:
                transport = protocol.transport
                if self.waiting_for_100_continue and not transport.is_closing():
                    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.waiting_for_100_continue = False
                protocol.flow.resume_reading()  # paused while requests before it ran
                self._body_whole = asyncio.get_running_loop().create_future()
                await self._body_whole
            if self.disconnected:
                return  # nobody to answer
            pieces = self.pieces  # (a first piece is always bytes: on_body)
            body = bytes(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
            self.pieces = []
            reply = await route.answer(self, self.matched, body)
            await self._write(reply)
        except asyncio.CancelledError:  # the server's shutdown ran out of grace
            transport = protocol.transport
            if not (self.response_started or self.disconnected or transport.is_closing()):
                stopped = Unavailable("the server stopped before this request was answered")
                self.keep_alive = False
                with contextlib.suppress(Exception):  # the cancellation goes on regardless
                    self._send(route.failed(self, stopped))
            transport.close()
            raise
        except Exception as exc:  # the route's own bug: the client still gets an answer
            log.exception("unexpected error on %s", self.path)
            if not self.response_started and not self.disconnected:
                self.keep_alive = False
                await self._write(route.failed(self, exc))

    async def _writable(self) -> bool:
        """Wait while the client reads slower than we answer; False once it has gone."""
        if self.protocol.flow.write_paused and not self.disconnected:
            await self.protocol.flow.drain()
        return not self.disconnected

    async def _write(self, reply: Reply) -> None:
        if reply.more is not None:
            await self._write_stream(reply, reply.more)
        elif await self._writable():
            self._send(reply)

    def _send(self, reply: Reply) -> None:
        """Write a whole (not streamed) reply now, and end the request."""
        protocol = self.protocol
        body = reply.body
        size = body.nbytes if isinstance(body, memoryview) else len(body)
        for piece in reply.tail:
            size += piece.nbytes if isinstance(piece, memoryview) else len(piece)
        head = head_bytes(reply.status, reply.headers, size, not self.keep_alive)
        self.response_started = True
        transport = protocol.transport
        if size >= VECTORED_BYTES:
            transport.writelines((head, body, *reply.tail))
        elif reply.tail:
            transport.write(b"".join((head, body, *reply.tail)))
        else:
            transport.write(head + body if body else head)
        self._complete()

    async def _write_stream(self, reply: Reply, more: Chunks) -> None:
        """A streamed answer, chunk by chunk as they come; a client gone ends it."""
        protocol = self.protocol
        try:
            head = head_bytes(reply.status, reply.headers, None, not self.keep_alive)
        except ValueError:
            await more.aclose()
            raise  # not started: run_asgi answers 500
        try:
            if not await self._writable() or protocol.transport.is_closing():
                return  # gone while the first answer was made
            chunk: bytes | bytearray | memoryview = reply.body
            self.response_started = True
            protocol.transport.write(head)
            while True:
                if not await self._writable():
                    return
                if chunk:
                    protocol.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                try:
                    chunk = await anext(more)
                except StopAsyncIteration:
                    break
            protocol.transport.write(b"0\r\n\r\n")
            self._complete()
        except Exception:
            log.exception("a streamed answer on %s failed", self.path)
            protocol.transport.close()  # its status is out: only the connection can say
        finally:
            await more.aclose()

    def _complete(self) -> None:
        self.response_complete = True
        if not self.keep_alive:
            self.protocol.transport.close()
        self.protocol.on_response_complete()


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    length = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None  # two, or not a number: uvicorn's way says what is wrong
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length


def _route_of(url: bytes, route: DirectRoute) -> tuple[str, Any] | None:
    """The path and the route's match for `url`, or None if the route does not take it."""
    path_bytes = url.partition(b"?")[0]
    if b"%" in path_bytes:  # uvicorn's way decodes it
        return None
    path = path_bytes.decode("ascii", "replace")
    matched = route.match(path)
    return None if matched is None else (path, matched)


# The URLs whose routes a server remembers: a client's model names, and then some. Past
# it the memory starts again, so that no client can grow it without bound; a longer URL
# is looked at each time.
KNOWN_URLS = 1024
KNOWN_URL_BYTES = 256
_UNKNOWN = object()


@dataclass(frozen=True)
class DirectPath:
    """What a server answers on the direct path: `route`'s POST requests whose URLs start
    with one of `prefixes` (a cheap first test), with a body declared within
    `max_body_bytes` (one declared longer takes uvicorn's way, which answers 413 at once)."""

    route: DirectRoute
    max_body_bytes: int
    prefixes: tuple[bytes, ...]


def direct_protocol(base: type[HttpToolsProtocol], direct: DirectPath) -> type[HttpToolsProtocol]:
    """`base` answering on the direct path what `direct` says."""
    route, max_body_bytes, prefixes = direct.route, direct.max_body_bytes, direct.prefixes
    urls: dict[bytes, Any] = {}  # what _route_of said of each URL seen lately

    class DirectProtocol(base):  # type: ignore[valid-type,misc]
        __slots__ = ()  # as the base's (timeouts.py)

        def on_headers_complete(self) -> None:
            cycle = self._direct_cycle()
            if cycle is None:
                base.on_headers_complete(self)  # (not super(): as costly as the rest here)
                return
            earlier, self.cycle = self.cycle, cycle
            if earlier is None or earlier.response_complete:
                self._start_asgi_task(cycle, None)
            else:  # pipelined behind an answer still due: uvicorn starts it after
                self.flow.pause_reading()
                self.pipeline.appendleft((cycle, None))

        def _direct_cycle(self) -> DirectCycle | None:
            url, parser = self.url, self.parser
            if not url.startswith(prefixes) or parser.get_method() != b"POST":
                return None
            known = urls.get(url, _UNKNOWN)
            if known is _UNKNOWN:
                known = _route_of(url, route)
                if len(url) <= KNOWN_URL_BYTES:
                    if len(urls) >= KNOWN_URLS:
                        urls.clear()
                    urls[url] = known
            if known is None or parser.should_upgrade():
                return None
            path, matched = known
            length = _declared_length(self.headers)
            if length is None or length > max_body_bytes:
                return None
            limit = self.limit_concurrency
            if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
                return None  # uvicorn's way answers 503
            return DirectCycle(self, route, matched, path)

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if type(cycle) is DirectCycle:
                if not cycle.response_complete:
                    pieces = cycle.pieces
                    if len(body) >= SMALL_READ_BYTES or not pieces:
                        pieces.append(body)
                    elif type(pieces[-1]) is bytearray:
                        pieces[-1] += body  # type: ignore[operator]
                    else:
                        pieces.append(bytearray(body))  # type: ignore[arg-type]
                return
            base.on_body(self, body)

    return DirectProtocol
