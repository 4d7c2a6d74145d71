"""The HTTP server's read deadline (gateway/protocols/http/timeouts.py) and each request's
fresh context (gateway/listeners.py), against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from accel_base.logs import REQUEST_ID
from gateway.listeners import event_loop_factory
from tests.gateway.protocols.http.asgi_server import serving

TIMEOUT_S = 0.5


class App:
    """Answers 200 with the body's length after `delay_s`, or 413 at once for a body
    declared larger than 1000 bytes; records the request id each request began with and
    then sets its own (its path)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.ids_at_start: list[str] = []
        self.disconnected = 0

    async def __call__(self, scope, receive, send) -> None:
        self.ids_at_start.append(REQUEST_ID.get())
        REQUEST_ID.set(scope["path"])
        length = int(dict(scope["headers"]).get(b"content-length", b"0"))
        if length > 1000:
            await answer(send, 413, b"too large")
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected += 1
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await asyncio.sleep(self.delay_s)
        await answer(send, 200, str(len(body)).encode())


async def answer(send, status: int, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_all(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> bytes:
    """Everything until the server closes the connection (or `timeout_s` passes)."""
    with contextlib.suppress(asyncio.TimeoutError):
        return await asyncio.wait_for(reader.read(), timeout_s)
    return b"<still open>"


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length"))  # fmt: skip
    return head + await reader.readexactly(length)


def get(path: str = "/") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def run(scenario, loop_factory=None) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(scenario())


def test_silent_slow_and_truncated_requests_get_408_after_the_timeout():
    app = App()
    cases = {
        "silent": b"",
        "slow headers": b"GET / HTTP/1.1\r\nHost: x\r\n",
        "truncated": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
    }

    async def scenario() -> None:
        async with serving(app, TIMEOUT_S) as port:
            for what, sent in cases.items():
                began = time.monotonic()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(sent)
                reply = await read_all(reader)
                elapsed = time.monotonic() - began
                writer.close()
                assert reply.startswith(b"HTTP/1.1 408"), (what, reply)
                assert b"read timeout" in reply and TIMEOUT_S * 0.9 < elapsed < 3.0, what
        assert app.disconnected == 1  # the truncated request's reader saw the end

    run(scenario)


def test_each_request_on_a_connection_has_its_own_deadline():
    app = App()

    async def scenario() -> None:
        async with serving(app, TIMEOUT_S) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Requests spaced out over several timeouts in all, each arriving in time
            # (idle between requests: bounded by the keep-alive timeout, not this one).
            for _ in range(4):
                await asyncio.sleep(TIMEOUT_S / 2)
                writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\na")
                await asyncio.sleep(TIMEOUT_S / 4)
                writer.write(b"b")
                assert (await read_answer(reader)).startswith(b"HTTP/1.1 200")
            # Then one that never ends.
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
            assert (await read_all(reader)).startswith(b"HTTP/1.1 408")
            writer.close()

    run(scenario)


def test_a_request_served_longer_than_the_timeout_is_not_cut():
    app = App(delay_s=TIMEOUT_S * 3)

    async def scenario() -> None:
        async with serving(app, TIMEOUT_S) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Pipelined: the second waits, unread, while the first is served.
            writer.write(get("/a") + get("/b"))
            assert (await read_answer(reader)).startswith(b"HTTP/1.1 200")
            assert (await read_answer(reader)).startswith(b"HTTP/1.1 200")
            writer.close()

    run(scenario)


def test_an_early_answer_leaves_the_connection_idle_and_bounded():
    app = App()

    async def scenario() -> None:
        async with serving(app, TIMEOUT_S) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n")
            assert (await read_answer(reader)).startswith(b"HTTP/1.1 413")
            writer.write(b"x" * 2000)  # the rest of the body: the request is over
            began = time.monotonic()
            rest = await read_all(reader)
            assert rest == b"" and time.monotonic() - began < 3.0  # closed, no 408
            writer.close()

    run(scenario)


@pytest.mark.parametrize("loop_factory", [None, event_loop_factory()], ids=["asyncio", "served"])
def test_a_pipelined_request_does_not_inherit_its_predecessors_request_id(loop_factory):
    # (asyncio's loop runs a connection's reads in the context that last resumed them: a
    # request's, without uvicorn's fresh context per request.)
    app = App()

    async def scenario() -> None:
        async with serving(app, TIMEOUT_S) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(get("/a") + get("/b") + get("/c"))
            for _ in range(3):
                assert (await read_answer(reader)).startswith(b"HTTP/1.1 200")
            writer.write(get("/d"))  # and one after the others, on the same connection
            assert (await read_answer(reader)).startswith(b"HTTP/1.1 200")
            writer.close()
        assert app.ids_at_start == ["", "", "", ""]

    run(scenario, loop_factory)
