"""The HTTP/2 server under attack, from raw sockets, while a well-behaved grpc client
calls it: each flood ends its own connection with the right GOAWAY code, and the victim's
calls all succeed; what one connection may hold is bounded by the windows we advertise,
and released when it goes; idle connections make room at the limit; RFC 9113's errors.
What each attack costs the victim in time is benchmarks/h2_attacks.py's to show."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import hpack
import pytest

from benchmarks.h2_floods import (
    ATTACKS,
    ECHO,
    MESSAGE,
    call_headers,
    goaway_code,
    opening,
    read_frames,
    run_attack,
    unfinished_messages,
)
from gateway.launch import free_port
from gateway.listeners import listen
from gateway.protocols.grpc.h2 import frames as f
from gateway.protocols.grpc.h2.server import H2Server

LIMIT = 1 << 20  # the server's largest request message


async def _echo(request: bytes, context) -> bytes:
    return request


async def _once(requests, context):
    async for request in requests:  # one answer, then the call is over
        yield request
        return


class Running:
    """An H2Server on its own event loop thread."""

    def __init__(self, max_connections: int = 64, read_timeout_s: float = 30.0) -> None:
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.server = H2Server(LIMIT, 256, 30.0, max_connections, read_timeout_s)
        self.server.add_registered_method_handlers(
            "test.Echo",
            {
                "Call": grpc.unary_unary_rpc_method_handler(_echo),
                "Once": grpc.stream_stream_rpc_method_handler(_once),
            },
        )
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.server.start(listen("127.0.0.1", self.port, "gRPC")))

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def read(self, what):
        """`what()` evaluated on the server's loop (its state is the loop's alone)."""

        async def read():
            return what()

        return self.call(read())

    def held(self) -> int:
        """Bytes of request messages the server's connections hold."""
        return self.read(
            lambda: sum(s.held for c in self.server.connections for s in c.streams.values())
        )

    def stop(self) -> None:
        self.call(self.server.stop(0.5))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def running():
    server = Running()
    yield server
    server.stop()


def _victim(port: int, stop: threading.Event) -> list:
    """Calls every 5 ms until `stop`; each outcome. The deadline is far past any wait a
    contained flood causes: how long the victim waits is the benchmark's to show
    (benchmarks/h2_floods.py); here, that every call is served."""
    outcomes = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        echo = channel.unary_unary(ECHO)
        while not stop.is_set():
            try:
                outcomes.append(echo(b"victim", timeout=30.0) == b"victim")
            except grpc.RpcError as exc:
                outcomes.append(exc.code())
            time.sleep(0.005)
    return outcomes


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_each_flood_ends_its_own_connection_and_the_victim_is_served(running, attack):
    window = running.server.receive_window
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        victim = pool.submit(_victim, running.port, stop)
        time.sleep(0.2)
        code, closed_s = run_attack(running.port, attack, window, timeout_s=60.0)
        time.sleep(0.2)
        stop.set()
        outcomes = victim.result()
    assert code == attack.code, f"{attack.name}: GOAWAY {code}, expected {attack.code}"
    assert closed_s < 30.0  # closed by the server (in well under a second), not timed out
    assert outcomes and all(o is True for o in outcomes), outcomes
    assert running.held() == 0


def test_a_connection_holds_at_most_its_bound_and_lets_go_when_it_closes(running):
    window, bound = running.server.receive_window, running.server.max_held
    past = bound - window + (1 << 20)  # 16 unfinished messages, 1 MiB past the bound
    with socket.create_connection(("127.0.0.1", running.port)) as sock:
        sock.sendall(opening() + unfinished_messages(ECHO, window, past))
        frames = read_frames(sock, lambda found: _ended(found) >= 1, timeout=10)
        with pytest.raises(TimeoutError):  # the connection goes on: quiet, not closed
            frames += read_frames(sock, lambda found: False, timeout=0.5)
        held = running.held()
    decoder = hpack.Decoder()
    trailers = [dict(decoder.decode(p)) for k, fl, _, p in frames if k == f.HEADERS]
    assert trailers and all(t["grpc-status"] == "8" for t in trailers)  # RESOURCE_EXHAUSTED
    assert "4 x --max-request-bytes" in trailers[0]["grpc-message"]
    assert 0 < held <= bound and not any(k == f.GOAWAY for k, *_ in frames)
    deadline = time.monotonic() + 5
    while running.held() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert running.held() == 0 and running.read(lambda: len(running.server.connections)) == 0


def _ended(found) -> int:
    return sum(1 for k, fl, _, _ in found if k == f.HEADERS and fl & f.END_STREAM)


