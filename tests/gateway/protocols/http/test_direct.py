"""The direct path (gateway/protocols/http/direct.py) against a real uvicorn server on
127.0.0.1: which requests it takes, their bodies whole, and the connection's order,
keep-alive, 100-continue, timeouts and failures as uvicorn's own way keeps them."""

from __future__ import annotations

import asyncio
import hashlib

from gateway.operation.shedding import LoopShedder
from gateway.protocols.http.direct import DirectPath
from gateway.protocols.http.early_refusal import ADMITTED, COUNTED
from gateway.protocols.http.route import Reply
from tests.gateway.protocols.http.asgi_server import serving
from tests.gateway.protocols.http.test_early_refusal import infer_head, read_answer

LIMIT = 8 * 1024 * 1024
PREFIX = b"/direct/"


def digest(body: bytes) -> bytes:
    return b"%d %s" % (len(body), hashlib.sha256(body).hexdigest()[:16].encode())


class Route:
    """POST /direct/{word}: answers "direct <length> <digest>" of the body (or, for
    `echo`, the body itself; `fail` raises; `slow` waits on `release`)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.flags: list[tuple[bool, bool]] = []
        self.release = asyncio.Event()
        self.streams_closed = 0

    def match(self, path: str) -> str | None:
        word = path[len("/direct/") :]
        return word if word.isalpha() else None

    def admit(self, request, word: str) -> Reply | None:
        if word == "refused":  # before its body: as an unauthorized or shed request
            return Reply(403, [(b"content-type", b"text/plain")], b"refused")
        return None

    def failed(self, request, exc: Exception) -> Reply:
        return Reply(500, [(b"content-type", b"text/plain")], f"failed: {exc}".encode())

    async def answer(self, request, word: str, body: bytes) -> Reply:
        self.seen.append(word)
        self.flags.append((ADMITTED in request.scope, COUNTED in request.scope))
        if word == "fail":
            raise RuntimeError("the route's own bug")
        if word == "slow":
            await self.release.wait()
        if word == "interim":  # not a final answer's status: the route's failure instead
            return Reply(101, [], b"")
        if word == "stream":
            return Reply(200, [(b"content-type", b"text/plain")], b"first", self._rest())
        if word == "echo":
            return Reply(200, [(b"content-type", b"application/octet-stream")], body)
        return Reply(200, [(b"content-type", b"text/plain")], b"direct " + digest(body))

    async def _rest(self):
        try:
            yield b"second"
            await self.release.wait()
            yield b"third"
        finally:
            self.streams_closed += 1


class App:
    """The ASGI app behind: answers "asgi <length> <digest>" of the body it reads."""

    async def __call__(self, scope, receive, send) -> None:
        if int(dict(scope["headers"]).get(b"content-length", b"0")) > LIMIT:
            headers = [(b"content-length", b"3")]
            await send({"type": "http.response.start", "status": 413, "headers": headers})
            await send({"type": "http.response.body", "body": b"big"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        answer = b"asgi " + digest(b"".join(chunks))
        headers = [(b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def payload(size: int, seed: int) -> bytes:
    return bytes((i * seed + i // 251) % 256 for i in range(size))


def server(
    route: Route, read_timeout_s: float = 5.0, shedder: LoopShedder | None = None,
    prefix: bytes = PREFIX,
):  # fmt: skip
    return serving(App(), read_timeout_s, shedder, DirectPath(route, LIMIT, (prefix,)))


def test_bodies_large_and_small_reach_the_route_whole_on_one_connection():
    route = Route()
    big, other = payload(4 * 1024 * 1024, 7), payload(300_000, 11)

    async def scenario() -> None:
        async with server(route) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for body in (big, b"abc", b"", other):
                writer.write(infer_head(len(body), "/direct/sum") + body)
                head, answer = await read_answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and answer == b"direct " + digest(body)
            # Sent in pieces, with pauses between them: still whole.
            writer.write(infer_head(len(big), "/direct/sum?x=1") + big[:1000])
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(big[1000:2_000_000])
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(big[2_000_000:])
            head, answer = await read_answer(reader)
            assert answer == b"direct " + digest(big)
            # A large answer (written beside its head) arrives intact.
            writer.write(infer_head(len(big), "/direct/echo") + big)
            head, answer = await read_answer(reader)
            assert b"content-length: %d" % len(big) in head and answer == big
            writer.close()
        assert route.seen == ["sum"] * 5 + ["echo"]

    asyncio.run(scenario())


def test_requests_the_route_does_not_take_go_to_the_asgi_app():
    route = Route()
    body = payload(100_000, 3)

    async def scenario() -> None:
        async with server(route) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for head in (
                infer_head(len(body), "/direct/not-a-word"),  # the route's match says no
                infer_head(len(body), "/other/sum"),  # outside the prefix
                infer_head(len(body), "/direct/s%75m"),  # %-encoded: uvicorn decodes it
                infer_head(len(body), "/direct/sum").replace(b"POST", b"PUT", 1),
            ):
                writer.write(head + body)
                head, answer = await read_answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and answer == b"asgi " + digest(body)
            # Chunked: no declared length.
            writer.write(
                b"POST /direct/sum HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"3\r\nabc\r\n0\r\n\r\n"
            )
            head, answer = await read_answer(reader)
            assert answer == b"asgi " + digest(b"abc")
            writer.close()
            # Declared past the limit: uvicorn's way (whose app answers 413 in the server).
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(LIMIT + 1, "/direct/sum") + b"x" * 10)
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 413") and answer == b"big"
            writer.close()
        assert route.seen == []

    asyncio.run(scenario())


def test_pipelined_requests_are_answered_in_order_whichever_way_each_takes():
    route = Route()
    first, second = payload(500_000, 13), payload(700_000, 17)

    async def scenario() -> None:
        async with server(route) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                infer_head(len(first), "/direct/slow") + first
                + infer_head(len(second), "/other") + second
                + infer_head(len(second), "/direct/sum") + second
                + infer_head(3, "/other") + b"abc"
            )  # fmt: skip
            await asyncio.sleep(0.3)  # the first holds the rest back
            assert route.seen == ["slow"]
            route.release.set()
            answers = [(await read_answer(reader))[1] for _ in range(4)]
            assert answers == [
                b"direct " + digest(first),
                b"asgi " + digest(second),
                b"direct " + digest(second),
                b"asgi " + digest(b"abc"),
            ]
            writer.close()

    asyncio.run(scenario())


def test_continue_close_and_http_1_0_are_kept():
    route = Route()

    async def scenario() -> None:
        async with server(route) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST /direct/sum HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"abc")
            head, answer = await read_answer(reader)
            assert answer == b"direct " + digest(b"abc")
            writer.write(
                infer_head(3, "/direct/sum").replace(b"Host", b"Connection: close\r\nHost")
            )
            writer.write(b"abc")
            head, answer = await read_answer(reader)
            assert b"connection: close" in head and answer == b"direct " + digest(b"abc")
            assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed after
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(3, "/direct/sum").replace(b"HTTP/1.1", b"HTTP/1.0") + b"abc")
            head, answer = await read_answer(reader)
            assert b"connection: close" in head and answer == b"direct " + digest(b"abc")
            assert await asyncio.wait_for(reader.read(), 5.0) == b""

    asyncio.run(scenario())


def test_a_failing_route_a_late_body_and_a_client_gone_harm_no_other_request():
    route = Route()
    failed_answer = b""

    async def scenario() -> None:
        nonlocal failed_answer
        async with server(route, read_timeout_s=0.5) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(3, "/direct/fail") + b"abc")
            head, failed_answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 500") and b"connection: close" in head
            assert await asyncio.wait_for(reader.read(), 5.0) == b""
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(3, "/direct/interim") + b"abc")
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 500") and b"not a status" in answer
            # A body that never comes whole: 408 at the read timeout, the route not run.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(1000, "/direct/late") + b"x" * 10)
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 408") and b"read timeout" in answer
            # A client gone mid-body: nothing runs for it.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(2_000_000, "/direct/gone") + b"x" * 1_000_000)
            await writer.drain()
            writer.close()
            await asyncio.sleep(0.2)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(3, "/direct/sum") + b"abc")
            head, answer = await read_answer(reader)
            assert answer == b"direct " + digest(b"abc")
            writer.close()
        assert route.seen == ["fail", "interim", "sum"]
        assert b"failed: the route's own bug" in failed_answer

    asyncio.run(scenario())


class InferRoute(Route):
    """Route's answers on the URL the early refusal knows: a V2 infer URL."""

    def match(self, path: str) -> str | None:
        return "sum" if path == "/v2/models/simple/infer" else None


