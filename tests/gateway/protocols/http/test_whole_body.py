"""Large inference bodies read into one buffer at the protocol (gateway/protocols/http/
whole_body.py) and handed to read_body, against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib

from accel_base.errors import GatewayError
from gateway.protocols.http.body import read_infer_body
from tests.gateway.protocols.http.asgi_server import serving
from tests.gateway.protocols.http.test_early_refusal import infer_head, read_answer

LIMIT = 8 * 1024 * 1024


class BodyApp:
    """Answers with the body's length, digest and type, as read_body gave it."""

    def __init__(self) -> None:
        self.errors: list[GatewayError] = []

    async def __call__(self, scope, receive, send) -> None:
        headers = dict(scope["headers"])
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            return message

        try:
            body = await read_infer_body(counted, headers.get(b"content-length"), LIMIT, scope)
        except GatewayError as exc:
            self.errors.append(exc)
            status, answer = exc.http_status, exc.message.encode()
        else:
            status = 200
            digest = hashlib.sha256(body).hexdigest()[:16]
            # "whole": the protocol read it (whole_body.py), and receive() gave nothing.
            kind = "whole" if body and not received else "bytes"
            answer = f"{len(body)} {digest} {kind}".encode()
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def expected(body: bytes, kind: str) -> bytes:
    return f"{len(body)} {hashlib.sha256(body).hexdigest()[:16]} {kind}".encode()


def payload(size: int, seed: int) -> bytes:
    return bytes((i * seed + i // 251) % 256 for i in range(size))


def test_a_large_body_arrives_in_one_buffer_and_the_connection_goes_on():
    app = BodyApp()
    big, other, small = payload(4 * 1024 * 1024, 7), payload(300_000, 11), b"abc"

    async def scenario() -> None:
        async with serving(app, 5.0, max_body_bytes=LIMIT) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for body, kind in ((big, "whole"), (small, "bytes"), (other, "whole")):
                writer.write(infer_head(len(body)) + body)
                head, answer = await read_answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and answer == expected(body, kind)
            writer.close()

    asyncio.run(scenario())


def test_a_body_that_starts_small_or_is_not_inference_takes_uvicorns_way():
    app = BodyApp()
    body = payload(1_000_000, 3)

    async def scenario() -> None:
        async with serving(app, 5.0, max_body_bytes=LIMIT) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(len(body)) + body[:1000])  # a first piece of 1,000
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(body[1000:])
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 200") and answer == expected(body, "bytes")
            writer.write(infer_head(len(body), "/v2/repository/index") + body)
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 200") and answer == expected(body, "bytes")
            writer.close()

    asyncio.run(scenario())


def test_a_body_over_the_limit_is_refused_and_a_client_gone_mid_body_harms_nothing():
    app = BodyApp()
    body = payload(LIMIT + 4096, 5)

    async def scenario() -> None:
        async with serving(app, 5.0, max_body_bytes=LIMIT) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(len(body)) + body[:1_000_000])
            head, answer = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 413") and b"limit" in answer
            writer.close()
            # Half of a large body, then the client goes: the handler hears of it.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(2_000_000) + body[:1_000_000])
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()
            for _ in range(100):
                if len(app.errors) == 2:
                    break
                await asyncio.sleep(0.02)
            assert "disconnected" in app.errors[1].message
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            whole = body[:2_000_000]
            writer.write(infer_head(len(whole)) + whole)
            head, answer = await read_answer(reader)
            assert answer == expected(whole, "whole")
            writer.close()

    asyncio.run(scenario())


def test_pipelined_large_bodies_and_one_answered_unread_each_get_their_own():
    # Two large requests in one write, then one the handler answers without reading
    # (a 405 on the infer path), then a large one again: each body is its own.
    first, second = payload(500_000, 13), payload(700_000, 17)

    class Unread(BodyApp):
        put_scope: dict | None = None

        async def __call__(self, scope, receive, send) -> None:
            if scope["method"] != "PUT":
                return await super().__call__(scope, receive, send)
            self.put_scope = scope
            headers = [(b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 405, "headers": headers})
            await send({"type": "http.response.body", "body": b""})

    app = Unread()

    async def scenario() -> None:
        async with serving(app, 5.0, max_body_bytes=LIMIT) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(infer_head(len(first)) + first + infer_head(len(second)) + second)
            for body in (first, second):
                head, answer = await read_answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and answer == expected(body, "whole")
            put = infer_head(len(first)).replace(b"POST", b"PUT", 1)
            writer.write(put + first)
            head, _ = await read_answer(reader)
            assert head.startswith(b"HTTP/1.1 405")
            writer.write(infer_head(len(second)) + second)
            head, answer = await read_answer(reader)
            assert answer == expected(second, "whole")
            assert app.put_scope is not None and "gateway.whole_body" not in app.put_scope
            writer.close()

    asyncio.run(scenario())