def test_a_unary_message_that_never_ends_is_cancelled_after_the_read_timeout():
    server = Running(read_timeout_s=0.3)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            encoder = hpack.Encoder()
            calls = b"".join(
                f.frame(f.HEADERS, f.END_HEADERS, stream, call_headers(encoder, ECHO))
                + f.frame(f.DATA, 0, stream, MESSAGE[:3])
                for stream in range(1, 21, 2)
            )
            sock.sendall(opening() + calls)
            frames = read_frames(sock, lambda found: _resets(found) >= 10)
        decoder = hpack.Decoder()
        trailers = [dict(decoder.decode(p)) for k, fl, _, p in frames if k == f.HEADERS]
        assert len(trailers) == 10 and all(t["grpc-status"] == "1" for t in trailers)
        assert "--read-timeout" in trailers[0]["grpc-message"]
        assert server.held() == 0
    finally:
        server.stop()


def test_at_the_connection_limit_the_connection_idle_longest_makes_room():
    server = Running(max_connections=4)
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        for sock in idle:
            sock.sendall(opening())
            time.sleep(0.05)  # each idle since a moment later than the last
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            assert channel.unary_unary(ECHO)(b"in", timeout=5) == b"in"
        idle[0].settimeout(5)
        data = b""
        while chunk := idle[0].recv(1 << 16):
            data += chunk
        assert goaway_code(data) == f.NO_ERROR
        for sock in idle:
            sock.close()
    finally:
        server.stop()


def _resets(found) -> int:
    return sum(1 for k, *_ in found if k == f.RST_STREAM)


def _call(stream: int, encoder: hpack.Encoder, *extra) -> bytes:
    return f.frame(f.HEADERS, f.END_HEADERS, stream, call_headers(encoder, ECHO, *extra))


# RFC 9113: a stream error resets that stream and the connection goes on; a connection
# error ends it with GOAWAY.
STREAM_ERRORS = {
    "WINDOW_UPDATE of 0 on a stream": (
        lambda e: _call(1, e) + f.window_update(1, 0), f.PROTOCOL_ERROR),
    "a stream's send window past 2^31-1": (
        lambda e: _call(1, e) + f.window_update(1, 2**31 - 1), f.FLOW_CONTROL_ERROR),
    "an uppercase header name": (
        lambda e: _call(1, e, ("X-Upper", "1")), f.PROTOCOL_ERROR),
    "a connection header": (
        lambda e: _call(1, e, ("connection", "keep-alive")), f.PROTOCOL_ERROR),
    "a second header block without END_STREAM": (
        lambda e: _call(1, e) + _call(1, e), f.PROTOCOL_ERROR),
}  # fmt: skip


@pytest.mark.parametrize("case", STREAM_ERRORS, ids=list(STREAM_ERRORS))
def test_a_stream_error_resets_that_stream_and_the_connection_serves_on(running, case):
    build, code = STREAM_ERRORS[case]
    with socket.create_connection(("127.0.0.1", running.port)) as sock:
        encoder = hpack.Encoder()
        sock.sendall(
            opening()
            + build(encoder)
            + _call(3, encoder)
            + f.frame(f.DATA, f.END_STREAM, 3, MESSAGE)
        )

        def answered(found):
            return any(k == f.HEADERS and fl & f.END_STREAM and s == 3 for k, fl, s, _ in found)

        frames = read_frames(sock, answered)
    assert (f.RST_STREAM, 0, 1, code.to_bytes(4, "big")) in frames
    assert answered(frames) and not any(k == f.GOAWAY for k, *_ in frames)


CONNECTION_ERRORS = {
    "WINDOW_UPDATE on an idle stream": (lambda e: f.window_update(9, 100), f.PROTOCOL_ERROR),
    "RST_STREAM on an idle stream": (lambda e: f.rst_stream(9, f.CANCEL), f.PROTOCOL_ERROR),
    "DATA on an idle stream": (lambda e: f.frame(f.DATA, 0, 9, b"x"), f.PROTOCOL_ERROR),
    "a stream id that goes back": (lambda e: _call(5, e) + _call(3, e), f.PROTOCOL_ERROR),
    "PING on a stream": (lambda e: f.frame(f.PING, 0, 1, b"12345678"), f.PROTOCOL_ERROR),
    "WINDOW_UPDATE of 0 on the connection": (lambda e: f.window_update(0, 0), f.PROTOCOL_ERROR),
    "a header block past what any may be": (
        lambda e: _call(1, e, ("x-big", "v" * (70 * 1024))), f.ENHANCE_YOUR_CALM),
}  # fmt: skip


@pytest.mark.parametrize("case", CONNECTION_ERRORS, ids=list(CONNECTION_ERRORS))
def test_a_connection_error_ends_the_connection_with_its_code(running, case):
    build, code = CONNECTION_ERRORS[case]
    with socket.create_connection(("127.0.0.1", running.port)) as sock:
        sock.sendall(opening() + build(hpack.Encoder()))
        frames = read_frames(sock, lambda found: False)  # until the server closes
    goaways = [p for k, _, _, p in frames if k == f.GOAWAY]
    assert len(goaways) == 1 and int.from_bytes(goaways[0][4:8], "big") == code, goaways


