"""Refusals at the HTTP front before the request is built (gateway/protocols/http/early_refusal.py),
against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib

from gateway.listeners import uvicorn_server
from gateway.operation.limits import ConnectionLimits
from gateway.operation.shedding import LoopShedder
from gateway.protocols.http.early_refusal import ADMITTED
from tests.gateway.protocols.http.asgi_server import serving


class App:
    """Answers 200 with the body's length; records which requests reached it."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append(scope["path"])
        answer = str(len(body)).encode()
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length"))  # fmt: skip
    return head, await reader.readexactly(length)


def infer_head(length: int, path: str = "/v2/models/simple/infer") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()


def test_a_refused_request_is_answered_before_its_body_and_the_connection_goes_on():
    app, shedder = App(), LoopShedder(target_lag_s=0.004, draw=lambda: 0.0)

    async def scenario() -> None:
        async with serving(app, 5.0, shedder) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            shedder.share = 1.0  # the loop is late: refuse every request
            shedder.pending = 1  # ... while others are in flight
            writer.write(infer_head(100_000))  # headers only: the body is not sent yet
            head, body = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower()
            assert b"overloaded" in body and app.seen == []
            # The body arrives after its answer, in pieces; it is skipped, and the next
            # request on the same connection is served once the loop is on time.
            for _ in range(10):
                writer.write(b"x" * 10_000)
                await asyncio.sleep(0)
            shedder.share = 0.0
            writer.write(infer_head(3) + b"abc")
            head, body = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 200") and body == b"3"
            assert app.seen == ["/v2/models/simple/infer"] and shedder.refused == 1
            writer.close()

    asyncio.run(scenario())


def test_only_inference_requests_are_refused_early():
    app, shedder = App(), LoopShedder(target_lag_s=0.004, draw=lambda: 0.0)

    async def scenario() -> None:
        async with serving(app, 5.0, shedder) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            shedder.share, shedder.pending = 1.0, 1
            writer.write(infer_head(2, "/v2/repository/index") + b"{}")
            head, _ = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 200")
            writer.close()

    asyncio.run(scenario())
    assert app.seen == ["/v2/repository/index"] and shedder.refused == 0


def test_admitted_requests_count_as_pending_until_answered_or_gone():
    app, shedder = App(), LoopShedder(target_lag_s=0.004, draw=lambda: 1.0)
    counts: list[tuple[int, bool]] = []

    async def counting(scope, receive, send) -> None:
        # Pending while served; marked, so that the handler does not draw a second time.
        counts.append((shedder.pending, ADMITTED in scope))
        await app(scope, receive, send)

    async def scenario() -> None:
        async with serving(counting, 5.0, shedder) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(1) + b"a")
            await read_answer(reader)
            answered = shedder.pending
            writer.write(infer_head(5) + b"b")  # then the client goes, body unfinished
            await asyncio.sleep(0.1)
            assert shedder.pending == 1
            writer.transport.abort()
            await asyncio.sleep(0.1)
            assert answered == 0

    asyncio.run(scenario())
    assert counts == [(1, True), (1, True)] and shedder.pending == 0


def test_a_server_without_shedding_uses_the_plain_protocol():
    server = uvicorn_server(App(), ConnectionLimits(), None, LoopShedder(target_lag_s=0.0))
    assert server.config.http.__name__ == "TimedHttpToolsProtocol"


def test_an_http10_keep_alive_request_is_not_refused_early_and_its_connection_closes():
    # The prepared 503 carries no keep-alive header: an HTTP/1.0 client would wait for
    # the connection to close. Such a request takes uvicorn's path, which closes it.
    app, shedder = App(), LoopShedder(target_lag_s=0.004, draw=lambda: 0.0)

    async def scenario() -> bytes:
        async with serving(app, 5.0, shedder) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            shedder.share, shedder.pending = 1.0, 1
            writer.write(
                b"POST /v2/models/simple/infer HTTP/1.0\r\nHost: x\r\n"
                b"Connection: keep-alive\r\nContent-Length: 3\r\n\r\nabc"
            )
            answer = await asyncio.wait_for(reader.read(), 5.0)  # until it closes
            writer.close()
            return answer

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 200") and app.seen == ["/v2/models/simple/infer"]


def test_an_upgrade_request_is_not_counted_as_pending():
    # uvicorn hands an upgrade to its WebSocket protocol, which would never count it out.
    app, shedder = App(), LoopShedder(target_lag_s=0.004, draw=lambda: 0.0)

    async def scenario() -> int:
        async with serving(app, 5.0, shedder) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                b"Upgrade: websocket\r\nContent-Length: 0\r\n\r\n"
            )
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
                await asyncio.wait_for(reader.read(1024), 2.0)
            writer.close()
            await asyncio.sleep(0.2)
            return shedder.pending

    assert asyncio.run(scenario()) == 0