def test_early_refusal_comes_before_the_direct_path_and_counts_it_out():
    route, shedder = InferRoute(), LoopShedder(target_lag_s=0.004, draw=lambda: 0.0)

    async def scenario() -> None:
        async with server(route, shedder=shedder, prefix=b"/v2/models/") as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            shedder.share, shedder.pending = 1.0, 1  # late, with others in flight
            writer.write(infer_head(3) + b"abc")
            head, _ = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 503")
            shedder.share, shedder.pending = 0.0, 0
            writer.write(infer_head(3) + b"abc")
            head, answer = await read_answer(reader)
            assert answer == b"direct " + digest(b"abc")
            assert shedder.pending == 0  # counted out when answered, connection open
            writer.close()
        assert route.seen == ["sum"] and route.flags == [(True, True)]

    asyncio.run(scenario())


def test_a_streamed_answer_goes_out_chunk_by_chunk_and_ends_with_its_client():
    route = Route()

    async def scenario() -> None:
        async with server(route) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(3, "/direct/stream") + b"abc")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            assert b"transfer-encoding: chunked" in head
            first = await asyncio.wait_for(reader.readuntil(b"second\r\n"), 5.0)
            assert first == b"5\r\nfirst\r\n6\r\nsecond\r\n"  # out before the rest
            route.release.set()
            rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5.0)
            assert rest == b"5\r\nthird\r\n0\r\n\r\n"
            # The connection goes on; a client gone mid-stream closes the stream.
            route.release.clear()
            writer.write(infer_head(3, "/direct/stream") + b"abc")
            await asyncio.wait_for(reader.readuntil(b"second\r\n"), 5.0)
            writer.close()
            await asyncio.sleep(0.1)
            route.release.set()
            for _ in range(100):
                if route.streams_closed == 2:
                    break
                await asyncio.sleep(0.02)
            assert route.streams_closed == 2

    asyncio.run(scenario())


def test_a_refusal_comes_before_the_body_and_before_100_continue():
    route = Route()
    body = payload(3_000_000, 19)

    async def scenario() -> None:
        async with server(route) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = infer_head(len(body), "/direct/refused")
            writer.write(head.replace(b"Host", b"Expect: 100-continue\r\nHost"))
            head, answer = await read_answer(reader)  # not "100 Continue"
            assert head.startswith(b"HTTP/1.1 403") and answer == b"refused"
            # The body held back may never come: the connection ends with the refusal.
            assert b"connection: close" in head
            assert await asyncio.wait_for(reader.read(), 5.0) == b""
            # A refusal of a body already on its way: skipped, and the connection goes on.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(len(body), "/direct/refused") + body[:100_000])
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 403") and b"connection: close" not in head
            writer.write(body[100_000:] + infer_head(3, "/direct/sum") + b"abc")
            head, answer = await read_answer(reader)
            assert answer == b"direct " + digest(b"abc")
            writer.close()
        assert route.seen == ["sum"]

    asyncio.run(scenario())