def test_data_on_a_stream_the_client_ended_and_we_answered_is_a_connection_error(running):
    with socket.create_connection(("127.0.0.1", running.port)) as sock:
        encoder = hpack.Encoder()
        sock.sendall(opening() + _call(1, encoder) + f.frame(f.DATA, f.END_STREAM, 1, MESSAGE))
        read_frames(sock, lambda found: any(k == f.HEADERS and fl & f.END_STREAM
                                              for k, fl, _, _ in found))  # fmt: skip
        sock.sendall(f.frame(f.DATA, 0, 1, b"x"))
        frames = read_frames(sock, lambda found: False)
    goaways = [p for k, _, _, p in frames if k == f.GOAWAY]
    assert [int.from_bytes(p[4:8], "big") for p in goaways] == [f.STREAM_CLOSED]


def test_a_call_whose_headers_pass_the_limit_ends_and_the_connection_serves_on(running):
    with socket.create_connection(("127.0.0.1", running.port)) as sock:
        encoder = hpack.Encoder()
        sock.sendall(
            opening() + _call(1, encoder, ("x-big", "v" * (20 * 1024)))
            + _call(3, encoder) + f.frame(f.DATA, f.END_STREAM, 3, MESSAGE)
        )  # fmt: skip
        frames = read_frames(sock, lambda found: _ended(found) >= 2)
    decoder = hpack.Decoder()
    ended = {s: dict(decoder.decode(p)) for k, fl, s, p in frames if k == f.HEADERS}
    assert ended[1]["grpc-status"] == "8" and "16384" in ended[1]["grpc-message"]
    assert (f.RST_STREAM, 0, 1, f.NO_ERROR.to_bytes(4, "big")) in frames
    assert not any(k == f.GOAWAY for k, *_ in frames)


def test_a_call_answered_while_its_client_sends_on_holds_nothing(running):
    """Its answer waits for credit (a window of 0) while the client goes on sending on
    it, and other calls fill the connection past its bound: the answered call holds
    nothing, and the calls that do hold are the ones ended."""
    window, bound = running.server.receive_window, running.server.max_held
    encoder = hpack.Encoder()
    first = (
        f.settings({f.INITIAL_WINDOW_SIZE: 0})
        + f.frame(f.HEADERS, f.END_HEADERS, 1, call_headers(encoder, "/test.Echo/Once"))
        + f.frame(f.DATA, 0, 1, MESSAGE)
    )
    more = b"\x00" + (window - 20_000).to_bytes(4, "big") + b"\x00" * (window // 2)
    with socket.create_connection(("127.0.0.1", running.port)) as sock:
        sock.sendall(opening() + first)
        time.sleep(0.3)  # answered, its answer held
        sock.sendall(f.frame(f.DATA, 0, 1, more[: 1 << 20]))
        calls = b"".join(
            f.frame(f.HEADERS, f.END_HEADERS, stream, call_headers(encoder, ECHO))
            + f.frame(f.DATA, 0, stream, more[: 1 << 20])
            for stream in range(3, 3 + 2 * (bound // (window // 2) + 2), 2)
        )
        sock.sendall(calls)
        frames = read_frames(sock, lambda found: _ended(found) >= 1, timeout=10)
        held = running.held()  # the server's loop answers: it is not spinning
    decoder = hpack.Decoder()
    ended = [dict(decoder.decode(p)) for k, fl, s, p in frames if k == f.HEADERS and s != 1]
    assert ended and ended[0]["grpc-status"] == "8"
    assert held <= bound


def test_a_call_answered_before_its_client_ended_it_gets_no_reset_once_it_does(running):
    """Its answer waits for credit (a window of 0); the client then ends its side
    (END_STREAM, empty or with bytes the answered call drops) and gives credit: the
    trailers go, and no RST_STREAM after them (the stream is closed both ways)."""
    for last in (b"", MESSAGE):
        encoder = hpack.Encoder()
        with socket.create_connection(("127.0.0.1", running.port)) as sock:
            sock.sendall(
                opening() + f.settings({f.INITIAL_WINDOW_SIZE: 0})
                + f.frame(f.HEADERS, f.END_HEADERS, 1, call_headers(encoder, "/test.Echo/Once"))
                + f.frame(f.DATA, 0, 1, MESSAGE)
            )  # fmt: skip
            time.sleep(0.3)  # answered, its answer held
            sock.sendall(f.frame(f.DATA, f.END_STREAM, 1, last))
            time.sleep(0.2)
            sock.sendall(f.window_update(1, 1 << 20))
            frames = read_frames(sock, lambda found: _ended(found) >= 1)
            sock.sendall(f.frame(f.PING, 0, 0, b"whatnext"))  # its ACK comes after any reset
            frames += read_frames(sock, lambda found: any(k == f.PING for k, *_ in found))
        assert _ended(frames) == 1
        assert not [k for k, _, s, _ in frames if k == f.RST_STREAM and s == 1]
        assert running.held() == 0
